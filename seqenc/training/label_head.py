"""The label head's part of :class:`~seqenc.training.module.SeqencModule` (fine-tuning on a label
table): its class-weighted loss, and the labelled validation score that picks the checkpoint."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from lightning.pytorch.utilities import rank_zero_info
from torchmetrics.aggregation import CatMetric

from seqenc.data.datamodule import SequenceDataModule
from seqenc.model.batch import Batch
from seqenc.model.head import SupervisedHead
from seqenc.scores import class_scores, r2, score_name
from seqenc.training.label_plan import class_weights
from seqenc.training.wide_start import fit_wide_start


def label_score(task: str, outputs: torch.Tensor, targets: torch.Tensor) -> float:
    """The score (:mod:`seqenc.scores`) of the head's raw ``outputs`` (``[n, k]`` class scores or
    ``[n, 1]`` standardised numbers) against ``targets``: ROC-AUC of the classes' probabilities,
    or R² (unit-free, so the same on the standardised scale). The labelled hold-out holds every
    class (two different numbers), so the score is defined (:func:`~seqenc.data.labels.hold_out`)."""
    y = targets.detach().cpu().numpy().reshape(-1)
    out = outputs.detach().float().cpu().reshape(len(y), -1)
    if task == "regression":
        return r2(y, out[:, 0].numpy())
    return class_scores(y, torch.softmax(out, dim=-1).numpy().astype(np.float64))["roc_auc"]


class LabelHead:
    """Mixed into the LightningModule: everything its label head adds (``self.encoder``,
    ``self.hparams``, ``self.log``, ``self.trainer`` are the module's)."""

    def add_label_head(self, labels: dict[str, Any], fusion: str) -> None:
        """The head of ``labels`` (:class:`~seqenc.model.head.SupervisedHead`'s arguments; with
        ``fusion="aggregates"`` its aggregates' layout too), its class weights (set when the fit
        starts) and the held-out outputs of an epoch."""
        self.encoder.head = SupervisedHead.of(self.config.d_model, labels, fusion)
        self.register_buffer("label_weights", None, persistent=False)
        self.label_outputs, self.label_targets = CatMetric(), CatMetric()

    def label_loss(self, batch: Batch, targets: torch.Tensor) -> torch.Tensor:
        """The label head's loss on the entity readouts of ``batch`` (mean over its rows)."""
        return self._label_outputs_loss(batch, targets)[1]

    def _label_outputs_loss(
        self, batch: Batch, targets: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The label head's outputs on ``batch`` and their (class-weighted) loss."""
        head = self.encoder.head
        readout = self.encoder.entity_embedding(batch)
        outputs = head(readout, batch.aggregates)
        loss = head.loss(outputs, targets, self.label_weights)
        if head.wide is not None:  # the readout on its own too: the encoder learns the label
            loss = loss + head.loss(head.alone(readout), targets, self.label_weights)
        return outputs, loss

    def _log_label_loss(self, stage: str, batch: Batch, targets: torch.Tensor) -> None:
        """The label loss of held-out samples (epoch mean); their outputs kept for the score."""
        outputs, loss = self._label_outputs_loss(batch, targets)
        self.log(f"{stage}/loss", loss, batch_size=len(batch))
        self.label_outputs.update(outputs.detach().float())
        self.label_targets.update(targets)

    def _log_label_score(self, stage: str) -> None:
        """The labelled score of the epoch's held-out samples (every process's): ``STAGE/score``
        and the same under its name (``roc_auc`` or ``r2``)."""
        if not self.label_targets.update_count:
            return
        task = self.encoder.head.task
        score = label_score(task, self.label_outputs.compute(), self.label_targets.compute())
        self.label_outputs.reset()
        self.label_targets.reset()
        self.log(f"{stage}/score", score, prog_bar=stage == "val")
        self.log(f"{stage}/{score_name(task)}", score)

    def _prepare_labels(self) -> None:
        """Before a fine-tuning fit: the label loss's class weights from the training labels
        (:func:`~seqenc.training.label_plan.class_weights`), printed with the score that picks
        the checkpoint."""
        head = self.encoder.head
        datamodule = self.trainer.datamodule
        if head.task == "classification" and isinstance(datamodule, SequenceDataModule):
            targets = datamodule.labelled_splits[0].targets
            weights, why = class_weights(targets, head.classes, self.hparams.class_weights)
            self.label_weights = None if weights is None else weights.to(self.device)
            rank_zero_info(why)
        if head.wide is None:
            rank_zero_info("fusion: none (the head reads the pooled sequence alone)")
        else:
            rank_zero_info(
                f"fusion: aggregates ({head.wide.in_features} hand-made aggregates of each "
                "labelled row's events at its cut-off, beside the pooled sequence)"
            )
            train = datamodule.labelled_splits[0]
            why = fit_wide_start(head, train.aggregates, train.targets)
            rank_zero_info(why)
        rank_zero_info(
            f"evaluation: {score_name(head.task)} of the held-out labelled entities (val/score), "
            "which picks the checkpoint and drives early stopping"
        )
