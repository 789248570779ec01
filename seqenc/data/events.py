"""Read an event log from pandas, Arrow, Parquet or CSV into one typed, validated Arrow table.

Every later step (vocabularies, sequences) relies on what :func:`read_events` guarantees, so all
input checking lives here: each problem raises :class:`~seqenc.errors.SeqencError` naming the column
or file and showing an offending row.
"""

from __future__ import annotations

import glob
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.dataset as pads

from seqenc.data.schema import EventSchema
from seqenc.errors import SeqencError

PARQUET_SUFFIXES = (".parquet", ".pq")
CSV_SUFFIXES = (".csv", ".csv.gz", ".tsv")
# Numeric epoch times above this (year 5138) are almost surely milliseconds or finer, not seconds.
_MAX_EPOCH_SECONDS = 1e11
_SECONDS_PER_UNIT = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "ns": 1e-9}

DEFAULT_SCHEMA = EventSchema()  # frozen, so safe as a shared default argument

Source = pd.DataFrame | pa.Table | str | Path | Sequence[str | Path]


def read_events(source: Source, schema: EventSchema = DEFAULT_SCHEMA) -> pa.Table:
    """Read the schema's columns of an event log into a typed Arrow table.

    Args:
        source: a pandas DataFrame, a pyarrow Table, or file(s): a path, a list of paths, a glob
            pattern (``"logs/*.parquet"``) or a directory of Parquet files. Parquet (``.parquet``,
            ``.pq``) and CSV (``.csv``, ``.csv.gz``, ``.tsv``) are supported; only the schema's
            columns are read.
        schema: which columns hold the entity, item, time and extra features.

    Returns:
        A table with exactly ``schema.columns``, typed as follows:

        - entity and item: ``int64`` when the column holds integers (or whole floats), else
          ``large_string`` (pandas string / object / categorical and Arrow dictionary columns are
          decoded). Integer-looking *strings* stay strings: ``"007"`` and ``"7"`` are different ids.
        - timestamp: ``float64`` **seconds since the Unix epoch, UTC**. Accepted inputs:
          datetime64 / Arrow timestamps of any unit (s, ms, us, ns); timezone-aware values are
          converted to UTC, naive ones are taken as UTC; Arrow dates (midnight UTC); numbers, read
          as epoch **seconds** (int or float, values above 1e11 are rejected as probable
          milliseconds); ISO-8601 strings such as ``"2024-03-01T12:00:00+01:00"``.
        - categorical columns: ``int64`` or ``large_string``; nulls are kept (they encode as UNK).
        - numeric columns: ``float32``.

    Raises:
        SeqencError: a missing column (the available ones are listed), a null entity / item /
            timestamp, a non-numeric, NaN or infinite value in a numeric column, an unparsable
            timestamp, an empty log, a missing or unreadable file, a glob matching nothing, or an
            unsupported file extension.
    """
    if isinstance(source, pd.DataFrame):
        table = _from_pandas(source, schema)
    elif isinstance(source, pa.Table):
        _check_columns(source.column_names, schema, "the input table")
        table = source.select(schema.columns)
    else:
        table = _read_files(expand_paths(source), schema)
    if table.num_rows == 0:
        raise SeqencError(f"the event log is empty (0 rows); columns: {table.column_names}")
    return pa.table({name: _normalize(table, name, schema) for name in schema.columns})


# ---------------------------------------------------------------------------------------------
# Sources


def _check_columns(available: Sequence[str], schema: EventSchema, where: str) -> None:
    missing = [c for c in schema.columns if c not in available]
    if missing:
        raise SeqencError(
            f"column(s) {missing} not found in {where}; available columns: {list(available)}"
        )


def _from_pandas(df: pd.DataFrame, schema: EventSchema) -> pa.Table:
    _check_columns(list(df.columns), schema, "the DataFrame")
    arrays = {}
    for name in schema.columns:
        try:
            arrays[name] = pa.Array.from_pandas(df[name])
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError) as e:
            raise SeqencError(f"column {name!r} cannot be converted (mixed types?): {e}") from e
    return pa.table(arrays)


def expand_paths(source: str | Path | Sequence[str | Path]) -> list[Path]:
    """Turn a path, glob, directory or list of those into a list of existing files."""
    items = [source] if isinstance(source, (str, Path)) else list(source)
    if not items:
        raise SeqencError("no input files given (empty list)")
    files: list[Path] = []
    for item in items:
        text = str(item)
        if any(ch in text for ch in "*?["):
            matches = sorted(glob.glob(text, recursive=True))
            if not matches:
                raise SeqencError(f"no file matches the pattern {text!r}")
            files += [Path(m) for m in matches if Path(m).is_file()]
        elif Path(text).is_dir():
            found = sorted(p for p in Path(text).rglob("*") if p.name.endswith(PARQUET_SUFFIXES))
            if not found:
                raise SeqencError(f"directory {text!r} holds no Parquet files (*.parquet, *.pq)")
            files += found
        elif Path(text).is_file():
            files.append(Path(text))
        else:
            raise SeqencError(f"file not found: {text!r}")
    for f in files:
        if not f.name.endswith(PARQUET_SUFFIXES + CSV_SUFFIXES):
            raise SeqencError(
                f"unsupported file type: {str(f)!r}; expected one of "
                f"{', '.join(PARQUET_SUFFIXES + CSV_SUFFIXES)}"
            )
    return files


