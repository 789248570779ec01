"""The LightningModule of a fine-tuning fit: an encoder, its label head and their loss, trained on
labelled rows, as pytorch-lifestream's ``SequenceToTarget(seq_encoder, head, loss)``.

It is given what it trains (the encoder, the head with a fused head's wide part, the loss with its
class weights) and handed the labelled rows it starts from (a fused head's wide start is fitted on
the training rows' aggregates when the fit starts); it never reads the trainer's data. Validation
and test score the held-out labelled entities (``val/score``: ROC-AUC or R², also under its name),
which picks the checkpoint and drives early stopping. :func:`~seqenc.finetune.build.label_module`
builds one from the command line's options.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

import torch
from lightning.pytorch.utilities import rank_zero_info
from torchmetrics.aggregation import CatMetric

from seqenc.data.labels import LabelledRows
from seqenc.data.spec import DataSpec
from seqenc.data.split import FitSplits
from seqenc.finetune.loss import LabelLoss, label_score
from seqenc.finetune.wide_start import fit_wide_start
from seqenc.model.batch import Batch
from seqenc.model.encoder import SequenceEncoder
from seqenc.model.head import SupervisedHead
from seqenc.model.objectives import Causal, Masked
from seqenc.scores import score_name
from seqenc.training.encoder_module import EncoderModule

LabelledBatch = tuple[Batch, torch.Tensor] | list  # labelled samples and their targets


class LabelModule(EncoderModule):
    """An encoder fine-tuned on a label table.

    Args:
        encoder: the sequence encoder (its entity readout feeds the head).
        head: the label head (:class:`~seqenc.model.head.SupervisedHead`; fused: its wide part
            reads each row's aggregates); it becomes ``encoder.head``, as a bundle stores it.
        loss: the label loss (:class:`~seqenc.finetune.loss.LabelLoss`, with its class weights).
        spec: the data's spec (its ``labels`` describe the head).
        rows: the labelled rows (:attr:`SequenceDataModule.labelled
            <seqenc.data.datamodule.SequenceDataModule.labelled>`): a fused head's wide part is
            fitted on the training rows when the fit starts (``None``: kept as given).
        splits: the data's splits, whose training events give the per-item numeric statistics
            (``None``: the encoder's own).
        lr, weight_decay, warmup_steps: AdamW with linear warm-up then cosine decay to 0.
        init_from: a bundle whose encoder weights start the fit.
        notes: lines printed when the fit starts (how its options were chosen).
        options: the options the module was built from, saved as hyper-parameters beside these
            (a checkpoint then resumes and tests with them).
    """

    def __init__(
        self,
        encoder: SequenceEncoder,
        head: SupervisedHead,
        loss: LabelLoss,
        spec: DataSpec,
        rows: LabelledRows | None = None,
        splits: FitSplits | None = None,
        lr: float = 1e-3,
        weight_decay: float = 0.01,
        warmup_steps: int = 100,
        init_from: str | None = None,
        notes: tuple[str, ...] = (),
        options: dict[str, Any] | None = None,
    ) -> None:
        super().__init__()
        self.save_hyperparameters("lr", "weight_decay", "warmup_steps", "init_from")
        self.spec, self.rows, self.splits, self.notes = spec, rows, splits, notes
        self.encoder, self.config, self.loss = encoder, encoder.config, loss
        encoder.head = head
        self.objective = Causal(self.config.baskets) if self.config.causal else Masked()
        fusion = "none" if head.wide is None else "aggregates"
        self.hparams.update(options or {})
        self.hparams.update(objective=self.objective.name, fusion=fusion)
        self.hparams.update(encoder=asdict(self.config))
        if init_from is not None:
            self.start_from(init_from)
        self.outputs, self.targets = CatMetric(), CatMetric()

    @property
    def head(self) -> SupervisedHead:
        return self.encoder.head

    def training_step(self, batch: LabelledBatch, batch_idx: int) -> torch.Tensor:
        batch, targets = batch
        _, loss = self.loss(self.encoder, batch, targets)
        self.log("train/label", loss, batch_size=len(batch))
        self.log("train/loss", loss, prog_bar=True, batch_size=len(batch))
        return loss

    def validation_step(self, batch: LabelledBatch, batch_idx: int) -> None:
        self._held_out("val", *batch)

    def test_step(self, batch: LabelledBatch, batch_idx: int) -> None:
        self._held_out("test", *batch)

    def _held_out(self, stage: str, batch: Batch, targets: torch.Tensor) -> None:
        """The loss of held-out samples (epoch mean); their outputs kept for the score."""
        outputs, loss = self.loss(self.encoder, batch, targets)
        self.log(f"{stage}/loss", loss, batch_size=len(batch))
        self.outputs.update(outputs.detach().float())
        self.targets.update(targets)

    def on_validation_epoch_end(self) -> None:
        self._log_score("val")

    def on_test_epoch_end(self) -> None:
        self._log_score("test")

    def _log_score(self, stage: str) -> None:
        """The labelled score of the epoch's held-out samples (every process's): ``STAGE/score``
        and the same under its name (``roc_auc`` or ``r2``)."""
        if not self.targets.update_count:
            return
        task = self.head.task
        score = label_score(task, self.outputs.compute(), self.targets.compute())
        self.outputs.reset()
        self.targets.reset()
        self.log(f"{stage}/score", score, prog_bar=stage == "val")
        self.log(f"{stage}/{score_name(task)}", score)

    def monitored(self) -> set[str]:
        """The metrics validation logs: what a checkpoint or early stopping may monitor."""
        return {"val/loss", "val/score", f"val/{score_name(self.head.task)}"}

    def on_fit_start(self) -> None:
        """How the fit was planned (class weights, fusion, the wide start on the training rows'
        aggregates) and which score picks the checkpoint, printed before the first step."""
        self.set_numeric_statistics(self.splits)
        for line in self.notes:
            rank_zero_info(line)
        head = self.head
        if head.wide is None:
            rank_zero_info("fusion: none (the head reads the pooled sequence alone)")
        else:
            rank_zero_info(
                f"fusion: aggregates ({head.wide.in_features} hand-made aggregates of each "
                "labelled row's events at its cut-off, beside the pooled sequence)"
            )
            if self.rows is not None:
                train = self.rows.train
                rank_zero_info(fit_wide_start(head, train.aggregates, train.targets))
        rank_zero_info(
            f"evaluation: {score_name(head.task)} of the held-out labelled entities (val/score), "
            "which picks the checkpoint and drives early stopping"
        )
