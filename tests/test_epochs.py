"""The one schedule rule (seqenc.training.epochs.epoch_schedule) against the two rules it
replaced, copied here as they were: the next-basket and the fine-tuning schedule, every
(steps, epochs) and every printed line."""

from __future__ import annotations

import math

from hypothesis import given
from hypothesis import strategies as st

from seqenc.finetune.plan import (
    LABEL_EPOCHS,
    MAX_LABEL_STEPS,
    MIN_LABEL_STEPS,
    label_schedule,
)
from seqenc.training.basket_plan import (
    BASKET_EPOCHS,
    MAX_BASKET_STEPS,
    MIN_BASKET_STEPS,
    basket_schedule,
)
from seqenc.training.epochs import whole_epochs


def old_basket_schedule(
    batches_per_epoch: int, basket_steps: int | None, max_steps: int, max_epochs: int | None
) -> tuple[int, int, str]:
    """seqenc/training/basket_plan.py::basket_schedule before the one rule."""
    batches = max(1, batches_per_epoch)
    if basket_steps is not None:
        steps, how = basket_steps, "model.basket_steps"
    else:
        steps = whole_epochs(batches, BASKET_EPOCHS, MIN_BASKET_STEPS, MAX_BASKET_STEPS) * batches
        how = (
            f"auto: {BASKET_EPOCHS} epochs within [{MIN_BASKET_STEPS:,}, "
            f"{MAX_BASKET_STEPS:,}] steps; model.basket_steps sets it"
        )
        caps = [(max_steps, "trainer.max_steps")] if max_steps >= 0 else []
        caps += [(max_epochs * batches, "trainer.max_epochs")] if max_epochs else []
        for cap, name in caps:
            if cap < steps:
                steps = cap // batches * batches or cap
                how = f"auto, capped by {name}"
    epochs = max(1, math.ceil(steps / batches))
    why = (
        f"basket schedule: {steps:,} steps = {epochs} epoch{'s' * (epochs > 1)} of {batches} "
        f"batches ({how})"
    )
    return steps, epochs, why


def old_label_schedule(
    n_rows: int, batches_per_epoch: int, label_steps: int | None, max_steps: int
) -> tuple[int, int, str]:
    """seqenc/finetune/plan.py::label_schedule before the one rule."""
    batches = max(1, batches_per_epoch)
    if max_steps >= 0:
        steps, how = max_steps, "trainer.max_steps"
    elif label_steps is not None:
        steps, how = label_steps, "model.label_steps"
    else:
        steps = whole_epochs(batches, LABEL_EPOCHS, MIN_LABEL_STEPS, MAX_LABEL_STEPS) * batches
        how = (
            f"auto: {LABEL_EPOCHS} epochs, within [{MIN_LABEL_STEPS:,}, {MAX_LABEL_STEPS:,}]; "
            "model.label_steps sets it"
        )
    epochs = max(1, math.ceil(steps / batches))
    if max_steps < 0:
        steps = epochs * batches
    why = (
        f"fine-tuning schedule: {steps:,} steps = {epochs} epoch{'s' * (epochs > 1)} of "
        f"{batches} batches over "
        f"{n_rows:,} labelled training rows ({how})"
    )
    return steps, epochs, why


batches = st.integers(0, 5000)
steps = st.none() | st.integers(1, 50_000)
max_steps = st.just(-1) | st.integers(0, 50_000)


@given(batches, steps, max_steps, st.none() | st.integers(0, 40))
def test_the_basket_schedule_is_the_old_rule(batches, given_steps, max_steps, max_epochs):
    got = basket_schedule(batches, given_steps, max_steps, max_epochs)
    assert got == old_basket_schedule(batches, given_steps, max_steps, max_epochs)


@given(st.integers(0, 10**7), batches, steps, max_steps)
def test_the_label_schedule_is_the_old_rule(n_rows, batches, given_steps, max_steps):
    got = label_schedule(n_rows, batches, given_steps, max_steps)
    assert got == old_label_schedule(n_rows, batches, given_steps, max_steps)
