"""Lightning callbacks of ``seqenc fit``: early stopping that resumes as configured, and the bundle
written when fitting ends."""

from __future__ import annotations

from pathlib import Path

import lightning.pytorch as pl
from lightning.pytorch.callbacks import Callback, EarlyStopping

from seqenc.bundle import bundle_from_checkpoint, save_bundle


class ConfiguredEarlyStopping(EarlyStopping):
    """Early stopping whose ``patience`` is the config's even when a run resumes from a checkpoint
    (Lightning's own restores the checkpoint's patience, so a resumed run could not relax it)."""

    def load_state_dict(self, state_dict: dict) -> None:
        patience = self.patience
        super().load_state_dict(state_dict)
        self.patience = patience


class WriteBundle(Callback):
    """At the end of ``fit``, write the model bundle to ``<log_dir>/bundle``: from the best
    checkpoint when one was saved, else from the live model. ``path`` is where it went."""

    def __init__(self) -> None:
        self.path: Path | None = None
        self.checkpoint = ""

    def on_fit_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if not trainer.is_global_zero:
            return
        callback = trainer.checkpoint_callback
        self.checkpoint = callback.best_model_path if callback else ""
        output = Path(trainer.log_dir or ".") / "bundle"
        logger = trainer.logger
        name = f"{logger.name}-{logger.version}" if logger else None
        if self.checkpoint:
            self.path = bundle_from_checkpoint(self.checkpoint, output, name=name)
        else:
            self.path = save_bundle(
                output, pl_module.encoder, pl_module.spec, pl_module.objective.name, name=name
            )
