"""What ``seqenc fit`` checks before Lightning's banner beyond the classes' own checks: where the
run writes, that the monitors are metrics the fit logs, and that the run folder takes its
checkpoints."""

from __future__ import annotations

import warnings
from pathlib import Path

import lightning.pytorch as pl
from jsonargparse import Namespace

from seqenc.atomic import check_room
from seqenc.errors import ignored
from seqenc.training.callbacks import ConfiguredEarlyStopping
from seqenc.training.saving import checkpoint_size

MONITOR = "val/ndcg@10"
LABEL_MONITOR = "val/score"  # with data.labels: ROC-AUC or R² of the held-out labelled entities


def check_monitors(model: pl.LightningModule, trainer: pl.Trainer) -> None:
    """Early stopping's and the best checkpoint's monitor must be a metric the fit logs at
    validation: Lightning's early stopping would skip another one, silently."""
    with warnings.catch_warnings():  # a fresh metric's names: computed before any update
        warnings.simplefilter("ignore")
        logged = model.monitored()
    if LABEL_MONITOR in logged:  # fine-tuning: MONITOR becomes the labelled score (before_fit)
        logged.add(MONITOR)
    for callback in trainer.callbacks:
        monitor = getattr(callback, "monitor", None)
        if monitor is not None and monitor not in logged:
            option = "early_stopping.monitor"
            if not isinstance(callback, ConfiguredEarlyStopping):
                option = "the best checkpoint's monitor (model.ks sets its cut-offs)"
            why = f"it is not a metric this fit logs (one of {sorted(logged)})"
            raise ignored(option, monitor, why)


def check_run_folder(
    model: pl.LightningModule, datamodule: pl.LightningDataModule, trainer: pl.Trainer
) -> None:
    """The run folder must take the fit's checkpoints (the best and the last, and one more while
    a checkpoint is replaced) and its bundle, and the file size limit one checkpoint: a disk too
    full for them is one line before the banner, not after the first epoch."""
    checkpoint = checkpoint_size(model, datamodule)
    loggers = trainer.loggers
    where = loggers[0].save_dir if loggers and loggers[0].save_dir else None
    where = where if where and Path(where).is_dir() else trainer.default_root_dir
    check_room(where, 4 * checkpoint, checkpoint, "run directory")


def run_directories(trainer: Namespace) -> list[str]:
    """Where a run writes: the trainer's root directory and each logger's ``save_dir``."""
    loggers = trainer.logger if isinstance(trainer.logger, list) else [trainer.logger]
    saved = [
        logger.init_args.get("save_dir")
        for logger in loggers
        if isinstance(logger, Namespace) and isinstance(logger.get("init_args"), Namespace)
    ]
    return [trainer.default_root_dir or ".", *(d for d in saved if d)]
