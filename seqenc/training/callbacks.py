"""Lightning callbacks of the ``seqenc`` command: early stopping that resumes as configured, and
the bundle written when fitting ends (the baselines printed beside a test:
:mod:`seqenc.training.baseline_report`)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import lightning.pytorch as pl
from lightning.pytorch.callbacks import Callback, EarlyStopping, ModelCheckpoint

from seqenc.bundle import save_bundle
from seqenc.data.bounds import check_count
from seqenc.errors import SeqencError
from seqenc.training.checkpoint import bundle_from_checkpoint

PATIENCE = 10  # validations without gain before a run stops, unless the fit sets its own


class ConfiguredEarlyStopping(EarlyStopping):
    """Early stopping that never ends a run in an early dip, and whose ``patience`` is the config's
    even when a run resumes from a checkpoint (Lightning's own restores the checkpoint's patience).

    ``min_share``: no stop before this share of ``max_epochs`` has run. On real event logs the
    validation curve can rise for a few epochs, fall for several while the learning rate is high,
    then climb for the rest of the schedule; a fixed patience stops every run at the bottom of
    that dip. After ``min_share`` of the schedule, a run stops when ``patience`` validations
    brought no improvement on the best score so far (the dip included). ``patience`` ``None``:
    :data:`PATIENCE`, or the run's own (:meth:`resolve`: a next-basket fit's).

    ``keep``: the weights the run tests and bundles. ``"best"``: the best validation checkpoint.
    ``"last"``: the end of the learning-rate schedule; the run never stops early. For logs whose
    validation target is not the kind of event the test asks for (a process log: validation asks
    for a mid-case state, the test for the closing one) the validation curve is flat noise, and
    its best epoch can be an early one whose repeat gate is not yet calibrated. ``"auto"``: best
    where validation asks what the test asks (a next basket, a label), else last (:meth:`resolve`,
    when the fit starts).
    """

    def __init__(
        self,
        *args,
        patience: int | None = None,
        min_share: float = 0.5,
        keep: Literal["best", "last", "auto"] = "best",
        **kwargs,
    ) -> None:
        check_stopping(kwargs.get("mode", "min"), patience, min_share, keep)
        super().__init__(*args, patience=PATIENCE if patience is None else patience, **kwargs)
        self.min_share = min_share
        self.keep = keep
        self.options = {"patience": patience, "keep": keep}  # as given: None / auto resolve

    def resolve(self, picks: bool, patience: int = PATIENCE) -> None:
        """Settle the automatic options: ``keep`` ``auto`` is best when validation ``picks``
        (it asks what the test asks), else last; a ``None`` patience becomes ``patience``."""
        if self.keep == "auto":
            self.keep = "best" if picks else "last"
        if self.options["patience"] is None:
            self.patience = patience

    def _run_early_stopping_check(self, trainer: pl.Trainer) -> None:
        if self.monitor not in trainer.callback_metrics:
            return  # nothing validated yet (e.g. max_steps ends the run inside the first epoch)
        stop_before = trainer.should_stop
        super()._run_early_stopping_check(trainer)
        early = trainer.current_epoch + 1 < self.min_share * (trainer.max_epochs or 0)
        if early or self.keep == "last":
            trainer.should_stop = stop_before

    def load_state_dict(self, state_dict: dict) -> None:
        patience = self.patience
        super().load_state_dict(state_dict)
        self.patience = patience


def check_stopping(mode: object, patience: object, min_share: object, keep: object) -> None:
    """One line unless early stopping's ``mode`` is min or max, ``patience`` a whole number >= 0
    (or ``None``: automatic), ``min_share`` a number in [0, 1] and ``keep`` best, last or auto
    (when the callback is built: before the banner)."""
    if mode not in ("min", "max"):
        raise SeqencError(f"early_stopping.mode must be min or max, got {mode!r}")
    check_count(patience, "early_stopping.patience", low=0, optional=True)
    if keep not in ("best", "last", "auto"):
        raise SeqencError(f"early_stopping.keep must be best, last or auto, got {keep!r}")
    share = isinstance(min_share, (int, float)) and not isinstance(min_share, bool)
    if not (share and 0 <= min_share <= 1):
        raise SeqencError(f"early_stopping.min_share must be a number in [0, 1], got {min_share!r}")


class WriteBundle(Callback):
    """At the end of ``fit``, write the model bundle to ``<log_dir>/bundle``: from the checkpoint
    early stopping keeps (``keep``: the best validation one by default, else the last epoch's) when
    one was saved, else from the live model. ``path`` is where it went (the first process writes
    it), ``checkpoint`` where from (the one every process tests after ``fit``)."""

    def __init__(self) -> None:
        self.path: Path | None = None
        self.checkpoint = ""

    def on_fit_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.checkpoint = kept_checkpoint(trainer)  # every process tests from it after fit
        # log_dir is a collective under DDP (broadcast from the first process): every process asks
        output = Path(trainer.log_dir or ".") / "bundle"
        if not trainer.is_global_zero:
            return
        logger = trainer.logger
        name = f"{logger.name}-{logger.version}" if logger else None
        if self.checkpoint:
            self.path = bundle_from_checkpoint(self.checkpoint, output, name=name)
        else:
            self.path = save_bundle(
                output, pl_module.encoder, pl_module.spec, pl_module.objective.name, name=name
            )


def kept_checkpoint(trainer: pl.Trainer) -> str:
    """The checkpoint a run keeps: the monitored one (best validation), or with
    ``ConfiguredEarlyStopping(keep="last")`` the newest of the unmonitored one; ``""`` if none."""
    stopping = [c for c in trainer.callbacks if isinstance(c, ConfiguredEarlyStopping)]
    last = stopping and stopping[0].keep == "last"
    checkpoints = [
        c
        for c in trainer.callbacks
        if isinstance(c, ModelCheckpoint) and (c.monitor is None) == bool(last)
    ]
    return checkpoints[0].best_model_path if checkpoints else ""
