"""Streaming embedding export (``seqenc embed``): event files → one embedding per entity in Parquet,
in bounded memory, on one device or many.

Two passes keep memory bounded while every entity sees its whole history:
:mod:`~seqenc.export.partition` routes the events by a hash of the entity id into temporary,
entity-complete Parquet partitions of about ``chunk_events`` events, then
:mod:`~seqenc.export.predict` embeds one partition at a time (Lightning ``trainer.predict``) and
:mod:`~seqenc.export.writer` appends row groups. With ``W`` processes (``--strategy ddp``) each
rank writes its own shard. Everything is written under a locked scratch directory beside the output
(:mod:`~seqenc.export.scratch`) and renamed when complete, so a failed or killed run leaves no
output; an output that would overwrite or be read as an input is refused before any work.
"""

from __future__ import annotations

import logging
import os
import warnings
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import pyarrow as pa
import pyarrow.parquet as pq

from seqenc.atomic import directory_target, file_target
from seqenc.bundle import bundle_inputs
from seqenc.data.paths import expand_paths, not_read_next
from seqenc.devices import check_accelerator, trainer_options
from seqenc.encoding import EncodeOptions, last_step, load_on
from seqenc.encoding.outputs import output_schema
from seqenc.errors import SeqencError
from seqenc.export.options import ExportOptions, export_options
from seqenc.export.partition import partition_of
from seqenc.export.predict import EmbeddingModule, ExportDataModule, PartitionChunks
from seqenc.export.scratch import Scratch
from seqenc.export.writer import ParquetPredictionWriter
from seqenc.signals import sigterm_raises

__all__ = ["ExportOptions", "export_embeddings", "output_schema", "partition_of"]

log = logging.getLogger(__name__)


def _only_shards(path: Path) -> bool:
    return all(p.match("part-*.parquet") for p in path.iterdir())


def _refuse_overwriting_inputs(events: object, files: list[Path], output: Path) -> None:
    """Refuse an output that is one of the input files (through links, hard links included) or
    holds one, or that the ``events`` argument would read next time (inside an input directory
    or matching an input glob): the event log must survive its export."""
    for f in files:
        inside = f.resolve().is_relative_to(output.resolve())
        if inside or (output.exists() and os.path.samefile(f, output)):
            what = "holds the input file" if output.is_dir() else "is the input file"
            raise SeqencError(
                f"output {str(output)!r} {what} {str(f)!r}; refusing to replace the event log: "
                "choose another output"
            )
    not_read_next(output, [events])


def export_embeddings(
    model: str | Path,
    events: str | Path | list[str | Path],
    output: str | Path,
    options: EncodeOptions | None = None,
    export: ExportOptions | None = None,
    **fields: Any,
) -> Path:
    """Embed every entity of the event file(s) ``events`` with the bundle ``model`` into Parquet.

    Args:
        model: a bundle directory.
        events: Parquet/CSV file(s), a glob or a directory of Parquet files.
        output: the Parquet file (one process) or shard directory (several) to write.
        options: what is encoded (:class:`~seqenc.encoding.EncodeOptions`; here ``on_empty``
            defaults to ``"skip"``: counted, and a warning says when that leaves the output
            empty). ``space="parent"`` writes through the bundle's map into its parent's space;
            the metadata names the space written.
        export: how the export runs (:class:`~seqenc.export.options.ExportOptions`: partitions,
            row groups, devices, progress).
        fields: single fields of either, by name (``as_of=...``, ``chunk_events=...``).

    Returns:
        ``output`` (as a path). Layout, columns and metadata: see :mod:`seqenc.export`.
    """
    options, run = export_options(options, export, fields)
    files = _inputs(events, Path(output))
    bundle = load_on(model, "cpu", options)  # moved to each rank's device once it has one
    last = last_step(bundle, options)  # a space without a map is refused before any work
    trainer = _trainer(run, on_cpu_only=options.backend != "torch")
    read = [*files, *bundle_inputs(model), *([options.onnx] if options.onnx else [])]
    output, scratch = _target(output, trainer.world_size, read)
    datamodule = ExportDataModule(files, bundle, options, scratch, run)
    writer = ParquetPredictionWriter(
        output, scratch, last, datamodule, run.row_group_size, run.progress
    )
    trainer.callbacks.append(writer)
    _predict(trainer, EmbeddingModule(), datamodule, scratch)
    if trainer.is_global_zero:
        _report(datamodule.dataset, options.as_of, output)
    return output


