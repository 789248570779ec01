"""What every seqenc LightningModule shares, whatever it trains: AdamW with warm-up and cosine
decay, the norm clip that counts the item table's sparse gradient, the encoder's architecture in
every checkpoint (and a checkpoint that does not fit refused in one line), a start from a bundle's
encoder weights and the per-item numeric statistics of the training events.

The logits memory a fit reuses is released when it ends. The next-event module (:class:`~seqenc.training.module.SeqencModule`) and the label module
(:class:`~seqenc.finetune.module.LabelModule`) subclass it; each sets ``spec``, ``config``,
``encoder`` and ``objective`` and saves ``lr``, ``weight_decay``, ``warmup_steps`` and
``init_from`` as hyper-parameters.
"""

from __future__ import annotations

import math
from dataclasses import asdict
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.pytorch.utilities import rank_zero_info
from torch.optim.lr_scheduler import LambdaLR

from seqenc.bundle import load_bundle
from seqenc.data.numeric import unrecorded_shares, view_statistics
from seqenc.data.spec import DataSpec
from seqenc.data.split import FitSplits
from seqenc.errors import SeqencError
from seqenc.model.encoder import EncoderConfig, SequenceEncoder
from seqenc.model.objectives import Causal, Masked
from seqenc.model.optim import RowSparseAdamW, clip_grad_norm
from seqenc.model.workspace import release
from seqenc.training.run_options import shape_mismatch


