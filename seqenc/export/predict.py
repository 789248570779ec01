"""Pass 2 of the export as Lightning ``predict``: partitions → the encoding core's chunks.

Rank 0 partitions the input (``prepare_data``) while the others wait; then every rank reads every
partition and takes every ``W``-th batch of the core (:meth:`seqenc.encoding.Encoding.chunks` with
``rank, world_size``), so the ranks together cover every entity exactly once. The core runs the
forward pass, the head and the space's map; ``predict_step`` passes its chunks to the writer.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import math
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
from torch.utils.data import DataLoader, IterableDataset

from seqenc.data.duplicates import duplicated_newest
from seqenc.data.events import Events
from seqenc.encoding import Chunk, Counts, EncodeOptions, Encoding, LoadedBundle
from seqenc.export.options import ExportOptions
from seqenc.export.partition import (
    count_events,
    entity_type,
    partition_events,
    read_partition,
)
from seqenc.export.scratch import Scratch


class PartitionChunks(IterableDataset):
    """This rank's chunks of every partition (:meth:`Encoding.chunks`), and what the whole input
    held: the core's counts, and the entities whose newest event is duplicated (every rank reads
    every partition)."""

    def __init__(
        self, partitions: list[Path], encoding: Encoding, rank: int, world_size: int
    ) -> None:
        self.partitions, self.encoding = partitions, encoding
        self.rank, self.world_size = rank, world_size
        self.n_duplicated_newest = 0

    @property
    def counts(self) -> Counts:
        return self.encoding.counts

    def __iter__(self) -> Iterator[Chunk]:
        yield from self.encoding.chunks(self._read(), self.rank, self.world_size)

    def _read(self) -> Iterator[Events]:
        """Each partition's events, its duplicated newest events counted, memory released
        after it."""
        meta, as_of = self.encoding.bundle.meta, self.encoding.options.cut
        for path in self.partitions:
            events = read_partition(path, meta.schema)
            self.n_duplicated_newest += duplicated_newest(events.table, meta.schema, as_of)
            yield events
            del events
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
    """Partitions the input once (global rank 0, holding the scratch lock), then serves each rank
    its share of chunks, the bundle on the rank's device."""

    def __init__(
        self,
        files: list[Path],
        bundle: LoadedBundle,
        options: EncodeOptions,
        scratch: Scratch,
        run: ExportOptions,
    ) -> None:
        super().__init__()
        self.prepare_data_per_node = False  # the scratch dir lies beside the output: shared
        self.files, self.bundle, self.options, self.scratch = files, bundle, options, scratch
        self.run = run
        self.dataset: PartitionChunks | None = None

    @property
    def partition_dir(self) -> Path:
        return self.scratch.path / "partitions"

    def prepare_data(self) -> None:
        self.scratch.acquire()
        n_partitions = max(1, math.ceil(count_events(self.files) / self.run.chunk_events))
        schema = self.bundle.meta.schema
        # The partitions keep the ticks that order the events and that the cut compares.
        partition_events(
            self.files, schema, self.partition_dir, n_partitions, self.run.progress, exact=True
        )

    def setup(self, stage: str) -> None:
        self.partitions = sorted(self.partition_dir.glob("events-*.parquet"))
        self.entity_type = entity_type(self.partitions[0], self.bundle.meta.schema)

    def predict_dataloader(self) -> DataLoader:
        bundle = self.bundle.on(self.trainer.strategy.root_device)
        encoding = Encoding(bundle, self.options)
        trainer = self.trainer
        self.dataset = PartitionChunks(
            self.partitions, encoding, trainer.global_rank, trainer.world_size
        )
        return DataLoader(self.dataset, batch_size=None, collate_fn=_as_is)

    def transfer_batch_to_device(self, batch: Chunk, device: torch.device, index: int) -> Chunk:
        """As it is: the core ran the model on the rank's device and gives numpy and Arrow."""
        return batch


class EmbeddingModule(pl.LightningModule):
    """What Lightning runs on each rank: the core's chunks, passed to the writer as they come."""

    def predict_step(self, batch: Chunk, batch_idx: int) -> Chunk:
        return batch
