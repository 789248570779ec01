"""The label path's families (issue 54): label tables of one row, one class per split, float
classes; the one task rule, the one scorer, the one hold-out, and the label options refused in one
line before anything prints."""

from __future__ import annotations

import contextlib
import io

import numpy as np
import pandas as pd
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from tiny import SCHEMA, tiny_events

from seqenc.cli import main
from seqenc.data.labels import MAX_AUTO_CLASSES, hold_out, infer_task, labelled_view, read_labels
from seqenc.data.sequences import build_sequences
from seqenc.errors import SeqencError
from seqenc.evaluate.probe import probe_task
from seqenc.finetune.loss import label_score
from seqenc.scores import class_scores, prediction_scores, r2

FIT = [
    "--data.path", "events.parquet",
    "--data.schema.categorical", "[event_type, channel]",
    "--data.history_len", "16",
    "--model.encoder.d_model", "16",
    "--model.encoder.n_layers", "1",
    "--model.label_steps", "2",
    "--trainer.enable_progress_bar", "false",
    "--trainer.enable_model_summary", "false",
]  # fmt: skip
EVENTS = tiny_events(12)
STORE = build_sequences(EVENTS, SCHEMA)[0]
IDS = EVENTS["entity_id"].unique()


def test_one_task_rule_with_its_reason_for_a_fit_and_a_probe():
    whole = np.arange(97, dtype=float)  # whole-number floats, many values: a number
    assert infer_task(whole) == (
        "regression",
        "97 distinct whole numbers, more than 20; a classification task set explicitly makes "
        "them classes",
    )
    assert infer_task(np.array([0.0, 1.0, 1.0])) == (
        "classification",
        "2 distinct whole numbers, at most 20",
    )
    assert infer_task(np.arange(MAX_AUTO_CLASSES))[0] == "classification"
    assert infer_task(np.array([0.5, 1.0]))[0] == "regression"
    assert infer_task(np.array(["a", "b", "a"], dtype=object))[0] == "classification"
    assert infer_task(np.array([True, False]))[0] == "classification"
    # the probe names the same rule's answer, split into two or more classes
    assert probe_task(whole) == ("regression", f"regression ({infer_task(whole)[1]})")
    assert probe_task(np.array([3, 1, 2]))[0] == "multiclass"
    assert probe_task(np.array([3, 1]))[0] == "binary"


@settings(max_examples=40, deadline=None)
@given(
    classes=st.lists(st.integers(0, 3), min_size=1, max_size=len(IDS)),
    regression=st.booleans(),
    share=st.sampled_from([0.01, 0.1, 0.5, 0.9]),
)
def test_the_hold_out_holds_what_its_score_needs_or_refuses_in_one_line(classes, regression, share):
    """Any label table: either both sides hold every class (regression: the held-out rows two
    different numbers, the training rows one at least), or one line before training."""
    values = np.asarray(classes, dtype=float) + (0.5 if regression else 0.0)
    labels = pd.DataFrame({"entity_id": IDS[: len(values)], "y": values})
    task = "regression" if regression else "classification"
    try:
        table = read_labels(labels, "entity_id", "y", task=task)
        train, val, why = hold_out(labelled_view(STORE, table), share, table.spec)
    except SeqencError as e:
        assert "\n" not in str(e)
        return
    if regression:
        assert len(train.targets) >= 1 and len(np.unique(val.targets)) >= 2
        r2(val.targets, np.zeros(len(val.targets)))  # defined
    else:
        assert set(train.targets) == set(val.targets) == set(range(len(table.spec["classes"])))
        class_scores(val.targets, np.full((len(val.targets), len(set(classes))), 0.5))  # defined
    assert not set(train.view.rows) & set(val.view.rows)  # entities on one side only
    assert f"{len(val.targets):,} validation rows" in why


@settings(max_examples=40, deadline=None)
@given(
    y=st.lists(st.integers(0, 2), min_size=2, max_size=40),
    scores=st.lists(st.integers(0, 4), min_size=40, max_size=40),
)
def test_the_scorer_is_sklearns_where_defined_and_refuses_where_not(y, scores):
    from sklearn.metrics import r2_score, roc_auc_score

    y = np.asarray(y)
    raw = np.asarray(scores[: len(y)], dtype=float)
    probabilities = np.stack([4 - raw, raw], axis=1) / 4  # tied scores
    binary = (y == 1).astype(int)
    if len(np.unique(binary)) < 2:
        with pytest.raises(SeqencError, match="ROC-AUC is undefined"):
            class_scores(binary, probabilities)
    else:
        expected = roc_auc_score(binary, probabilities[:, 1])
        assert class_scores(binary, probabilities)["roc_auc"] == pytest.approx(expected)
    if len(np.unique(y)) < 2:
        with pytest.raises(SeqencError, match="R² is undefined"):
            r2(y, raw)
    else:
        assert r2(y, raw) == pytest.approx(r2_score(y, raw))
    # held-out classes the training rows never had score as negatives of every column
    got = prediction_scores("multiclass", np.array([0, 1, 7]), np.eye(3)[[0, 1, 2]], [0, 1, 2])
    assert got["roc_auc"] == 1.0 and got["accuracy"] == pytest.approx(2 / 3)


