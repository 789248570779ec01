"""The ``seqenc`` command: LightningCLI for fit / validate / test / predict."""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from pathlib import Path

import torch
import yaml
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.cli import LightningCLI, SaveConfigCallback

from seqenc.callbacks import Baselines, ConfiguredEarlyStopping, WriteBundle
from seqenc.checkpoint import bundle_from_checkpoint
from seqenc.cli_support import default_logger_classes, one_line_errors, run_user_command
from seqenc.compat_cli import align_after_fit, align_main, check_parent_bundle, drift_main
from seqenc.data.datamodule import SequenceDataModule
from seqenc.errors import SeqencError
from seqenc.module import SeqencModule
from seqenc.run_options import ENCODER_FIELDS, FROM_DATA, resume_options
from seqenc.version import __version__

MONITOR = "val/ndcg@10"
USAGE = """seqenc: event streams to embeddings with a small Transformer.

  seqenc fit|validate|test --config configs/X.yaml [--print_config]   (LightningCLI)
  seqenc bundle --ckpt CKPT --output DIR       make a model bundle from a checkpoint
  seqenc embed --model BUNDLE --events PATH --output FILE.parquet [--as-of TIME]
               [--backend torch|onnxruntime]
  seqenc probe --labels L.parquet --label-column C [--embeddings E.parquet]
               [--events EV --entity COL --item COL --categorical ... --numeric ...] [--as-of T]
                                               linear probe: embeddings vs aggregate features
  seqenc onnx --model BUNDLE [--output FILE.onnx]  the embedding as an ONNX graph
  seqenc align NEW OLD --events PATH [--kind orthogonal|ridge]
                                               map NEW's embeddings into OLD's space (fit
                                               --compatible_with OLD does it after training)
  seqenc drift OLD NEW --events PATH [--json FILE]  compare two versions: cosine, neighbours,
                                               per-dimension shift, verdict
  seqenc --version
"""


class SeqencCLI(LightningCLI):
    """Wires the data module's spec into the model, tests the best checkpoint right after ``fit``
    and prints where the checkpoint and the bundle are. Embeddings are made by ``seqenc embed``
    (one prediction path), so there is no ``predict`` subcommand."""

    @staticmethod
    def subcommands() -> dict[str, set[str]]:
        return {k: v for k, v in LightningCLI.subcommands().items() if k != "predict"}

    def add_arguments_to_parser(self, parser) -> None:
        parser.link_arguments("data.spec", "model.spec", apply_on="instantiate")
        # Early stopping as its own config section, so a run can relax it: with a cosine schedule
        # the validation curve is noisy while the learning rate is high.
        parser.add_lightning_class_args(ConfiguredEarlyStopping, "early_stopping")
        parser.add_argument(  # seqenc.compat: after fit, map the new space to OLD's
            "--compatible_with", type=str | None, default=None, help="OLD bundle to stay usable for"
        )
        parser.set_defaults(
            {
                "early_stopping.monitor": MONITOR,
                "early_stopping.mode": "max",
                "early_stopping.patience": 10,
            }
        )

    def parse_arguments(self, parser, args) -> None:
        self._args = args  # kept to tell the options given from the defaults (_parse_ckpt_path)
        super().parse_arguments(parser, args)

    def _parse_ckpt_path(self) -> None:
        """With ``--ckpt_path``: the checkpoint's model options, except those given on the command
        line or in a config file (:func:`~seqenc.run_options.resume_options`: a changed learning rate or
        dropout applies, a changed ``d_model`` is refused). Lightning's own lets the checkpoint's
        override every given option, silently."""
        subcommand = self.config.get("subcommand")
        path = subcommand and self.config[subcommand].get("ckpt_path")
        if not path or not Path(path).is_file():
            return
        checkpoint = torch.load(path, weights_only=True, map_location="cpu")
        saved = {k: v for k, v in checkpoint.get("hyper_parameters", {}).items() if k[0] != "_"}
        explicit = self.parser.parse_args(self._args, defaults=False, _skip_validation=True)
        given = explicit[subcommand].get("model")
        model = resume_options(given.as_dict() if given else {}, saved)
        self.config = self.parser.parse_object({subcommand: {"model": model}}, self.config)

    def before_fit(self) -> None:
        check_parent_bundle(self.config.fit.get("compatible_with"))  # fails before training

    def after_fit(self) -> None:
        writer = next(c for c in self.trainer.callbacks if isinstance(c, WriteBundle))
        self.trainer.test(
            self.model, datamodule=self.datamodule, ckpt_path=writer.checkpoint or None
        )
        if self.trainer.is_global_zero:
            print(f"checkpoint: {writer.checkpoint or '(none saved)'}")
            print(f"bundle: {writer.path}")
            align_after_fit(self.config.fit.get("compatible_with"), writer.path, self.datamodule)


