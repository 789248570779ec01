"""Pass 2 of the export as Lightning ``predict``: partitions → length-sorted batches → embeddings.

Rank 0 partitions the input (``prepare_data``) while the others wait; then every rank reads every
partition and embeds every ``W``-th batch of the encoding core
(:func:`seqenc.encoding.iter_batches` with ``rank, world_size``), so the ranks together cover every
entity exactly once.
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
import pyarrow as pa
import torch
from torch.utils.data import DataLoader, IterableDataset

from seqenc.bundle import BundleMeta
from seqenc.compat.parent_map import ParentMap
from seqenc.data.batches import Batch
from seqenc.data.duplicates import duplicated_newest
from seqenc.data.events import epoch_seconds
from seqenc.data.vocab import Vocabularies
from seqenc.encoding import Counts, entity_columns, iter_batches, sequences
from seqenc.encoding.backends import Backend, embed_batch
from seqenc.export.partition import (
    count_events,
    entity_type,
    partition_events,
    read_partition,
)
from seqenc.export.scratch import Scratch
from seqenc.model.encoder import SequenceEncoder


class PartitionBatches(IterableDataset):
    """This rank's batches of every partition, each with its output columns (entity id, counts),
    and the counts of the whole input (every rank reads every partition)."""

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
        self.counts = Counts()
        self.n_duplicated_newest = 0

    def __iter__(self) -> Iterator[tuple[Batch, pa.Table]]:
        history_len = self.meta.history_len
        as_of = None if self.as_of is None else epoch_seconds(self.as_of)
        for path in self.partitions:
            events = read_partition(path, self.meta.schema)
            self.n_duplicated_newest += duplicated_newest(events.table, self.meta.schema, as_of)
            store, counts = sequences(
                events, self.meta, self.vocabs, self.as_of, self.on_empty, history_len
            )
            self.counts += counts
            batches = iter_batches(store, history_len, self.batch_size, self.rank, self.world_size)
            for batch in batches:
                yield batch, entity_columns(store, batch.index.numpy(), history_len)
            del store, events
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
    its share of batches."""

    def __init__(
        self,
        files: list[Path],
        meta: BundleMeta,
        vocabs: Vocabularies,
        scratch: Scratch,
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
        return self.scratch.path / "partitions"

    def prepare_data(self) -> None:
        self.scratch.acquire()
        n_partitions = max(1, math.ceil(count_events(self.files) / self.chunk_events))
        partition_events(
            self.files, self.meta.schema, self.partition_dir, n_partitions, self.progress
        )

    def setup(self, stage: str) -> None:
        self.partitions = sorted(self.partition_dir.glob("events-*.parquet"))
        self.entity_type = entity_type(self.partitions[0], self.meta.schema)

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
    """The bundle's encoder as a LightningModule whose ``predict_step`` gives ``[B, d]`` float32;
    with a ``backend`` (ONNX Runtime) that runs the forward pass instead, and through ``to_parent``
    (:mod:`seqenc.compat.lineage`) when the export writes the parent's space."""

    def __init__(
        self,
        encoder: SequenceEncoder,
        backend: Backend | None = None,
        to_parent: ParentMap | None = None,
    ) -> None:
        super().__init__()
        self.encoder, self.backend, self.to_parent = encoder, backend, to_parent

    def predict_step(self, batch: tuple[Batch, pa.Table], batch_idx: int) -> torch.Tensor:
        if self.backend is not None:
            out = torch.from_numpy(self.backend.embed(batch[0]))
        else:
            out = embed_batch(self.encoder, batch[0])
        if self.to_parent is None:
            return out
        return torch.from_numpy(self.to_parent.apply(out.float().cpu().numpy()))
