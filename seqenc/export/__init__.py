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

import lightning.pytorch as pl

from seqenc.atomic import directory_target, file_target
from seqenc.bundle import BundleMeta, bundle_inputs, load_bundle
from seqenc.compat.lineage import space_map
from seqenc.data.events import epoch_seconds
from seqenc.data.paths import expand_paths, would_read
from seqenc.devices import check_accelerator, trainer_options
from seqenc.encoding.backends import check_backend, runtime_backend
from seqenc.encoding.options import ON_EMPTY, check_choice, positive_int
from seqenc.encoding.outputs import file_metadata
from seqenc.errors import SeqencError
from seqenc.export.partition import partition_of
from seqenc.export.predict import EmbeddingModule, ExportDataModule, PartitionBatches
from seqenc.export.scratch import Scratch
from seqenc.export.writer import ParquetPredictionWriter, output_schema
from seqenc.signals import sigterm_raises

__all__ = ["export_embeddings", "output_schema", "partition_of"]

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
    if would_read(events, output):
        raise SeqencError(
            f"output {str(output)!r} lies where the input {events!r} reads events: the next read "
            "would take the embeddings for events; choose an output outside it (or a name "
            "starting with '_' or '.')"
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
    backend: str = "torch",
    onnx: str | Path | None = None,
    space: str = "native",
    parent: str | BundleMeta | None = None,
) -> Path:
    """Embed every entity of the event file(s) ``events`` with the bundle ``model`` into Parquet.

    Args:
        model: a bundle directory.
        events: Parquet/CSV file(s), a glob or a directory of Parquet files.
        output: the Parquet file (one process) or shard directory (several) to write.
        as_of: only events at or before this time are used; also the query time (as in
            ``Encoder.encode``). The forms of :func:`~seqenc.data.events.epoch_seconds`.
        batch_size: histories per forward pass.
        chunk_events: events per temporary partition: bounds memory (about 1 KB per event).
        on_empty: for entities with no event at or before ``as_of``: ``"skip"`` (count and warn;
            a warning also says when that leaves the output empty) or ``"raise"``.
        row_group_size: rows per Parquet row group.
        accelerator, devices, strategy: as for ``lightning.Trainer``; several devices need
            ``strategy="ddp"`` and launch one process per device (from a script or the CLI).
        progress: show progress bars.
        backend, onnx: ``"torch"`` or ``"onnxruntime"`` (on the CPU, with the graph ``onnx``,
            default ``<model>/model.onnx``, written by ``seqenc onnx``).
        space, parent: ``"parent"`` writes the embeddings through the bundle's map into its parent's
            space (:meth:`Encoder.encode <seqenc.inference.Encoder.encode>`, :mod:`seqenc.compat.lineage`);
            the metadata names the space written.

    Returns:
        ``output`` (as a path). Layout, columns and metadata: see :mod:`seqenc.export`.
    """
    _check_options(chunk_events, batch_size, row_group_size, on_empty, as_of, backend)
    files = _inputs(events, Path(output))
    encoder, meta, vocabs = load_bundle(model)
    to_parent, space_metadata = space_map(model, meta, space, parent)
    runtime = runtime_backend(backend, model, meta, onnx)
    trainer = _trainer(accelerator, devices, strategy, runtime is not None)
    read = [*files, *bundle_inputs(model), *([onnx] if onnx else [])]
    output, scratch = _target(output, trainer.world_size, read)
    datamodule = ExportDataModule(
        files, meta, vocabs, scratch, as_of, on_empty, batch_size, chunk_events, progress
    )
    metadata = file_metadata(meta, as_of) | space_metadata
    writer = ParquetPredictionWriter(output, scratch, metadata, row_group_size, progress)
    trainer.callbacks.append(writer)
    _predict(trainer, EmbeddingModule(encoder, runtime, to_parent), datamodule, scratch)
    if trainer.is_global_zero:
        _report(datamodule.dataset, as_of, output)
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
        output = file_target(output, inputs)
    else:
        shards = "a directory of part-*.parquet shards"
        output = directory_target(output, _only_shards, shards, inputs)
    return output, Scratch(output)


def _check_options(
    chunk_events: int,
    batch_size: int,
    row_group_size: int,
    on_empty: str,
    as_of: object,
    backend: str,
) -> None:
    """Refuse a bad option in one line, before any work."""
    for name, value in [
        ("chunk_events", chunk_events),
        ("batch_size", batch_size),
        ("row_group_size", row_group_size),
    ]:
        positive_int(name, value)
    check_choice("on_empty", on_empty, ON_EMPTY)
    if as_of is not None:
        epoch_seconds(as_of)
    check_backend(backend)


def _trainer(
    accelerator: str, devices: int | str | list[int], strategy: str, on_cpu_only: bool
) -> pl.Trainer:
    """The Lightning trainer that runs ``predict``: no logger, checkpoints or sampler of its own
    (batches come from the encoding core); ONNX Runtime (``on_cpu_only``) runs on the CPU."""
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


def _report(stats: PartitionBatches | None, as_of: object, output: Path) -> None:
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
