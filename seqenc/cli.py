"""The ``seqenc`` command: LightningCLI for fit / validate / test / predict."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from lightning.pytorch.callbacks import EarlyStopping, ModelCheckpoint
from lightning.pytorch.cli import LightningCLI, SaveConfigCallback

from seqenc import __version__
from seqenc.bundle import bundle_from_checkpoint, save_bundle
from seqenc.bundle import main as bundle_main
from seqenc.cli_support import default_logger_classes, run_user_command
from seqenc.data.datamodule import SequenceDataModule
from seqenc.module import SeqencModule

MONITOR = "val/ndcg@10"
USAGE = """seqenc: event streams to embeddings with a small Transformer.

  seqenc fit|validate|test|predict --config configs/X.yaml [--print_config]   (LightningCLI)
  seqenc bundle --ckpt CKPT --output DIR       make a model bundle from a checkpoint
  seqenc embed --model BUNDLE --events PATH --output FILE.parquet [--as-of TIME]
  seqenc --version
"""


class ConfiguredEarlyStopping(EarlyStopping):
    """Early stopping whose ``patience`` is the config's even when a run resumes from a checkpoint
    (Lightning's own restores the checkpoint's patience, so a resumed run could not relax it)."""

    def load_state_dict(self, state_dict: dict) -> None:
        patience = self.patience
        super().load_state_dict(state_dict)
        self.patience = patience


class SeqencCLI(LightningCLI):
    """Wires the data module's vocabulary sizes into the model, and tests the best checkpoint
    right after ``fit``."""

    def add_arguments_to_parser(self, parser) -> None:
        parser.link_arguments("data.model_inputs", "model.inputs", apply_on="instantiate")
        parser.link_arguments("data.max_len", "model.max_len")
        # Early stopping as its own config section, so a run can relax it: with a cosine schedule
        # the validation curve is noisy while the learning rate is high.
        parser.add_lightning_class_args(ConfiguredEarlyStopping, "early_stopping")
        parser.set_defaults(
            {
                "early_stopping.monitor": MONITOR,
                "early_stopping.mode": "max",
                "early_stopping.patience": 10,
            }
        )

    def after_fit(self) -> None:
        best = (
            self.trainer.checkpoint_callback.best_model_path
            if self.trainer.checkpoint_callback
            else ""
        )
        self.trainer.test(self.model, datamodule=self.datamodule, ckpt_path=best or None)
        if self.trainer.is_global_zero:
            print(f"checkpoint: {best or '(none saved)'}")
            print(f"bundle: {self._write_bundle(best)}")

    def _write_bundle(self, best: str) -> Path:
        """The model bundle in ``<log_dir>/bundle``: from the best checkpoint, else the live model."""
        output = Path(self.trainer.log_dir or ".") / "bundle"
        logger = self.trainer.logger
        name = f"{logger.name}-{logger.version}" if logger else None
        if best:
            return bundle_from_checkpoint(best, output, name=name)
        hp = self.model.hparams
        return save_bundle(
            output,
            self.model.encoder,
            self.datamodule.vocabs,
            self.datamodule.schema_used,
            max_len=hp.max_len,
            objective=hp.objective,
            name=name,
        )


def _run_name(argv: list[str]) -> str:
    """The run's name: the stem of its ``--config`` file, else ``seqenc``."""
    for i, arg in enumerate(argv):
        if arg == "--config" and i + 1 < len(argv):
            return Path(argv[i + 1]).stem
        if arg.startswith("--config="):
            return Path(arg.split("=", 1)[1]).stem
    return "seqenc"


def trainer_defaults(name: str) -> dict:
    """Checkpoints of the best validation NDCG@10 and of the last epoch, gradient clipping, CSV +
    TensorBoard logs in one folder (early stopping is the ``early_stopping`` config section)."""
    version = time.strftime("%Y%m%d-%H%M%S")
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
        ],
        "use_distributed_sampler": False,
        "gradient_clip_val": 1.0,
        "max_epochs": 20,
    }


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
    if argv[:1] == ["embed"]:
        from seqenc.export import main as embed_main

        return embed_main(argv[1:])
    run_user_command(
        lambda: SeqencCLI(
            SeqencModule,
            SequenceDataModule,
            trainer_defaults=trainer_defaults(_run_name(argv)),
            # Only fit saves its config (into the run folder); test / validate have no run folder.
            save_config_callback=SaveConfigCallback if argv[:1] == ["fit"] else None,
            save_config_kwargs={"overwrite": True},
            args=given,  # None: LightningCLI reads sys.argv itself
        ),
        f"seqenc {argv[0] if argv else ''}".strip(),
    )


if __name__ == "__main__":
    main()
