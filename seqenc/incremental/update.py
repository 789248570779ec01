"""Incremental encoding: extend each entity's encoded history with new events instead of
re-encoding it (causal models only; the torch part is :mod:`seqenc.model.cache`).

:meth:`Encoder.state <seqenc.inference.Encoder.state>` encodes a log once and keeps, per entity,
the events of its window, every layer's keys and values there and the embedding;
:meth:`Encoder.update <seqenc.inference.Encoder.update>` then gives what :meth:`Encoder.encode
<seqenc.inference.Encoder.encode>` would give on the old and new events together. An entity whose
window still fits ``history_len`` is extended (its new positions run against the cached keys and
values: ``n_extended``); one whose window slides, or whose tie order changes, is re-encoded from
its kept events (``n_reencoded``, ``n_reordered``); one whose query time alone moved gets its
newest position recomputed (``n_requeried``). Runs in float32 on the encoder's device.

A model with the basket rule (``EncoderConfig.baskets``) reads whole baskets: each entity whose
embedding changes runs its kept window through the full forward pass, as ``encode`` does.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import torch

from seqenc.data.batches import collate
from seqenc.data.cut import Cut, at_or_before
from seqenc.data.events import Events, Source, read_events
from seqenc.data.sampling import token_batches
from seqenc.data.schema import EventSchema
from seqenc.data.sequences import SequenceStore
from seqenc.data.split import SequenceView, full_view
from seqenc.encoding import Counts, EncodeOptions, LastStep, LoadedBundle, sequences
from seqenc.encoding.outputs import entity_table
from seqenc.errors import SeqencError
from seqenc.incremental.merge import Merge, merge, merged_windows, of
from seqenc.incremental.state import EncoderState, check_state, empty_state
from seqenc.incremental.ties import tie_keys
from seqenc.model.cache import KVCache, check_incremental, extend, readout


@torch.inference_mode()
def update_state(
    encoder: LoadedBundle,
    state: EncoderState,
    events: Source | None,
    options: EncodeOptions,
) -> EncoderState:
    """The state after ``events`` (see the module docstring; ``None``: no new event, only a new
    ``options.as_of``); ``on_empty`` as in ``encode``; each forward pass runs at most
    ``batch_size`` entities and ``max_tokens`` positions (its query plus key tokens: twice as
    many)."""
    meta = encoder.meta
    check_incremental(encoder.model)
    check_state(state, meta)
    cut = options.cut
    ref = None if cut is None else cut.seconds
    new, counts, new_keys = _new_events(encoder, state, events, options)
    m = merge(state, new, meta.history_len)
    _check_order(m.ids, m.had & m.got, m.old_last, m.first_new, cut)
    window, tail, old_src, reordered = merged_windows(state, new, new_keys, m, meta.schema)
    newest = window["timestamps"][m.offsets[1:] - 1] if len(m.ids) else np.zeros(0)
    query_gap = (np.zeros(len(m.ids)) if ref is None else ref - newest).astype(np.float32)
    store = window_store(m.ids, m.offsets, window, query_gap, meta.schema)
    caches, stats = _encode_windows(encoder, state, m, store, old_src, reordered, options)
    return EncoderState(
        entity_ids=m.ids,
        offsets=m.offsets,
        **window,
        **caches,
        tail=tail,
        query_gap=query_gap,
        config_hash=meta.config_hash,
        weights_sha256=meta.weights_sha256,
        has_time=state.has_time,
        stats=stats | counts.output(),
    )


def _new_events(
    encoder: LoadedBundle,
    state: EncoderState,
    events: Source | None,
    options: EncodeOptions,
) -> tuple[SequenceStore, Counts, pa.Table]:
    """``(store, counts, tie_keys)`` of the new events (an empty store for ``None``)."""
    meta = encoder.meta
    if events is None:
        return _no_events(state, meta.schema), Counts(), state.tail.schema.empty_table()
    table = read_events(events, meta.schema, exact=True)  # ordered and cut on the ticks
    new, counts = sequences(Events(table, meta.schema), meta, encoder.vocabs, options)
    counts.report()
    return new, counts, tie_keys(table, meta.schema, options.cut, state.tail.schema)


def _encode_windows(
    encoder: LoadedBundle,
    state: EncoderState,
    m: Merge,
    store: SequenceStore,
    old_src: np.ndarray,
    reordered: np.ndarray,
    options: EncodeOptions,
) -> tuple[dict[str, np.ndarray], dict[str, int]]:
    """Run the entities whose embedding changes, each against the cached positions it keeps:
    ``(caches, stats)``, the caches being the state's ``keys``, ``values``, ``prefix_sum`` and
    ``embeddings``; ``store`` holds the merged windows (:func:`window_store`)."""
    config, had, width = encoder.model.config, m.had, m.width
    reads_query = config.time and config.query_time
    query_gap = store.dt_ref[m.offsets[1:] - 1]
    old_gap = of(state.query_gap, m.old_row, 0.0)
    requery = had & (m.new_len == 0) & reads_query & (old_gap != query_gap)
    run = (m.new_len > 0) | requery
    extendable = had & (m.drop == 0) & ~reordered & (not config.baskets)
    keep = np.where(extendable, m.old_len - 1, 0) * run + width * ~run
    prefix_sum = np.zeros((len(m.ids), config.d_model), dtype=np.float32)
    cached = had & (keep > 0)  # the running sum carries over only with the cache
    prefix_sum[cached] = state.prefix_sum[m.old_row[cached]]
    embeddings = np.zeros_like(prefix_sum)
    embeddings[had & ~run] = state.embeddings[m.old_row[had & ~run]]
    # Cached positions keep their keys and values; the others are written by the batches.
    cache = {name: _take(getattr(state, name), old_src) for name in ("keys", "values")}
    rows = np.flatnonzero(run)
    chunk = width[rows] - keep[rows]
    order = rows[np.lexsort((width[rows], chunk))]
    tokens, rows = 2 * options.max_tokens, options.batch_size
    for idx in token_batches(order, 2 * width - keep, tokens, rows):  # query + key tokens
        if config.baskets:
            embeddings[idx] = _whole_windows(encoder, store, idx)
            continue
        _run_batch(encoder, store, idx, keep, cache, prefix_sum, embeddings)
    reencoded = had & ((m.drop > 0) | (run & config.baskets))
    stats = {
        "n_new": int((~had).sum()),
        "n_extended": int((extendable & run & (m.new_len > 0)).sum()),
        "n_reencoded": int(reencoded.sum()),
        "n_reordered": int((reordered & (m.drop == 0) & ~reencoded).sum()),
        "n_requeried": int((requery & ~reencoded).sum()),
        "n_unchanged": int((had & ~run).sum()),
        "n_positions": int(chunk.sum()),
    }
    return cache | {"prefix_sum": prefix_sum, "embeddings": embeddings}, stats


def _no_events(state: EncoderState, schema: EventSchema) -> SequenceStore:
    """An empty store with the state's entity id type."""
    empty = np.zeros(0)
    return SequenceStore(
        entity_ids=state.entity_ids[:0],
        offsets=np.zeros(1, dtype=np.int64),
        items=empty.astype(np.int64),
        timestamps=empty,
        dt_prev=empty.astype(np.float32),
        dt_ref=empty.astype(np.float32),
        categorical={c: empty.astype(np.int64) for c in schema.categorical},
        numeric={c: empty.astype(np.float32) for c in schema.numeric},
    )