# Keys renamed when the lengths got their names and the model its encoder section.
RENAMED = {"data.max_len": "data.history_len"} | {
    f"model.{name}": f"model.encoder.{name}" for name in sorted(ENCODER_FIELDS - set(FROM_DATA))
}


def check_renamed(argv: list[str]) -> None:
    """An option under its old name (command line or ``--config`` file) is one line naming the
    new one, not jsonargparse's usage message."""
    keys = [a[2:].split("=", 1)[0] for a in argv if a.startswith("--")]
    for i, arg in enumerate(argv):
        path = argv[i + 1] if arg == "--config" and i + 1 < len(argv) else None
        path = arg.split("=", 1)[1] if arg.startswith("--config=") else path
        if path and Path(path).is_file():
            keys += _yaml_keys(yaml.safe_load(Path(path).read_text()), f"{path}: ")
    for key in keys:
        old = key.split(": ")[-1]
        if old in RENAMED:
            raise SeqencError(f"{key} is now {RENAMED[old]}")


def _yaml_keys(tree: object, prefix: str) -> list[str]:
    """``data.max_len``-style paths of the (two top levels of the) mapping ``tree``."""
    if not isinstance(tree, dict):
        return []
    return [
        f"{prefix}{section}.{key}"
        for section, options in tree.items()
        if isinstance(options, dict)
        for key in options
    ]


def _run_name(argv: list[str]) -> str:
    """The run's name: the stem of its ``--config`` file, else ``seqenc``."""
    for i, arg in enumerate(argv):
        if arg == "--config" and i + 1 < len(argv):
            return Path(argv[i + 1]).stem
        if arg.startswith("--config="):
            return Path(arg.split("=", 1)[1]).stem
    return "seqenc"


def trainer_defaults(name: str) -> dict:
    """Checkpoints of the best validation NDCG@10 and of the last epoch, the bundle at the end,
    gradient clipping, CSV + TensorBoard logs in one folder (early stopping is the
    ``early_stopping`` config section). The run folder is ``runs/<name>/<start time>-<pid>``: runs
    started in the same second (a seed sweep launched at once) never share logs, checkpoints or
    bundle."""
    version = f"{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"
    loggers = [
        {
            "class_path": f"lightning.pytorch.loggers.{cls}",
            "init_args": {"save_dir": "runs", "name": name, "version": version},
        }
        for cls in default_logger_classes()
    ]
    return {
        "logger": loggers,
        # Lightning's ``save_last`` copies only the checkpoints it saves (the best ones), so the
        # true last epoch gets its own callback: no monitor, top-1 = the newest, named last.ckpt.
        "callbacks": [
            ModelCheckpoint(monitor=MONITOR, mode="max", filename="best-{epoch}"),
            ModelCheckpoint(filename="last"),
            WriteBundle(),
            Baselines(),
        ],
        "use_distributed_sampler": False,
        "gradient_clip_val": 1.0,
        "max_epochs": 20,
    }


