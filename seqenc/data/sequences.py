"""Per-entity event sequences stored jagged, the way an Arrow ListArray is.

One flat values array per field plus one ``offsets`` array: entity ``i`` owns events
``offsets[i]:offsets[i + 1]``, oldest first. No Python object per event or per entity.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from seqenc.data.bounds import VocabBounds
from seqenc.data.cut import EXACT, Cut, parse, reference_seconds
from seqenc.data.events import DEFAULT_SCHEMA, Source, read_events
from seqenc.data.schema import EventSchema
from seqenc.data.vocab import Vocabularies
from seqenc.errors import SeqencError

log = logging.getLogger(__name__)


class Jagged:
    """Rows of different lengths stored flat, as an Arrow ListArray is: row ``i`` owns positions
    ``offsets[i]:offsets[i + 1]`` of every per-position array, oldest first. The one such structure
    (:class:`SequenceStore`, the incremental :class:`~seqenc.incremental.state.EncoderState`)."""

    offsets: np.ndarray  # [n + 1] int64
    timestamps: np.ndarray  # [P] float64 epoch seconds

    def __len__(self) -> int:
        return len(self.offsets) - 1

    @property
    def lengths(self) -> np.ndarray:
        """``[n]`` int64 positions per row."""
        return np.diff(self.offsets)

    def newest_times(self) -> np.ndarray:
        """``[n]`` float64 time of each row's newest position (rows are never empty)."""
        return self.timestamps[self.offsets[1:] - 1]


@dataclass
class SequenceStore(Jagged):
    """Jagged event histories of many entities (:class:`Jagged`).

    Attributes:
        entity_ids: one id per entity (original type), sorted ascending.
        offsets: ``[n_entities + 1]`` int64 event offsets.
        items: ``[n_events]`` int64 item vocabulary ids.
        timestamps: ``[n_events]`` float64 event times in epoch seconds (all 0 without times).
        dt_prev: ``[n_events]`` float32 seconds since the entity's previous event (0 for its first).
        dt_ref: ``[n_events]`` float32 seconds from the event to the reference time: the entity's last
            event, or the ``as_of`` time given when building.
        categorical: column name → ``[n_events]`` int64 vocabulary ids.
        numeric: column name → ``[n_events]`` float32 values.
        has_time: whether the log had real timestamps.
        n_unknown_items: events whose item was not in the vocabulary (mapped to its
            out-of-vocabulary bucket, or to UNK without buckets).
        n_unknown_categorical: column name → events whose (non-null) value was not in that
            column's vocabulary (mapped as items are; nulls are UNK and not counted).
        ticks: ``[n_events]`` int64 nanoseconds of the events, when they were read ``exact``
            (what per-row cut-offs compare, :mod:`seqenc.data.cut`), else ``None``.
    """

    entity_ids: pa.Array
    offsets: np.ndarray
    items: np.ndarray
    timestamps: np.ndarray
    dt_prev: np.ndarray
    dt_ref: np.ndarray
    categorical: dict[str, np.ndarray] = field(default_factory=dict)
    numeric: dict[str, np.ndarray] = field(default_factory=dict)
    has_time: bool = True
    n_unknown_items: int = 0
    n_unknown_categorical: dict[str, int] = field(default_factory=dict)
    ticks: np.ndarray | None = None

    @property
    def n_events(self) -> int:
        return int(self.offsets[-1])


