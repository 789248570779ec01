"""Read an event log from pandas, Arrow, Parquet or CSV into one typed, validated Arrow table.

One reader for every path (``encode()``, training and ``seqenc embed``): files are streamed block
by block through :class:`EventScan`, each block typed and checked once by
:mod:`seqenc.data.columns`, with errors naming the file, column and row *in the file*. Every later
step (vocabularies, sequences) relies on what :func:`read_events` guarantees.
"""

from __future__ import annotations

import gzip
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from seqenc.data.columns import is_text, normalize_table
from seqenc.data.cut import EXACT, NS, Cut, at_or_before, epoch_seconds, parse
from seqenc.data.frames import check_column_names, from_pandas
from seqenc.data.hashing import Shard
from seqenc.data.paths import PARQUET_SUFFIXES, expand_paths
from seqenc.data.schema import EventSchema
from seqenc.errors import SeqencError

__all__ = [
    "DEFAULT_SCHEMA",
    "EventScan",
    "Events",
    "Source",
    "check_column_names",
    "epoch_seconds",
    "read_events",
]

SCAN_ROWS = 1 << 18  # rows per block when streaming files
DEFAULT_SCHEMA = EventSchema()  # frozen, so safe as a shared default argument


@dataclass(frozen=True)
class Events:
    """A table already typed and validated by :func:`read_events` for ``schema``: reading it again
    returns it as is (each event is checked once), and a cut compares the ticks it holds when read
    ``exact`` (else its float seconds). Build one only from such a table."""

    table: pa.Table
    schema: EventSchema


Source = pd.DataFrame | pa.Table | Events | str | Path | Sequence[str | Path]


def read_events(
    source: Source,
    schema: EventSchema = DEFAULT_SCHEMA,
    shard: Shard | None = None,
    until: object = None,
    exact: bool = False,
) -> pa.Table:
    """Read the schema's columns of an event log into a typed Arrow table.

    Args:
        source: a pandas DataFrame, a pyarrow Table, or file(s): a path, a list of paths, a glob
            pattern (``"logs/*.parquet"``) or a directory of Parquet files. Parquet (``.parquet``,
            ``.pq``) and CSV (``.csv``, ``.csv.gz``, ``.tsv``) are supported; only the schema's
            columns are read, and every file must have all of them.
        schema: which columns hold the entity, item, time and extra features.
        shard: keep only this shard's entities (:class:`~seqenc.data.hashing.Shard`); files are
            filtered block by block, so memory holds the shard's events only. Column types are
            still decided by the whole input, so every shard types its columns alike.
        until: keep only the events at or before this ``as_of`` (or its parsed ``Cut``), by
            :func:`seqenc.data.cut.at_or_before` on the column's ticks; may leave no row.
        exact: with instants, also the column ``seqenc.data.cut.EXACT`` (int64 ns) that a
            later cut compares (per label row, or of :class:`Events`).

    Returns:
        A table with exactly ``schema.columns``, typed as follows:

        - entity, item and categorical columns (ids), by ``schema.id_types``: ``"string"`` keeps
          text as written (numbers become their decimal text), ``"int"`` gives ``int64`` (integer
          text such as ``"007"`` is read as 7; anything else is refused). ``"auto"`` (the
          default): ``int64`` when the column holds integers (or whole floats or decimals) in
          every file, else ``large_string`` (pandas string / object / categorical and Arrow
          dictionary columns are decoded). Integer-looking *strings* of a DataFrame, Arrow or
          Parquet column stay strings (``"007"`` and ``"7"`` differ); in CSV, where every cell is
          text, a column is integer when all its cells are integers written canonically (no
          leading zero, sign or space: ``"007"`` keeps the column text). Booleans are refused as
          entity and item ids; integers beyond int64 need ``"string"``. Categorical nulls are
          kept (they encode as UNK).
        - timestamp: ``float64`` **seconds since the Unix epoch, UTC**. Accepted inputs:
          datetime64 / Arrow timestamps of any unit (s, ms, us, ns); timezone-aware values are
          converted to UTC (zones may differ row to row), naive ones are taken as UTC; Arrow dates
          (midnight UTC); numbers, decimals or numeric text, read as epoch **seconds** (values
          above 1e11 are rejected as probable milliseconds, microseconds or nanoseconds); ISO-8601
          strings such as ``"2024-03-01T12:00:00+01:00"`` (up to the year 9999).
        - numeric columns: ``float32`` (from integers, floats, decimals or numeric text); a
          value not recorded (null, NaN, blank text) is NaN, read as not recorded downstream.

        A pandas object column must hold one kind of value (numbers of any type, times, or text):
        a number among times, or text among numbers, is refused naming the row.

    Raises:
        SeqencError: a missing column (naming the file; the available ones are listed), a null
            entity / item / timestamp, a non-numeric or infinite value in a numeric column,
            an unparsable timestamp, an empty log, a missing or unreadable file, a glob matching
            nothing, or an unsupported file extension. Rows are numbered from 0 in each file.
    """
    table = _typed_table(source, schema, shard, parse(until), exact)  # parsed before any read
    if table is None or (table.num_rows == 0 and until is None):
        where = "" if shard is None else f" for shard {shard.rank} of {shard.world_size}"
        raise SeqencError(f"the event log is empty{where} (0 rows); columns: {schema.columns}")
    return table


