"""Type and check one block of an event log, column by column: the only place events are validated.

Every problem raises :class:`~seqenc.errors.SeqencError` naming the column and showing the first
offending row, numbered in the whole input (``offset`` is the block's first row), so a streaming
reader reports the same row as a whole-file read. A point in time (``as_of``) is parsed, with the
same rules as the timestamp column, and applied by :mod:`seqenc.data.cut`.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from seqenc.data.cut import (
    EXACT,
    MAX_EPOCH_SECONDS,
    NS,
    TICKS_PER_SECOND,
    Cut,
    at_or_before,
    seconds,
    unit_hint,
)
from seqenc.data.schema import EventSchema
from seqenc.errors import SeqencError

# Where an 'int' id type comes from, for messages refusing a value that is not an integer.
_INT_SOURCE = ": EventSchema.id_types, or a model whose vocabulary holds integers"


def is_text(t: pa.DataType) -> bool:
    """Whether ``t`` is an Arrow string type."""
    return pa.types.is_string(t) or pa.types.is_large_string(t)


def as_text(col: pa.ChunkedArray) -> pa.ChunkedArray:
    """Any id column as ``large_string`` (Arrow prints whole floats without ``.0``, like ints)."""
    if pa.types.is_dictionary(col.type):
        col = col.cast(col.type.value_type)
    return col.cast(pa.large_string())


def normalize_table(
    table: pa.Table,
    schema: EventSchema,
    offset: int = 0,
    until: Cut | None = None,
    exact: bool = False,
) -> pa.Table:
    """The schema's columns of one block, typed as :func:`~seqenc.data.events.read_events` says;
    with ``until``, only the rows at or before it (:func:`~seqenc.data.cut.at_or_before`, on the
    column's ticks); with ``exact``, also the column :data:`~seqenc.data.cut.EXACT` of int64
    nanoseconds when the times are instants (the per-row cut-offs compare on it)."""
    if until is None and not exact:
        return pa.table({name: _normalize(table, name, schema, offset) for name in schema.columns})
    columns, ticks = {}, None
    for name in schema.columns:  # the timestamp converted once: its seconds and its ticks
        if name == schema.timestamp:
            columns[name], ticks = _epoch(table, name, _decoded(table[name]), offset)
        else:
            columns[name] = _normalize(table, name, schema, offset)
    if exact and ticks is not None:
        columns[EXACT] = pa.chunked_array([_nanoseconds(*ticks, schema.timestamp)])
    out = pa.table(columns)
    if until is None:
        return out
    times = (
        (ticks[0], ticks[1]) if ticks is not None else (columns[schema.timestamp].to_numpy(), None)
    )
    return out.filter(pa.array(at_or_before(times, until)))


def _nanoseconds(values: np.ndarray, per_second: int, name: str) -> np.ndarray:
    """Ticks of any unit as int64 nanoseconds, refused in one line beyond their range (2262)."""
    factor = NS // per_second
    limit = np.iinfo(np.int64).max // factor
    if len(values) and np.abs(values).max() > limit:
        raise SeqencError(
            f"column {name!r}: times beyond the years 1678-2262 cannot be cut per row to the "
            "nanosecond; give the label table's cut-offs on a log within them"
        )
    return values * factor


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


def _decoded(col: pa.ChunkedArray) -> pa.ChunkedArray:
    """A dictionary column as its values; any other as it is."""
    return col.cast(col.type.value_type) if pa.types.is_dictionary(col.type) else col


def _normalize(table: pa.Table, name: str, schema: EventSchema, offset: int) -> pa.ChunkedArray:
    col = _decoded(table[name])
    if name == schema.timestamp:
        return _to_epoch_seconds(table, name, col, offset)
    if name in schema.numeric:
        return _to_float32(table, name, col, offset)
    if name in schema.tie_breakers and name not in schema.id_columns:
        return _to_sortable(table, name, col, offset)
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
    return _to_id(table, name, col, schema.id_type(name), offset)


def _to_id(
    table: pa.Table, name: str, col: pa.ChunkedArray, id_type: str, offset: int
) -> pa.ChunkedArray:
    """An id column as ``int64`` or ``large_string``, by ``id_type`` (see ``EventSchema``)."""
    t = col.type
    known = (pa.types.is_integer, pa.types.is_boolean, pa.types.is_floating, pa.types.is_decimal)
    if not (is_text(t) or pa.types.is_null(t) or any(test(t) for test in known)):
        raise SeqencError(f"column {name!r} has type {t}; expected integers or strings")
    if id_type == "string":
        return as_text(col)
    if is_text(t) and id_type == "int":
        return _parse_ints(table, name, col, offset)
    if is_text(t) or pa.types.is_null(t):
        return col.cast(pa.int64() if id_type == "int" else pa.large_string())
    fits = _fits_int64(col)
    if fits is None or pc.all(fits).as_py() is not False:
        return col.cast(pa.int64(), safe=False)
    if pa.types.is_integer(t):  # uint64 beyond int64: every file's integers must stay integers
        problem = f"integer beyond int64 (id_types={{{name!r}: 'string'}} reads such ids as text)"
    elif id_type == "int":
        problem = f"not a whole number within int64 (the id type is 'int'{_INT_SOURCE})"
    else:
        return as_text(col)
    raise _bad_row(table, name, pc.invert(fits), problem, offset)


def _fits_int64(col: pa.ChunkedArray) -> pa.ChunkedArray | None:
    """Which values of a float, decimal or ``uint64`` column are whole and exactly ``int64``
    (floats: below 2**53), or ``None`` for integer and boolean types, which always are."""
    t = col.type
    if pa.types.is_floating(t) or pa.types.is_decimal(t):
        limit = 2.0**53 if pa.types.is_floating(t) else 2.0**63
        small = pc.less(pc.abs(col.cast(pa.float64(), safe=False)), limit)
        return pc.and_(pc.equal(col, pc.floor(col)), small)
    if pa.types.is_uint64(t):
        return pc.less_equal(col, pa.scalar(2**63 - 1, pa.uint64()))
    return None


def _parse_ints(table: pa.Table, name: str, col: pa.ChunkedArray, offset: int) -> pa.ChunkedArray:
    """Integer text (``"007"``, ``" 7"``, ``"+7"``) → ``int64``, naming the first row that is not."""
    text = pc.utf8_trim_whitespace(col)
    digits = pc.fill_null(pc.match_substring_regex(text, r"^[+-]?[0-9]+$"), True)
    if not pc.all(digits).as_py():
        problem = f"not an integer (the id type is 'int'{_INT_SOURCE})"
        raise _bad_row(table, name, pc.invert(digits), problem, offset)
    try:
        return text.cast(pa.int64())
    except pa.ArrowInvalid:
        big = np.abs(text.cast(pa.float64()).to_numpy(zero_copy_only=False)) >= 2.0**63
        raise _bad_row(table, name, big, "integer beyond int64", offset) from None


def _numbers(col: pa.ChunkedArray) -> np.ndarray | None:
    """Integer, float, boolean or decimal values as float64 (precision beyond 2**53 is rounded,
    never an error), or ``None`` for other types."""
    t = col.type
    kinds = (pa.types.is_integer, pa.types.is_floating, pa.types.is_boolean, pa.types.is_decimal)
    if not any(test(t) for test in kinds):
        return None
    return col.cast(pa.float64(), safe=False).to_numpy()


def _to_sortable(table: pa.Table, name: str, col: pa.ChunkedArray, offset: int) -> pa.ChunkedArray:
    """A tie-breaker column: integers, floats, text or times, kept comparable (nulls sort last)."""
    t = col.type
    if pa.types.is_integer(t) or pa.types.is_boolean(t):
        fits = _fits_int64(col)
        if fits is not None and pc.all(fits).as_py() is False:
            raise _bad_row(table, name, pc.invert(fits), "integer beyond int64", offset)
        return col.cast(pa.int64(), safe=False)
    if pa.types.is_floating(t) or pa.types.is_decimal(t):
        return col.cast(pa.float64(), safe=False)
    if is_text(t):
        return col.cast(pa.large_string())
    if pa.types.is_timestamp(t) or pa.types.is_date(t):
        return pa.chunked_array([_ticks(col)[0]])  # microseconds: no overflow before year 294247
    raise SeqencError(f"tie-breaker column {name!r} has type {t}; expected numbers, text or times")


def _to_float32(table: pa.Table, name: str, col: pa.ChunkedArray, offset: int) -> pa.ChunkedArray:
    """A numeric column as float32; a value not recorded (null, NaN, blank or ``"nan"`` text) is
    NaN, which the model and the aggregates read as not recorded. Infinite values, values beyond
    float32 and text that is not a number are refused."""
    t = col.type
    values = np.full(len(col), np.nan) if pa.types.is_null(t) else _numbers(col)
    if is_text(t):
        values = _parse_floats(table, name, col, offset)
    elif values is None:
        raise SeqencError(f"column {name!r} has type {t}; expected numbers")
    with np.errstate(over="ignore"):  # values beyond float32 become inf, reported just below
        out = values.astype(np.float32)
    if np.isinf(out).any():
        problem = "infinite value (or beyond float32)"
        raise _bad_row(table, name, np.isinf(out), problem, offset)
    return pa.chunked_array([out])


def _parse_floats(table: pa.Table, name: str, col: pa.ChunkedArray, offset: int) -> np.ndarray:
    """Numbers written as text → float64, NaN where none was recorded (null, blank, ``"nan"``);
    Arrow's parser first, pandas (spaces, odd spellings) to find the text that is no number."""
    try:
        return col.cast(pa.float64()).to_numpy()
    except pa.ArrowInvalid:
        texts = pd.Series(col.to_numpy(zero_copy_only=False), dtype=object)
        values = pd.to_numeric(texts, errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)
        trimmed = texts.str.strip().str.lower()
        unrecorded = (texts.isna() | trimmed.isin(("", "nan"))).to_numpy()
        bad = np.isnan(values) & ~unrecorded
        if bad.any():
            raise _bad_row(table, name, bad, "non-numeric value", offset) from None
        return values


def _ticks(col: pa.ChunkedArray) -> tuple[np.ndarray, int]:
    """Timestamps or dates as ``(int64 ticks since the epoch, UTC; ticks per second)``, in the
    column's unit, or microseconds for dates."""
    t = col.type
    if pa.types.is_date(t):
        col, t = col.cast(pa.timestamp("us")), pa.timestamp("us")
    # Arrow stores tz-aware timestamps as UTC ticks: the raw integers are already UTC.
    return col.cast(pa.int64()).to_numpy(), TICKS_PER_SECOND[t.unit]


def _to_epoch_seconds(
    table: pa.Table, name: str, col: pa.ChunkedArray, offset: int
) -> pa.ChunkedArray:
    return _epoch(table, name, col, offset)[0]


Ticks = tuple[np.ndarray, int]  # int64 ticks since the epoch (UTC) and ticks per second


def _epoch(
    table: pa.Table, name: str, col: pa.ChunkedArray, offset: int
) -> tuple[pa.ChunkedArray, Ticks | None]:
    """The column as float epoch seconds, and for instants (datetimes, dates, ISO text) their
    exact integer ticks too (numbers are seconds already: ``None``)."""
    if col.null_count:
        raise _bad_row(table, name, pc.is_null(col), "null/NaT timestamp", offset)
    if is_text(col.type):
        try:  # numbers written as text (CSV): epoch seconds
            col = col.cast(pa.float64())
        except pa.ArrowInvalid:
            col = _parse_iso(table, name, col, offset)
    t = col.type
    if pa.types.is_timestamp(t) or pa.types.is_date(t):
        ticks = _ticks(col)
        return pa.chunked_array([seconds(*ticks)]), ticks
    values = None if pa.types.is_boolean(t) else _numbers(col)
    if values is None:
        raise SeqencError(
            f"column {name!r} has type {t}; expected datetimes, epoch seconds or ISO text"
        )
    if not np.isfinite(values).all():
        raise _bad_row(table, name, ~np.isfinite(values), "NaN or infinite timestamp", offset)
    too_big = np.abs(values) > MAX_EPOCH_SECONDS
    if too_big.any():
        raise _bad_row(table, name, too_big, unit_hint(values[too_big]), offset)
    return pa.chunked_array([values]), None


def _parse_iso(table: pa.Table, name: str, col: pa.ChunkedArray, offset: int) -> pa.ChunkedArray:
    """ISO-8601 strings → timestamps, UTC (naive strings are taken as UTC). Arrow's fast parser
    first, in nanoseconds, then microseconds (years beyond 2262); pandas for mixed offsets."""
    for unit in ("ns", "us"):
        for target in (pa.timestamp(unit), pa.timestamp(unit, "UTC")):
            try:
                return col.cast(target)
            except pa.ArrowInvalid:
                pass
    texts = pd.Series(col.to_numpy(zero_copy_only=False))
    parsed = pd.to_datetime(texts, utc=True, format="ISO8601", errors="coerce")
    if parsed.isna().any():
        problem = "cannot parse timestamp as ISO-8601"
        raise _bad_row(table, name, parsed.isna().to_numpy(), problem, offset)
    return pa.chunked_array([pa.Array.from_pandas(parsed).cast(pa.timestamp("ns", "UTC"))])
