"""Masked values: a self-supervised term for logs whose events carry numbers (measurements,
amounts). Some events' values are withheld, their item and time stay visible, and the encoder's
state at each such event predicts the value in its item's standardised units, so it learns what
each item's values are, given the rest of the history, before it ever sees a label.

A withheld value reads as its item's typical one (the centre of its signed-log values): the input
then says nothing about it, as a missing value imputed by its item's mean.
"""

from __future__ import annotations

from dataclasses import replace

import torch
from torch import Tensor, nn

from seqenc.model.batch import Batch
from seqenc.model.masking import at_least_one, uniform


def hide_values(
    batch: Batch, prob: float, center: Tensor, generator: torch.Generator | None = None
) -> tuple[Batch, Tensor]:
    """``(inputs, hidden)``: ``batch`` with each real event's values withheld with probability
    ``prob`` (``hidden``, ``[B, L]`` bool; at least one event drawn in a row with events), a
    withheld value replaced by its item's centre ``center`` (``[n_items, n_numeric]``, signed-log
    units) mapped back to the raw scale. An event none of whose values was recorded (all NaN) is
    never withheld, and a value not recorded stays NaN (not recorded) in the inputs."""
    draws = uniform(tuple(batch.items.shape), generator, batch.items.device)
    hidden = at_least_one((draws < prob) & batch.padding_mask, batch.lengths, generator)
    unrecorded = torch.isnan(batch.numeric)
    hidden &= ~unrecorded.all(dim=-1)
    typical = center[batch.items].to(batch.numeric.dtype)
    typical = torch.sign(typical) * torch.expm1(typical.abs())  # the inverse of the signed log
    numeric = torch.where(hidden[..., None] & ~unrecorded, typical, batch.numeric)
    return replace(batch, numeric=numeric), hidden


class ValueHead(nn.Module):
    """A linear map from an event's state to its standardised values (``n_numeric`` each)."""

    def __init__(self, d_model: int, n_numeric: int) -> None:
        super().__init__()
        self.out = nn.Linear(d_model, n_numeric)

    def forward(self, hidden_states: Tensor) -> Tensor:
        return self.out(hidden_states)


def value_loss(predicted: Tensor, target: Tensor, hidden: Tensor) -> Tensor:
    """Mean squared error over the withheld events' recorded values (``predicted`` and
    ``target``: ``[B, L, n_numeric]``, NaN in ``target`` where not recorded, never a target;
    ``hidden``: ``[B, L]``); 0 when there is none."""
    counted = hidden[..., None] & ~torch.isnan(target)
    if not counted.any():
        return predicted.sum() * 0.0
    return (predicted[counted] - target[counted]).pow(2).mean()
