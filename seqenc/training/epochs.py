"""How many whole epochs a schedule sized from the data runs (a label head's labelled rows, a
next-basket fit's training windows): one rule, :func:`epoch_schedule`, parametrised by a
:class:`ScheduleRule`, so both fits read their bounds, their options and the trainer's alike."""

from __future__ import annotations

import math
from dataclasses import dataclass


def whole_epochs(batches: int, epochs: int, low: int, high: int) -> int:
    """``epochs`` passes of ``batches`` batches moved into ``[low, high]`` steps in whole epochs:
    the fewest that reach ``low``, the most that stay within ``high`` (``high`` wins where no whole
    number lies between), at least one (longer than ``high`` where one epoch already is). Whole
    epochs, as each ends with the validation that picks the checkpoint and stops the run."""
    batches = max(1, batches)
    fewest, most = math.ceil(low / batches), high // batches
    return max(1, min(max(epochs, fewest), most))


@dataclass(frozen=True)
class ScheduleRule:
    """What differs between the schedules of :func:`epoch_schedule`.

    Attributes:
        name: the printed line's first words (``"basket schedule"``).
        option: the option that gives the step count (``"model.basket_steps"``).
        epochs, low, high: the automatic schedule, ``epochs`` epochs moved into ``[low, high]``
            steps (:func:`whole_epochs`).
        auto: the printed reason of the automatic schedule, a template of ``epochs``, ``low``,
            ``high`` and ``option``.
        capped: ``trainer.max_steps`` (>= 0) and ``trainer.max_epochs`` cap the automatic
            schedule at its last whole epoch within them, and a given step count runs as given;
            else ``trainer.max_steps`` (>= 0) is the schedule as it is, and any other runs to the
            end of its last epoch.
    """

    name: str
    option: str
    epochs: int
    low: int
    high: int
    auto: str
    capped: bool


def epoch_schedule(
    rule: ScheduleRule,
    batches_per_epoch: int,
    given: int | None,
    max_steps: int = -1,
    max_epochs: int | None = None,
    over: str = "",
) -> tuple[int, int, str]:
    """``(steps, epochs, why)`` of a fit of ``batches_per_epoch`` training batches an epoch under
    ``rule``: ``given`` steps (``rule.option``) if given, else the automatic schedule, with the
    trainer's ``max_steps`` / ``max_epochs`` as ``rule.capped`` says. ``why`` is the line to
    print (``over``: what the batches are, after their count)."""
    batches = max(1, batches_per_epoch)
    if max_steps >= 0 and not rule.capped:
        steps, how = max_steps, "trainer.max_steps"
    elif given is not None:
        steps, how = given, rule.option
    else:
        steps, how = _automatic(rule, batches, max_steps, max_epochs)
    epochs = max(1, math.ceil(steps / batches))
    if not rule.capped and max_steps < 0:  # whole epochs: the last one ends with a validation
        steps = epochs * batches
    why = (
        f"{rule.name}: {steps:,} steps = {epochs} epoch{'s' * (epochs > 1)} of {batches} "
        f"batches{over} ({how})"
    )
    return steps, epochs, why


def _automatic(
    rule: ScheduleRule, batches: int, max_steps: int, max_epochs: int | None
) -> tuple[int, str]:
    """``(steps, how)`` of ``rule``'s automatic schedule, capped where ``rule.capped`` (a cap that
    ends inside an epoch ends at the last whole one, unless it is below one epoch)."""
    steps = whole_epochs(batches, rule.epochs, rule.low, rule.high) * batches
    how = rule.auto.format(epochs=rule.epochs, low=rule.low, high=rule.high, option=rule.option)
    caps = [(max_steps, "trainer.max_steps")] if rule.capped and max_steps >= 0 else []
    caps += [(max_epochs * batches, "trainer.max_epochs")] if rule.capped and max_epochs else []
    for cap, name in caps:
        if cap < steps:
            steps = cap // batches * batches or cap
            how = f"auto, capped by {name}"
    return steps, how
