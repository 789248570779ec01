"""Pass 1 of the export: stream the event files into entity-complete Parquet partitions.

Each block is read, typed and checked once (:class:`~seqenc.data.events.EventScan`) and its rows
are routed by a fixed hash of the entity id to one of ``K`` partition files, so all events of an
entity land in one partition. The partitions hold the scan's storage types; ``types.json`` beside
them records which text columns turn out to be integers, applied when a partition is read back
(:func:`read_partition`): every rank then reads exactly what :func:`~seqenc.data.events.read_events`
would have returned for those rows, without checking them again.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from tqdm.auto import tqdm

from seqenc.data.events import Events, EventScan, count_rows, with_final_types
from seqenc.data.schema import EventSchema
from seqenc.errors import SeqencError

TYPES_FILE = "types.json"


def partition_of(ids: pa.Array | pa.ChunkedArray, n_partitions: int) -> np.ndarray:
    """Partition of every entity id, from a fixed (unseeded) hash: every process, input batch and
    run agrees on it. String ids are hashed once per distinct value."""
    if isinstance(ids, pa.ChunkedArray):
        ids = ids.combine_chunks()
    if pa.types.is_integer(ids.type):
        hashes = pd.util.hash_array(ids.to_numpy())
    else:
        encoded = pc.dictionary_encode(ids)
        uniques = encoded.dictionary.to_numpy(zero_copy_only=False)
        hashes = pd.util.hash_array(uniques)[encoded.indices.to_numpy()]
    return (hashes % np.uint64(n_partitions)).astype(np.int64)


def count_events(files: list[Path]) -> int:
    """Rows of all files: exact for Parquet (footers), an upper bound for CSV (line breaks)."""
    return sum(count_rows(path) for path in files)


def partition_events(
    files: list[Path],
    schema: EventSchema,
    directory: Path,
    n_partitions: int,
    progress: bool = True,
    exact: bool = False,
) -> list[Path]:
    """Stream ``files`` into ``n_partitions`` entity-complete Parquet files in ``directory`` (with
    ``exact``, each event's ticks too: ``read_events(exact=True)``)."""
    directory.mkdir(parents=True, exist_ok=True)
    scan = EventScan(files, schema, exact=exact)
    writers: dict[int, pq.ParquetWriter] = {}
    bar = tqdm(
        total=count_events(files),
        unit=" events",
        unit_scale=True,
        desc="partition",
        disable=not progress,
    )
    try:
        for table in scan:
            part = partition_of(table[schema.entity], n_partitions)
            order = np.argsort(part, kind="stable")
            table, part = table.take(order), part[order]
            bounds = np.searchsorted(part, np.arange(n_partitions + 1))
            for p in np.flatnonzero(np.diff(bounds)):
                if p not in writers:
                    path = directory / f"events-{p:05d}.parquet"
                    writers[p] = pq.ParquetWriter(path, table.schema)
                writers[p].write_table(table.slice(bounds[p], bounds[p + 1] - bounds[p]))
            bar.update(table.num_rows)
    finally:
        bar.close()
        for writer in writers.values():
            writer.close()
    if not writers:
        raise SeqencError(f"the event log is empty (0 rows) in {[str(f) for f in files]}")
    (directory / TYPES_FILE).write_text(json.dumps(scan.final_types))
    return sorted(directory.glob("events-*.parquet"))


def read_partition(path: Path, schema: EventSchema) -> Events:
    """A partition written by :func:`partition_events`, in the whole input's types."""
    final_types = json.loads((path.parent / TYPES_FILE).read_text())
    return Events(with_final_types(pq.read_table(path), final_types), schema)


def entity_type(path: Path, schema: EventSchema) -> pa.DataType:
    """The entity id type of the partitions (from a footer and ``types.json``, no data read)."""
    final_types = json.loads((path.parent / TYPES_FILE).read_text())
    if schema.entity in final_types:
        return pa.int64()
    return pq.read_schema(path).field(schema.entity).type
