"""How a fine-tuning fit trains, from its labelled training rows: the schedule's length and the
class weights of the label loss. Each is chosen by the data, printed, and overridable.

- **Schedule**: ``LABEL_EPOCHS`` passes over the labelled training rows, at least
  ``MIN_LABEL_STEPS`` and at most ``MAX_LABEL_STEPS`` optimizer steps (``model.label_steps``
  sets it): a small label table still gets enough steps to learn, a large one a bounded cost.
  The data config's ``trainer.max_epochs`` is meant for self-supervised passes over every event
  and does not apply; a ``trainer.max_steps`` given explicitly does (a quick check).
- **Class weights** (``model.class_weights``): ``auto`` weighs each class by the largest class's
  count over its own, clipped to ``[1, MAX_CLASS_WEIGHT]`` (two classes: the rare one by
  negatives / positives), so a rare class is not drowned by the frequent one; ``none`` weighs every
  row alike; a list gives the weights in the order of the classes. The loss keeps the head's
  probabilities calibrated either way (:meth:`~seqenc.model.head.SupervisedHead.loss`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Literal

import lightning.pytorch as pl
import numpy as np
import torch

from seqenc.data.bounds import check_count
from seqenc.data.datamodule import SequenceDataModule
from seqenc.errors import SeqencError, ignored
from seqenc.training.epochs import ScheduleRule, epoch_schedule

LABEL_EPOCHS = 12
MIN_LABEL_STEPS = 200
MAX_LABEL_STEPS = 2000
MAX_CLASS_WEIGHT = 10.0
MAX_GIVEN_RATIO = 1e4  # given class weights: beyond this ratio one class is all the loss sees
ClassWeights = Literal["auto", "none"] | list[float]


LABEL_RULE = ScheduleRule(
    name="fine-tuning schedule",
    option="model.label_steps",
    epochs=LABEL_EPOCHS,
    low=MIN_LABEL_STEPS,
    high=MAX_LABEL_STEPS,
    auto="auto: {epochs} epochs, within [{low:,}, {high:,}]; {option} sets it",
    capped=False,
)


def label_schedule(
    n_rows: int, batches_per_epoch: int, label_steps: int | None, max_steps: int = -1
) -> tuple[int, int, str]:
    """``(steps, epochs, why)`` of a fine-tuning fit over ``n_rows`` labelled training rows in
    ``batches_per_epoch`` batches: ``label_steps`` rounded up to whole epochs (each ends with a
    validation) if given, else :data:`LABEL_EPOCHS` epochs moved into ``[MIN_LABEL_STEPS,
    MAX_LABEL_STEPS]`` (:func:`~seqenc.training.epochs.whole_epochs`); an explicit ``max_steps``
    (>= 0) wins as it is: :data:`LABEL_RULE`."""
    over = f" over {n_rows:,} labelled training rows"
    return epoch_schedule(LABEL_RULE, batches_per_epoch, label_steps, max_steps, over=over)


def check_label_options(
    option: ClassWeights, label_steps: int | None, labels: dict[str, Any]
) -> None:
    """Refuse, in one line when the model is built (before the trainer prints anything), a label
    option that cannot work or would be ignored: ``label_steps`` not an integer >= 1;
    ``class_weights`` not auto / none / one weight per class, positive and finite in the float32
    the loss computes in, the largest at most :data:`MAX_GIVEN_RATIO` times the smallest; class
    weights on a regression label."""
    check_count(label_steps, "model.label_steps", optional=True)
    if isinstance(option, str) and option not in ("auto", "none"):
        raise SeqencError(f"model.class_weights must be auto, none or a list, got {option!r}")
    if option != "auto" and labels["task"] == "regression":
        why = "the label is a number (regression), it has no classes to weigh"
        raise ignored("model.class_weights", option, why)
    if isinstance(option, str):
        return
    classes = labels["classes"]
    try:
        weights = np.asarray(option, dtype=np.float64).astype(np.float32)
    except (TypeError, ValueError):
        weights = np.array([np.nan], dtype=np.float32)
    usable = weights.shape == (len(classes),) and bool((np.isfinite(weights) & (weights > 0)).all())
    if not usable or weights.max() > MAX_GIVEN_RATIO * weights.min():
        raise SeqencError(
            f"model.class_weights: {len(classes)} weights expected (classes {list(classes)}), "
            "each positive and finite in float32 (the loss's precision), the largest at most "
            f"{MAX_GIVEN_RATIO:g} times the smallest; got {list(option)}"
        )


def class_weights(
    targets: np.ndarray, classes: Sequence[object], option: ClassWeights
) -> tuple[torch.Tensor | None, str]:
    """``(weights, why)``: the ``[k]`` class weights of the label loss for training class codes
    ``targets`` (``None``: unweighted), and the line a fit prints; ``option`` as
    :func:`check_label_options` passed it."""
    if option == "none":
        return None, "class weights: none (model.class_weights)"
    if option == "auto":
        counts = np.bincount(targets, minlength=len(classes)).astype(float)
        weights = np.clip(counts.max() / np.maximum(counts, 1.0), 1.0, MAX_CLASS_WEIGHT)
        how = f"auto: largest class count / class count, within [1, {MAX_CLASS_WEIGHT:g}]"
    else:
        weights, how = np.asarray(option, dtype=float), "model.class_weights"
    shown = ", ".join(f"{c}: {w:.2f}" for c, w in zip(classes, weights, strict=True))
    return torch.tensor(weights, dtype=torch.float32), f"class weights: {shown} ({how})"


def set_label_schedule(
    trainer: pl.Trainer, datamodule: SequenceDataModule, label_steps: int | None
) -> str:
    """Give ``trainer`` the fine-tuning schedule of ``datamodule``'s labelled training rows
    (:func:`label_schedule`; the epochs too, so early stopping's share of the schedule holds);
    returns the line to print."""
    rows = len(datamodule.labelled.train.targets)
    batches = math.ceil(len(datamodule.train_dataloader()) / max(1, trainer.world_size))
    steps, epochs, why = label_schedule(rows, batches, label_steps, trainer.max_steps)
    trainer.fit_loop.max_epochs = epochs
    trainer.fit_loop.epoch_loop.max_steps = steps
    return why
