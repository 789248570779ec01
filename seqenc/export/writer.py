"""The export's Parquet writer: each rank's embeddings as row groups, moved into place at the end."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import pyarrow as pa
import pyarrow.parquet as pq
from lightning.pytorch.callbacks import BasePredictionWriter
from tqdm.auto import tqdm

from seqenc.atomic import move_into_place
from seqenc.encoding import Chunk, LastStep
from seqenc.export.predict import ExportDataModule
from seqenc.export.scratch import Scratch


class ParquetPredictionWriter(BasePredictionWriter):
    """Writes each rank's chunks (the core's output schema, metadata included) to its Parquet shard
    as row groups of ``row_group_size`` rows; when every rank is done, rank 0 moves the result to
    ``output`` and releases the scratch."""

    def __init__(
        self,
        output: Path,
        scratch: Scratch,
        last: LastStep,
        data: ExportDataModule,
        row_group_size: int = 65536,
        progress: bool = True,
    ) -> None:
        super().__init__("batch")
        self.output, self.scratch, self.last, self.data = output, scratch, last, data
        self.row_group_size, self.progress = row_group_size, progress
        self._writer: pq.ParquetWriter | None = None
        self._buffer: list[pa.Table] = []
        self._bar: tqdm | None = None
        self.n_rows = 0

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        self.rank, self.world_size = trainer.global_rank, trainer.world_size
        self.shard_dir = self.scratch.path / "output"
        self.shard_dir.mkdir(parents=True, exist_ok=True)
        self.schema = self.last.schema(self.data.entity_type)  # the partitions' id type
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
        prediction: Chunk,
        batch_indices: Any,
        batch: Chunk,
        batch_idx: int,
        dataloader_idx: int = 0,
    ) -> None:
        table = self.last.table(prediction).cast(self.schema)
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
        self._close()
        trainer.strategy.barrier("seqenc-export-done")
        if self.rank == 0:
            src = self.shard_dir / "part-00000.parquet" if self.world_size == 1 else self.shard_dir
            move_into_place(src, self.output)
            self.scratch.release()

    def _close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        if self._bar is not None:
            self._bar.close()

    def on_exception(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException
    ) -> None:
        self._close()
        self.scratch.release()  # only the owner (rank 0) removes anything
