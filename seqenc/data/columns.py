"""Type and check one block of an event log, column by column: the only place events are validated.

Every problem raises :class:`~seqenc.errors.SeqencError` naming the column and showing the first
offending row, numbered in the whole input (``offset`` is the block's first row), so a streaming
reader reports the same row as a whole-file read. Also :func:`epoch_seconds`, the one parser of a
point in time (``as_of``) with the same rules as the timestamp column.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from seqenc.data.schema import EventSchema
from seqenc.errors import SeqencError

# Numeric epoch times above this (year 5138) are almost surely milliseconds or finer, not seconds.
MAX_EPOCH_SECONDS = 1e11
_SECONDS_PER_UNIT = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "ns": 1e-9}
_MS_HINT = (
    "numeric timestamps must be epoch SECONDS, this looks like milliseconds or finer "
    "(divide by 1000, or pass datetime values)"
)


def is_text(t: pa.DataType) -> bool:
    """Whether ``t`` is an Arrow string type."""
    return pa.types.is_string(t) or pa.types.is_large_string(t)


def as_text(col: pa.ChunkedArray) -> pa.ChunkedArray:
    """Any id column as ``large_string`` (Arrow prints whole floats without ``.0``, like ints)."""
    if pa.types.is_dictionary(col.type):
        col = col.cast(col.type.value_type)
    return col.cast(pa.large_string())


def normalize_table(table: pa.Table, schema: EventSchema, offset: int = 0) -> pa.Table:
    """The schema's columns of one block, typed as :func:`~seqenc.data.events.read_events` says."""
    return pa.table({name: _normalize(table, name, schema, offset) for name in schema.columns})


def _bad_row(table: pa.Table, name: str, mask, problem: str, offset: int) -> SeqencError:
    """A SeqencError for the first row where ``mask`` is true, showing that row."""
    if not isinstance(mask, np.ndarray):
        mask = pc.fill_null(mask, True).to_numpy(zero_copy_only=False)
    row = int(np.flatnonzero(mask)[0])
    values = table.slice(row, 1).to_pylist()[0]
    return SeqencError(
        f"column {name!r}: {problem} in {int(mask.sum())} row(s); first at row {offset + row} "
        f"(0-based): {name}={values[name]!r}; row: {values}"
    )


def _normalize(table: pa.Table, name: str, schema: EventSchema, offset: int) -> pa.ChunkedArray:
    col = table[name]
    if pa.types.is_dictionary(col.type):
        col = col.cast(col.type.value_type)
    if name == schema.timestamp:
        return _to_epoch_seconds(table, name, col, offset)
    if name in schema.numeric:
        return _to_float32(table, name, col, offset)
    if name in schema.tie_breakers and name not in (schema.item, *schema.categorical):
        return _to_sortable(name, col)
    if pa.types.is_floating(col.type):  # NaN in an id / category column means "missing"
        col = pc.if_else(pc.is_nan(col), pa.scalar(None, col.type), col)
    if name in (schema.entity, schema.item):
        kind = "entity" if name == schema.entity else "item"
        if col.null_count:
            raise _bad_row(table, name, pc.is_null(col), f"null {kind} id", offset)
        if pa.types.is_boolean(col.type):
            raise SeqencError(
                f"column {name!r} holds booleans; {kind} ids must be integers or strings"
            )
    return _to_id(name, col)


def _to_id(name: str, col: pa.ChunkedArray) -> pa.ChunkedArray:
    t = col.type
    if pa.types.is_integer(t) or pa.types.is_boolean(t):
        try:
            return col.cast(pa.int64())
        except pa.ArrowInvalid as e:  # uint64 beyond int64
            raise SeqencError(f"column {name!r}: ids do not fit in int64: {e}") from e
    if pa.types.is_floating(t):
        values = np.nan_to_num(col.to_numpy(), nan=0.0)  # NaN = null here, kept as null
        if (np.abs(values) < 2**53).all() and (values == np.round(values)).all():
            return col.cast(pa.int64())
        return as_text(col)
    if is_text(t) or pa.types.is_null(t):
        return col.cast(pa.large_string())
    raise SeqencError(f"column {name!r} has type {t}; expected integers or strings")


def _to_sortable(name: str, col: pa.ChunkedArray) -> pa.ChunkedArray:
    """A tie-breaker column: integers, floats, text or times, kept comparable (nulls sort last)."""
    t = col.type
    if pa.types.is_integer(t) or pa.types.is_boolean(t):
        return col.cast(pa.int64())
    if pa.types.is_floating(t):
        return col.cast(pa.float64())
    if is_text(t):
        return col.cast(pa.large_string())
    if pa.types.is_timestamp(t) or pa.types.is_date(t):
        return col.cast(pa.timestamp("ns")).cast(pa.int64())
    raise SeqencError(f"tie-breaker column {name!r} has type {t}; expected numbers, text or times")


