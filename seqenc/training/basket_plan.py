"""How a next-basket fit trains: a schedule sized from the log, stopped on the basket metric.

Validation asks what the test asks (the basket before the newest, the same
:class:`~seqenc.training.metrics.BasketMetrics`), so it picks the checkpoint and stops the run
(``early_stopping.keep: auto``, :func:`set_basket_schedule`); the schedule's length reads the
log's training windows (:func:`basket_schedule`), so its cost grows with the log's lines.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

import lightning.pytorch as pl

from seqenc.data.bounds import check_count
from seqenc.data.datamodule import SequenceDataModule
from seqenc.errors import SeqencError, ignored
from seqenc.model.encoder import EncoderConfig
from seqenc.training.callbacks import PATIENCE, ConfiguredEarlyStopping
from seqenc.training.epochs import ScheduleRule, epoch_schedule


@dataclass(frozen=True)
class BasketOptions:
    """How a next-basket fit trains (``model.basket_positives``, ``model.basket_steps``).

    Attributes:
        basket_positives: what a basket trains on: ``"one"`` item of the next basket drawn per
            line and step, or ``"all"`` its items (:mod:`seqenc.model.basket_loss`); ``"auto"``:
            all under the basket protocol (printed at fit time, saved resolved).
        basket_steps: the fit's optimizer steps; ``None``: from the log's training windows
            (:func:`basket_schedule`, printed).
    """

    basket_positives: Literal["one", "all", "auto"] = "auto"
    basket_steps: int | None = None


BASKET_EPOCHS = 5
MIN_BASKET_STEPS = 200
MAX_BASKET_STEPS = 2000
BASKET_PATIENCE = 2


BASKET_RULE = ScheduleRule(
    name="basket schedule",
    option="model.basket_steps",
    epochs=BASKET_EPOCHS,
    low=MIN_BASKET_STEPS,
    high=MAX_BASKET_STEPS,
    auto="auto: {epochs} epochs within [{low:,}, {high:,}] steps; {option} sets it",
    capped=True,
)


def basket_schedule(
    batches_per_epoch: int,
    basket_steps: int | None,
    max_steps: int = -1,
    max_epochs: int | None = None,
) -> tuple[int, int, str]:
    """``(steps, epochs, why)`` of a next-basket fit with ``batches_per_epoch`` training batches:
    ``basket_steps`` if given, else :data:`BASKET_EPOCHS` epochs moved into
    ``[MIN_BASKET_STEPS, MAX_BASKET_STEPS]`` (:func:`~seqenc.training.epochs.whole_epochs`), then
    capped by ``max_steps`` (>= 0) and ``max_epochs`` (a cap that ends inside an epoch ends at the
    last whole one, unless it is below one epoch): :data:`BASKET_RULE`."""
    return epoch_schedule(BASKET_RULE, batches_per_epoch, basket_steps, max_steps, max_epochs)


def set_basket_schedule(
    trainer: pl.Trainer,
    datamodule: SequenceDataModule,
    basket_steps: int | None,
    stopping: ConfiguredEarlyStopping | None,
) -> list[str]:
    """Give ``trainer`` the next-basket schedule of ``datamodule``'s training windows
    (:func:`basket_schedule`; the epochs too, so early stopping's share of the schedule holds),
    and resolve ``stopping``'s automatic options: the best validation checkpoint is kept, every
    epoch validates, the patience is :data:`BASKET_PATIENCE`. Returns the lines to print."""
    batches = math.ceil(len(datamodule.train_dataloader()) / max(1, trainer.world_size))
    steps, epochs, why = basket_schedule(
        batches, basket_steps, trainer.max_steps, trainer.max_epochs
    )
    trainer.fit_loop.max_epochs = epochs
    trainer.fit_loop.epoch_loop.max_steps = steps
    if stopping is not None and stopping.options["keep"] == "auto":
        trainer.check_val_every_n_epoch = 1  # validation picks the checkpoint: every epoch
    return [why] + resolve_stopping(
        stopping, "the next basket, as the test", picks=True, patience=BASKET_PATIENCE
    )


def resolve_stopping(
    stopping: ConfiguredEarlyStopping | None,
    target: str,
    picks: bool,
    patience: int = PATIENCE,
) -> list[str]:
    """Settle ``stopping``'s automatic options (:meth:`ConfiguredEarlyStopping.resolve`: the best
    validation kept where validation ``picks``, a ``None`` patience ``patience``) and return the
    line to print: what validation scores (``target``), what is kept, when the run stops; none
    where nothing was automatic and validation picks nothing."""
    if stopping is None:
        return []
    automatic = stopping.options["keep"] == "auto" or stopping.options["patience"] is None
    stopping.resolve(picks, patience)
    if not (picks or stopping.options["keep"] == "auto"):
        return []
    if stopping.keep == "last":
        return [f"early stopping: off (validation on {target}); the end of the schedule is kept"]
    how = "auto" if automatic else "early_stopping"
    return [
        f"early stopping: {stopping.monitor} on {target}, the best validation kept; stop after "
        f"{stopping.patience} validations without gain, none before {stopping.min_share:.0%} of "
        f"the schedule ({how})"
    ]


def resolve_positives(option: str, config: EncoderConfig) -> str:
    """``model.basket_positives``: ``"auto"`` is ``"all"`` under the basket protocol, else
    ``"one"``; any other value kept."""
    if option != "auto":
        return option
    return "all" if config.baskets else "one"


def describe_baskets(positives: str, config: EncoderConfig) -> str:
    """The line a fit with the repeat head prints (``""`` without it): whether the head reads
    purchase counts, and under the basket protocol what a basket trains on (both resolved)."""
    counts = bool(config.repeat_counts)
    reads = (
        f"{'reads' if counts else 'does not read'} purchase counts "
        f"(model.encoder.repeat_counts {str(counts).lower()})"
    )
    if not config.baskets:
        return f"repeat head: {reads}" if config.repeat_head else ""
    return (
        f"next baskets: trains on {'every item' if positives == 'all' else 'one item'} of the "
        f"next basket (model.basket_positives {positives}); the repeat head {reads}"
    )


def check_basket_options(options: dict[str, Any], encoder: EncoderConfig) -> None:
    """Refuse, in one line, a basket or purchase-count option that cannot apply."""
    positives = options.get("basket_positives", "one")
    if positives not in ("one", "all", "auto"):
        raise SeqencError(
            f"model.basket_positives must be 'one', 'all' or 'auto', got {positives!r}"
        )
    if positives == "all" and not encoder.baskets:
        raise SeqencError(
            "model.basket_positives all trains on next baskets: it needs the basket protocol "
            "(data.baskets true, or null on a log whose newest events share their time)"
        )
    steps = options.get("basket_steps")
    check_count(steps, "model.basket_steps", optional=True)
    if steps is not None and not (encoder.baskets and not options.get("labels")):
        why = "it sets a next-basket fit's schedule, and the basket protocol is off"
        raise ignored("model.basket_steps", steps, why + " or a label head trains (label_steps)")
    if encoder.repeat_counts and not encoder.repeat_head:
        raise SeqencError(
            "model.encoder.repeat_counts reads the repeat head's purchases: it needs "
            "model.encoder.repeat_head true (or null on a log with repeats)"
        )
