"""Streaming embedding export: event files → one embedding per entity in Parquet, in bounded memory,
on one device or many (``seqenc embed``).

How memory stays bounded while every entity sees its whole history:

1. **Partition** (one process, streaming). The input files are read record batch by record batch
   (``pyarrow.dataset``); each batch is validated and typed by
   :func:`~seqenc.data.events.read_events` and its rows are routed by a fixed hash of the entity id
   to one of ``K`` temporary Parquet files, ``K = ceil(n_events / chunk_events)``. All events of an
   entity land in the same file, so each partition is an *entity-complete* chunk of about
   ``chunk_events`` events.
2. **Embed** (Lightning ``trainer.predict``). Partitions are read one at a time: build_sequences with
   the bundle's schema and vocabularies → length-sorted batches → embeddings. The
   :class:`ParquetPredictionWriter` appends them to the output as row groups of ``row_group_size``
   rows. Memory holds one partition and at most two row groups, whatever the input size.

Scale-out: with ``W > 1`` processes (``--strategy ddp --devices W``; on CPU the gloo backend) rank 0
partitions (``prepare_data``) while the others wait; then every rank reads every partition and
embeds every ``W``-th batch (``BucketBatchSampler(rank, world_size, even_shards=False)``), so the
ranks together cover every entity exactly once and each writes its own shard.

Output layout: one process writes the single file ``<output>``; ``W`` processes write a directory
``<output>/`` of ``part-00000.parquet`` … one per rank, which pyarrow, pandas
(``pd.read_parquet(output)``), DuckDB (``read_parquet('<output>/*.parquet')``) and Spark read as one
table. Columns: ``entity_id`` (the log's id type), ``embedding`` ``fixed_size_list<float32>[d]``,
``n_events`` int32 (events fed to the model), ``last_event_time`` ``timestamp[us, UTC]`` (null
without times); rows in no particular order. File metadata: ``seqenc.model``, ``seqenc.version``,
``seqenc.config_hash``, ``seqenc.weights_sha256``, ``seqenc.dim``, ``seqenc.as_of``.

Atomicity: everything is written under the scratch directory ``.<output name>.seqenc-tmp/`` beside
the output and renamed to ``<output>`` once complete. A failed run leaves no ``<output>`` (its
scratch is removed on failure, or at the start of the next run if the process was killed). Two
exports must not target the same output at once.
"""

from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import logging
import math
import os
import shutil
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.dataset as pads
import pyarrow.parquet as pq
import torch
from lightning.pytorch.callbacks import BasePredictionWriter
from lightning.pytorch.utilities import rank_zero_only
from torch.utils.data import DataLoader, IterableDataset
from tqdm.auto import tqdm

from seqenc.bundle import BundleMeta, load_bundle
from seqenc.data.batches import Batch
from seqenc.data.events import PARQUET_SUFFIXES, expand_paths, read_events
from seqenc.data.schema import EventSchema
from seqenc.data.vocab import Vocabularies
from seqenc.errors import SeqencError
from seqenc.inference import (
    embed_batch,
    embedding_type,
    entity_columns,
    file_metadata,
    iter_batches,
    sequences,
    with_embeddings,
)
from seqenc.model.encoder import SequenceEncoder

log = logging.getLogger(__name__)
# Rows per input record batch in the partition pass. Parquet is decoded a row group at a time, so
# an input file's largest row group also bounds memory.
SCAN_ROWS = 1 << 18


# ---------------------------------------------------------------------------------------------
# Pass 1: hash-partition the events by entity


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


def _dataset(path: Path) -> pads.Dataset:
    if path.name.endswith(PARQUET_SUFFIXES):
        return pads.dataset(str(path), format="parquet")
    delimiter = "\t" if path.name.endswith(".tsv") else ","
    return pads.dataset(
        str(path), format=pads.CsvFileFormat(parse_options=pacsv.ParseOptions(delimiter=delimiter))
    )


