"""Encode on Spark: a DataFrame of events in, one embedding per entity out, equal to
:meth:`Encoder.encode <seqenc.inference.Encoder.encode>` on the same events (within float rounding)
however the DataFrame is partitioned.

>>> from seqenc.encoding.spark import encode                               # doctest: +SKIP
>>> out = encode(spark.read.parquet("events/"), "bundle", as_of="2024-06-01")  # doctest: +SKIP

The events are hash-partitioned by entity and sorted inside each partition, so every entity lies
in exactly one partition; ``mapInArrow`` streams each partition in chunks of about
``events_per_call`` events, cut after a complete entity, through the encoding core
(:func:`seqenc.encoding.encode_events`). The bundle is loaded once per Python worker, from a path
every executor reads or shipped with ``ship=True``; each task runs torch with ``spark.task.cpus``
threads. Entities whose events all lie after ``as_of`` are skipped (``on_empty="skip"``). The old
keyword ``chunk_events`` still works, with a :class:`DeprecationWarning`.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import torch

from seqenc.bundle import BundleMeta, load_bundle
from seqenc.encoding import ON_EMPTY, LoadedBundle, encode_events, load_on
from seqenc.encoding.backends import check_backend
from seqenc.encoding.options import check_choice, positive_int
from seqenc.encoding.outputs import with_embeddings
from seqenc.errors import SeqencError

_BUNDLES: dict[tuple[str, str, str], LoadedBundle] = {}


def encode(
    df: Any,
    model: str | Path,
    as_of: object = None,
    batch_size: int = 256,
    *,
    ship: bool = False,
    num_partitions: int | None = None,
    events_per_call: int = 200_000,
    backend: str = "torch",
    on_empty: str = "skip",
    chunk_events: int | None = None,
) -> Any:
    """One embedding per entity of the Spark DataFrame ``df`` (the bundle's schema columns).

    Args:
        df: events; other columns are ignored.
        model: the bundle directory: a path every executor can read, or on the driver with ``ship``.
        as_of: only events at or before this time are used (see :meth:`Encoder.encode`).
        batch_size: histories per forward pass (does not change the result).
        ship: send the bundle to the executors with ``SparkContext.addFile``.
        num_partitions: partitions of the shuffle by entity (default
            ``spark.sql.shuffle.partitions``).
        events_per_call: events per encode call on an executor (bounds its memory).
        backend: ``"torch"`` or ``"onnxruntime"`` (the graph ``seqenc onnx`` wrote into the bundle).
        on_empty: ``"skip"`` leaves out an entity whose events all lie after ``as_of``;
            ``"raise"`` fails the job on it.
        chunk_events: the former name of ``events_per_call`` (deprecated).

    Returns:
        A DataFrame with ``entity_id`` (the entity column's type), ``embedding`` (array<float>),
        ``n_events_read`` (int, events the model read: at most ``history_len``) and ``last_event_time`` (timestamp), in no
        particular order.
    """
    events_per_call = _check_options(backend, on_empty, events_per_call, chunk_events)
    path, meta = _on_driver(df, model, ship)
    schema = meta.schema
    run = functools.partial(
        _encode_partition,
        location=path.name if ship else str(path),
        shipped=ship,
        weights_sha256=meta.weights_sha256,
        backend=backend,
        entity=schema.entity,
        as_of=as_of,
        on_empty=on_empty,
        batch_size=batch_size,
        events_per_call=events_per_call,
    )
    events = df.select(*schema.columns)
    by_entity = (
        events.repartition(num_partitions, schema.entity)
        if num_partitions
        else events.repartition(schema.entity)
    )
    output = _output_type(df.schema[schema.entity].dataType)
    return by_entity.sortWithinPartitions(schema.entity).mapInArrow(run, output)


def _on_driver(df: Any, model: str | Path, ship: bool) -> tuple[Path, BundleMeta]:
    """The bundle's path and meta, loaded on the driver (a broken bundle fails here), checked
    against ``df``'s columns, and shipped to the executors with ``ship``."""
    path = Path(model).resolve()
    _, meta, _ = load_bundle(path)
    missing = [c for c in meta.schema.columns if c not in df.columns]
    if missing:
        raise SeqencError(
            f"the DataFrame lacks the bundle's column(s) {missing}; it has {list(df.columns)}"
        )
    if ship:
        df.sparkSession.sparkContext.addFile(str(path), recursive=True)
    return path, meta


def _check_options(
    backend: str, on_empty: str, events_per_call: int, chunk_events: int | None
) -> int:
    """The events per call, the options checked in one line each (``chunk_events``, the old
    name, wins with a :class:`DeprecationWarning`)."""
    check_backend(backend)
    check_choice("on_empty", on_empty, ON_EMPTY)
    if chunk_events is not None:
        warnings.warn(
            "seqenc.encoding.spark.encode(chunk_events=...) is now events_per_call=...",
            DeprecationWarning,
            stacklevel=3,
        )
        return positive_int("chunk_events", chunk_events)
    return positive_int("events_per_call", events_per_call)


def _output_type(entity_type: Any) -> Any:
    """The Spark schema of the output: the columns of every embedding output."""
    from pyspark.sql import types as T

    return T.StructType(
        [
            T.StructField("entity_id", entity_type),
            T.StructField("embedding", T.ArrayType(T.FloatType(), containsNull=False)),
            T.StructField("n_events_read", T.IntegerType()),
            T.StructField("last_event_time", T.TimestampType()),
        ]
    )


def cached_bundle(path: str, weights_sha256: str, backend: str) -> LoadedBundle:
    """The bundle at ``path`` on this worker's CPU, loaded on first use; it must be the driver's."""
    key = (path, weights_sha256, backend)
    if key not in _BUNDLES:
        bundle = load_on(path, "cpu", backend)
        if bundle.meta.weights_sha256 != weights_sha256:
            raise SeqencError(
                f"the bundle at {path!r} on this executor has other weights than the driver's"
            )
        _BUNDLES[key] = bundle
    return _BUNDLES[key]


def _encode_partition(
    batches: Iterator[pa.RecordBatch],
    location: str,
    shipped: bool,
    weights_sha256: str,
    backend: str,
    entity: str,
    as_of: object,
    on_empty: str,
    batch_size: int,
    events_per_call: int,
) -> Iterator[pa.RecordBatch]:
    """One partition (sorted by entity) → record batches of the output columns."""
    from pyspark import SparkFiles, TaskContext

    path = SparkFiles.get(location) if shipped else location
    bundle = cached_bundle(path, weights_sha256, backend)
    context = TaskContext.get()
    torch.set_num_threads(max(1, context.cpus() if context is not None else 1))

    def run(table: pa.Table) -> Iterator[pa.RecordBatch]:
        done = encode_events(bundle, table, as_of, on_empty, batch_size)
        out = with_embeddings(done.columns, done.embeddings)
        columns = {
            "entity_id": out["entity_id"].cast(table.schema.field(entity).type),
            "embedding": out["embedding"].cast(pa.list_(pa.float32())),
            "n_events_read": out["n_events_read"],
            "last_event_time": out["last_event_time"],
        }
        yield from pa.table(columns).to_batches()

    pending: list[pa.RecordBatch] = []
    n_pending = 0
    for batch in batches:
        pending.append(batch)
        n_pending += batch.num_rows
        if n_pending < events_per_call:
            continue
        table = pa.Table.from_batches(pending)
        ids = table[entity]
        # The partition is sorted by entity: the newest entity may continue in the next batch.
        n_last = pc.sum(pc.equal(ids, ids[len(ids) - 1])).as_py() or 0
        complete = table.num_rows - n_last
        if complete:
            yield from run(table.slice(0, complete))
        pending, n_pending = table.slice(complete).to_batches(), n_last
    if n_pending:
        yield from run(pa.Table.from_batches(pending))