def _read_files(files: list[Path], schema: EventSchema) -> pa.Table:
    parquet = [f for f in files if f.name.endswith(PARQUET_SUFFIXES)]
    csv = [f for f in files if not f.name.endswith(PARQUET_SUFFIXES)]
    tables = ([_read_parquet(parquet, schema)] if parquet else []) + [
        _read_csv(f, schema) for f in csv
    ]
    if len(tables) == 1:
        return tables[0]
    # Files may disagree on whether an id column is int or string: compare such columns as text.
    for name in schema.columns:
        types = {t.schema.field(name).type for t in tables}
        if len(types) > 1 and any(
            pa.types.is_string(t) or pa.types.is_large_string(t) for t in types
        ):
            tables = [
                t.set_column(t.column_names.index(name), name, _as_text(t[name])) for t in tables
            ]
    try:
        return pa.concat_tables(tables, promote_options="permissive")
    except (pa.ArrowInvalid, pa.ArrowTypeError) as e:
        raise SeqencError(
            f"input files {[str(f) for f in files]} have incompatible columns: {e}"
        ) from e


def _as_text(col: pa.ChunkedArray) -> pa.ChunkedArray:
    if pa.types.is_dictionary(col.type):
        col = col.cast(col.type.value_type)
    return col.cast(pa.large_string())


def _read_parquet(files: list[Path], schema: EventSchema) -> pa.Table:
    try:
        dataset = pads.dataset([str(f) for f in files], format="parquet")
        _check_columns(dataset.schema.names, schema, f"Parquet file(s) {[str(f) for f in files]}")
        return dataset.to_table(columns=schema.columns)
    except (OSError, pa.ArrowException) as e:
        raise SeqencError(f"cannot read Parquet file(s) {[str(f) for f in files]}: {e}") from e


def _read_csv(path: Path, schema: EventSchema) -> pa.Table:
    parse = pacsv.ParseOptions(delimiter="\t" if path.name.endswith(".tsv") else ",")
    try:
        with pacsv.open_csv(path, parse_options=parse) as reader:
            available = reader.schema.names
    except (OSError, pa.ArrowException) as e:
        raise SeqencError(f"cannot read CSV file {str(path)!r}: {e}") from e
    _check_columns(available, schema, f"CSV file {str(path)!r}")
    convert = pacsv.ConvertOptions(include_columns=schema.columns)
    try:
        return pacsv.read_csv(path, parse_options=parse, convert_options=convert)
    except pa.ArrowInvalid:
        # Type inference looks at the first block only: a later row may not fit the inferred type
        # (an id column turning from digits to text). Read ids and categories as text instead;
        # a bad numeric or time value is then reported with its row by _normalize.
        text_columns = [schema.entity, schema.item, *schema.categorical, *schema.numeric]
        convert.column_types = dict.fromkeys(text_columns, pa.large_string())
        try:
            return pacsv.read_csv(path, parse_options=parse, convert_options=convert)
        except (OSError, pa.ArrowException) as e:
            raise SeqencError(f"cannot read CSV file {str(path)!r}: {e}") from e
    except (OSError, pa.ArrowException) as e:
        raise SeqencError(f"cannot read CSV file {str(path)!r}: {e}") from e


# ---------------------------------------------------------------------------------------------
# Column normalization


def _bad_row(table: pa.Table, name: str, mask: np.ndarray | pa.ChunkedArray, problem: str):
    """A SeqencError for the first row where ``mask`` is true, showing that row."""
    if not isinstance(mask, np.ndarray):
        mask = pc.fill_null(mask, True).to_numpy(zero_copy_only=False)
    row = int(np.flatnonzero(mask)[0])
    values = table.slice(row, 1).to_pylist()[0]
    count = int(mask.sum())
    return SeqencError(
        f"column {name!r}: {problem} in {count} row(s); first at row {row} "
        f"(0-based): {name}={values[name]!r}; row: {values}"
    )


def _normalize(table: pa.Table, name: str, schema: EventSchema) -> pa.ChunkedArray:
    col = table[name]
    if pa.types.is_dictionary(col.type):
        col = col.cast(col.type.value_type)
    if name == schema.timestamp:
        return _to_epoch_seconds(table, name, col)
    if name in schema.numeric:
        return _to_float32(table, name, col)
    if pa.types.is_floating(col.type):  # NaN in an id / category column means "missing"
        col = pc.if_else(pc.is_nan(col), pa.scalar(None, col.type), col)
    if col.null_count and name in (schema.entity, schema.item):
        kind = "entity" if name == schema.entity else "item"
        raise _bad_row(table, name, pc.is_null(col), f"null {kind} id")
    return _to_id(table, name, col)


