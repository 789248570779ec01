"""Readers for the public recommendation datasets in the formats people already have.

Each returns a pandas DataFrame with ``entity_id``, ``item_id``, ``timestamp`` (int64 epoch seconds,
only when the format has times) and ``rating`` (where present), ready for
:func:`~seqenc.data.sequences.build_sequences`. Formats without times (SASRec text files, the ml-1m
sequence file) list each user's events in chronological order: use them with
``EventSchema(timestamp=None)``. Any other CSV / Parquet log goes through :func:`read_event_log`.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from seqenc.data.events import DEFAULT_SCHEMA, read_events
from seqenc.data.paths import CSV_SUFFIXES, PARQUET_SUFFIXES
from seqenc.data.schema import EventSchema
from seqenc.errors import SeqencError

_RATING_TYPES = {
    "entity_id": pa.int64(),
    "item_id": pa.int64(),
    "rating": pa.float64(),
    "timestamp": pa.int64(),
}


def _read_bytes(path: str | Path) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as e:
        raise SeqencError(f"cannot read {str(path)!r}: {e}") from e


def _parse_csv(path: str | Path, data: bytes, delimiter: str, header: bool) -> pa.Table:
    """Four rating columns (user, item, rating, time) of delimited text, typed."""
    read = pacsv.ReadOptions(column_names=list(_RATING_TYPES), skip_rows=int(header))
    try:
        return pacsv.read_csv(
            pa.BufferReader(data),
            read_options=read,
            parse_options=pacsv.ParseOptions(delimiter=delimiter),
            convert_options=pacsv.ConvertOptions(column_types=_RATING_TYPES),
        )
    except pa.ArrowException as e:
        raise SeqencError(f"malformed ratings file {str(path)!r}: {e}") from e


def read_movielens(path: str | Path) -> pd.DataFrame:
    """MovieLens ``ratings.dat`` (ml-1m / ml-10m, ``user::item::rating::time``) or ml-100k
    ``u.data`` (tab-separated), told apart by the first line."""
    data = _read_bytes(path)
    first = data[: data.find(b"\n")] if b"\n" in data else data
    if b"::" in first:
        data, delimiter = (
            data.replace(b"::", b"\t"),
            "\t",
        )  # Arrow's reader wants a 1-char separator
    elif b"\t" in first:
        delimiter = "\t"
    else:
        raise SeqencError(
            f"{str(path)!r} is not a MovieLens ratings file: the first line {first[:80]!r} "
            "is neither '::' (ratings.dat) nor tab (u.data) separated"
        )
    return _parse_csv(path, data, delimiter, header=False).to_pandas()


def read_movielens_latest(path: str | Path) -> pd.DataFrame:
    """MovieLens ml-latest / ml-20m / ml-25m ``ratings.csv`` (header userId,movieId,rating,timestamp)."""
    data = _read_bytes(path)
    header = data[: data.find(b"\n")].decode(errors="replace").strip().split(",")
    if header != ["userId", "movieId", "rating", "timestamp"]:
        raise SeqencError(
            f"{str(path)!r}: expected the header userId,movieId,rating,timestamp, got {header}"
        )
    return _parse_csv(path, data, ",", header=True).to_pandas()


def read_sasrec_txt(path: str | Path, layout: str = "auto") -> pd.DataFrame:
    """Whitespace-separated SASRec-style text, in file order (no timestamp column).

    Layouts: ``"pairs"``, one ``user item`` per line (kang205/SASRec); ``"lines"``, one user per
    line followed by its items (S3-Rec ``Beauty.txt``); ``"auto"``, lines if any line has more
    than two tokens. Blank lines are skipped. Ids are int64 when every token is an integer.
    """
    if layout not in ("auto", "pairs", "lines"):
        raise SeqencError(f"layout must be 'auto', 'pairs' or 'lines', got {layout!r}")
    try:
        text = _read_bytes(path).decode()
    except UnicodeDecodeError as e:
        raise SeqencError(f"{str(path)!r} is not UTF-8 text: {e}") from e
    lines = pc.utf8_trim_whitespace(pa.array(text.splitlines(), pa.large_string()))
    line_numbers = np.flatnonzero(pc.utf8_length(lines).to_numpy()) + 1  # blank lines skipped
    lines = lines.take(pa.array(line_numbers - 1))
    if not len(lines):
        raise SeqencError(f"{str(path)!r} holds no events (empty file)")
    tokens = pc.utf8_split_whitespace(lines)
    counts = pc.list_value_length(tokens).to_numpy()
    if layout == "auto":
        layout = "lines" if (counts > 2).any() else "pairs"
    bad = (counts != 2) if layout == "pairs" else (counts < 2)
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        expected = "'user item'" if layout == "pairs" else "'user item item ...'"
        raise SeqencError(
            f"{str(path)!r} line {line_numbers[row]}: expected {expected} ({layout} layout), "
            f"got {lines[row].as_py()!r}"
        )
    flat = pc.list_flatten(tokens)
    try:
        flat = flat.cast(pa.int64())
    except pa.ArrowInvalid:
        pass  # non-integer ids stay strings
    values = flat.to_numpy(zero_copy_only=False)
    starts = np.cumsum(counts) - counts
    is_user = np.zeros(len(values), dtype=bool)
    is_user[starts] = True
    return pd.DataFrame(
        {"entity_id": np.repeat(values[starts], counts - 1), "item_id": values[~is_user]}
    )


def read_ml1m_sequences(path: str | Path) -> pd.DataFrame:
    """The ml-1m sequence Parquet (``user_id, item_id, position``), ordered by (user, position)."""
    try:
        table = pq.read_table(path, columns=["user_id", "item_id", "position"])
    except (OSError, pa.ArrowException) as e:
        raise SeqencError(f"cannot read {str(path)!r} as user_id,item_id,position: {e}") from e
    table = table.sort_by([("user_id", "ascending"), ("position", "ascending")])
    return pd.DataFrame(
        {
            "entity_id": table["user_id"].to_numpy().astype(np.int64),
            "item_id": table["item_id"].to_numpy().astype(np.int64),
        }
    )


def read_event_log(path: str | Path, schema: EventSchema = DEFAULT_SCHEMA) -> pd.DataFrame:
    """Any CSV / Parquet event log: :func:`~seqenc.data.events.read_events` as a DataFrame
    (timestamps as float64 epoch seconds)."""
    return read_events(path, schema).to_pandas()


FORMATS: dict[str, Callable[[str | Path], pd.DataFrame]] = {
    "movielens": read_movielens,
    "movielens-latest": read_movielens_latest,
    "sasrec": read_sasrec_txt,
    "ml1m-sequences": read_ml1m_sequences,
    "events": read_event_log,
}


def detect_format(path: str | Path) -> str:
    """Format name from the file name (see :data:`FORMATS`)."""
    name = Path(path).name.lower()
    if name.endswith(".dat") or name == "u.data":
        return "movielens"
    if name == "ratings.csv":
        return "movielens-latest"
    if name.endswith(".txt"):
        return "sasrec"
    if name.endswith("_sequences.parquet"):
        return "ml1m-sequences"
    if name.endswith(PARQUET_SUFFIXES + CSV_SUFFIXES) or Path(path).is_dir():
        return "events"
    raise SeqencError(
        f"cannot tell the format of {str(path)!r} from its name; pass format= one of {list(FORMATS)}"
    )


def load_dataset(path: str | Path, format: str = "auto") -> pd.DataFrame:
    """Read a dataset file with the reader for ``format`` (``"auto"``: guess from the file name)."""
    if format == "auto":
        format = detect_format(path)
    if format not in FORMATS:
        raise SeqencError(f"unknown dataset format {format!r}; known: {list(FORMATS)}")
    return FORMATS[format](path)
