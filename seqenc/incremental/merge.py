"""How an incremental update merges a state's windows with new events (:mod:`seqenc.incremental.update`):
per entity of the union, which positions of old ++ new stay (the newest ``history_len``), in the tie
order ``encode`` uses (:mod:`seqenc.incremental.ties`), and where each is stored. Numpy only; the forward pass
is :mod:`seqenc.incremental.update`'s."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from seqenc.data.schema import EventSchema
from seqenc.data.sequences import SequenceStore
from seqenc.errors import SeqencError
from seqenc.incremental.state import EVENT_FIELDS, EncoderState
from seqenc.incremental.ties import tie_order


@dataclass
class Merge:
    """The union of the state's entities and the new ones, ascending, and where each one's
    merged window (the newest ``history_len`` of state window ++ new events) comes from."""

    ids: pa.Array
    old_row: np.ndarray  # row in the state, -1 where absent
    new_row: np.ndarray  # row in the new store, -1 where absent
    old_len: np.ndarray
    new_len: np.ndarray
    old_last: np.ndarray  # time of the state's newest event (-inf where absent)
    first_new: np.ndarray  # time of the first new event (+inf where absent)
    width: np.ndarray  # merged window positions
    drop: np.ndarray  # positions of old ++ new that fall out of the window

    @property
    def had(self) -> np.ndarray:
        return self.old_row >= 0

    @property
    def got(self) -> np.ndarray:
        return self.new_row >= 0

    @property
    def offsets(self) -> np.ndarray:
        return np.concatenate([[0], np.cumsum(self.width)]).astype(np.int64)


def merge(state: EncoderState, new: SequenceStore, history_len: int) -> Merge:
    """Join the state and the new store by entity; size each merged window."""
    ids, old_row, new_row = _join(state, new.entity_ids)
    old_len, new_len = of(state.lengths, old_row, 0), of(new.lengths, new_row, 0)
    first_new = new.timestamps[new.offsets[:-1]] if len(new) else np.zeros(0)
    total = old_len + new_len
    width = np.minimum(total, history_len)
    return Merge(
        ids=ids,
        old_row=old_row,
        new_row=new_row,
        old_len=old_len,
        new_len=new_len,
        old_last=of(state.newest_times(), old_row, -np.inf),
        first_new=of(first_new, new_row, np.inf),
        width=width,
        drop=total - width,
    )


def merged_windows(
    state: EncoderState, new: SequenceStore, new_keys: pa.Table, m: Merge, schema: EventSchema
) -> tuple[dict[str, np.ndarray], pa.Table, np.ndarray, np.ndarray]:
    """``(window, tail, old_src, reordered)``: the merged windows' event fields, their newest
    events' tie keys, each position's state row (where it comes from the state) and which
    entities the tie rule reordered."""
    had, got, old_len = m.had, m.got, m.old_len
    total, offsets = old_len + m.new_len, m.offsets
    owner = np.repeat(np.arange(len(m.ids)), m.width)
    at = np.arange(offsets[-1]) - offsets[owner] + m.drop[owner]  # index in old ++ new
    ties = had & got & (m.first_new == m.old_last) & state.has_time
    old_keys, tie_owner, slot, moved_from = tie_order(
        state, new, new_keys, m.old_row, m.new_row, ties
    )
    base = np.cumsum(total) - total  # where each entity's old ++ new starts, flattened
    flat = np.arange(int(total.sum()))
    flat[base[tie_owner] + slot] = base[tie_owner] + moved_from
    reordered = np.bincount(tie_owner, weights=slot != moved_from, minlength=len(m.ids)) > 0
    old_start = of(state.offsets[:-1], m.old_row, 0)
    new_start = of(new.offsets[:-1], m.new_row, 0)

    def source(index: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(from_old, old_src, new_src)``: where index ``index`` of old ++ new is stored."""
        from_old = index < old_len[owner]
        old_src = np.where(from_old, old_start[owner] + index, 0)
        return from_old, old_src, np.where(from_old, 0, new_start[owner] + index - old_len[owner])

    # The events' fields follow the tie order; dt_prev is positional (0 inside a same-time block).
    from_old, old_src, new_src = source(flat[base[owner] + at] - base[owner])
    fresh = _fresh_fields(new, m, schema)
    window = {
        name: _pick(from_old, getattr(state, name), old_src, fresh[name], new_src)
        for name in EVENT_FIELDS
        if name != "dt_prev"
    }
    at_old, at_old_src, at_new_src = source(at)
    window["dt_prev"] = _pick(at_old, state.dt_prev, at_old_src, fresh["dt_prev"], at_new_src)
    newest = window["timestamps"][offsets[1:] - 1] if len(m.ids) else np.zeros(0)
    at_newest = (window["timestamps"] == np.repeat(newest, m.width)) & state.has_time
    tail_rows = len(state.tail) + new_src
    tail_rows[from_old] = old_keys[old_src[from_old]]
    old_tail = state.tail if state.tail.num_columns else new_keys.schema.empty_table()
    tail = pa.concat_tables([old_tail, new_keys]).take(tail_rows[at_newest])
    return window, tail, old_src, reordered