def _inputs(events: str | Path | list[str | Path], output: Path) -> list[Path]:
    """The input files, refused when ``output`` would overwrite or shadow one of them."""
    files = expand_paths(events)
    _refuse_overwriting_inputs(events, files, output)
    return files


def _predict(
    trainer: pl.Trainer, module: EmbeddingModule, datamodule: ExportDataModule, scratch: Scratch
) -> None:
    """Run the export; SIGTERM stops it as Ctrl-C does, and the scratch lock is always released."""
    try:
        with sigterm_raises(), warnings.catch_warnings():  # batches carry their own indices
            warnings.filterwarnings("ignore", message="Couldn't infer the batch indices")
            warnings.filterwarnings(
                "ignore", message=".*LeafSpec.* is deprecated"
            )  # Lightning's own
            trainer.predict(module, datamodule=datamodule, return_predictions=False)
    finally:
        scratch.release()


def _target(output: str | Path, world_size: int, inputs: list[Path]) -> tuple[Path, Scratch]:
    """The output and its scratch: one process writes the file ``output``; several write shards
    into the directory; neither may be one of ``inputs``."""
    if world_size == 1:
        what = "a Parquet file seqenc wrote (its schema carries seqenc.* metadata)"
        output = file_target(output, inputs, ours=written_by_seqenc, what=what)
    else:
        shards = "a directory of part-*.parquet shards"
        output = directory_target(output, _only_shards, shards, inputs)
    return output, Scratch(output)


def written_by_seqenc(path: Path) -> bool:
    """Whether ``path`` is a Parquet file whose schema carries seqenc's metadata (an export, an
    item table, ``seqenc embed``'s output): what an export may replace."""
    try:
        metadata = pq.read_schema(path).metadata or {}
    except (OSError, ValueError, pa.ArrowException):
        return False
    return any(key.startswith(b"seqenc.") for key in metadata)


def _trainer(run: ExportOptions, on_cpu_only: bool) -> pl.Trainer:
    """The Lightning trainer that runs ``predict``: no logger, checkpoints or sampler of its own
    (chunks come from the encoding core); ONNX Runtime (``on_cpu_only``) runs on the CPU."""
    accelerator, devices, strategy = run.accelerator, run.devices, run.strategy
    if on_cpu_only:
        if accelerator not in ("auto", "cpu"):
            raise SeqencError(
                f"backend='onnxruntime' runs on the CPU, not accelerator={accelerator!r}"
            )
        accelerator = "cpu"
    check_accelerator(accelerator, devices)
    with trainer_options(quiet=True):
        return pl.Trainer(
            accelerator=accelerator,
            devices=devices,
            strategy=strategy,
            logger=False,
            enable_checkpointing=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            use_distributed_sampler=False,
        )


def _report(stats: PartitionChunks | None, as_of: object, output: Path) -> None:
    """Warn about what the whole input held: unknown values, skipped entities, duplicated newest
    events, an empty output (``None``: nothing was read)."""
    if stats is None:
        return
    stats.counts.report()
    if stats.n_duplicated_newest:
        log.warning(
            "%d entities have their newest event twice or more (every column equal); kept as "
            "given: if the log holds delivery duplicates, drop them first",
            stats.n_duplicated_newest,
        )
    if not stats.counts.n_entities:
        log.warning(
            "no entity has an event at or before as_of=%s: %s holds 0 rows "
            "(on_empty='raise' makes this an error)",
            as_of,
            output,
        )