def count_events(files: list[Path]) -> int:
    """Rows of all files (Parquet: from the footers; CSV: one streaming pass)."""
    total = 0
    for path in files:
        try:
            total += _dataset(path).count_rows()
        except (OSError, pa.ArrowException) as e:
            raise SeqencError(f"cannot read {str(path)!r}: {e}") from e
    return total


def _scan(path: Path, schema: EventSchema) -> Iterator[pa.Table]:
    """The file's schema columns, typed and validated, ``SCAN_ROWS`` rows at a time."""
    try:
        dataset = _dataset(path)
        missing = [c for c in schema.columns if c not in dataset.schema.names]
        if missing:
            raise SeqencError(
                f"column(s) {missing} not found in {str(path)!r}; "
                f"available columns: {dataset.schema.names}"
            )
        batches = dataset.to_batches(
            columns=schema.columns, batch_size=SCAN_ROWS, batch_readahead=1, fragment_readahead=1
        )
        for batch in batches:
            if batch.num_rows:
                yield read_events(pa.Table.from_batches([batch]), schema)
    except SeqencError as e:
        raise SeqencError(f"{str(path)!r}: {e}") from e
    except (OSError, pa.ArrowException) as e:
        raise SeqencError(f"cannot read {str(path)!r}: {e}") from e


def partition_events(
    files: list[Path],
    schema: EventSchema,
    directory: Path,
    n_partitions: int,
    progress: bool = True,
) -> list[Path]:
    """Stream ``files`` into ``n_partitions`` entity-complete Parquet files in ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    writers: dict[int, pq.ParquetWriter] = {}
    typed: pa.Schema | None = None
    bar = tqdm(
        total=count_events(files),
        unit=" events",
        unit_scale=True,
        desc="partition",
        disable=not progress,
    )
    try:
        for path in files:
            for table in _scan(path, schema):
                if typed is None:
                    typed = table.schema
                elif not table.schema.equals(typed):
                    table = _conform(table, typed, path)
                part = partition_of(table[schema.entity], n_partitions)
                order = np.argsort(part, kind="stable")
                table, part = table.take(order), part[order]
                bounds = np.searchsorted(part, np.arange(n_partitions + 1))
                for p in np.flatnonzero(np.diff(bounds)):
                    if p not in writers:
                        writers[p] = pq.ParquetWriter(directory / f"events-{p:05d}.parquet", typed)
                    writers[p].write_table(table.slice(bounds[p], bounds[p + 1] - bounds[p]))
                bar.update(table.num_rows)
    finally:
        bar.close()
        for writer in writers.values():
            writer.close()
    if not writers:
        raise SeqencError(f"the event log is empty (0 rows) in {[str(f) for f in files]}")
    return sorted(directory.glob("events-*.parquet"))


def _conform(table: pa.Table, typed: pa.Schema, path: Path) -> pa.Table:
    """Cast a batch to the types of the first one (an id column may read as int in one file and
    as text in another: that cannot be reconciled without a full pass, so it is an error)."""
    try:
        return table.cast(typed)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
        diff = [
            f"{f.name}: {typed.field(f.name).type} vs {f.type}"
            for f in table.schema
            if f != typed.field(f.name)
        ]
        raise SeqencError(
            f"{str(path)!r}: column types differ from earlier input ({'; '.join(diff)}); "
            "make each column one type across all files"
        ) from e


# ---------------------------------------------------------------------------------------------
# Pass 2: partitions → batches → embeddings → Parquet


def output_schema(entity_type: pa.DataType, dim: int, metadata: dict[str, str]) -> pa.Schema:
    """The export's columns (see the module docstring)."""
    return pa.schema(
        [
            ("entity_id", entity_type),
            ("embedding", embedding_type(dim)),
            ("n_events", pa.int32()),
            ("last_event_time", pa.timestamp("us", tz="UTC")),
        ],
        metadata=metadata,
    )


