"""Events → the bundle's encoded histories, the counts of one call, and the entity columns of
every output."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from seqenc.bundle import BundleMeta
from seqenc.data.aggregates import AggregateSpec
from seqenc.data.cut import Cut
from seqenc.data.events import Events, Source, read_events
from seqenc.data.sequences import SequenceStore, build_sequences, log_unknown_values
from seqenc.data.vocab import Vocabularies
from seqenc.encoding.options import EncodeOptions
from seqenc.encoding.outputs import entity_table
from seqenc.errors import SeqencError

log = logging.getLogger(__name__)


@dataclass
class Counts:
    """What one call met: every output carries the first three (pandas attrs, arrow metadata,
    :class:`~seqenc.encoding.outputs.Embeddings`, the incremental state's ``stats``).

    Attributes:
        n_unknown_items: events whose item is not in the vocabulary (encoded as UNK or a bucket).
        n_skipped: entities left out for having no event at or before ``as_of``.
        n_unknown_categorical: per categorical column, events whose value the model never saw.
        n_events, n_entities: events and entities encoded (for the log lines and the export).
    """

    n_unknown_items: int = 0
    n_skipped: int = 0
    n_unknown_categorical: dict[str, int] = field(default_factory=dict)
    n_events: int = 0
    n_entities: int = 0

    @classmethod
    def of(cls, store: SequenceStore, n_skipped: int) -> Counts:
        """The counts of ``store``, built with ``n_skipped`` entities left out."""
        return cls(
            store.n_unknown_items,
            n_skipped,
            dict(store.n_unknown_categorical),
            store.n_events,
            len(store),
        )

    def __add__(self, other: Counts) -> Counts:
        categorical = dict(self.n_unknown_categorical)
        for column, n in other.n_unknown_categorical.items():
            categorical[column] = categorical.get(column, 0) + n
        return Counts(
            self.n_unknown_items + other.n_unknown_items,
            self.n_skipped + other.n_skipped,
            categorical,
            self.n_events + other.n_events,
            self.n_entities + other.n_entities,
        )

    def output(self) -> dict[str, Any]:
        """The counts every output carries."""
        return {
            "n_unknown_items": self.n_unknown_items,
            "n_skipped": self.n_skipped,
            "n_unknown_categorical": self.n_unknown_categorical,
        }

    def report(self) -> None:
        """Warn about unknown values and skipped entities (never an error)."""
        log_unknown_values(self.n_events, self.n_unknown_items, self.n_unknown_categorical)
        if self.n_skipped:
            log.warning("skipped %d entities with no event at or before as_of", self.n_skipped)


def sequences(
    events: Source,
    meta: BundleMeta,
    vocabs: Vocabularies,
    options: EncodeOptions,
    keep_newest: int | None = None,
) -> tuple[SequenceStore, Counts]:
    """``(store, counts)``: the log's histories up to ``options.as_of``, encoded with the bundle's
    vocabularies.

    An entity has no usable events when all of them are later than ``as_of``; ``on_empty="raise"``
    then raises (naming one such entity), ``"skip"`` leaves it out and counts it in ``n_skipped``.
    ``keep_newest`` truncates the stored histories (``None`` keeps them whole).
    """
    as_of, schema = options.as_of, meta.schema
    table = read_events(events, schema, exact=True)  # ordered and cut on the events' ticks
    store, _ = build_sequences(
        Events(table, schema), schema, keep_newest=keep_newest, as_of=options.cut, vocabs=vocabs
    )
    entities = pc.unique(table[schema.entity])
    n_skipped = len(entities) - len(store)
    if n_skipped and options.on_empty == "raise":
        example = entities.filter(pc.invert(pc.is_in(entities, value_set=store.entity_ids)))[0]
        raise SeqencError(
            f"{n_skipped} entit{'y has' if n_skipped == 1 else 'ies have'} no event at or before "
            f"as_of={as_of!r}, e.g. {schema.entity}={example.as_py()!r}; pass on_empty='skip' "
            "to leave such entities out"
        )
    return store, Counts.of(store, n_skipped)


def wide_inputs(
    events: Source, store: SequenceStore, meta: BundleMeta, cut: Cut | None
) -> np.ndarray | None:
    """``[len(store), n_wide]`` float32: a fused head's aggregates of each stored entity, from
    the same events at the same parsed cut-off as its history (``EncodeOptions.cut``, through
    :meth:`AggregateSpec.transform`); ``None`` for a bundle without one."""
    layout = (meta.head or {}).get("aggregates")
    if layout is None:
        return None
    if len(store) == 0:  # no entity with an event at or before the cut: nothing to aggregate
        return np.zeros((0, len(layout["names"])), dtype=np.float32)
    spec = AggregateSpec.from_dict(layout["spec"])
    table = spec.transform(events, meta.schema, cut)
    if table.names != list(layout["names"]):
        raise SeqencError(
            f"bundle {meta.name!r}: the aggregates of these events have other columns than the "
            "model was trained on (its aggregate layout does not match this code's)"
        )
    ids = pd.Index(table.keys[meta.schema.entity].to_numpy())
    at = ids.get_indexer(pd.Index(store.entity_ids.to_pandas()))
    wide = np.zeros((len(store), len(table.names)), dtype=np.float32)
    wide[at >= 0] = table.values[at[at >= 0]]
    return wide


def entity_columns(store: SequenceStore, rows: np.ndarray, history_len: int) -> pa.Table:
    """``entity_id``, ``n_events_read`` (the events of the history the model read: the newest, at most ``history_len``) and
    ``last_event_time`` of store ``rows``; ``last_event_time`` is null when the log has no times."""
    ends = store.offsets[rows + 1]
    return entity_table(
        store.entity_ids.take(pa.array(rows)),
        np.minimum(ends - store.offsets[rows], history_len),
        store.timestamps[np.maximum(ends - 1, 0)] if store.has_time else None,
    )
