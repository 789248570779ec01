"""A run resumed from a checkpoint trains on with the catalogue term the checkpoint trained (its
loss, saved resolved, and the options that set what it learns, saved with their defaults), and a
fit says in one line what changes in it: hand-written cases, and real fits resumed."""

from __future__ import annotations

import time

import pytest
import torch

import seqenc.training.loss_choice as loss_choice
from seqenc.errors import SeqencError
from seqenc.model.sampled import ITEM_GRADIENT, N_NEGATIVES
from seqenc.training.loss_choice import recorded_options, resume_loss
from seqenc.training.run_options import check_loss_options
from tests.tiny import catalogue_fit

SAMPLED = {
    "n_negatives": 64,
    "sampler": "mixed",
    "own_items": True,
    "exact_share": None,
    "item_gradient": "all_rows",
}


def test_the_sampled_term_is_saved_with_its_defaults():
    assert recorded_options(
        "sampled_softmax", {"n_negatives": 64, "item_gradient": "all_rows"}
    ) == (SAMPLED)
    assert recorded_options("sampled_softmax", None)["item_gradient"] == ITEM_GRADIENT
    # no exact rows: every row trains the table, what a resumed run's options check accepts
    assert recorded_options("sampled_softmax", {"exact_share": 0})["item_gradient"] == "all_rows"
    assert recorded_options("gbce", None) == {"n_negatives": 256, "t": 0.75}
    # the exact term's options set how it is computed, not what it learns: kept as given
    assert recorded_options("ce", None) is None
    assert recorded_options("ce", {"chunk_size": 8}) == {"chunk_size": 8}


def test_a_resumed_run_keeps_the_checkpoints_term():
    saved = {"loss": "sampled_softmax", "loss_options": SAMPLED}
    # the saved values that are today's defaults are left to them (so checked as defaults)
    moved = {
        "loss": "sampled_softmax",
        "loss_options": {"n_negatives": 64, "item_gradient": "all_rows"},
    }
    for given in ({}, {"loss": "auto"}, {"loss": "sampled_softmax"}):
        assert resume_loss(given, saved) == (moved, "")
    # ``auto`` does not re-resolve a term the checkpoint trained (its threshold may have moved)
    assert resume_loss({"loss": "auto"}, {"loss": "ce", "loss_options": None}) == (
        {"loss": "ce", "loss_options": None},
        "",
    )


def test_what_a_resumed_run_changes_is_said_in_one_line():
    saved = {"loss": "sampled_softmax", "loss_options": SAMPLED}
    options, line = resume_loss({"loss_options": {"n_negatives": 128}}, saved)
    assert options["loss_options"] == {"n_negatives": 128, "item_gradient": "all_rows"}
    assert line == "resume: model.loss_options.n_negatives 128 replaces the checkpoint's 64"
    options, line = resume_loss({"loss": "ce"}, saved)
    assert options == {"loss": "ce", "loss_options": None}
    assert line == "resume: model.loss ce replaces the checkpoint's sampled_softmax"


def test_options_a_checkpoint_does_not_record_are_named():
    """A checkpoint written before the options were saved: today's defaults, said with the
    earlier ones."""
    old = {"loss": "sampled_softmax", "loss_options": {"n_negatives": 64}}
    options, line = resume_loss({}, old)
    assert options["loss_options"] == {"n_negatives": 64}
    assert line == (
        "resume: the checkpoint's sampled_softmax does not record model.loss_options sampler, "
        "own_items, exact_share, item_gradient (written before they were saved): today's defaults "
        f"apply, sampler mixed, own_items True, exact_share auto, item_gradient {ITEM_GRADIENT} "
        "(earlier defaults: item_gradient all_rows; set them to go on with those)"
    )
    line = resume_loss(
        {"loss_options": {"item_gradient": "all_rows"}}, old | {"loss_options": None}
    )[1]
    assert "n_negatives, sampler, own_items, exact_share (" in line
    assert f"n_negatives {N_NEGATIVES}," in line and "earlier defaults: n_negatives 1024;" in line


def _fit(tmp_path, *args: str) -> tuple[str, dict]:
    """A fit on a 20-item log: what it printed and its last checkpoint."""
    out = catalogue_fit(tmp_path, "--data.baskets", "false", *args)
    run = out.strip().splitlines()[-1].removeprefix("bundle: ").rsplit("/bundle", 1)[0]
    time.sleep(1)  # the next run gets its own folder (named by the second)
    last = tmp_path / run / "checkpoints" / "last.ckpt"
    return out, torch.load(last, weights_only=True)


def test_a_real_fit_resumes_with_its_term(tmp_path, monkeypatch, caplog):
    """Trained with the sampled term, ``all_rows`` and ``auto`` from a lowered threshold: resumed
    with ``auto`` under today's threshold (the exact term here), it trains on with the sampled term
    and ``all_rows`` (the fit's loss line, the new checkpoint), saying nothing; the same
    checkpoint with its options stripped (an older seqenc's) says what it takes instead."""
    caplog.set_level("INFO")
    monkeypatch.setattr(loss_choice, "SAMPLED_FROM_ITEMS", 10)
    first = ("--model.loss_options", '{"item_gradient": "all_rows"}')  # 4,096 candidates of 20
    hp = _fit(tmp_path, "--trainer.max_epochs", "1", *first)[1]
    hp = hp["hyper_parameters"]
    assert (hp["loss"], hp["loss_options"]["item_gradient"]) == ("sampled_softmax", "all_rows")
    monkeypatch.undo()
    ckpt = next(tmp_path.rglob("last.ckpt"))
    caplog.clear()
    args = ("--trainer.max_epochs", "2", "--model.loss", "auto", "--ckpt_path", str(ckpt))
    out, again = _fit(tmp_path, *args)
    line = next(r.getMessage() for r in caplog.records if r.getMessage().startswith("loss: "))
    assert line.endswith("4,096 shared candidates (mixed), 10 % of the rows exact, the item table "
                         "trained from every row")  # fmt: skip
    assert again["epoch"] == 1 and "resume: " not in out
    resumed = again["hyper_parameters"]
    assert (resumed["loss"], resumed["loss_options"]) == (hp["loss"], hp["loss_options"])
    old = torch.load(ckpt, weights_only=True)
    old["hyper_parameters"]["loss_options"] = None
    torch.save(old, tmp_path / "old.ckpt")
    out, _ = _fit(tmp_path, *args[:2], "--ckpt_path", "old.ckpt")
    assert "resume: the checkpoint's sampled_softmax does not record model.loss_options " in out


def test_a_checkpoints_recorded_defaults_pass_the_options_check_on_a_small_catalogue():
    """The defaults a checkpoint records are what the loss does without them, also where the
    catalogue is smaller than the default candidates; a value given above it is refused."""
    check_loss_options("sampled_softmax", recorded_options("sampled_softmax", None), 100)
    with pytest.raises(SeqencError, match="n_negatives is 5000, more than the 100 items"):
        check_loss_options("sampled_softmax", {"n_negatives": 5000}, 100)
