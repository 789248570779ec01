"""``model.loss: auto``: which catalogue term resolves for which catalogue size, and the line the
fit prints about it (hand-written expectations, and real fits' printed lines and saved losses)."""

from __future__ import annotations

import pytest
import torch

import seqenc.training.loss_choice as loss_choice
from seqenc.training.loss_choice import SAMPLED_FROM_ITEMS, loss_line, resolve_loss, what_trains
from tests.tiny import catalogue_fit


@pytest.mark.parametrize(
    ("n_items", "expected"),
    [
        (20, "ce"),
        (3_706, "ce"),  # MovieLens-1M
        (9_999, "ce"),
        (10_000, "sampled_softmax"),
        (12_101, "sampled_softmax"),  # Amazon Beauty
        (23_812, "sampled_softmax"),  # Ta-Feng's products
        (3_000_000, "sampled_softmax"),
    ],
)
def test_auto_resolves_by_the_catalogue_size(n_items, expected):
    loss, why = resolve_loss("auto", n_items)
    assert loss == expected
    sign = ">=" if expected == "sampled_softmax" else "<"
    assert why.startswith(f"auto: {n_items:,} items {sign} 10,000: ")
    other = "ce" if expected == "sampled_softmax" else "sampled_softmax"
    assert why.endswith(
        f"set model.loss {other} to force the {'exact' if other == 'ce' else 'sampled'} one"
    )


@pytest.mark.parametrize(
    ("trains", "words"), [("next_basket", "once per basket"), ("masked", "masked")]
)
def test_where_it_was_not_measured_the_threshold_stays_at_50000(trains, words):
    """Next baskets over every item of the basket (the exact normaliser shared by the basket) and
    the masked objective: ``auto`` moves to the sampled term only from 50,000 items."""
    for n_items, expected in (
        (3_706, "ce"),
        (23_812, "ce"),
        (49_999, "ce"),
        (50_000, "sampled_softmax"),
    ):
        loss, why = resolve_loss("auto", n_items, trains)
        assert loss == expected
        sign = ">=" if expected == "sampled_softmax" else "<"
        assert why.startswith(f"auto: {n_items:,} items {sign} 50,000: ")
    assert words in resolve_loss("auto", 23_812, trains)[1]
    assert resolve_loss("sampled_softmax", 20, trains) == ("sampled_softmax", "set by model.loss")


def test_what_the_term_trains():
    assert what_trains("causal", False, "one") == "next_item"
    assert what_trains("causal", True, "one") == "next_item"  # one drawn item per basket
    assert what_trains("causal", True, "all") == "next_basket"
    assert what_trains("masked", False, "one") == "masked"


@pytest.mark.parametrize("name", ["ce", "sampled_softmax", "bce", "gbce"])
def test_a_named_loss_is_kept_at_any_size(name):
    for n_items in (20, 50_000, 3_000_000):
        assert resolve_loss(name, n_items) == (name, "set by model.loss")


def test_the_printed_line_says_what_the_sampled_term_is():
    why = resolve_loss("auto", 23_812)[1]
    assert loss_line("sampled_softmax", why, None, 23_812) == (
        f"loss: sampled_softmax ({why}): each row's window exact, 4,096 shared candidates "
        "(mixed), 10 % of the rows exact, the item table trained from the exact rows"
    )
    # a large catalogue: at most n_negatives / items of the rows (4,096 / 296,000 = 1.38 %)
    assert "1.38 % of the rows exact, the item table trained from the exact rows" in loss_line(
        "sampled_softmax", "set by model.loss", None, 296_000
    )
    given = {"n_negatives": 1024, "own_items": False, "item_gradient": "all_rows"}
    assert loss_line("sampled_softmax", "set by model.loss", given, 23_812) == (
        "loss: sampled_softmax (set by model.loss): each target exact, 1,024 shared candidates "
        "(mixed), 4.3 % of the rows exact, the item table trained from every row"
    )
    no_exact = loss_line("sampled_softmax", "x", {"exact_share": 0, "sampler": "uniform"}, 50)
    assert no_exact.endswith(
        "(uniform), 0 % of the rows exact, the item table trained from every row"
    )
    assert loss_line("ce", "set by model.loss", None, 50) == "loss: ce (set by model.loss)"


@pytest.mark.parametrize(
    ("threshold", "args", "expected"),
    [
        (10, ["--data.baskets", "false"], "sampled_softmax"),
        (SAMPLED_FROM_ITEMS, ["--data.baskets", "false"], "ce"),
        (10, ["--data.baskets", "true"], "ce"),  # every basket item: its own threshold
        (10, ["--data.baskets", "false", "--model.objective", "masked"], "ce"),
    ],
)
def test_a_fit_prints_the_choice_and_saves_it_resolved(
    tmp_path, monkeypatch, caplog, threshold, args, expected
):
    """A real fit on a 20-item log: with the threshold moved below its catalogue the sampled term,
    else the exact one, and the exact one for next baskets and the masked objective (their own
    threshold); the line it logs names it and why, its checkpoint keeps it resolved."""
    monkeypatch.setattr(loss_choice, "SAMPLED_FROM_ITEMS", threshold)
    caplog.set_level("INFO")
    catalogue_fit(tmp_path, "--trainer.max_epochs", "1", *args, daily=True)
    line = next(r.getMessage() for r in caplog.records if r.getMessage().startswith("loss: "))
    n_items = int(line.split("auto: ")[1].split(" items")[0])
    assert 0 < n_items <= 20
    if expected == "sampled_softmax":
        assert line.startswith(f"loss: sampled_softmax (auto: {n_items} items >= 10: ")
        assert line.endswith("the item table trained from the exact rows")
    elif "true" in args or "masked" in args:
        assert line.startswith(f"loss: ce (auto: {n_items} items < 50,000: ")
    else:
        assert line.startswith(f"loss: ce (auto: {n_items} items < {SAMPLED_FROM_ITEMS:,}: ")
    checkpoint = torch.load(next(tmp_path.rglob("*.ckpt")), weights_only=True)
    assert checkpoint["hyper_parameters"]["loss"] == expected