class EncoderModule(pl.LightningModule):
    """A LightningModule around a :class:`~seqenc.model.encoder.SequenceEncoder` (see the module
    docstring for what a subclass sets)."""

    spec: DataSpec
    config: EncoderConfig
    encoder: SequenceEncoder
    objective: Causal | Masked

    def start_from(self, path: str) -> None:
        """The encoder weights of the bundle at ``path`` (its head, if any, is not taken)."""
        encoder, meta, vocabs = load_bundle(path)
        if vocabs != self.spec.vocabs:
            raise SeqencError(
                f"model.init_from {path}: the bundle's vocabularies differ from the data's "
                "(read the data with them: data.vocabs_from)"
            )
        state = {k: v for k, v in encoder.state_dict().items() if not k.startswith("head.")}
        shapes = {k: tuple(v.shape) for k, v in self.encoder.state_dict().items()}
        # a bundle written before the not-recorded vectors: they keep their start, zero
        fresh = {"embed.missing"} - set(state)
        if {k: tuple(v.shape) for k, v in state.items()} != {
            k: v for k, v in shapes.items() if not k.startswith("head.") and k not in fresh
        }:
            why = shape_mismatch(asdict(meta.encoder), self.config, self.spec)
            raise SeqencError(f"model.init_from {path}: its weights do not fit this model: {why}")
        self.encoder.load_state_dict(state, strict=False)

    def configure_optimizers(self) -> dict[str, Any]:
        # As nanoGPT: weight matrices and embedding tables are decayed, biases and norms are not.
        decay, no_decay = [], []
        for param in self.parameters():
            (decay if param.ndim >= 2 else no_decay).append(param)
        optimizer = RowSparseAdamW(
            [
                {"params": decay, "weight_decay": self.hparams.weight_decay},
                {"params": no_decay, "weight_decay": 0.0},
            ],
            lr=self.hparams.lr,
        )
        total = max(1, int(self.trainer.estimated_stepping_batches))
        warmup = min(self.hparams.warmup_steps, total // 2)

        def schedule(step: int) -> float:
            if step < warmup:
                return (step + 1) / warmup
            progress = (step - warmup) / max(1, total - warmup)
            return 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))

        scheduler = LambdaLR(optimizer, schedule)
        return {
            "optimizer": optimizer,
            "lr_scheduler": {"scheduler": scheduler, "interval": "step"},
        }

    def configure_gradient_clipping(
        self,
        optimizer: torch.optim.Optimizer,
        gradient_clip_val: float | None = None,
        gradient_clip_algorithm: str | None = None,
    ) -> None:
        """Norm clipping that also counts the item table's sparse gradient (torch's does not)."""
        if gradient_clip_algorithm not in (None, "norm"):
            raise SeqencError(
                f"trainer.gradient_clip_algorithm {gradient_clip_algorithm!r}: only 'norm' is supported"
            )
        if gradient_clip_val:
            clip_grad_norm(self.parameters(), gradient_clip_val)

    def on_train_start(self) -> None:
        """The configured ``lr`` and ``weight_decay`` in the optimizer and its schedule. A resumed
        run restores the checkpoint's into both, so a changed learning rate would not apply (the
        schedule's warm-up and length are the configured ones already: its function is not
        saved). On a new run this sets the values they already have."""
        hp = self.hparams
        for config in self.trainer.lr_scheduler_configs:
            scheduler = config.scheduler
            scheduler.base_lrs = [hp.lr] * len(scheduler.base_lrs)
            rates = [hp.lr * f(scheduler.last_epoch) for f in scheduler.lr_lambdas]
            for group, rate in zip(scheduler.optimizer.param_groups, rates, strict=True):
                group["lr"], group["initial_lr"] = rate, hp.lr
            scheduler._last_lr = rates
        for optimizer in self.trainer.optimizers:
            for group, decay in zip(optimizer.param_groups, (hp.weight_decay, 0.0), strict=True):
                group["weight_decay"] = decay

    def on_fit_end(self) -> None:
        """The logits memory the fit reused (:mod:`seqenc.model.workspace`) given back: a process
        that goes on after a fit does not keep it."""
        release()

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """The encoder's architecture beside its weights, so a checkpoint converts to a bundle."""
        checkpoint["encoder_config"] = asdict(self.config)

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """Before the weights load (resume, test): refuse, in one line, a checkpoint whose weights
        do not fit this model (other data vocabulary, ``history_len`` or shape option)."""
        shapes = {k: tuple(v.shape) for k, v in self.state_dict().items()}
        saved = {k: tuple(v.shape) for k, v in checkpoint.get("state_dict", {}).items()}
        if "encoder_config" in checkpoint and saved != shapes:
            why = shape_mismatch(checkpoint["encoder_config"], self.config, self.spec)
            raise SeqencError(f"cannot load the checkpoint's weights: {why}")

    def set_numeric_statistics(self, splits: FitSplits | None) -> None:
        """Per-item numeric scaling reads each item's statistics of the training events (the
        training split of ``splits``, handed to the module, read only when the log has numeric
        columns; ``None`` is refused in one line rather than training on statistics of nothing);
        a model started from a bundle (``init_from``) keeps the bundle's, which its weights
        learned on. Prints how the numbers are read."""
        if not self.config.n_numeric:
            return
        train = None if splits is None else splits.train
        if train is not None:
            shares = [f"{c} {s:.1%}" for c, s in unrecorded_shares(train.store).items() if s]
            vectors = "with" if self.config.missing_values else "without"
            if shares:
                rank_zero_info(
                    f"numbers not recorded (null/NaN): {', '.join(shares)} of the events; read as "
                    f"not recorded, {vectors} a learned vector (model.encoder.missing_values)"
                )
        if self.config.numeric_scaling != "per_item":
            rank_zero_info("numeric features: one linear map of the signed log for every item")
            return
        if self.hparams.init_from is None:
            if train is None:
                raise SeqencError(
                    "per-item numeric scaling reads each item's statistics of the training "
                    "events: hand the module the data's splits (splits=datamodule.fit_splits, as "
                    "seqenc fit does), or set encoder numeric_scaling 'global'"
                )
            center, scale = view_statistics(train.store, train, self.config.n_items)
            self.encoder.embed.set_numeric_stats(torch.from_numpy(center), torch.from_numpy(scale))
        rank_zero_info(
            "numeric features: per item (each value also standardised by its item's statistics of "
            "the training events; model.encoder.numeric_scaling: global turns it off)"
        )
