"""Lightning checkpoints written whole or not at all: a full disk in the run folder leaves the
earlier checkpoint and no truncated ``best-epoch=0.ckpt`` (Lightning writes in place)."""

from __future__ import annotations

import io
from pathlib import Path

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import ModelCheckpoint

from seqenc.atomic import move_into_place, remove, temporary_beside, written


class AtomicCheckpoint(ModelCheckpoint):
    """A :class:`ModelCheckpoint` whose files are written under a unique temporary name beside
    them and renamed when complete; a write that fails for want of room is one line."""

    def _save_checkpoint(self, trainer: pl.Trainer, filepath: str) -> None:
        if not trainer.is_global_zero:  # the first process writes; the others take part
            super()._save_checkpoint(trainer, filepath)
            return
        target = Path(filepath)
        with written(target):
            target.parent.mkdir(parents=True, exist_ok=True)
            tmp = temporary_beside(target, directory=False)
            try:
                super()._save_checkpoint(trainer, str(tmp))
                move_into_place(tmp, target)
            finally:
                remove(tmp)
        self._last_checkpoint_saved = filepath


def checkpoint_size(module: pl.LightningModule, datamodule: pl.LightningDataModule) -> int:
    """About the bytes of a checkpoint of ``module`` fitted on ``datamodule`` (a little less):
    its state, hyper-parameters and the data's state, and the optimizer's two moments of every
    parameter (AdamW), as ``torch.save`` writes them (counted, not stored)."""
    state = {"state_dict": module.state_dict(), "hparams": dict(module.hparams)}
    parameters = dict(module.named_parameters())
    return _saved_size(state | {"data": datamodule.state_dict()}) + 2 * _saved_size(parameters)


def _saved_size(payload: object) -> int:
    """The bytes ``torch.save`` writes for ``payload``."""
    counter = _Counter()
    torch.save(payload, counter)
    return counter.size


class _Counter(io.RawIOBase):
    """A write-only stream that keeps only the count of the bytes written to it."""

    def __init__(self) -> None:
        super().__init__()
        self.size = 0

    def writable(self) -> bool:
        return True

    def write(self, data: bytes) -> int:
        self.size += len(data)
        return len(data)