def _take(values: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """``values[:, rows]`` (per-layer arrays); zeros when ``values`` has no position yet."""
    if values.shape[1] == 0:
        return np.zeros((values.shape[0], len(rows), *values.shape[2:]), dtype=values.dtype)
    return np.take(values, rows, axis=1)


def _when(seconds: float) -> str:
    return str(pd.Timestamp(seconds, unit="s", tz="UTC"))


def _check_order(
    ids: pa.Array, both: np.ndarray, old_last: np.ndarray, first_new: np.ndarray, cut: Cut | None
) -> None:
    """New events may not precede the state's newest event of their entity, nor ``as_of`` it."""
    early = np.flatnonzero(both & (first_new < old_last))
    if len(early):
        i = early[0]
        raise SeqencError(
            f"{len(early)} entit{'y has' if len(early) == 1 else 'ies have'} new events older than "
            f"their newest event in the state, e.g. entity {ids[i].as_py()!r}: {_when(first_new[i])} "
            f"< {_when(old_last[i])}; build the state again from the whole log"
        )
    late = np.flatnonzero(~at_or_before((old_last, None), cut)) if cut is not None else []
    if len(late):
        i = late[0]
        raise SeqencError(
            f"as_of={_when(cut.seconds)} is earlier than events already in the state (entity "
            f"{ids[i].as_py()!r} at {_when(old_last[i])}); a state cannot drop events"
        )


def window_store(
    ids: pa.Array,
    offsets: np.ndarray,
    window: dict[str, np.ndarray],
    query_gap: np.ndarray,
    schema: EventSchema,
) -> SequenceStore:
    """The merged windows as a store for :func:`collate`, each entity's reference time its query
    time (the ``dt_ref`` of its newest event is its query gap), as ``encode``'s store has it."""
    dt_ref = np.zeros(len(window["timestamps"]), dtype=np.float32)
    dt_ref[offsets[1:] - 1] = query_gap
    return SequenceStore(
        entity_ids=ids,
        offsets=offsets,
        items=window["items"],
        timestamps=window["timestamps"],
        dt_prev=window["dt_prev"],
        dt_ref=dt_ref,
        categorical={c: window["categorical"][:, j] for j, c in enumerate(schema.categorical)},
        numeric={c: window["numeric"][:, j] for j, c in enumerate(schema.numeric)},
    )


def _run_batch(
    encoder: LoadedBundle,
    store: SequenceStore,
    idx: np.ndarray,
    keep: np.ndarray,
    cache: dict[str, np.ndarray],
    prefix_sum: np.ndarray,
    embeddings: np.ndarray,
) -> None:
    """Run entities ``idx``: positions ``keep`` on of their window against the cached ones; writes
    their embeddings, running sums and new keys / values in place."""
    device, offsets = encoder.device, store.offsets
    starts, ends = offsets[idx], offsets[idx + 1]
    kept, width = keep[idx], ends - starts
    view = SequenceView(store, idx, starts + kept, ends)
    batch = collate(view, np.arange(len(idx)), encoder.meta.history_len).to(device)
    new = width - kept
    slots = np.arange(int(kept.max(initial=0)) + batch.items.shape[1])[None, :]
    at = starts[:, None] + np.minimum(slots, width[:, None] - 1)  # [B, W] window rows

    def cached(values: np.ndarray) -> torch.Tensor:  # nothing to gather when nothing is kept
        if not kept.any():
            return torch.empty(values.shape[0], *at.shape, values.shape[2], device=device)
        return torch.from_numpy(np.take(values, at, axis=1)).to(device)

    past = KVCache(
        keys=cached(cache["keys"]),
        values=cached(cache["values"]),
        lengths=torch.from_numpy(kept).to(device),
    )
    hidden = extend(encoder.model, past, batch)
    old_sum, total = (torch.from_numpy(a).to(device) for a in (prefix_sum[idx], width))
    pooled, sums = readout(encoder.model, hidden, batch.lengths, old_sum, total)
    embeddings[idx], prefix_sum[idx] = pooled.cpu().numpy(), sums.cpu().numpy()
    b, i = np.nonzero(np.arange(batch.items.shape[1])[None, :] < new[:, None])
    rows = starts[b] + kept[b] + i
    for name, written in (("keys", past.keys), ("values", past.values)):
        cache[name][:, rows] = written[:, b, kept[b] + i].cpu().numpy()


def _whole_windows(encoder: LoadedBundle, store: SequenceStore, idx: np.ndarray) -> np.ndarray:
    """``[len(idx), d]`` embeddings of entities ``idx`` from their whole windows (the full
    forward pass, for a model with the basket rule), in float32."""
    batch = collate(full_view(store), idx, encoder.meta.history_len).to(encoder.device)
    return encoder.model.entity_embedding(batch).float().cpu().numpy()


def build_state(encoder: LoadedBundle, events: Source, options: EncodeOptions) -> EncoderState:
    """The state of ``events`` (an update of the empty state)."""
    check_incremental(encoder.model)
    return update_state(encoder, empty_state(encoder.meta), events, options)


def state_output(state: EncoderState, last: LastStep, output: str) -> Any:
    """The state's embeddings through ``encode``'s last step (the head's predictions, the map
    into the space asked for), in its ``output`` form, the call's counts attached."""
    keys = entity_table(
        state.entity_ids, state.lengths, state.newest_times() if state.has_time else None
    )
    return last.output(last(keys, state.embeddings.copy()), state.stats, output)
