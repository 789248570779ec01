"""Lightning checkpoints written whole or not at all: a full disk in the run folder leaves the
earlier checkpoint and no truncated ``best-epoch=0.ckpt`` (Lightning writes in place)."""

from __future__ import annotations

from pathlib import Path

import lightning.pytorch as pl
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
