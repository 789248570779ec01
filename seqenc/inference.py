"""The Python API: a model bundle → one embedding per entity of an event log, and item recommendations.

>>> enc = load_encoder("runs/quickstart/.../bundle")          # doctest: +SKIP
>>> df = enc.encode(events, as_of="2024-06-01")                # doctest: +SKIP

The encoding itself is the core's (:mod:`seqenc.encoding`: the same path as training, items the
model never saw become UNK or a bucket, token-budget batches, eval mode, identical results on two
calls); this module is the facade: output forms, the backend (torch, or ``backend="onnxruntime"``
on the graph ``seqenc onnx`` writes), incremental states and recommendations (always torch).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import numpy as np
import pandas as pd
import pyarrow as pa
import torch

from seqenc.data.batches import Batch
from seqenc.data.events import Source
from seqenc.encoding import (
    OUTPUTS,
    EncodeOptions,
    Encoding,
    LoadedBundle,
    encode_options,
    iter_batches,
    last_step,
    load_on,
)
from seqenc.encoding.backends import autocast
from seqenc.encoding.options import check_choice
from seqenc.encoding.outputs import Embeddings
from seqenc.errors import SeqencError
from seqenc.incremental.state import EncoderState, load_state
from seqenc.incremental.update import build_state, state_output, update_state

Output = Literal["pandas", "numpy", "torch", "arrow"]


class Encoder(LoadedBundle):
    """A loaded bundle on a device (``Encoder(model, meta, vocabs, device, backend=None,
    lineage=None)``); see :func:`load_encoder`. Every method takes an
    :class:`~seqenc.encoding.EncodeOptions`, or its fields by name (``as_of=...``,
    ``on_empty=...``, ``space=...``)."""

    @property
    def dim(self) -> int:
        return self.meta.dim

    def __repr__(self) -> str:
        m = self.meta
        return f"Encoder(name={m.name!r}, objective={m.objective!r}, dim={m.dim}, device={self.device})"

    def options(self, options: EncodeOptions | None = None, **fields: Any) -> EncodeOptions:
        """The options of a call: ``options`` (default: :class:`EncodeOptions` with this
        encoder's backend) with ``fields`` replaced, checked."""
        return encode_options(options, fields, backend=self.backend.name)

    def encode(
        self,
        events: Source,
        options: EncodeOptions | None = None,
        *,
        output: Output = "pandas",
        **fields: Any,
    ) -> pd.DataFrame | pa.Table | Embeddings:
        """One embedding per entity of ``events``, entities in ascending id order.

        Args:
            events: a DataFrame, Arrow table, or Parquet/CSV path(s) / glob, with the bundle's columns.
            options, fields: :class:`~seqenc.encoding.EncodeOptions` (``as_of``, ``on_empty``,
                ``batch_size``, ``max_tokens``, ``space``, ``parent``), or its fields by name.
            output: ``"pandas"`` (columns ``entity_id``, ``embedding`` (float32 arrays),
                ``n_events_read``, ``last_event_time``, and a fine-tuned bundle's ``prediction``
                (and ``probabilities``); counts and space in ``df.attrs``), ``"arrow"`` (the
                columns of the Parquet export, counts and space in the schema metadata), ``"numpy"``
                or ``"torch"`` (an :class:`Embeddings`).
        """
        check_choice("output", output, OUTPUTS)
        run = Encoding(self, self.options(options, **fields))
        chunk = run.whole(events)
        run.counts.report()
        return run.last.output(chunk, run.counts.output(), output)

    def state(
        self, events: Source, options: EncodeOptions | None = None, **fields: Any
    ) -> EncoderState:
        """Encode ``events`` keeping what :meth:`update` needs to extend each history (causal
        models; see :mod:`seqenc.incremental.update`). The embeddings: ``state_output``, or the next
        :meth:`update`. Runs the torch model in float32 whatever the backend."""
        return build_state(self, events, self.options(options, **fields))

    def update(
        self,
        state: EncoderState,
        events: Source | None,
        options: EncodeOptions | None = None,
        *,
        output: Output = "pandas",
        **fields: Any,
    ) -> tuple[pd.DataFrame | pa.Table | Embeddings, EncoderState]:
        """``(embeddings, new_state)``: what :meth:`encode` gives on the state's events and
        ``events`` together (every entity of both, within float rounding; in ``options.space``,
        with a fine-tuned bundle's predictions), running only the new positions; ``state`` is left
        as it was. ``events=None``: no new event, only a new ``as_of`` (a time-aware model's
        embeddings move with the query time). The counts of what ran are in ``new_state.stats``
        (and the pandas attrs / arrow metadata)."""
        check_choice("output", output, OUTPUTS)
        options = self.options(options, **fields)
        last = last_step(self, options)  # a space without a map is refused before any work
        new_state = update_state(self, state, events, options)
        return state_output(new_state, last, output), new_state

    def load_state(self, path: str | Path) -> EncoderState:
        """A state saved by ``EncoderState.save``; refused if another bundle made it."""
        return load_state(path, self.meta)

    @torch.inference_mode()
    def recommend(
        self,
        events: Source,
        k: int = 10,
        filter_seen: bool = True,
        options: EncodeOptions | None = None,
        **fields: Any,
    ) -> pd.DataFrame:
        """Top-``k`` items per entity by the model's scores (the tied output layer's logits, or with
        the repeat head the log-probabilities of its mixture), for the next event at ``as_of``.

        Returns a long DataFrame: ``entity_id``, ``rank`` (1 = best), ``item_id`` (original item
        values) and ``score``, sorted by entity then rank. With ``filter_seen`` an item anywhere in
        the entity's history (not only its newest ``history_len`` events) is never recommended, so an
        entity may get fewer than ``k`` rows. An out-of-vocabulary bucket is never recommended.
        Options as in :meth:`encode` (``space`` does not apply: the scores are this model's).
        """
        if not isinstance(k, (int, np.integer)) or k < 1:
            raise SeqencError(f"k must be a positive integer, got {k!r}")
        options = self.options(options, **fields)
        if options.space != "native":
            raise SeqencError("recommend scores this model's items: space='parent' does not apply")
        run = Encoding(self, options)
        store = next(run.stores([events], None))
        run.counts.report()
        k = min(int(k), len(self.vocabs.item.values))
        sizes = {"batch_size": options.batch_size, "max_tokens": options.max_tokens}
        batches = iter_batches(store, self.meta.history_len, with_seen=filter_seen, **sizes)
        found = [self._top(b, k, filter_seen) for b in batches] or [(np.zeros(0),) * 3]
        rows, items, scores = (np.concatenate(x) for x in zip(*found, strict=True))
        keep = np.isfinite(scores)
        rank = np.tile(np.arange(1, k + 1), len(rows) // k)[keep]
        rows, items, scores = (
            rows[keep].astype(np.int64),
            items[keep].astype(np.int64),
            scores[keep],
        )
        table = pa.table(
            {
                "entity_id": store.entity_ids.take(pa.array(rows)),
                "rank": pa.array(rank.astype(np.int32)),
                "item_id": pa.array(
                    self.vocabs.item.decode(items).tolist(), type=self.vocabs.item.values.type
                ),
                "score": pa.array(scores.astype(np.float32)),
            }
        )
        return table.sort_by([("entity_id", "ascending"), ("rank", "ascending")]).to_pandas()

    def _top(self, batch: Batch, k: int, filter_seen: bool) -> tuple[np.ndarray, ...]:
        """``(rows, items, scores)`` flat: each history's ``k`` best items (-inf where seen)."""
        batch = batch.to(self.device)
        with autocast(self.device):
            scorer = self.model.next_item_scorer(batch)  # with the repeat head: the mixture
        scorer.seen = batch.seen if filter_seen else None
        # a chunk of the catalogue at a time; a bucket is no item to offer
        scores, items = scorer.top_k(k, stop=self.vocabs.item.bucket_start)
        return (
            batch.index.cpu().numpy().repeat(k),
            items.cpu().numpy().ravel(),
            scores.float().cpu().numpy().ravel(),
        )


def load_encoder(
    path: str | Path,
    device: str | torch.device | None = None,
    backend: Literal["torch", "onnxruntime"] = "torch",
    onnx: str | Path | None = None,
) -> Encoder:
    """Load a bundle directory onto ``device`` (default: CUDA when available, else CPU).

    ``backend="onnxruntime"`` embeds through the graph ``onnx`` (default ``<bundle>/model.onnx``,
    written by ``seqenc onnx``) on the CPU; the torch model still serves ``recommend``.
    """
    b = load_on(path, device, EncodeOptions(backend=backend, onnx=onnx))
    return Encoder(b.model, b.meta, b.vocabs, b.device, b.backend, b.lineage)


def encode(events: Source, model: str | Path | Encoder, **kwargs: Any) -> Any:
    """One-shot :meth:`Encoder.encode` with the bundle at ``model`` (or a loaded :class:`Encoder`)."""
    encoder = (
        model
        if isinstance(model, Encoder)
        else load_encoder(
            model,
            kwargs.pop("device", None),
            kwargs.pop("backend", "torch"),
            kwargs.pop("onnx", None),
        )
    )
    return encoder.encode(events, **kwargs)