class PartitionBatches(IterableDataset):
    """This rank's batches of every partition, each with its output columns (entity id, counts)."""

    def __init__(
        self,
        partitions: list[Path],
        meta: BundleMeta,
        vocabs: Vocabularies,
        as_of: object,
        on_empty: str,
        batch_size: int,
        rank: int,
        world_size: int,
    ) -> None:
        self.partitions, self.meta, self.vocabs = partitions, meta, vocabs
        self.as_of, self.on_empty, self.batch_size = as_of, on_empty, batch_size
        self.rank, self.world_size = rank, world_size
        self.n_skipped = self.n_unknown_items = self.n_events = 0

    def __iter__(self) -> Iterator[tuple[Batch, pa.Table]]:
        max_len = self.meta.max_len
        for path in self.partitions:
            store, n_skipped = sequences(
                path, self.meta, self.vocabs, self.as_of, self.on_empty, max_len
            )
            self.n_skipped += n_skipped
            self.n_unknown_items += store.n_unknown_items
            self.n_events += store.n_events
            for batch in iter_batches(store, max_len, self.batch_size, self.rank, self.world_size):
                yield batch, entity_columns(store, batch.index.numpy(), max_len)
            del store
            release_freed_memory()


def _load_glibc() -> Any:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    except OSError:
        return None
    return libc if hasattr(libc, "malloc_trim") else None


_GLIBC = _load_glibc()


def release_freed_memory() -> None:
    """Return freed heap pages to the OS (glibc ``malloc_trim``; a no-op elsewhere).

    Tensors of ever-changing shapes fragment glibc's heap: without this, resident memory creeps up
    from partition to partition although nothing stays alive, and memory would not stay flat.
    """
    if _GLIBC is not None:
        _GLIBC.malloc_trim(0)


def _as_is(sample: Any) -> Any:
    return sample


class ExportDataModule(pl.LightningDataModule):
    """Partitions the input once (global rank 0), then serves each rank its share of batches."""

    def __init__(
        self,
        files: list[Path],
        meta: BundleMeta,
        vocabs: Vocabularies,
        scratch: Path,
        as_of: object,
        on_empty: str,
        batch_size: int,
        chunk_events: int,
        progress: bool,
    ) -> None:
        super().__init__()
        self.prepare_data_per_node = False  # the scratch dir lies beside the output: shared
        self.files, self.meta, self.vocabs, self.scratch = files, meta, vocabs, scratch
        self.as_of, self.on_empty, self.batch_size = as_of, on_empty, batch_size
        self.chunk_events, self.progress = chunk_events, progress
        self.dataset: PartitionBatches | None = None

    @property
    def partition_dir(self) -> Path:
        return self.scratch / "partitions"

    def prepare_data(self) -> None:
        shutil.rmtree(self.scratch, ignore_errors=True)  # a killed run's leftovers
        n_partitions = max(1, math.ceil(count_events(self.files) / self.chunk_events))
        partition_events(
            self.files, self.meta.schema, self.partition_dir, n_partitions, self.progress
        )

    def setup(self, stage: str) -> None:
        self.partitions = sorted(self.partition_dir.glob("events-*.parquet"))
        self.entity_type = pq.read_schema(self.partitions[0]).field(self.meta.schema.entity).type

    def predict_dataloader(self) -> DataLoader:
        self.dataset = PartitionBatches(
            self.partitions,
            self.meta,
            self.vocabs,
            self.as_of,
            self.on_empty,
            self.batch_size,
            self.trainer.global_rank,
            self.trainer.world_size,
        )
        return DataLoader(self.dataset, batch_size=None, collate_fn=_as_is)


class EmbeddingModule(pl.LightningModule):
    """The bundle's encoder as a LightningModule whose ``predict_step`` gives ``[B, d]`` float32."""

    def __init__(self, encoder: SequenceEncoder) -> None:
        super().__init__()
        self.encoder = encoder

    def predict_step(self, batch: tuple[Batch, pa.Table], batch_idx: int) -> torch.Tensor:
        return embed_batch(self.encoder, batch[0])


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()


def _move_into_place(src: Path, dst: Path) -> None:
    """Rename ``src`` to ``dst``, replacing a previous export (atomic for a single file)."""
    if dst.is_dir() or src.is_dir():
        old = dst.with_name(f".{dst.name}.seqenc-old")
        _remove(old)
        if dst.exists():
            dst.rename(old)
        src.rename(dst)
        _remove(old)
    else:
        os.replace(src, dst)