def build_sequences(
    events: Source,
    schema: EventSchema = DEFAULT_SCHEMA,
    *,
    keep_newest: int | None = None,
    as_of: object = None,
    vocabs: Vocabularies | None = None,
    bounds: VocabBounds | None = None,
) -> tuple[SequenceStore, Vocabularies]:
    """Group an event log into per-entity, time-ordered, vocabulary-encoded histories.

    Args:
        events: anything :func:`~seqenc.data.events.read_events` accepts.
        schema: the log's columns.
        keep_newest: keep only each entity's newest ``keep_newest`` events (``None``, the
            default: keep all; a model is fed its ``history_len`` newest when batched).
        as_of: point-in-time cut (datetime, ISO string, ``pd.Timestamp``, epoch seconds, a Cut):
            later events are dropped (:func:`seqenc.data.cut.at_or_before`), entities left with
            none are left out. It is also the reference time of ``dt_ref``.
        vocabs: vocabularies to encode with (inference: unseen items and categories take their
            out-of-vocabulary bucket, or UNK without buckets, counted in ``n_unknown_items``);
            ``None`` fits new ones on these events after the ``as_of`` cut (training).
        bounds: when fitting, how large the vocabularies may grow (None: every value kept).

    Ordering: entities by ascending id; events by time, and events with equal times by
    ``schema.tie_order`` (the schema's ``tie_breakers``, then item, categorical and numeric
    values), so the order of the input rows never matters. Without a timestamp column the input
    order is the event order and every time field is 0.

    Time deltas: ``dt_prev`` is the gap to the entity's previous event in its full history up
    to ``as_of`` (so the first event of a truncated window still knows its gap; 0 only for the
    entity's very first event); ``dt_ref`` is the reference time minus the event time, the
    reference being ``as_of`` when given, else the entity's last event.

    Returns:
        ``(store, vocabs)``: the histories and the vocabularies used (fitted or given).
    """
    table, cut = _cut(events, schema, as_of, keep_newest)
    vocabs = _vocabularies(table, schema, vocabs, bounds)
    codes, entity_ids = _entity_codes(table[schema.entity])
    n_events, n_entities = len(codes), len(entity_ids)
    order, times = _ordered(table, schema, codes, n_entities)
    codes = codes[order]
    full_lengths = np.bincount(codes, minlength=n_entities)
    full_ends = np.cumsum(full_lengths)
    limit = n_events if keep_newest is None else keep_newest
    keep = full_ends[codes] - np.arange(n_events) <= limit  # rank from the end
    ref = None if cut is None else cut.seconds
    dt_prev, dt_ref = _gaps(times, codes, full_ends - full_lengths, full_ends, ref)
    lengths = np.minimum(full_lengths, limit)
    store = SequenceStore(
        entity_ids=entity_ids,
        offsets=np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64),
        timestamps=times[keep],
        dt_prev=dt_prev[keep].astype(np.float32),
        dt_ref=dt_ref[keep].astype(np.float32),
        has_time=schema.timestamp is not None,
        **_encoded_values(table, schema, vocabs, order[keep]),
    )
    return store, vocabs


def _ordered(
    table: pa.Table, schema: EventSchema, codes: np.ndarray, n_entities: int
) -> tuple[np.ndarray, np.ndarray]:
    """``(order, times)``: the permutation sorting the events by entity, time (their exact ticks
    when read ``exact``: events 1 ns apart are not tied) and tie order, and their times in that
    order (all 0 without a timestamp column)."""
    if schema.timestamp is None:
        return _stable_order(codes, None, n_entities), np.zeros(len(codes))
    times = table[schema.timestamp].to_numpy()
    key = table[EXACT].to_numpy() if EXACT in table.column_names else times
    order = _stable_order(codes, key, n_entities, lambda: _tie_order(table, schema))
    return order, times[order]


def _cut(
    events: Source, schema: EventSchema, as_of: object, keep_newest: int | None
) -> tuple[pa.Table, Cut | None]:
    """``(table, cut)``: the log's events at or before ``as_of`` (``keep_newest`` checked first,
    one line)."""
    if keep_newest is not None and (
        not isinstance(keep_newest, (int, np.integer)) or keep_newest < 1
    ):
        raise SeqencError(f"keep_newest must be a positive integer or None, got {keep_newest!r}")
    if as_of is None:
        return read_events(events, schema), None
    if schema.timestamp is None:
        raise SeqencError("as_of needs a timestamp column, but the schema has timestamp=None")
    cut = parse(as_of)  # checked before any event is read
    return read_events(events, schema, until=cut), cut


def _vocabularies(
    table: pa.Table, schema: EventSchema, vocabs: Vocabularies | None, bounds: VocabBounds | None
) -> Vocabularies:
    """``vocabs``, or new ones fitted on ``table``; refused when a categorical column has none."""
    if vocabs is None:
        vocabs = Vocabularies.fit(table, schema, bounds)
    missing = [c for c in schema.categorical if c not in vocabs.categorical]
    if missing:
        raise SeqencError(
            f"no vocabulary for categorical column(s) {missing}; "
            f"the vocabularies cover {sorted(vocabs.categorical)}"
        )
    return vocabs