def _typed_table(
    source: Source, schema: EventSchema, shard: Shard | None, until: Cut | None, exact: bool
) -> pa.Table | None:
    """:func:`read_events`' table of a DataFrame, Arrow table, :class:`Events` or file(s);
    ``None`` when no file holds a block of this shard."""
    if until is not None and schema.timestamp is None:
        raise SeqencError("as_of needs a timestamp column, but the schema has timestamp=None")
    if isinstance(source, Events) and source.schema == schema:
        return source.table if until is None else _cut_typed(source.table, schema, until)
    if isinstance(source, Events):
        source = source.table
    if isinstance(source, pd.DataFrame):
        table = normalize_table(from_pandas(source, schema), schema, until=until, exact=exact)
        return _sharded(table, schema, shard)
    if isinstance(source, pa.Table):
        _check_columns(source.column_names, schema, "the input table")
        table = normalize_table(source.select(schema.columns), schema, until=until, exact=exact)
        return _sharded(table, schema, shard)
    scan = EventScan(expand_paths(source), schema, until=until, exact=exact)
    blocks = [_sharded(block, schema, shard) for block in scan]
    return scan.finish(pa.concat_tables(blocks)) if blocks else None


def _cut_typed(table: pa.Table, schema: EventSchema, until: Cut) -> pa.Table:
    """The rows of a typed table at or before ``until``: on its exact ticks when it has them (read
    with ``exact``), else on its float seconds (a log of numeric times)."""
    if EXACT in table.column_names:
        times = (table[EXACT].to_numpy(), NS)
    else:
        times = (table[schema.timestamp].to_numpy(), None)
    return table.filter(pa.array(at_or_before(times, until)))


def _sharded(table: pa.Table, schema: EventSchema, shard: Shard | None) -> pa.Table:
    """The rows of ``table`` whose entity is in ``shard`` (all of them without one)."""
    return table if shard is None else table.filter(shard.keeps(table[schema.entity]))


# ---------------------------------------------------------------------------------------------
# Sources


def _check_columns(available: Sequence[str], schema: EventSchema, where: str) -> None:
    """The one check of an input's column names, for every input form: each column the schema
    reads must be there, once."""
    check_column_names(available, schema.columns, where)


def _is_csv(path: Path) -> bool:
    return not path.name.endswith(PARQUET_SUFFIXES)


def _csv_options(path: Path, columns: list[str] | None = None, block_size: int = 16 << 20):
    parse = pacsv.ParseOptions(delimiter="\t" if path.name.endswith(".tsv") else ",")
    # Every cell is read as text and typed by seqenc.data.columns: a column's type never depends
    # on which rows Arrow's type inference happened to look at. An empty cell is null.
    convert = pacsv.ConvertOptions(
        include_columns=columns or [],
        column_types=dict.fromkeys(columns or [], pa.large_string()),
        strings_can_be_null=True,
        null_values=[""],
    )
    return pacsv.ReadOptions(block_size=block_size), parse, convert