class ParquetPredictionWriter(BasePredictionWriter):
    """Writes each rank's embeddings to its Parquet shard as row groups of ``row_group_size`` rows;
    when every rank is done, rank 0 moves the result to ``output`` (layout: module docstring)."""

    def __init__(
        self,
        output: Path,
        scratch: Path,
        metadata: dict[str, str],
        row_group_size: int = 65536,
        progress: bool = True,
    ) -> None:
        super().__init__("batch")
        self.output, self.scratch, self.metadata = output, scratch, metadata
        self.row_group_size, self.progress = row_group_size, progress
        self._writer: pq.ParquetWriter | None = None
        self._buffer: list[pa.Table] = []
        self._bar: tqdm | None = None
        self.n_rows = 0

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        self.rank, self.world_size = trainer.global_rank, trainer.world_size
        self.shard_dir = self.scratch / "output"
        self.shard_dir.mkdir(parents=True, exist_ok=True)
        dim = int(self.metadata["seqenc.dim"])
        self.schema = output_schema(trainer.datamodule.entity_type, dim, self.metadata)
        self._writer = pq.ParquetWriter(
            self.shard_dir / f"part-{self.rank:05d}.parquet", self.schema
        )
        desc = "embed" if self.world_size == 1 else f"embed (rank 0 of {self.world_size})"
        self._bar = tqdm(
            unit=" entities",
            unit_scale=True,
            desc=desc,
            disable=not self.progress or self.rank != 0,
        )

    def write_on_batch_end(
        self,
        trainer: pl.Trainer,
        pl_module: pl.LightningModule,
        prediction: torch.Tensor,
        batch_indices: Any,
        batch: tuple[Batch, pa.Table],
        batch_idx: int,
        dataloader_idx: int = 0,
    ) -> None:
        table = with_embeddings(batch[1], prediction.cpu().numpy()).cast(self.schema)
        self._buffer.append(table)
        self.n_rows += table.num_rows
        self._bar.update(table.num_rows)
        if sum(t.num_rows for t in self._buffer) >= self.row_group_size:
            self._flush(final=False)

    def _flush(self, final: bool) -> None:
        """Write whole row groups of the buffer (everything when ``final``)."""
        if not self._buffer:
            return
        table = pa.concat_tables(self._buffer)
        n = table.num_rows if final else table.num_rows - table.num_rows % self.row_group_size
        if n:
            self._writer.write_table(table.slice(0, n), row_group_size=self.row_group_size)
        self._buffer = [table.slice(n)] if n < table.num_rows else []

    def on_predict_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._flush(final=True)
        self._writer.close()
        self._writer = None
        self._bar.close()
        trainer.strategy.barrier("seqenc-export-done")
        if self.rank == 0:
            src = self.shard_dir / "part-00000.parquet" if self.world_size == 1 else self.shard_dir
            _move_into_place(src, self.output)
            shutil.rmtree(self.scratch)

    def on_exception(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException
    ) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        if self._bar is not None:
            self._bar.close()
        if trainer.global_rank == 0:
            shutil.rmtree(self.scratch, ignore_errors=True)


def _check_output(output: Path) -> None:
    """Refuse to replace anything but a file or a directory of ``part-*.parquet`` shards."""
    if output.is_dir() and any(not p.match("part-*.parquet") for p in output.iterdir()):
        raise SeqencError(
            f"output {str(output)!r} is a directory holding files other than part-*.parquet "
            "shards; refusing to overwrite it"
        )