def _to_float32(table: pa.Table, name: str, col: pa.ChunkedArray, offset: int) -> pa.ChunkedArray:
    if col.null_count:
        raise _bad_row(table, name, pc.is_null(col), "missing value (null/NaN)", offset)
    t = col.type
    if is_text(t):
        try:  # Arrow's parser first; pandas (spaces, odd spellings) finds the bad row otherwise
            values = col.cast(pa.float64()).to_numpy()
        except pa.ArrowInvalid:
            parsed = pd.to_numeric(pd.Series(col.to_numpy(zero_copy_only=False)), errors="coerce")
            values = parsed.to_numpy(dtype=np.float64, na_value=np.nan)
            if np.isnan(values).any():
                raise _bad_row(table, name, np.isnan(values), "non-numeric value", offset) from None
    elif pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t):
        values = col.cast(pa.float64()).to_numpy()
    else:
        raise SeqencError(f"column {name!r} has type {t}; expected numbers")
    with np.errstate(over="ignore"):  # values beyond float32 become inf, reported just below
        out = values.astype(np.float32)
    if not np.isfinite(out).all():
        problem = "NaN or infinite value (or beyond float32)"
        raise _bad_row(table, name, ~np.isfinite(out), problem, offset)
    return pa.chunked_array([out])


def _to_epoch_seconds(
    table: pa.Table, name: str, col: pa.ChunkedArray, offset: int
) -> pa.ChunkedArray:
    if col.null_count:
        raise _bad_row(table, name, pc.is_null(col), "null/NaT timestamp", offset)
    t = col.type
    if is_text(t):
        try:  # numbers written as text (CSV): epoch seconds
            col, t = col.cast(pa.float64()), pa.float64()
        except pa.ArrowInvalid:
            col, t = _parse_iso(table, name, col, offset), pa.timestamp("ns", "UTC")
    if pa.types.is_date(t):
        col, t = col.cast(pa.timestamp("s")), pa.timestamp("s")
    if pa.types.is_timestamp(t):
        # Arrow stores tz-aware timestamps as UTC ticks: the raw integers are already UTC.
        ticks = col.cast(pa.int64()).to_numpy()
        return pa.chunked_array([ticks * _SECONDS_PER_UNIT[t.unit]])
    if pa.types.is_integer(t) or pa.types.is_floating(t):
        values = col.cast(pa.float64()).to_numpy()
        if not np.isfinite(values).all():
            raise _bad_row(table, name, ~np.isfinite(values), "NaN or infinite timestamp", offset)
        too_big = np.abs(values) > MAX_EPOCH_SECONDS
        if too_big.any():
            raise _bad_row(table, name, too_big, _MS_HINT, offset)
        return pa.chunked_array([values])
    raise SeqencError(
        f"column {name!r} has type {t}; expected datetimes, epoch seconds or ISO text"
    )


def _parse_iso(table: pa.Table, name: str, col: pa.ChunkedArray, offset: int) -> pa.ChunkedArray:
    """ISO-8601 strings → UTC timestamps (naive strings are taken as UTC)."""
    for target in (pa.timestamp("ns"), pa.timestamp("ns", "UTC")):  # Arrow's fast parser first
        try:
            return col.cast(target)
        except pa.ArrowInvalid:
            pass
    texts = pd.Series(col.to_numpy(zero_copy_only=False))  # mixed offsets / formats: pandas
    parsed = pd.to_datetime(texts, utc=True, format="ISO8601", errors="coerce")
    if parsed.isna().any():
        problem = "cannot parse timestamp as ISO-8601"
        raise _bad_row(table, name, parsed.isna().to_numpy(), problem, offset)
    return pa.chunked_array([pa.Array.from_pandas(parsed).cast(pa.timestamp("ns", "UTC"))])


def epoch_seconds(value: object) -> float:
    """A point in time (``as_of``) → float epoch seconds, UTC, by the timestamp column's rules.

    Accepts ``datetime`` / ``pd.Timestamp`` / ``np.datetime64`` / ISO-8601 strings (naive values are
    taken as UTC) and numbers or numeric strings (``"1704119688"``, as the command line passes
    them), read as epoch **seconds**; a number above 1e11 is refused as probable milliseconds.
    """
    if isinstance(value, (bool, np.bool_)):
        raise SeqencError(f"cannot read {value!r} as a point in time")
    number = value
    if isinstance(value, str):
        try:
            number = float(value)
        except ValueError:
            pass
    if isinstance(number, (int, float, np.integer, np.floating)):
        if not np.isfinite(number):
            raise SeqencError(f"time must be finite, got {value!r}")
        if abs(number) > MAX_EPOCH_SECONDS:
            raise SeqencError(f"time {value!r}: {_MS_HINT}")
        return float(number)
    try:
        ts = pd.Timestamp(value)
    except (TypeError, ValueError) as e:
        raise SeqencError(f"cannot read {value!r} as a point in time: {e}") from e
    if ts is pd.NaT:
        raise SeqencError(f"cannot read {value!r} as a point in time (NaT)")
    ts = ts.tz_localize("UTC") if ts.tzinfo is None else ts.tz_convert("UTC")
    return ts.value / 1e9
