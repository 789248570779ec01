"""The Trainer a ``seqenc fit|validate|test`` run starts with, before its config: the run folder
(named after the first ``--config`` file), its loggers and checkpoints, the bundle and baselines
callbacks, gradient clipping and the epochs."""

from __future__ import annotations

import os
import time
from pathlib import Path

from seqenc.cli_support import config_paths, default_logger_classes
from seqenc.commands.fit_checks import MONITOR
from seqenc.finetune.baseline import LabelBaselines
from seqenc.training.baseline_report import Baselines
from seqenc.training.callbacks import WriteBundle
from seqenc.training.saving import AtomicCheckpoint

MAX_EPOCHS = 20


def run_name(argv: list[str]) -> str:
    """The run's name: the stem of its first ``--config`` file, else ``seqenc``."""
    configs = config_paths(argv)
    return Path(configs[0]).stem if configs else "seqenc"


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
        # true last epoch gets its own callback: no monitor, top-1 = the newest, named last.ckpt,
        # saved after every training epoch, whether or not that epoch validates.
        "callbacks": [
            AtomicCheckpoint(monitor=MONITOR, mode="max", filename="best-{epoch}"),
            AtomicCheckpoint(filename="last", save_on_train_epoch_end=True),
            WriteBundle(),
            Baselines(),
            LabelBaselines(),
        ],
        "use_distributed_sampler": False,
        "gradient_clip_val": 1.0,
        "max_epochs": MAX_EPOCHS,
    }