def bundle_main(argv: list[str]) -> None:
    """``seqenc bundle --ckpt CKPT --output DIR [--name NAME]``."""
    parser = argparse.ArgumentParser(
        prog="seqenc bundle", description="Turn a seqenc Lightning checkpoint into a model bundle."
    )
    parser.add_argument("--ckpt", required=True, help="a .ckpt written by `seqenc fit`")
    parser.add_argument("--output", required=True, help="bundle directory to write")
    parser.add_argument("--name", default=None, help="model name (default: the directory name)")
    args = parser.parse_args(argv)
    with one_line_errors("seqenc bundle"):
        path = bundle_from_checkpoint(args.ckpt, args.output, name=args.name)
    print(f"bundle: {path}")


def embed_main(argv: list[str]) -> None:
    """``seqenc embed --model BUNDLE --events PATH_OR_GLOB --output PATH [...]``."""
    from lightning.pytorch.utilities import rank_zero_only

    from seqenc.backends import BACKENDS, ONNX_FILE
    from seqenc.encoding import ON_EMPTY
    from seqenc.export import export_embeddings

    parser = argparse.ArgumentParser(
        prog="seqenc embed",
        description="Embed every entity of an event log with a model bundle, streaming to Parquet.",
    )
    parser.add_argument("--model", required=True, help="bundle directory")
    parser.add_argument("--events", required=True, nargs="+", help="Parquet/CSV file(s), glob, dir")
    parser.add_argument("--output", required=True, help="Parquet file (or shard dir with ddp)")
    parser.add_argument(
        "--as-of", default=None, help="use only events at or before this time (ISO or epoch s)"
    )
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--chunk-events", type=int, default=1_000_000, help="events per partition")
    parser.add_argument(
        "--on-empty",
        choices=ON_EMPTY,
        default="skip",
        help="entities with no event at or before --as-of: skip (warn) or raise (fail)",
    )
    parser.add_argument("--row-group-size", type=int, default=65536)
    parser.add_argument("--accelerator", default="auto")
    parser.add_argument("--devices", default="1", help="number, list (0,1) or auto")
    parser.add_argument("--strategy", default="auto", help="e.g. ddp for several devices")
    parser.add_argument("--no-progress", action="store_true", help="hide progress bars")
    parser.add_argument(
        "--backend",
        choices=BACKENDS,
        default="torch",
        help="onnxruntime: run the graph of `seqenc onnx` on the CPU",
    )
    parser.add_argument("--onnx", default=None, help=f"ONNX graph (default <model>/{ONNX_FILE})")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    with one_line_errors("seqenc embed"):
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
            backend=args.backend,
            onnx=args.onnx,
        )
    if rank_zero_only.rank == 0:
        print(f"embeddings: {path}")


def main(argv: list[str] | None = None) -> None:
    """Entry point of the ``seqenc`` console script."""
    given, argv = argv, sys.argv[1:] if argv is None else argv
    if argv[:1] in ([], ["-h"], ["--help"]):
        print(USAGE)
    if argv[:1] == ["--version"]:
        print(f"seqenc {__version__}")
        return
    if argv[:1] == ["bundle"]:
        return bundle_main(argv[1:])
    if argv[:1] == ["onnx"]:
        from seqenc.onnx import onnx_main

        return onnx_main(argv[1:])
    if argv[:1] == ["embed"]:
        return embed_main(argv[1:])
    if argv[:1] == ["align"]:
        return align_main(argv[1:])
    if argv[:1] == ["drift"]:
        return drift_main(argv[1:])
    if argv[:1] == ["probe"]:
        from seqenc.evaluate import main as probe_main

        return probe_main(argv[1:])
    run_user_command(
        lambda: (
            check_renamed(argv)
            or SeqencCLI(
                SeqencModule,
                SequenceDataModule,
                trainer_defaults=trainer_defaults(_run_name(argv)),
                # Only fit saves its config (into the run folder); test / validate have no run folder.
                save_config_callback=SaveConfigCallback if argv[:1] == ["fit"] else None,
                save_config_kwargs={"overwrite": True},
                args=given,  # None: LightningCLI reads sys.argv itself
            )
        ),
        f"seqenc {argv[0] if argv else ''}".strip(),
    )


if __name__ == "__main__":
    main()
