"""Encode on Spark: a DataFrame of events in, one embedding per entity out, equal to
:meth:`Encoder.encode <seqenc.inference.Encoder.encode>` on the same events (within float rounding)
however the DataFrame is partitioned.

>>> from seqenc.encoding.spark import encode                               # doctest: +SKIP
>>> out = encode(spark.read.parquet("events/"), "bundle", as_of="2024-06-01")  # doctest: +SKIP

The events are hash-partitioned by entity and sorted inside each partition, so every entity lies
in exactly one partition; ``mapInArrow`` streams each partition, about ``events_per_call`` events
at a time cut after a complete entity, through the encoding core (:func:`encode_sorted`) with the
call's one :class:`~seqenc.encoding.EncodeOptions` (``on_empty="skip"`` by default). The bundle is
loaded once per Python worker, from a path every executor reads or shipped with ``ship=True``;
each task runs torch with ``spark.task.cpus`` threads. ``chunk_events`` is the deprecated name of
``events_per_call``.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import torch

from seqenc.encoding import (
    EncodeOptions,
    Encoding,
    LoadedBundle,
    encode_options,
    last_step,
    load_on,
)
from seqenc.encoding.options import positive_int
from seqenc.errors import SeqencError

_BUNDLES: dict[tuple[str, ...], LoadedBundle] = {}


def encode(
    df: Any,
    model: str | Path,
    options: EncodeOptions | None = None,
    *,
    ship: bool = False,
    num_partitions: int | None = None,
    events_per_call: int = 200_000,
    chunk_events: int | None = None,
    **fields: Any,
) -> Any:
    """One embedding per entity of the Spark DataFrame ``df`` (the bundle's schema columns).

    Args:
        df: events; other columns are ignored.
        model: the bundle directory: a path every executor can read, or on the driver with ``ship``.
        options, fields: :class:`~seqenc.encoding.EncodeOptions` (here ``on_empty`` defaults to
            ``"skip"``), or its fields by name (``as_of=...``, ``space="parent"``); checked on
            the driver, before the job.
        ship: send the bundle to the executors with ``SparkContext.addFile``.
        num_partitions: partitions of the shuffle by entity (default
            ``spark.sql.shuffle.partitions``).
        events_per_call: events per encode call on an executor (bounds its memory).
        chunk_events: the former name of ``events_per_call`` (deprecated).

    Returns:
        A DataFrame with the columns of every embedding output
        (:func:`~seqenc.encoding.outputs.output_schema`: ``entity_id`` in the entity column's
        type, ``embedding`` as array<float>, ``n_events_read``, ``last_event_time``, and a
        fine-tuned bundle's predictions), in no particular order.
    """
    options = encode_options(options, fields, on_empty="skip")
    events_per_call = _events_per_call(events_per_call, chunk_events)
    path, bundle = _on_driver(df, model, ship, options)
    schema = bundle.meta.schema
    run = functools.partial(
        _encode_partition,
        location=path.name if ship else str(path),
        shipped=ship,
        weights_sha256=bundle.meta.weights_sha256,
        options=options,
        entity=schema.entity,
        events_per_call=events_per_call,
    )
    events = df.select(*schema.columns)
    by_entity = (
        events.repartition(num_partitions, schema.entity)
        if num_partitions
        else events.repartition(schema.entity)
    )
    declared = last_step(bundle, options).schema(pa.null())
    output = spark_schema(declared, df.schema[schema.entity].dataType)
    return by_entity.sortWithinPartitions(schema.entity).mapInArrow(run, output)


def _on_driver(
    df: Any, model: str | Path, ship: bool, options: EncodeOptions
) -> tuple[Path, LoadedBundle]:
    """The bundle's path, and the bundle loaded on the driver (a broken bundle, graph or lineage,
    or a space without a map, fails here), checked against ``df``'s columns, and shipped to the
    executors with ``ship``."""
    path = Path(model).resolve()
    bundle = load_on(path, "cpu", options)
    last_step(bundle, options)
    missing = [c for c in bundle.meta.schema.columns if c not in df.columns]
    if missing:
        raise SeqencError(
            f"the DataFrame lacks the bundle's column(s) {missing}; it has {list(df.columns)}"
        )
    if ship:
        df.sparkSession.sparkContext.addFile(str(path), recursive=True)
    return path, bundle


def _events_per_call(events_per_call: int, chunk_events: int | None) -> int:
    """The events per call, checked in one line (``chunk_events``, the old name, wins with a
    :class:`DeprecationWarning`)."""
    if chunk_events is not None:
        warnings.warn(
            "seqenc.encoding.spark.encode(chunk_events=...) is now events_per_call=...",
            DeprecationWarning,
            stacklevel=3,
        )
        return positive_int("chunk_events", chunk_events)
    return positive_int("events_per_call", events_per_call)


def spark_schema(schema: pa.Schema, entity_type: Any) -> Any:
    """The Spark schema of the declared output ``schema`` (:func:`for_spark`'s types), the entity
    id in the input column's ``entity_type``."""
    from pyspark.sql import types as T
    from pyspark.sql.pandas.types import from_arrow_type

    def spark_type(arrow: pa.DataType) -> Any:
        if pa.types.is_fixed_size_list(arrow) or pa.types.is_list(arrow):
            return T.ArrayType(spark_type(arrow.value_type), containsNull=False)
        if pa.types.is_timestamp(arrow):
            return T.TimestampType()
        return from_arrow_type(arrow)

    fields = [T.StructField(f.name, spark_type(f.type)) for f in schema][1:]
    return T.StructType([T.StructField("entity_id", entity_type), *fields])


def for_spark(table: pa.Table, entity_type: pa.DataType) -> pa.Table:
    """An output table in types Spark reads: fixed-size lists as lists, the entity id in the
    input column's ``entity_type``; no metadata."""
    columns = [
        c.cast(pa.list_(c.type.value_type)) if pa.types.is_fixed_size_list(c.type) else c
        for c in table.columns
    ]
    columns[0] = columns[0].cast(entity_type)
    return pa.table(columns, names=table.column_names)


def cached_bundle(path: str, weights_sha256: str, options: EncodeOptions) -> LoadedBundle:
    """The bundle at ``path`` on this worker's CPU, loaded on first use; it must be the driver's."""
    key = (path, weights_sha256, options.backend, str(options.onnx))  # what loading reads
    if key not in _BUNDLES:
        bundle = load_on(path, "cpu", options)
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
    options: EncodeOptions,
    entity: str,
    events_per_call: int,
) -> Iterator[pa.RecordBatch]:
    """One partition (sorted by entity) → record batches of the output columns."""
    from pyspark import SparkFiles, TaskContext

    path = SparkFiles.get(location) if shipped else location
    bundle = cached_bundle(path, weights_sha256, options)
    context = TaskContext.get()
    torch.set_num_threads(max(1, context.cpus() if context is not None else 1))
    yield from encode_sorted(batches, bundle, options, entity, events_per_call)


def encode_sorted(
    batches: Iterable[pa.RecordBatch],
    bundle: LoadedBundle,
    options: EncodeOptions,
    entity: str,
    events_per_call: int,
) -> Iterator[pa.RecordBatch]:
    """Record batches of events sorted by ``entity`` → record batches of the output columns
    (:func:`for_spark`), through the encoding core about ``events_per_call`` events at a time,
    each call cut after a complete entity; the counts are reported once, at the end."""
    encoding = Encoding(bundle, options)
    entity_type = None
    for table in entity_complete(batches, entity, events_per_call):
        entity_type = table.schema.field(entity).type
        for chunk in encoding.chunks([table]):
            yield from for_spark(encoding.last.table(chunk), entity_type).to_batches()
    if entity_type is not None:
        encoding.counts.report()


def entity_complete(
    batches: Iterable[pa.RecordBatch], entity: str, events_per_call: int
) -> Iterator[pa.Table]:
    """Tables of about ``events_per_call`` events each (or more: an entity is never cut) from
    record batches sorted by ``entity``."""
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
            yield table.slice(0, complete)
        pending, n_pending = table.slice(complete).to_batches(), n_last
    if n_pending:
        yield pa.Table.from_batches(pending)
