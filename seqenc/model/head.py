"""The supervised head: an entity readout → a label's prediction (fine-tuning on a label table).

Classification: one score per class, trained with cross-entropy, read out as probabilities.
Regression: one number, trained on the standardised target (``center``, ``scale`` of the training
labels) so the loss is well scaled whatever the label's unit, read out in the label's unit. The
head's description (:meth:`SupervisedHead.describe`) is plain JSON data: a bundle stores it in
``config.json`` and the weights beside the encoder's.

A fused head (``aggregates``) also reads a wide input: the entity's hand-made aggregates
(:mod:`seqenc.data.aggregates`, computed from the same events at the same cut-off), standardised
with the training rows' statistics (stored in its layout) through their own linear map (fitted
before training: :mod:`seqenc.finetune.wide_start`), beside the readout's, which starts at zero;
the encoder is trained on the label through both and through a map of its own (wide and deep).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from seqenc.model.embeddings import signed_log

TASKS = ("classification", "regression")
WIDE_CLIP = 8.0  # a standardised aggregate beyond this many scales says no more than "extreme"


class SupervisedHead(nn.Module):
    """A layer norm and a linear map of the entity readout ``[B, d]`` to ``[B, k]`` class scores
    (``k = len(classes)``) or ``[B, 1]`` a standardised number.

    Args:
        d_model: the readout's size.
        task: ``"classification"`` or ``"regression"``.
        classes: the class values in output order (JSON values); empty for regression.
        center, scale: regression only: a prediction is ``output * scale + center``.
        aggregates: a fused head's aggregate layout (plain JSON data: the spec of
            :class:`~seqenc.data.aggregates.AggregateSpec`, its column ``names`` and their
            training ``center`` and ``scale`` after a signed log,
            :func:`~seqenc.data.label_aggregates.label_aggregates`); ``None``: the readout alone.
    """

    def __init__(
        self,
        d_model: int,
        task: str,
        classes: list[Any] | tuple[Any, ...] = (),
        center: float = 0.0,
        scale: float = 1.0,
        aggregates: dict[str, Any] | None = None,
    ) -> None:
        super().__init__()
        if task not in TASKS:
            raise ValueError(f"head task must be one of {TASKS}, got {task!r}")
        if (task == "classification") != (len(classes) >= 2):
            raise ValueError(f"a {task} head needs {'two or more' if classes else 'no'} classes")
        if not scale > 0:
            raise ValueError(f"head scale must be positive, got {scale!r}")
        self.task, self.classes = task, list(classes)
        self.center, self.scale = float(center), float(scale)
        self.norm = nn.LayerNorm(d_model)
        self.linear = nn.Linear(d_model, len(classes) if classes else 1)
        self.aggregates = aggregates
        self.wide = None
        if aggregates is not None:
            for name in ("center", "scale"):  # plain data in the layout, a buffer to compute on
                values = torch.tensor(aggregates[name], dtype=torch.float32)
                self.register_buffer(f"wide_{name}", values, persistent=False)
            self.wide = nn.Linear(len(aggregates["names"]), self.linear.out_features)
            # the readout's map starts at zero: a fused head starts as the aggregates' own model
            # and the sequence adds to it only what training finds; the readout also has a map of
            # its own, trained on the label alone (:meth:`alone`), so the encoder learns the label
            # whatever the aggregates already explain
            for weights in (self.wide.weight, self.linear.weight, self.linear.bias):
                nn.init.zeros_(weights)
            self.solo = nn.Linear(d_model, self.linear.out_features)

    @classmethod
    def of(cls, d_model: int, labels: dict[str, Any], fusion: str = "none") -> SupervisedHead:
        """The head of a data spec's ``labels`` (its arguments, and the aggregates' layout), fused
        with the aggregates when ``fusion="aggregates"``."""
        layout = labels.get("aggregates") if fusion == "aggregates" else None
        rest = {k: v for k, v in labels.items() if k != "aggregates"}
        return cls(d_model, **rest, aggregates=layout)

    def forward(self, readout: Tensor, wide: Tensor | None = None) -> Tensor:
        """``[B, k]`` class scores or ``[B, 1]`` standardised numbers; a fused head adds its linear
        map of the aggregates ``wide`` ``[B, n_wide]`` (standardised after a signed log)."""
        out = self.linear(self.norm(readout))
        if self.wide is None:
            return out
        if wide is None or wide.shape[-1] != self.wide.in_features:
            got = None if wide is None else wide.shape[-1]
            raise ValueError(f"this head reads {self.wide.in_features} aggregates, got {got}")
        return self.wide(self.standardise(wide)) + out

    def alone(self, readout: Tensor) -> Tensor:
        """A fused head's outputs from the readout alone (its own map, a training signal for the
        encoder: predictions are :meth:`forward`'s)."""
        return self.solo(self.norm(readout))

    def standardise(self, wide: Tensor) -> Tensor:
        """``[B, n_wide]`` the aggregates in units of their training scale from its centre, after
        a signed log, clipped to ``±WIDE_CLIP``."""
        z = (signed_log(wide.float()) - self.wide_center) / self.wide_scale
        return z.clamp(-WIDE_CLIP, WIDE_CLIP)

    def loss(self, outputs: Tensor, targets: Tensor, weights: Tensor | None = None) -> Tensor:
        """Cross-entropy against class codes, or squared error against standardised targets
        (``targets`` as :func:`~seqenc.data.labels.read_labels` gives them).

        ``weights``: ``[k]`` class weights (rare classes weigh more in the gradient). The scores
        are shifted by ``log(weights)`` inside the loss, so its minimum stays at the true class
        probabilities: :meth:`predict` reads calibrated probabilities, as without weights."""
        if self.task != "classification":
            return F.mse_loss(outputs.float()[:, 0], targets.float())
        if weights is None:
            return F.cross_entropy(outputs.float(), targets.long())
        return F.cross_entropy(outputs.float() + weights.log(), targets.long(), weight=weights)

    def predict(self, outputs: Tensor) -> Tensor:
        """``[B, k]`` class probabilities, or ``[B]`` numbers in the label's unit."""
        if self.task == "classification":
            return torch.softmax(outputs.float(), dim=-1)
        return outputs.float()[:, 0] * self.scale + self.center

    def describe(self) -> dict[str, Any]:
        """The head's configuration as plain data (``SupervisedHead(d_model, **describe())``)."""
        return {
            "task": self.task,
            "classes": self.classes,
            "center": self.center,
            "scale": self.scale,
            "aggregates": self.aggregates,
        }