def _gaps(
    times: np.ndarray,
    codes: np.ndarray,
    starts: np.ndarray,
    ends: np.ndarray,
    ref_time: float | None,
) -> tuple[np.ndarray, np.ndarray]:
    """``(dt_prev, dt_ref)`` float64 of the sorted events: the gap to the entity's previous event
    (0 for its first) and from the event to the reference time (``as_of``, else the entity's
    newest event)."""
    dt_prev = np.zeros(len(times), dtype=np.float64)
    dt_prev[1:] = np.diff(times)
    dt_prev[starts] = 0.0
    newest = times[ends - 1][codes] if len(times) else times
    cut = None if ref_time is None else np.asarray(ref_time, dtype=np.float64)
    return dt_prev, reference_seconds(cut, newest) - times


def _encoded_values(
    table: pa.Table, schema: EventSchema, vocabs: Vocabularies, kept: np.ndarray
) -> dict[str, Any]:
    """The store's items, categorical and numeric fields (and exact ticks, when read) from the
    input rows ``kept`` (in store order), and the counts of the values the vocabularies do not
    know."""
    items = vocabs.item.encode(table[schema.item])[0][kept]
    categorical = {c: vocabs.categorical[c].encode(table[c])[0][kept] for c in schema.categorical}
    return {
        "items": items,
        "categorical": categorical,
        "numeric": {c: table[c].to_numpy()[kept] for c in schema.numeric},
        "ticks": table[EXACT].to_numpy()[kept] if EXACT in table.column_names else None,
        "n_unknown_items": int(np.count_nonzero(vocabs.item.unknown(items))),
        "n_unknown_categorical": {
            c: int(np.count_nonzero(vocabs.categorical[c].unknown(ids) & _valid(table[c])[kept]))
            for c, ids in categorical.items()
        },
    }


def repeat_share(store: SequenceStore) -> float:
    """Share of events whose item already occurred earlier in the same entity's history."""
    return _pair_repeat_share(np.repeat(np.arange(len(store)), store.lengths), store.items)


def _pair_repeat_share(entities: np.ndarray, items: np.ndarray) -> float:
    """Share of events whose (entity, item) pair occurs at another event before them: all events
    but the first of each distinct pair, so the order of the events does not matter."""
    if len(items) == 0:
        return 0.0
    repeated = pd.DataFrame({"entity": entities, "item": items}).duplicated().to_numpy()
    return float(repeated.mean())


def fit_catalogue(
    events: Source,
    schema: EventSchema,
    bounds: VocabBounds | None = None,
    vocabs: Vocabularies | None = None,
) -> tuple[Vocabularies, float]:
    """``(vocabs, repeat share)`` of the whole log, as :func:`build_sequences` and
    :func:`repeat_share` find them, read from its id columns only (entity, item, categorical).

    What every process of a run split by entity must agree on: each reads this column projection
    of the whole log, then the events of its own entities only. ``vocabs`` given: the share is
    that of the log encoded with them (nothing is fitted).
    """
    table = read_events(events, replace(schema, timestamp=None, numeric=(), tie_breakers=()))
    vocabs = _vocabularies(table, schema, vocabs, bounds)
    items = vocabs.item.encode(table[schema.item])[0]
    return vocabs, _pair_repeat_share(_entity_codes(table[schema.entity])[0], items)


def _entity_codes(ids: pa.ChunkedArray) -> tuple[np.ndarray, pa.Array]:
    """``(codes, uniques)``: dense int64 codes that rank ``ids`` ascending, and the sorted uniques."""
    if pa.types.is_integer(ids.type):
        codes, uniques = pd.factorize(ids.to_numpy())
        uniques = pa.array(uniques, type=ids.type)
    else:
        encoded = pc.dictionary_encode(ids.combine_chunks())
        codes, uniques = encoded.indices.to_numpy().astype(np.int64), encoded.dictionary
    sorter = pc.sort_indices(uniques).to_numpy()
    rank = np.empty(len(sorter), dtype=np.int64)
    rank[sorter] = np.arange(len(sorter))
    return rank[codes], uniques.take(pa.array(sorter))


def _valid(col: pa.ChunkedArray) -> np.ndarray:
    return pc.is_valid(col).to_numpy(zero_copy_only=False)


def _tie_order(table: pa.Table, schema: EventSchema) -> np.ndarray:
    """Permutation sorting the events by ``schema.tie_order`` (stable; nulls last)."""
    keys = [(c, "ascending") for c in schema.tie_order]
    return pc.sort_indices(table, sort_keys=keys).to_numpy()


