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

from seqenc.bundle import BundleMeta
from seqenc.compat.lineage import Lineage, load_lineage, select_space, tag_space
from seqenc.compat.parent_map import ParentMap
from seqenc.data.batches import Batch
from seqenc.data.events import Source
from seqenc.encoding import MAX_TOKENS, OUTPUTS, LoadedBundle, encode_events, iter_batches, load_on
from seqenc.encoding.options import check_choice
from seqenc.encoding.outputs import Embeddings, embedding_output
from seqenc.encoding.store import sequences
from seqenc.errors import SeqencError
from seqenc.incremental.state import EncoderState, load_state
from seqenc.incremental.update import build_state, state_output, update_state


class Encoder(LoadedBundle):
    """A loaded bundle on a device (``Encoder(model, meta, vocabs, device, backend=None)``); see
    :func:`load_encoder`."""

    lineage: tuple[Lineage, ParentMap] | None = (
        None  # the map to the parent space (seqenc.compat.lineage)
    )

    @property
    def dim(self) -> int:
        return self.meta.dim

    def __repr__(self) -> str:
        m = self.meta
        return f"Encoder(name={m.name!r}, objective={m.objective!r}, dim={m.dim}, device={self.device})"

    @torch.inference_mode()
    def encode(
        self,
        events: Source,
        as_of: object = None,
        batch_size: int = 256,
        output: Literal["pandas", "numpy", "torch", "arrow"] = "pandas",
        on_empty: Literal["raise", "skip"] = "raise",
        max_tokens: int = MAX_TOKENS,
        space: Literal["native", "parent"] = "native",
        parent: str | BundleMeta | None = None,
    ) -> pd.DataFrame | pa.Table | Embeddings:
        """One embedding per entity of ``events``, entities in ascending id order.

        Args:
            events: a DataFrame, Arrow table, or Parquet/CSV path(s) / glob, with the bundle's columns.
            as_of: only events at or before this time are used, and it is the query time: a
                time-aware model embeds each entity as of that moment (the gap from its newest
                event to ``as_of`` is a model input, as the next event's time is in training).
                Default: each entity's newest event (a gap of 0, "right after the last event"), so
                an embedding never depends on the other entities in the call.
            batch_size, max_tokens: at most this many histories and padded positions per forward
                pass (neither changes the result).
            output: ``"pandas"`` (columns ``entity_id``, ``embedding`` (float32 arrays),
                ``n_events_read``, ``last_event_time``; counts in ``df.attrs``), ``"arrow"`` (the same
                columns as the Parquet export, counts in the schema metadata), ``"numpy"`` or
                ``"torch"`` (an :class:`Embeddings`).
            on_empty: what to do with an entity whose events all lie after ``as_of``.
            space: ``"native"`` (this model's space) or ``"parent"``: through the map that
                ``seqenc align`` / ``fit --compatible_with`` stored, into the space of the bundle
                this one was aligned to (:mod:`seqenc.compat.lineage`). ``parent`` (that bundle's meta or
                space id, e.g. an export's ``seqenc.space_id``) refuses a map to another space.
                The space is in the arrow metadata and pandas attrs.
        """
        check_choice("output", output, OUTPUTS)
        to_parent, space_metadata = select_space(self.meta, self.lineage, space, parent)
        done = encode_events(self, events, as_of, on_empty, batch_size, max_tokens)
        out, counts, columns = done.embeddings, done.counts.output(), done.columns
        out = out if to_parent is None else to_parent.apply(out)
        result = embedding_output(columns, out, counts, self.meta, as_of, output)
        return tag_space(result, space_metadata)

    def state(
        self,
        events: Source,
        as_of: object = None,
        on_empty: Literal["raise", "skip"] = "raise",
    ) -> EncoderState:
        """Encode ``events`` keeping what :meth:`update` needs to extend each history (causal
        models; see :mod:`seqenc.incremental.update`). The embeddings: ``state_output``, or the next
        :meth:`update`. Runs the torch model in float32 whatever the backend."""
        return build_state(self, events, as_of, on_empty)

    def update(
        self,
        state: EncoderState,
        events: Source | None,
        as_of: object = None,
        output: Literal["pandas", "numpy", "torch", "arrow"] = "pandas",
        on_empty: Literal["raise", "skip"] = "raise",
    ) -> tuple[pd.DataFrame | pa.Table | Embeddings, EncoderState]:
        """``(embeddings, new_state)``: what :meth:`encode` gives on the state's events and
        ``events`` together (every entity of both, within float rounding), running only the new
        positions; ``state`` is left as it was. ``events=None``: no new event, only a new
        ``as_of`` (a time-aware model's embeddings move with the query time). The counts of what ran are in ``new_state.stats``
        (and the pandas attrs / arrow metadata)."""
        check_choice("output", output, OUTPUTS)
        new_state = update_state(self, state, events, as_of, on_empty)
        return state_output(self, new_state, as_of, output), new_state

    def load_state(self, path: str | Path) -> EncoderState:
        """A state saved by ``EncoderState.save``; refused if another bundle made it."""
        return load_state(path, self.meta)

    @torch.inference_mode()
    def recommend(
        self,
        events: Source,
        k: int = 10,
        filter_seen: bool = True,
        as_of: object = None,
        batch_size: int = 256,
        on_empty: Literal["raise", "skip"] = "raise",
    ) -> pd.DataFrame:
        """Top-``k`` items per entity by the model's scores (the tied output layer's logits, or with
        the repeat head the log-probabilities of its mixture), for the next event at ``as_of``.

        Returns a long DataFrame: ``entity_id``, ``rank`` (1 = best), ``item_id`` (original item
        values) and ``score``, sorted by entity then rank. With ``filter_seen`` an item anywhere in
        the entity's history (not only its newest ``history_len`` events) is never recommended, so an
        entity may get fewer than ``k`` rows. An out-of-vocabulary bucket is never recommended.
        """
        if not isinstance(k, (int, np.integer)) or k < 1:
            raise SeqencError(f"k must be a positive integer, got {k!r}")
        store, counts = sequences(events, self.meta, self.vocabs, as_of, on_empty, None)
        counts.report()
        k = min(int(k), len(self.vocabs.item.values))
        batches = iter_batches(store, self.meta.history_len, batch_size, with_seen=filter_seen)
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
        device = batch.items.device
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"):
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
    bundle = load_on(path, device, backend, onnx)
    encoder = Encoder(bundle.model, bundle.meta, bundle.vocabs, bundle.device, bundle.backend)
    encoder.lineage = load_lineage(path, encoder.meta)  # checked here: a foreign map fails on load
    return encoder


def encode(events: Source, model: str | Path | Encoder, **kwargs: Any) -> Any:
    """One-shot :meth:`Encoder.encode` with the bundle at ``model`` (or a loaded :class:`Encoder`)."""
    encoder = (
        model
        if isinstance(model, Encoder)
        else load_encoder(model, kwargs.pop("device", None), kwargs.pop("backend", "torch"))
    )
    return encoder.encode(events, **kwargs)
