"""Early stopping as the seqenc command configures it."""

from types import SimpleNamespace

import pytest
import torch

from seqenc.training.callbacks import ConfiguredEarlyStopping


def trainer(metrics: dict) -> SimpleNamespace:
    return SimpleNamespace(
        callback_metrics=metrics, should_stop=False, current_epoch=9, max_epochs=10,
        fast_dev_run=False, global_rank=0, world_size=1,
        strategy=SimpleNamespace(reduce_boolean_decision=lambda decision, all=True: decision),
    )  # fmt: skip


def test_no_check_before_anything_was_validated():
    """A run that ends inside its first epoch (max_steps) has no validation metric yet: the
    check waits instead of failing; once the metric exists the usual rule applies."""
    stopping = ConfiguredEarlyStopping(monitor="val/ndcg@10", mode="max", patience=0)
    stopping._run_early_stopping_check(trainer({"train/loss": torch.tensor(1.0)}))
    with pytest.raises(RuntimeError, match="not available"):
        ConfiguredEarlyStopping(monitor="val/ndcg@10", mode="max")._validate_condition_metric(
            {"train/loss": torch.tensor(1.0)}
        )
    validated = trainer({"val/ndcg@10": torch.tensor(0.5)})
    stopping._run_early_stopping_check(validated)
    assert stopping.best_score == 0.5