def _stable_order(
    codes: np.ndarray,
    times: np.ndarray | None,
    n_entities: int,
    ties: Callable[[], np.ndarray] | None = None,
) -> np.ndarray:
    """Permutation sorting events by (entity code, time); equal keys keep the order ``ties()``
    (a permutation of the events, computed only when needed), or the input order.

    An LSD radix sort, 16 bits a pass (numpy's stable argsort of uint16 is a radix sort), on one
    int64 key ``code * time_span + time`` when times are whole seconds or integer ticks; otherwise a stable
    comparison sort by time followed by the radix passes over the codes.
    """
    step = np.diff(codes)
    if times is None:
        ordered = step >= 0
    else:
        dt = np.diff(times)
        ordered = (step > 0) | ((step == 0) & (dt > 0 if ties is not None else dt >= 0))
    if ordered.all():  # logs are often written grouped and in time order already
        return np.arange(len(codes))
    start = np.arange(len(codes)) if ties is None else ties()
    if times is None:
        return _radix_order(codes, start)
    offset = times - times.min()
    if np.issubdtype(offset.dtype, np.integer):  # exact ticks, in their common step (1 s, ...)
        offset = offset // max(int(np.gcd.reduce(offset)), 1)
        span, whole = int(offset.max()) + 1, True
    else:
        span, whole = float(offset.max()) + 1, bool((offset == np.floor(offset)).all())
    if n_entities * span < 2**62 and whole:
        return _radix_order(codes * int(span) + offset.astype(np.int64), start)
    return _radix_order(codes, start[np.argsort(times[start], kind="stable")])


def _radix_order(key: np.ndarray, order: np.ndarray) -> np.ndarray:
    """Refine ``order`` into a stable sort by the non-negative int64 ``key`` (LSD radix)."""
    shift = 0
    top = int(key.max())
    while top >> shift:
        digit = ((key[order] >> shift) & 0xFFFF).astype(np.uint16)
        order = order[np.argsort(digit, kind="stable")]
        shift += 16
    return order


def log_unknown_values(
    n_events: int, n_unknown_items: int, n_unknown_categorical: dict[str, int]
) -> None:
    """Warn about events whose item or categorical value the vocabularies do not know (→ a bucket,
    or UNK); the counts are a store's (or several stores' sums)."""
    if n_unknown_items:
        log.warning(
            "%d of %d events have items unknown to the model (encoded as UNK or a bucket)",
            n_unknown_items,
            n_events,
        )
    for column, n in n_unknown_categorical.items():
        if n:
            log.warning(
                "%d of %d events have a %r value unknown to the model (UNK or a bucket; a column "
                "of another type than in training, e.g. ints for text, is compared as text)",
                n,
                n_events,
                column,
            )


MIN_EVENTS = 4  # the fewest events of an entity a leave-one-out split trains on


def require_known_items(store: SequenceStore, source: str | None) -> None:
    """With vocabularies the log was not fitted on (``source`` says whose: ``data.vocabs_from``'s
    bundle, a checkpoint's), warn about the values they do not know, as an encode does, and
    refuse a log none of whose items they know: a model would train (or be tested) on unknown ids
    alone. Without (``None``: fitted on the log) there is nothing to check."""
    if source is None:
        return
    log_unknown_values(store.n_events, store.n_unknown_items, store.n_unknown_categorical)
    if store.n_events and store.n_unknown_items == store.n_events:
        raise SeqencError(
            f"{source}: its item vocabulary knows none of the log's {store.n_events:,} events' "
            "items: is it another catalogue's?"
        )


def require_trainable(store: SequenceStore, min_len: int, min_events: int = MIN_EVENTS) -> None:
    """Refuse a log where no entity has ``max(min_len, min_events)`` events (leave-one-out holds
    out two events and a training window needs two more): training would run on nothing and
    save an untrained model."""
    needed = max(min_len, min_events)
    lengths = store.lengths
    if len(store) and (lengths >= needed).any():
        return
    longest = int(lengths.max()) if len(store) else 0
    raise SeqencError(
        f"no entity has enough events to train: all {len(store)} entities have fewer than "
        f"{needed} events (min_len={min_len}; a train/val/test split needs at least "
        f"{min_events}); the longest has {longest}. Lower data.min_len or give a longer log"
    )
