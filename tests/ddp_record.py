"""A callback for the DDP tests: what each process of a run read and trained, one JSON file each
(run in the processes Lightning starts, so it lives in a module they can import)."""

import json
from pathlib import Path

import lightning.pytorch as pl


class Record(pl.Callback):
    """Writes ``<folder>/rank<r>.json``: the entities the process read, its spec, its last
    training loss, the validation targets summed over the processes and a checksum per weight."""

    def __init__(self, folder: str) -> None:
        self.folder, self.val_targets = Path(folder), 0

    def on_validation_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        with pl_module.val_metrics.sync_context():  # the states summed over the processes
            self.val_targets = int(pl_module.val_metrics.count)

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        data = trainer.datamodule
        record = {
            "entities": data.store.entity_ids.to_pylist(),
            "spec": data.spec.to_dict(),
            "loss": float(trainer.callback_metrics["train/loss"]),
            "val_targets": self.val_targets,
            "weights": {
                k: v.double().abs().sum().item() for k, v in pl_module.state_dict().items()
            },
        }
        self.folder.mkdir(parents=True, exist_ok=True)
        (self.folder / f"rank{trainer.global_rank}.json").write_text(json.dumps(record))