def _file_columns(path: Path) -> tuple[list[str], pa.Schema | None]:
    """Column names of a file and, for Parquet, its Arrow schema (from the footer)."""
    try:
        if _is_csv(path):
            read, parse, _ = _csv_options(path, block_size=1 << 16)  # the header is enough
            with pacsv.open_csv(path, read_options=read, parse_options=parse) as reader:
                return reader.schema.names, None
        schema = pq.read_schema(path)
        return schema.names, schema
    except (OSError, pa.ArrowException) as e:
        kind = "CSV file" if _is_csv(path) else "Parquet file"
        raise SeqencError(f"cannot read {kind} {str(path)!r}: {e}") from e


def count_rows(path: Path) -> int:
    """Rows of a Parquet file (footer), or an upper bound for CSV (line breaks, not parsed)."""
    try:
        if not _is_csv(path):
            return pq.ParquetFile(path).metadata.num_rows
        opener = gzip.open if path.name.endswith(".gz") else open
        with opener(path, "rb") as f:
            return sum(block.count(b"\n") for block in iter(lambda: f.read(1 << 24), b""))
    except (OSError, pa.ArrowException) as e:
        raise SeqencError(f"cannot read {str(path)!r}: {e}") from e


class EventScan:
    """Stream the schema's columns of event files, ``batch_rows`` rows at a time, typed and checked.

    Every file's columns are checked before the first row is read. Blocks come in *storage* types:
    an id column the schema types explicitly (``id_types``) has its final type in every block; an
    ``"auto"`` one is ``int64`` when every file stores it as integers, else text; a tie-breaker
    has its type when every file stores it alike (Parquet), else text. Once all blocks have been
    seen, :meth:`finish` gives a table the whole-input types (CSV text that is all integers written
    canonically becomes ``int64``; tie-breakers that are all numbers, ``int64`` or ``float64``),
    exactly as :func:`read_events` returns them. Text and final types map one to one, so the
    storage value identifies an id (the export hashes it to route rows).
    """

    def __init__(
        self,
        files: list[Path],
        schema: EventSchema,
        batch_rows: int = SCAN_ROWS,
        until: Cut | None = None,
        exact: bool = False,
    ) -> None:
        self.files, self.schema, self.batch_rows = files, schema, batch_rows
        self.until, self.exact = until, exact
        ids = [c for c in schema.id_columns if schema.id_type(c) == "auto"]
        typed = {schema.timestamp, *schema.numeric, *schema.id_columns}
        self.ties = [c for c in schema.tie_breakers if c not in typed]
        kinds: dict[str, set[str]] = {c: set() for c in ids + self.ties}
        for path in files:
            names, arrow = _file_columns(path)
            try:
                _check_columns(names, schema, f"the file {path.name!r}")
            except SeqencError as e:
                raise SeqencError(f"{str(path)!r}: {e}") from None
            for c, found in kinds.items():
                found.add("csv" if arrow is None else _kind(arrow.field(c).type))
        for c in self.ties:
            if "time" in kinds[c] and len(kinds[c]) > 1:
                raise SeqencError(
                    f"tie-breaker column {c!r} holds times in some files and other values in "
                    f"others ({sorted(kinds[c])}); write it with one type"
                )
        # Columns stored as text until every block has been seen, with their narrowest final type
        # so far (int64, then float64, then text).
        self.final = {
            c: "int64"
            for c, found in kinds.items()
            if found != {"int"} and (c in ids or len(found) > 1 or "csv" in found)
        }
        self.typed_numbers: set[str] = set()  # tie-breakers with numbers in a typed (Parquet) file

    def __iter__(self) -> Iterator[pa.Table]:
        for path in self.files:
            offset = 0
            try:
                for batch in self._batches(path):
                    if batch.num_rows:
                        table = pa.Table.from_batches([batch])
                        typed = normalize_table(table, self.schema, offset, self.until, self.exact)
                        yield self._store(typed, path)
                        offset += batch.num_rows
            except SeqencError as e:
                raise SeqencError(f"{str(path)!r}: {e}") from e
            except (OSError, pa.ArrowException) as e:
                raise SeqencError(f"cannot read {str(path)!r}: {e}") from e

    def _batches(self, path: Path) -> Iterator[pa.RecordBatch]:
        columns = self.schema.columns
        if _is_csv(path):
            read, parse, convert = _csv_options(path, columns)
            with pacsv.open_csv(
                path, read_options=read, parse_options=parse, convert_options=convert
            ) as reader:
                yield from reader
        else:
            yield from pq.ParquetFile(path).iter_batches(self.batch_rows, columns=columns)

    def _store(self, table: pa.Table, path: Path) -> pa.Table:
        """Cast deferred columns to text, narrowing their final type by this block's values."""
        for name, final in self.final.items():
            col = table[name]
            tie = name in self.ties
            if not is_text(col.type):
                found = "float64" if pa.types.is_floating(col.type) else "int64"
                if tie:
                    self.typed_numbers.add(name)
            elif not _is_csv(path):
                found = "string"
            else:
                found = (
                    _text_numbers(col) if tie else ("int64" if _canonical_ints(col) else "string")
                )
            self.final[name] = max(final, found, key=_FINAL_ORDER.index)
            i = table.column_names.index(name)
            table = table.set_column(i, name, col.cast(pa.large_string()))
        return table

    @property
    def final_types(self) -> dict[str, str]:
        """Stored-as-text columns that end as numbers: ``{column: "int64" or "float64"}``."""
        for name in self.typed_numbers:
            if self.final[name] == "string":
                raise SeqencError(
                    f"tie-breaker column {name!r} holds numbers in some file(s) and text in "
                    "others: they cannot be ordered together (write it with one type)"
                )
        return {name: final for name, final in self.final.items() if final != "string"}

    def finish(self, table: pa.Table) -> pa.Table:
        """Blocks of this scan (or a table of them) in the whole-input types."""
        return with_final_types(table, self.final_types)