def export_embeddings(
    model: str | Path,
    events: str | Path | list[str | Path],
    output: str | Path,
    as_of: object = None,
    batch_size: int = 256,
    chunk_events: int = 1_000_000,
    on_empty: str = "skip",
    row_group_size: int = 65536,
    accelerator: str = "auto",
    devices: int | str | list[int] = 1,
    strategy: str = "auto",
    progress: bool = True,
) -> Path:
    """Embed every entity of the event file(s) ``events`` with the bundle ``model`` into Parquet.

    Args:
        model: a bundle directory.
        events: Parquet/CSV file(s), a glob or a directory of Parquet files.
        output: the Parquet file (one process) or shard directory (several) to write.
        as_of: use only events at or before this time (also the recency reference).
        batch_size: histories per forward pass.
        chunk_events: events per temporary partition: bounds memory (about 1 KB per event).
        on_empty: ``"skip"`` (count and log) or ``"raise"`` for entities with no event before
            ``as_of``.
        row_group_size: rows per Parquet row group.
        accelerator, devices, strategy: as for ``lightning.Trainer``; several devices need
            ``strategy="ddp"`` and launch one process per device (from a script or the CLI).
        progress: show progress bars.

    Returns:
        ``output``. Layout, columns and metadata: see the module docstring.
    """
    if not isinstance(chunk_events, int) or chunk_events < 1:
        raise SeqencError(f"chunk_events must be a positive integer, got {chunk_events!r}")
    output = Path(output)
    _check_output(output)
    files = expand_paths(events)
    encoder, meta, vocabs = load_bundle(model)
    scratch = output.parent / f".{output.name}.seqenc-tmp"
    datamodule = ExportDataModule(
        files, meta, vocabs, scratch, as_of, on_empty, batch_size, chunk_events, progress
    )
    writer = ParquetPredictionWriter(
        output, scratch, file_metadata(meta, as_of), row_group_size, progress
    )
    trainer = pl.Trainer(
        accelerator=accelerator,
        devices=devices,
        strategy=strategy,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        use_distributed_sampler=False,
        callbacks=[writer],
    )
    with warnings.catch_warnings():  # batches carry their own indices
        warnings.filterwarnings("ignore", message="Couldn't infer the batch indices")
        trainer.predict(EmbeddingModule(encoder), datamodule=datamodule, return_predictions=False)
    stats = datamodule.dataset
    if trainer.is_global_zero and stats is not None:
        if stats.n_unknown_items:
            log.warning(
                "%d of %d events have items unknown to the model (encoded as UNK)",
                stats.n_unknown_items,
                stats.n_events,
            )
        if stats.n_skipped:
            log.warning("skipped %d entities with no event at or before as_of", stats.n_skipped)
    return output


def main(argv: list[str]) -> None:
    """``seqenc embed --model BUNDLE --events PATH_OR_GLOB --output PATH [...]``."""
    parser = argparse.ArgumentParser(
        prog="seqenc embed",
        description="Embed every entity of an event log with a model bundle, streaming to Parquet.",
    )
    parser.add_argument("--model", required=True, help="bundle directory")
    parser.add_argument("--events", required=True, nargs="+", help="Parquet/CSV file(s), glob, dir")
    parser.add_argument("--output", required=True, help="Parquet file (or shard dir with ddp)")
    parser.add_argument("--as-of", default=None, help="use only events at or before this time")
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--chunk-events", type=int, default=1_000_000, help="events per partition")
    parser.add_argument("--on-empty", choices=("skip", "raise"), default="skip")
    parser.add_argument("--row-group-size", type=int, default=65536)
    parser.add_argument("--accelerator", default="auto")
    parser.add_argument("--devices", default="1", help="number, list (0,1) or auto")
    parser.add_argument("--strategy", default="auto", help="e.g. ddp for several devices")
    parser.add_argument("--no-progress", action="store_true", help="hide progress bars")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    try:
        path = export_embeddings(
            args.model,
            args.events,
            args.output,
            as_of=args.as_of,
            batch_size=args.batch_size,
            chunk_events=args.chunk_events,
            on_empty=args.on_empty,
            row_group_size=args.row_group_size,
            accelerator=args.accelerator,
            devices=args.devices,
            strategy=args.strategy,
            progress=not args.no_progress,
        )
    except SeqencError as e:
        parser.exit(1, f"seqenc embed: error: {e}\n")
    if rank_zero_only.rank == 0:
        print(f"embeddings: {path}")