def test_a_one_row_validation_batch_scores():
    """A held-out set of one row is refused (one class), never a traceback on a 0-d array."""
    with pytest.raises(SeqencError, match="undefined on 1 row"):
        label_score("classification", torch.zeros(1, 2), torch.tensor([1]))
    with pytest.raises(SeqencError, match="undefined on 1 row"):
        label_score("regression", torch.zeros(1, 1), torch.tensor([0.5]))


def _fit(tmp_path, monkeypatch, capsys, labels: pd.DataFrame, *args: str) -> tuple[int, str]:
    """``seqenc fit`` on the tiny log with ``labels``: its exit code and everything it printed
    (its info lines, which pytest's log capture takes, first)."""
    EVENTS.drop(columns="account_type").to_parquet(tmp_path / "events.parquet")
    labels.to_parquet(tmp_path / "labels.parquet")
    monkeypatch.chdir(tmp_path)
    code = 0
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        try:
            main(["fit", *FIT, "--data.labels", "labels.parquet", *args])
        except SystemExit as e:
            code = e.code
    captured = capsys.readouterr()
    return code, captured.err + out.getvalue() + captured.out


@pytest.mark.parametrize("values", [[0, 1, 0, 1, 0], [1.5, 2.5, 3.0, 0.5, 7.0]])
def test_a_five_row_label_table_trains_and_scores(tmp_path, monkeypatch, capsys, caplog, values):
    """Was a 70-line traceback at the first validation (one held-out row)."""
    labels = pd.DataFrame({"entity_id": IDS[:5], "y": values})
    code, printed = _fit(tmp_path, monkeypatch, capsys, labels, "--data.label_column", "y")
    printed = caplog.text + printed
    assert code == 0 and "Traceback" not in printed
    task = "regression" if isinstance(values[0], float) else "classification"
    assert f"label task: {task} (" in printed
    assert "3 training and 2 validation rows" in printed
    assert "bundle: " in printed


@pytest.mark.parametrize(
    "labels, args, message",
    [
        (  # whole-number float labels as classes: a class of one entity cannot be on both sides
            pd.DataFrame({"entity_id": IDS, "y": np.arange(len(IDS), dtype=float)}),
            ["--data.label_task", "classification"],
            "labels: class 0.0 is the label of too few entities",
        ),
        (
            pd.DataFrame({"entity_id": IDS, "y": np.linspace(0, 1, len(IDS))}),
            ["--model.class_weights", "[1.0, 2.0]"],
            "model.class_weights would be ignored: the label is a number (regression), it has "
            "no classes to weigh; drop it (got [1.0, 2.0])",
        ),
        (
            pd.DataFrame({"entity_id": IDS, "y": np.arange(len(IDS)) % 2}),
            ["--model.class_weights", "[1.0, .inf]"],
            "2 weights expected (classes [0, 1]), each positive and finite in float32",
        ),
        (
            pd.DataFrame({"entity_id": IDS, "y": np.arange(len(IDS)) % 2}),
            ["--model.label_steps", "0"],
            "model.label_steps must be an integer >= 1",
        ),
    ],
)
def test_label_failures_are_one_line_before_anything_prints(
    tmp_path, monkeypatch, capsys, labels, args, message
):
    code, printed = _fit(tmp_path, monkeypatch, capsys, labels, "--data.label_column", "y", *args)
    lines = printed.strip().splitlines()
    assert code == 1 and len(lines) == 1 and message in lines[0]


def test_label_options_without_labels_are_one_line(tmp_path, monkeypatch, capsys):
    EVENTS.to_parquet(tmp_path / "events.parquet")
    monkeypatch.chdir(tmp_path)
    for option, value, got in (("label_steps", "5", "5"), ("class_weights", "none", "'none'")):
        with pytest.raises(SystemExit) as info:
            main(["fit", *FIT[:-6], f"--model.{option}", value])
        err = capsys.readouterr().err.strip().splitlines()
        assert info.value.code == 1 and len(err) == 1
        assert f"model.{option} would be ignored" in err[0] and "no label table" in err[0]
        assert err[0].endswith(f"; drop it (got {got})")