def _to_id(table: pa.Table, name: str, col: pa.ChunkedArray) -> pa.ChunkedArray:
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
        return _as_text(col)
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return col.cast(pa.large_string())
    raise SeqencError(f"column {name!r} has type {t}; expected integers or strings")


def _to_float32(table: pa.Table, name: str, col: pa.ChunkedArray) -> pa.ChunkedArray:
    if col.null_count:
        raise _bad_row(table, name, pc.is_null(col), "missing value (null/NaN)")
    t = col.type
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        parsed = pd.to_numeric(pd.Series(col.to_numpy(zero_copy_only=False)), errors="coerce")
        values = parsed.to_numpy(dtype=np.float64, na_value=np.nan)
        if np.isnan(values).any():
            raise _bad_row(table, name, np.isnan(values), "non-numeric value")
    elif pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t):
        values = col.cast(pa.float64()).to_numpy()
    else:
        raise SeqencError(f"column {name!r} has type {t}; expected numbers")
    with np.errstate(over="ignore"):  # values beyond float32 become inf, reported just below
        out = values.astype(np.float32)
    if not np.isfinite(out).all():
        raise _bad_row(table, name, ~np.isfinite(out), "NaN or infinite value (or beyond float32)")
    return pa.chunked_array([out])


def _to_epoch_seconds(table: pa.Table, name: str, col: pa.ChunkedArray) -> pa.ChunkedArray:
    if col.null_count:
        raise _bad_row(table, name, pc.is_null(col), "null/NaT timestamp")
    t = col.type
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        col, t = _parse_iso(table, name, col), pa.timestamp("ns", "UTC")
    if pa.types.is_date(t):
        col, t = col.cast(pa.timestamp("s")), pa.timestamp("s")
    if pa.types.is_timestamp(t):
        # Arrow stores tz-aware timestamps as UTC ticks: the raw integers are already UTC.
        ticks = col.cast(pa.int64()).to_numpy()
        return pa.chunked_array([ticks * _SECONDS_PER_UNIT[t.unit]])
    if pa.types.is_integer(t) or pa.types.is_floating(t):
        values = col.cast(pa.float64()).to_numpy()
        if not np.isfinite(values).all():
            raise _bad_row(table, name, ~np.isfinite(values), "NaN or infinite timestamp")
        if np.abs(values).max() > _MAX_EPOCH_SECONDS:
            raise _bad_row(
                table,
                name,
                np.abs(values) > _MAX_EPOCH_SECONDS,
                "numeric timestamps must be epoch SECONDS, this looks like milliseconds or finer "
                "(divide by 1000, or pass datetime values)",
            )
        return pa.chunked_array([values])
    raise SeqencError(
        f"column {name!r} has type {t}; expected datetimes, epoch seconds or ISO text"
    )


def _parse_iso(table: pa.Table, name: str, col: pa.ChunkedArray) -> pa.ChunkedArray:
    """ISO-8601 strings → UTC timestamps (naive strings are taken as UTC)."""
    for target in (pa.timestamp("ns"), pa.timestamp("ns", "UTC")):  # Arrow's fast parser first
        try:
            return col.cast(target)
        except pa.ArrowInvalid:
            pass
    texts = pd.Series(col.to_numpy(zero_copy_only=False))  # mixed offsets / formats: pandas
    parsed = pd.to_datetime(texts, utc=True, format="ISO8601", errors="coerce")
    if parsed.isna().any():
        raise _bad_row(table, name, parsed.isna().to_numpy(), "cannot parse timestamp as ISO-8601")
    return pa.chunked_array([pa.Array.from_pandas(parsed).cast(pa.timestamp("ns", "UTC"))])


def epoch_seconds(value: object) -> float:
    """A point in time → float epoch seconds, UTC.

    Accepts ``datetime`` / ``pd.Timestamp`` / ``np.datetime64`` / ISO-8601 strings (naive values are
    taken as UTC) and plain numbers, read as epoch seconds.
    """
    if isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool):
        if not np.isfinite(value):
            raise SeqencError(f"time must be finite, got {value!r}")
        return float(value)
    try:
        ts = pd.Timestamp(value)
    except (TypeError, ValueError) as e:
        raise SeqencError(f"cannot read {value!r} as a point in time: {e}") from e
    if ts is pd.NaT:
        raise SeqencError(f"cannot read {value!r} as a point in time (NaT)")
    ts = ts.tz_localize("UTC") if ts.tzinfo is None else ts.tz_convert("UTC")
    return ts.value / 1e9
