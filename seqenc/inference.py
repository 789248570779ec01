"""The Python API: a model bundle → one embedding per entity of an event log, and item recommendations.

>>> enc = load_encoder("runs/quickstart/.../bundle")          # doctest: +SKIP
>>> df = enc.encode(events, as_of="2024-06-01")                # doctest: +SKIP

Events go through the same path as training (:func:`~seqenc.data.sequences.build_sequences` with the
bundle's schema, vocabularies and ``max_len``): items the model never saw become UNK (counted and
logged, never an error). Entities are batched by history length (:class:`BucketBatchSampler`, no
shuffle) and the results scattered back, so an entity's embedding does not depend on which other
entities are in the call or on the batch size (up to float rounding), and the model runs in eval mode
under ``torch.inference_mode`` (no dropout): two calls give identical results. On CUDA the encoder
runs under bf16 autocast; embeddings are always returned as float32.

``backend="onnxruntime"`` runs the forward pass of :meth:`Encoder.encode` through ONNX Runtime on
the graph ``seqenc onnx`` writes (:mod:`seqenc.backends`), with the same batches; ``recommend``
stays on torch.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import torch

from seqenc.backends import ONNX_FILE, Backend, OnnxRuntimeBackend, TorchBackend
from seqenc.bundle import BundleMeta, load_bundle
from seqenc.data.batches import Batch, collate
from seqenc.data.events import Events, Source, read_events
from seqenc.data.sampling import token_batches
from seqenc.data.sequences import SequenceStore, build_sequences, log_unknown_values
from seqenc.data.split import full_view
from seqenc.data.vocab import N_SPECIAL, Vocabularies
from seqenc.errors import SeqencError
from seqenc.model.encoder import SequenceEncoder
from seqenc.outputs import Embeddings, embedding_output, entity_table

if TYPE_CHECKING:
    from seqenc.state import EncoderState

log = logging.getLogger(__name__)
OUTPUTS = ("pandas", "numpy", "torch", "arrow")
ON_EMPTY = ("raise", "skip")
BACKENDS = ("torch", "onnxruntime")
# Padded positions per forward pass: batches whose activations stay near the CPU's caches run
# fastest (2,048 beat 4,096 by 7-10 % at d=128 and tied at d=64: BENCHMARKS.md).
MAX_TOKENS = 2048


# ---------------------------------------------------------------------------------------------
# Building blocks shared with seqenc.export


def sequences(
    events: Source,
    meta: BundleMeta,
    vocabs: Vocabularies,
    as_of: object = None,
    on_empty: str = "raise",
    max_len: int | None = None,
) -> tuple[SequenceStore, int]:
    """``(store, n_skipped)``: the log's histories encoded with the bundle's vocabularies.

    An entity has no usable events when all of them are later than ``as_of``; ``on_empty="raise"``
    then raises (naming one such entity), ``"skip"`` leaves it out and counts it in ``n_skipped``.
    ``max_len`` truncates the stored histories (``None`` keeps them whole).
    """
    if on_empty not in ON_EMPTY:
        raise SeqencError(f"on_empty must be one of {ON_EMPTY}, got {on_empty!r}")
    schema = meta.schema
    table = read_events(events, schema)
    store, _ = build_sequences(
        Events(table, schema), schema, max_len=max_len, as_of=as_of, vocabs=vocabs
    )
    entities = pc.unique(table[schema.entity])
    n_skipped = len(entities) - len(store)
    if n_skipped and on_empty == "raise":
        example = entities.filter(pc.invert(pc.is_in(entities, value_set=store.entity_ids)))[0]
        raise SeqencError(
            f"{n_skipped} entit{'y has' if n_skipped == 1 else 'ies have'} no event at or before "
            f"as_of={as_of!r}, e.g. {schema.entity}={example.as_py()!r}; pass on_empty='skip' "
            "to leave such entities out"
        )
    return store, n_skipped


def iter_batches(
    store: SequenceStore,
    max_len: int,
    batch_size: int,
    rank: int = 0,
    world_size: int = 1,
    with_seen: bool = False,
    max_tokens: int = MAX_TOKENS,
) -> Iterator[Batch]:
    """Length-sorted batches of whole histories (newest ``max_len`` events), each at most
    ``batch_size`` histories and ``max_tokens`` padded positions (:func:`token_batches`), so
    mixed lengths are not padded to the longest of a large batch; ``Batch.index`` is the store
    row. Rank ``r`` of ``world_size`` gets every ``world_size``-th batch: the ranks together
    cover every entity exactly once."""
    if batch_size < 1 or max_tokens < 1:
        raise SeqencError(f"batch_size and max_tokens must be >= 1, got {batch_size}, {max_tokens}")
    view = full_view(store)
    lengths = np.minimum(view.lengths, max_len)
    batches = token_batches(np.argsort(lengths, kind="stable"), lengths, max_tokens, batch_size)
    for idx in batches[rank::world_size]:
        yield collate(view, idx, max_len, with_seen=with_seen)


def entity_columns(store: SequenceStore, rows: np.ndarray, max_len: int) -> pa.Table:
    """``entity_id``, ``n_events`` (history length fed to the model) and ``last_event_time`` of
    store ``rows``; ``last_event_time`` is null when the log has no times."""
    ends = store.offsets[rows + 1]
    return entity_table(
        store.entity_ids.take(pa.array(rows)),
        np.minimum(ends - store.offsets[rows], max_len),
        store.timestamps[np.maximum(ends - 1, 0)] if store.has_time else None,
    )


# ---------------------------------------------------------------------------------------------
# Public API


class Encoder:
    """A loaded bundle on a device; see :func:`load_encoder`."""

    def __init__(
        self,
        model: SequenceEncoder,
        meta: BundleMeta,
        vocabs: Vocabularies,
        device: torch.device,
        backend: Backend | None = None,
    ) -> None:
        self.model, self.meta, self.vocabs, self.device = (
            model.to(device).eval(),
            meta,
            vocabs,
            device,
        )
        self.backend = TorchBackend(self.model, device) if backend is None else backend

    @property
    def dim(self) -> int:
        return self.meta.dim

    def __repr__(self) -> str:
        m = self.meta
        return f"Encoder(name={m.name!r}, objective={m.objective!r}, dim={m.dim}, device={self.device})"

    def _report(self, store: SequenceStore, n_skipped: int) -> None:
        log_unknown_values(store.n_events, store.n_unknown_items, store.n_unknown_categorical)
        if n_skipped:
            log.warning("skipped %d entities with no event at or before as_of", n_skipped)

    @torch.inference_mode()
    def encode(
        self,
        events: Source,
        as_of: object = None,
        batch_size: int = 256,
        output: Literal["pandas", "numpy", "torch", "arrow"] = "pandas",
        on_empty: Literal["raise", "skip"] = "raise",
        max_tokens: int = MAX_TOKENS,
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
                ``n_events``, ``last_event_time``; counts in ``df.attrs``), ``"arrow"`` (the same
                columns as the Parquet export, counts in the schema metadata), ``"numpy"`` or
                ``"torch"`` (an :class:`Embeddings`).
            on_empty: what to do with an entity whose events all lie after ``as_of``.
        """
        if output not in OUTPUTS:
            raise SeqencError(f"output must be one of {OUTPUTS}, got {output!r}")
        max_len = self.meta.max_len
        store, n_skipped = sequences(events, self.meta, self.vocabs, as_of, on_empty, max_len)
        self._report(store, n_skipped)
        out = np.zeros((len(store), self.dim), dtype=np.float32)
        for batch in iter_batches(store, max_len, batch_size, max_tokens=max_tokens):
            out[batch.index.numpy()] = self.backend.embed(batch)
        counts = {
            "n_unknown_items": store.n_unknown_items,
            "n_skipped": n_skipped,
            "n_unknown_categorical": store.n_unknown_categorical,
        }
        columns = entity_columns(store, np.arange(len(store)), max_len)
        return embedding_output(columns, out, counts, self.meta, as_of, output)

    def state(
        self,
        events: Source,
        as_of: object = None,
        on_empty: Literal["raise", "skip"] = "raise",
    ) -> EncoderState:
        """Encode ``events`` keeping what :meth:`update` needs to extend each history (causal
        models; see :mod:`seqenc.incremental`). The embeddings: ``state_output``, or the next
        :meth:`update`. Runs the torch model in float32 whatever the backend."""
        from seqenc.incremental import build_state

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
        from seqenc.incremental import state_output, update_state

        if output not in OUTPUTS:
            raise SeqencError(f"output must be one of {OUTPUTS}, got {output!r}")
        new_state = update_state(self, state, events, as_of, on_empty)
        return state_output(self, new_state, as_of, output), new_state

    def load_state(self, path: str | Path) -> EncoderState:
        """A state saved by ``EncoderState.save``; refused if another bundle made it."""
        from seqenc.state import load_state

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
        the entity's history (not only its newest ``max_len`` events) is never recommended, so an
        entity may get fewer than ``k`` rows.
        """
        if not isinstance(k, (int, np.integer)) or k < 1:
            raise SeqencError(f"k must be a positive integer, got {k!r}")
        store, n_skipped = sequences(events, self.meta, self.vocabs, as_of, on_empty, None)
        self._report(store, n_skipped)
        k = min(int(k), len(self.vocabs.item) - N_SPECIAL)
        rows, items, scores = [], [], []
        for batch in iter_batches(store, self.meta.max_len, batch_size, with_seen=filter_seen):
            batch = batch.to(self.device)
            device = batch.items.device
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"):
                logits = self.model.item_scores(batch)  # with the repeat head: the mixture
            if filter_seen:
                logits[batch.seen[0], batch.seen[1]] = -torch.inf
            top = logits.topk(k, dim=1)
            rows.append(batch.index.cpu().numpy().repeat(k))
            items.append(top.indices.cpu().numpy().ravel())
            scores.append(top.values.float().cpu().numpy().ravel())
        rows, items, scores = (
            np.concatenate(x) if x else np.zeros(0) for x in (rows, items, scores)
        )
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


def _device(device: str | torch.device | None) -> torch.device:
    if device is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        return torch.device(device)
    except RuntimeError as e:
        raise SeqencError(f"unknown device {device!r}: {e}") from e


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
    if backend not in BACKENDS:
        raise SeqencError(f"backend must be one of {BACKENDS}, got {backend!r}")
    model, meta, vocabs = load_bundle(path)
    runtime = None
    if backend == "onnxruntime":
        runtime = OnnxRuntimeBackend(Path(path) / ONNX_FILE if onnx is None else Path(onnx), meta)
    return Encoder(model, meta, vocabs, _device(device), runtime)


def encode(events: Source, model: str | Path | Encoder, **kwargs: Any) -> Any:
    """One-shot :meth:`Encoder.encode` with the bundle at ``model`` (or a loaded :class:`Encoder`)."""
    encoder = (
        model
        if isinstance(model, Encoder)
        else load_encoder(model, kwargs.pop("device", None), kwargs.pop("backend", "torch"))
    )
    return encoder.encode(events, **kwargs)