def _fresh_fields(new: SequenceStore, m: Merge, schema: EventSchema) -> dict[str, np.ndarray]:
    """The new events' fields as the state stores them; an entity's first new event's ``dt_prev``
    runs from its newest event in the state."""
    dt_prev = new.dt_prev.copy()
    joins = m.had & m.got
    gap = m.first_new[joins] - m.old_last[joins]
    dt_prev[new.offsets[m.new_row[joins]]] = gap.astype(np.float32)
    n = len(new.items)
    return {
        "items": new.items,
        "timestamps": new.timestamps,
        "dt_prev": dt_prev,
        "categorical": _columns(new.categorical, schema.categorical, np.int64, n),
        "numeric": _columns(new.numeric, schema.numeric, np.float32, n),
    }


def _join(state: EncoderState, ids: pa.Array) -> tuple[pa.Array, np.ndarray, np.ndarray]:
    """``(all_ids, old_row, new_row)``: the sorted union of the state's and the new ids, and each
    one's row in the state and in the new store (-1 where absent)."""
    if not len(state):
        return ids, np.full(len(ids), -1), np.arange(len(ids))
    if ids.type != state.entity_ids.type:
        try:
            ids = ids.cast(state.entity_ids.type)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
            raise SeqencError(
                f"entity ids of the new events are {ids.type}, the state's are "
                f"{state.entity_ids.type}: {e}"
            ) from e
    union = pc.unique(pa.concat_arrays([state.entity_ids, ids]))
    union = union.take(pc.sort_indices(union))

    def rows(of: pa.Array) -> np.ndarray:
        return pc.fill_null(pc.index_in(union, value_set=of), -1).to_numpy().astype(np.int64)

    return union, rows(state.entity_ids), rows(ids)


def of(values: np.ndarray, rows: np.ndarray, fill: float) -> np.ndarray:
    """``values[rows]``, ``fill`` where a row is -1 (absent)."""
    out = np.full(len(rows), fill, dtype=np.result_type(values.dtype, type(fill)))
    out[rows >= 0] = values[rows[rows >= 0]]
    return out


def _columns(
    values: dict[str, np.ndarray], names: tuple[str, ...], dtype: type, n: int
) -> np.ndarray:
    """``[n, len(names)]`` the named feature columns side by side."""
    if not names:
        return np.zeros((n, 0), dtype=dtype)
    return np.stack([values[name] for name in names], axis=-1).astype(dtype)


def _pick(
    from_old: np.ndarray,
    old: np.ndarray,
    old_src: np.ndarray,
    new: np.ndarray,
    new_src: np.ndarray,
) -> np.ndarray:
    """Rows ``old[old_src]`` where ``from_old``, else ``new[new_src]``."""
    out = np.zeros((len(from_old), *old.shape[1:]), dtype=old.dtype)
    out[from_old] = old[old_src[from_old]]
    out[~from_old] = new[new_src[~from_old]]
    return out
