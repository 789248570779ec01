"""The tie rule of incremental encoding: new events at the same time as an entity's newest events
in an :class:`~seqenc.incremental.state.EncoderState` are ordered among them as ``encode`` orders equal times
(``schema.tie_order``), from the raw tie values the state keeps for its newest events."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from seqenc.data.cut import Cut
from seqenc.data.events import Events, read_events
from seqenc.data.schema import EventSchema
from seqenc.data.sequences import SequenceStore
from seqenc.errors import SeqencError
from seqenc.incremental.state import EncoderState


def tie_keys(table: pa.Table, schema: EventSchema, cut: Cut | None, like: pa.Schema) -> pa.Table:
    """The tie-order columns (``schema.tie_order``) of the events up to ``cut``, in the order of
    their store (entity, time, tie order): the raw values ``encode`` breaks equal times by, typed
    as the state's (``like``, unless it has none yet). Empty without timestamps."""
    if schema.timestamp is None:
        return table.select(schema.tie_order).slice(0, 0)
    table = read_events(Events(table, schema), schema, until=cut)
    order = [schema.entity, schema.timestamp, *schema.tie_order]
    keys = table.take(pc.sort_indices(table, sort_keys=[(c, "ascending") for c in order]))
    keys = keys.select(schema.tie_order)
    if not like.names:
        return keys
    try:
        return keys.cast(like)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, ValueError) as e:
        raise SeqencError(
            f"the new events' tie-order columns {keys.schema.types} cannot take the state's types "
            f"{like.types}: {e}"
        ) from e


def _ranges(starts: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """``concat(arange(s, s + c) for s, c in zip(starts, counts))``."""
    ends = np.cumsum(counts)
    return np.repeat(starts - ends + counts, counts) + np.arange(int(ends[-1]) if len(ends) else 0)


def tie_order(
    state: EncoderState,
    new: SequenceStore,
    new_keys: pa.Table,
    old_row: np.ndarray,
    new_row: np.ndarray,
    ties: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(old_keys, owner, slot, moved_from)``. ``old_keys``: each state position's row in
    ``state.tail`` (-1 where not among its entity's newest events). For the entities ``ties``
    (new events at the time of their newest in the state), the same-time block of old ++ new in
    the tie order: the event at index ``moved_from`` of old ++ new goes to index ``slot``."""
    at_newest = state.timestamps == np.repeat(state.newest_times(), state.lengths)
    at_newest &= state.has_time
    old_keys = np.full(len(state.timestamps), -1)
    old_keys[at_newest] = np.arange(int(at_newest.sum()))
    owners = np.repeat(np.arange(len(state)), state.lengths)
    n_tail = np.bincount(owners[at_newest], minlength=len(state))
    tail_start = np.cumsum(n_tail) - n_tail
    # new events of each new entity at the time of its newest in the state (first in its range)
    last = np.full(len(new), np.nan)
    last[new_row[ties]] = state.newest_times()[old_row[ties]]
    new_owner = np.repeat(np.arange(len(new)), new.lengths)
    n_at = np.bincount(new_owner[new.timestamps == last[new_owner]], minlength=len(new))

    owner = np.flatnonzero(ties)
    if not len(owner):
        return old_keys, owner, owner, owner
    old_n, new_n = n_tail[old_row[owner]], n_at[new_row[owner]]
    old_len = state.lengths[old_row[owner]]
    rows = pa.concat_tables(
        [
            state.tail.take(_ranges(tail_start[old_row[owner]], old_n)),
            new_keys.take(_ranges(new.offsets[new_row[owner]], new_n)),
        ]
    )
    entity = np.concatenate([np.repeat(owner, old_n), np.repeat(owner, new_n)])
    index = np.concatenate(
        [_ranges(old_len - old_n, old_n), _ranges(old_len, new_n)]
    )  # in old ++ new
    keyed = rows.append_column("__entity", pa.array(entity)).append_column(
        "__index", pa.array(index)
    )
    sort = [
        ("__entity", "ascending"),
        *[(c, "ascending") for c in rows.column_names],
        ("__index", "ascending"),
    ]
    moved_from = index[pc.sort_indices(keyed, sort_keys=sort).to_numpy()]
    slots = np.lexsort((index, entity))
    return old_keys, entity[slots], index[slots], moved_from
