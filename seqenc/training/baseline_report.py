"""The trivial baselines of a next-event fit's test split, computed after its test and printed
beside the model's figures (:mod:`seqenc.training.baselines` computes them)."""

from __future__ import annotations

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import Callback

from seqenc.training.baselines import Reduce, baseline_metrics, baseline_names
from seqenc.training.module import SeqencModule


class Baselines(Callback):
    """After ``test``, the trivial baselines on the same split and metrics: popularity, "repeat
    the most recent distinct items" (its HR@1: repeat the last item), "the entity's most frequent
    items" and, with timestamps, its purchases decayed by their age
    (:mod:`seqenc.training.baselines`), printed beside the model's figures and logged as
    ``baseline/<name>/<metric>``, with the share of repeated targets: on the splits the module
    was handed (:class:`~seqenc.data.split.FitSplits`).

    When every process reads the whole log, the first computes them alone; when each holds its
    own entities (``data.shard_entities``), each computes on its own and the sums are reduced,
    so the figures are those of every entity, as the model's are."""

    def on_test_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        # a next-event model handed its data's splits (a label fit tests its labels)
        if not isinstance(pl_module, SeqencModule) or pl_module.splits is None:
            return
        sharded = trainer.world_size > 1 and pl_module.splits.sharded
        if not (sharded or trainer.is_global_zero):
            return
        train, _, test = pl_module.splits.read()
        values = baseline_metrics(
            train,
            test,
            pl_module.hparams.ks,
            pl_module.filter_seen,
            n_items=pl_module.spec.n_items,
            reduce=_summed_over(trainer) if sharded else None,
        )
        if trainer.is_global_zero:
            names = baseline_names(test)
            _report(trainer, values, pl_module.filter_seen, names, test.target_ends is not None)
            for logger in trainer.loggers:
                logger.log_metrics({f"baseline/{k}": v for k, v in values.items()})


def _summed_over(trainer: pl.Trainer) -> Reduce:
    """A tensor summed over the run's processes (on the device their collectives use)."""
    strategy = trainer.strategy

    def reduce(value: torch.Tensor) -> torch.Tensor:
        return strategy.reduce(value.to(strategy.root_device), reduce_op="sum").cpu()

    return reduce


def _report(
    trainer: pl.Trainer,
    values: dict[str, float],
    filter_seen: bool,
    baselines: tuple[str, ...],
    baskets: bool,
) -> None:
    """Print the model's test figures, the baselines' below them and the model's intervals."""
    model = {k: float(v) for k, v in trainer.callback_metrics.items() if k.startswith("test/")}
    names = [k for k in model if k != "test/repeat_targets"]
    rows = [("model", [model[k] for k in names])] + [
        (f"baseline/{b}", [values[f"{b}/{k.removeprefix('test/')}"] for k in names])
        for b in baselines
    ]
    width = max(len(k) for k in names)
    kind = "target baskets (items)" if baskets else "targets"
    print(
        f"test split: {int(values['n_targets'])} {kind}, {values['share_repeat_targets']:.1%} "
        f"repeat an item of their history; seen items {'filtered' if filter_seen else 'kept'}"
    )
    print(f"{'':<20}" + "".join(f"{k.removeprefix('test/'):>{width}}" for k in names))
    for label, numbers in rows:
        print(f"{label:<20}" + "".join(f"{v:>{width}.4f}" for v in numbers))
    half = trainer.callback_metrics
    if f"test_ci95/{names[0].removeprefix('test/')}" in half:
        cells = [float(half[f"test_ci95/{k.removeprefix('test/')}"]) for k in names]
        print(f"{'±, 0.95 interval':<20}" + "".join(f"{v:>{width}.4f}" for v in cells))
