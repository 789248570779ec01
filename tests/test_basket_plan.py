"""The next-basket schedule (issue 56): its length from the log, validation on the basket metric
that picks the checkpoint, and early stopping where a hand-made validation curve says."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from seqenc.cli import main
from seqenc.commands.model import fit_model
from seqenc.data.schema import EventSchema
from seqenc.data.sequences import build_sequences
from seqenc.data.spec import DataSpec
from seqenc.data.synthetic import generate_events
from seqenc.errors import SeqencError
from seqenc.model.encoder import EncoderConfig
from seqenc.training.basket_plan import (
    BASKET_EPOCHS,
    BASKET_PATIENCE,
    MAX_BASKET_STEPS,
    MIN_BASKET_STEPS,
    basket_schedule,
    describe_baskets,
)
from seqenc.training.callbacks import PATIENCE, ConfiguredEarlyStopping
from seqenc.training.epochs import whole_epochs
from seqenc.training.metrics import BasketMetrics, RankingMetrics
from seqenc.training.module import SeqencModule
from seqenc.training.run_options import REPEAT_SHARE, resolve_encoder

# a validation curve that peaks at epoch 2, dips for two epochs, then would climb again
CURVE = [0.10, 0.20, 0.30, 0.25, 0.28, 0.29, 0.50, 0.60]


def naive_stop(curve: list[float], patience: int, min_share: float, epochs: int) -> int:
    """The epoch after which a run stops: ``patience`` validations without a strict gain on the
    best so far, not before ``min_share`` of ``epochs`` (else the last epoch)."""
    best, wait = -math.inf, 0
    for epoch, value in enumerate(curve[:epochs]):
        best, wait = (value, 0) if value > best else (best, wait + 1)
        if wait >= patience and epoch + 1 >= min_share * epochs:
            return epoch
    return epochs - 1


@pytest.mark.parametrize(
    ("batches", "given", "max_steps", "max_epochs", "steps", "epochs"),
    [
        (108, None, -1, None, BASKET_EPOCHS * 108, BASKET_EPOCHS),  # Ta-Feng's shape
        (7, None, -1, None, 203, 29),  # a small log: at least MIN_BASKET_STEPS, whole epochs
        (600, None, -1, None, 1800, 3),  # a large one: at most MAX_BASKET_STEPS, whole epochs
        (2500, None, -1, None, 2500, 1),  # ... one whole epoch where one is longer
        (108, None, 2000, 40, 540, 5),  # clicks.yaml's caps do not bind
        (108, None, 500, None, 432, 4),  # a cap inside an epoch ends at the last whole one
        (108, None, 216, None, 216, 2),  # ... at a whole epoch itself
        (108, None, 50, None, 50, 1),  # ... unless it is below one epoch
        (3, None, -1, 8, 24, 8),  # trainer.max_epochs caps it too
        (108, 1000, 500, 2, 1000, 10),  # model.basket_steps sets it exactly
    ],
)
def test_the_schedule_is_sized_from_the_log(batches, given, max_steps, max_epochs, steps, epochs):
    # the cases above assume these bounds
    assert (BASKET_EPOCHS, MIN_BASKET_STEPS, MAX_BASKET_STEPS) == (5, 200, 2000)
    got = basket_schedule(batches, given, max_steps, max_epochs)
    assert got[:2] == (steps, epochs)
    assert got[2].startswith(f"basket schedule: {steps:,} steps = {epochs} epoch")


@settings(max_examples=200)
@given(
    batches=st.integers(1, 3000),
    epochs=st.integers(1, 60),
    low=st.integers(1, 500),
    ratio=st.integers(2, 12),
)
def test_whole_epochs_is_the_nearest_count_within_the_bounds(batches, epochs, low, ratio):
    """Against a search: of the whole epoch counts whose steps lie within [low, high], the one
    nearest to the epochs asked for; one epoch where none fits (an epoch longer than high)."""
    high = ratio * low
    inside = [k for k in range(1, high + 1) if low <= k * batches <= high]
    expected = min(inside, key=lambda k: abs(k - epochs)) if inside else 1
    assert whole_epochs(batches, epochs, low, high) == expected
    assert inside or batches > high


def test_auto_keeps_the_best_only_where_validation_asks_what_the_test_asks():
    for picks, keep, patience in ((True, "best", BASKET_PATIENCE), (False, "last", PATIENCE)):
        stopping = ConfiguredEarlyStopping(monitor="val/ndcg@10", mode="max", keep="auto")
        assert stopping.patience == PATIENCE  # before the fit resolves it
        stopping.resolve(picks, BASKET_PATIENCE if picks else PATIENCE)
        assert (stopping.keep, stopping.patience) == (keep, patience)
    given = ConfiguredEarlyStopping(monitor="val/ndcg@10", patience=5, keep="last")
    given.resolve(True, BASKET_PATIENCE)
    assert (given.keep, given.patience) == ("last", 5)  # what the config sets stays
    with pytest.raises(SeqencError, match="early_stopping.keep must be best, last or auto"):
        ConfiguredEarlyStopping(monitor="val/ndcg@10", keep="first")


def scripted_validation(monkeypatch, metrics_class: type) -> None:
    """Validation logs :data:`CURVE` as its NDCG@10 at each epoch (its other figures as
    computed, by a ``metrics_class``); the test logs what it computes."""
    real = SeqencModule._log_metrics

    def log(self, stage, metrics):
        if stage != "val":
            return real(self, stage, metrics)
        assert isinstance(metrics, metrics_class)
        values = metrics.compute() | {"ndcg@10": torch.tensor(CURVE[self.current_epoch])}
        metrics.reset()
        self.log_dict({f"val/{k}": v for k, v in values.items()})

    monkeypatch.setattr(SeqencModule, "_log_metrics", log)


def fit(tmp_path, monkeypatch, capsys, baskets: str, epochs: int) -> tuple[list[str], Path]:
    """A fit on a day-stamped synthetic log (``keep auto``, validation every 5th epoch as
    clicks.yaml sets it): its printed lines and its run folder."""
    events = generate_events(60, n_items=30, seed=1, max_events=40)
    events = events.assign(timestamp=events["timestamp"].dt.floor("D"))
    events.to_parquet(tmp_path / "events.parquet")
    monkeypatch.chdir(tmp_path)
    main(
        [
            "fit", "--data.path", "events.parquet", "--data.baskets", baskets,
            "--trainer.enable_progress_bar", "false", "--trainer.enable_model_summary", "false",
            "--data.history_len", "16", "--model.encoder.d_model", "16",
            "--trainer.max_epochs", str(epochs), "--early_stopping.keep", "auto",
            "--trainer.check_val_every_n_epoch", "1" if baskets == "false" else "5",
        ]
    )  # fmt: skip
    lines = capsys.readouterr().out.splitlines()
    checkpoint = next(line for line in lines if line.startswith("checkpoint: ")).split(": ")[1]
    return lines, Path(checkpoint)


def test_a_basket_fit_stops_where_the_validation_curve_says(tmp_path, monkeypatch, capsys):
    """Under the basket protocol validation scores the basket metric (the test's), every epoch
    (clicks.yaml's every 5th is for runs that keep their end), the best validation checkpoint is
    tested, and the run stops after BASKET_PATIENCE validations without gain once half of the
    schedule has run: where :func:`naive_stop` says on :data:`CURVE`."""
    scripted_validation(monkeypatch, BasketMetrics)
    lines, checkpoint = fit(tmp_path, monkeypatch, capsys, "true", len(CURVE))
    stop = naive_stop(CURVE, BASKET_PATIENCE, 0.5, len(CURVE))
    assert 0 < stop < len(CURVE) - 1  # the curve stops the run early
    metrics = pd.read_csv(checkpoint.parent.parent / "metrics.csv")
    assert metrics.dropna(subset=["val/ndcg@10"])["epoch"].tolist() == list(range(stop + 1))
    best = max(range(stop + 1), key=CURVE.__getitem__)
    assert checkpoint.name == f"best-epoch={best}.ckpt"
    assert torch.load(checkpoint, weights_only=True)["epoch"] == best
    assert metrics["test/recall@10"].notna().sum() == 1  # the basket metrics, tested once
    assert any(line.startswith("basket schedule: ") and "capped by trainer.max_epochs" in line
               for line in lines)  # fmt: skip
    assert (
        f"early stopping: val/ndcg@10 on the next basket, as the test, the best validation kept; "
        f"stop after {BASKET_PATIENCE} validations without gain, none before 50% of the "
        "schedule (auto)"
    ) in lines


def test_without_baskets_auto_keeps_the_end_of_the_schedule(tmp_path, monkeypatch, capsys):
    """Off the basket protocol ``keep: auto`` is clicks.yaml's ``last``: the same falling curve
    stops nothing and the last epoch is tested."""
    scripted_validation(monkeypatch, RankingMetrics)
    lines, checkpoint = fit(tmp_path, monkeypatch, capsys, "false", 5)
    assert checkpoint.name == "last.ckpt"
    assert torch.load(checkpoint, weights_only=True)["epoch"] == 4
    metrics = pd.read_csv(checkpoint.parent.parent / "metrics.csv")
    assert metrics.dropna(subset=["val/ndcg@10"])["epoch"].tolist() == [0, 1, 2, 3, 4]
    assert not any(line.startswith("basket schedule") for line in lines)
    assert any(line.startswith("early stopping: off (validation on the event") for line in lines)


def test_basket_steps_without_the_basket_protocol_is_refused(tmp_path, monkeypatch, capsys):
    events = generate_events(30, n_items=20, seed=1, max_events=20)
    events.to_parquet(tmp_path / "events.parquet")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit):
        main(["fit", "--data.path", "events.parquet", "--data.baskets", "false",
              "--model.basket_steps", "100"])  # fmt: skip
    err = capsys.readouterr().err
    assert "model.basket_steps would be ignored" in err and "basket protocol is off" in err


@pytest.mark.parametrize("baskets", [True, False])
@pytest.mark.parametrize("repeats", [0.5, 0.0])
def test_the_next_basket_defaults_follow_the_basket_protocol(baskets, repeats):
    """``basket_positives`` auto trains on every item of the next basket exactly where the basket
    protocol is on, and ``repeat_counts`` null reads purchase counts wherever the repeat head is
    (a log with repeats), baskets or single events; saved resolved. Set values are kept."""
    log = pd.DataFrame(
        {
            "entity_id": ["a"] * 6,
            "item_id": [1, 2, 1, 3, 1, 2],
            "timestamp": pd.to_datetime([1, 1, 2, 2, 3, 3], unit="D", utc=True),
        }
    )
    _, vocabs = build_sequences(log)
    spec = DataSpec(EventSchema(), vocabs, 8, repeats, baskets=baskets)
    module = fit_model(spec, encoder=EncoderConfig(d_model=8))
    head = repeats >= REPEAT_SHARE
    assert module.config.repeat_head == head
    assert module.config.repeat_counts == head
    assert module.hparams.basket_positives == ("all" if baskets else "one")
    assert module.hparams.encoder["repeat_counts"] == head
    # the line the fit prints: how the head reads, wherever it is on (and every basket fit)
    line = describe_baskets(module.hparams.basket_positives, module.config)
    assert line.startswith("next baskets" if baskets else "repeat head" if head else "")
    counts = f"repeat_counts {str(module.config.repeat_counts).lower()})"
    assert line.endswith(counts) == (baskets or head) and bool(line) == (baskets or head)
    if head:
        given = fit_model(
            spec, encoder=EncoderConfig(d_model=8, repeat_counts=False), basket_positives="one"
        )
        assert (given.config.repeat_counts, given.hparams.basket_positives) == (False, "one")
        # a checkpoint written before the field read no counts: resumed, it keeps its weights
        older = {k: v for k, v in module.hparams.encoder.items() if k != "repeat_counts"}
        assert resolve_encoder(older, spec, module.objective).repeat_counts is False
