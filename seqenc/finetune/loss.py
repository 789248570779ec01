"""The label loss of a fine-tuning fit and the score that picks its checkpoint.

:class:`LabelLoss` is the head's loss (:meth:`~seqenc.model.head.SupervisedHead.loss`) with the
class weights of the training labels (:func:`~seqenc.finetune.plan.class_weights`); a fused
head is also trained through the readout alone, so the encoder learns the label rather than
leaning on the aggregates' part. :func:`label_score` is the held-out score (:mod:`seqenc.scores`).
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from seqenc.model.batch import Batch
from seqenc.model.encoder import SequenceEncoder
from seqenc.scores import class_scores, r2


class LabelLoss(nn.Module):
    """``forward(encoder, batch, targets) -> (outputs, loss)``: the head's outputs on the entity
    readouts of ``batch`` and their mean loss, each row weighted by its class's ``weights``
    (``[k]``; ``None``: unweighted)."""

    def __init__(self, weights: torch.Tensor | None = None) -> None:
        super().__init__()
        self.register_buffer("weights", weights, persistent=False)

    def forward(
        self, encoder: SequenceEncoder, batch: Batch, targets: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        head = encoder.head
        readout = encoder.entity_embedding(batch)
        outputs = head(readout, batch.aggregates)
        loss = head.loss(outputs, targets, self.weights)
        if head.wide is not None:  # the readout on its own too: the encoder learns the label
            loss = loss + head.loss(head.alone(readout), targets, self.weights)
        return outputs, loss


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