_FINAL_ORDER = ("int64", "float64", "string")


def with_final_types(table: pa.Table, final_types: dict[str, str]) -> pa.Table:
    """Cast the columns named in :attr:`EventScan.final_types` (stored as text) to their type."""
    for name, final in final_types.items():
        i = table.column_names.index(name)
        table = table.set_column(i, name, table[name].cast(getattr(pa, final)()))
    return table


def _kind(t: pa.DataType) -> str:
    """The kind of values a Parquet column stores: ``int``, ``float``, ``text``, ``time``."""
    t = _value_type(t)
    if pa.types.is_integer(t) or pa.types.is_boolean(t):
        return "int"
    if pa.types.is_floating(t) or pa.types.is_decimal(t):
        return "float"
    if pa.types.is_timestamp(t) or pa.types.is_date(t):
        return "time"
    return "text" if is_text(t) else str(t)


def _text_numbers(col: pa.ChunkedArray) -> str:
    """``"int64"`` or ``"float64"`` when every value of CSV text is such a number, else
    ``"string"``: a sequence number ordered as text would put "10" before "9"."""
    for final in ("int64", "float64"):
        try:
            col.cast(getattr(pa, final)())
            return final
        except pa.ArrowInvalid:
            pass
    return "string"


def _value_type(t: pa.DataType) -> pa.DataType:
    return t.value_type if pa.types.is_dictionary(t) else t


def _canonical_ints(col: pa.ChunkedArray) -> bool:
    """Whether every value of a text column is an integer written as Python writes it: ``"7"``
    but not ``"007"``, ``"+7"`` or ``" 7"``, which read as integers would merge with ``"7"``."""
    try:
        ints = pc.cast(col, pa.int64())
    except pa.ArrowInvalid:
        return False
    return pc.all(pc.equal(ints.cast(col.type), col)).as_py() is not False
