"""Stacked feature blocks (seqenc.evaluate.stacking): a training row's score never saw its label,
the scores against a loop written with scikit-learn's own calls, the probe and compare with a
stacked block, its columns computed once per fold for every probe."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from seqenc import SeqencError
from seqenc.evaluate import compare, cv_folds, probe, probes, stacking
from seqenc.evaluate.estimators import estimator, fit_estimator
from seqenc.evaluate.stacking import FLOOR, cross_fitted
from seqenc.scores import prediction_scores

fitted = cross_fitted  # the function itself, while a test counts its calls

sklearn = pytest.importorskip("sklearn")


def blocks(n: int = 300, noise: int = 60, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Three informative columns and ``noise`` columns of noise."""
    rng = np.random.default_rng(seed)
    return rng.normal(size=(n, 3)), rng.normal(size=(n, noise))


def test_a_training_rows_score_comes_from_a_fit_without_it():
    strong, _ = blocks()
    y = strong @ np.array([1.0, -0.5, 0.25]) + np.random.default_rng(1).normal(size=len(strong))
    new = np.random.default_rng(2).normal(size=(7, 3))
    inside, scores = cross_fitted(strong, y, new, "regression")
    assert inside.shape == (len(strong), 1) and scores.shape == (7, 1)
    # KFold does not read the labels: moving row i's label moves no score of row i.
    for row in (0, 17):
        moved = y.copy()
        moved[row] += 100.0
        inside_moved, scores_moved = cross_fitted(strong, moved, new, "regression")
        np.testing.assert_allclose(inside_moved[row], inside[row], rtol=0, atol=1e-9)
        assert np.abs(inside_moved - inside).max() > 0.1  # the other rows' fits saw it
        assert np.abs(scores_moved - scores).max() > 0.1  # and the fit on every row


def test_binary_scores_are_each_folds_log_odds():
    from sklearn.linear_model import LogisticRegressionCV
    from sklearn.model_selection import StratifiedKFold
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    strong, _ = blocks(200)
    y = (strong[:, 0] + np.random.default_rng(3).normal(size=200) > 0).astype(int)
    new = strong[:9] + 0.1
    inside, scores = cross_fitted(strong, y, new, "binary", seed=4)

    def fitted(rows: np.ndarray):
        inner = StratifiedKFold(3, shuffle=True, random_state=4)
        search = LogisticRegressionCV(
            Cs=[1e-4, 1e-3, 1e-2, 1e-1, 1.0], cv=inner, scoring="neg_log_loss", max_iter=2000
        )
        return make_pipeline(StandardScaler(), search).fit(strong[rows], y[rows])

    expected = np.empty(200)
    for fit_rows, held in StratifiedKFold(5, shuffle=True, random_state=4).split(strong, y):
        expected[held] = fitted(fit_rows).decision_function(strong[held])
    np.testing.assert_allclose(inside[:, 0], expected, rtol=1e-6, atol=1e-6)
    all_rows = fitted(np.arange(200)).decision_function(new)
    np.testing.assert_allclose(scores[:, 0], all_rows, rtol=1e-6, atol=1e-6)


def test_a_class_no_fit_saw_scores_the_floor():
    strong, _ = blocks(120)
    y = np.argmax(strong, axis=1)
    y[7] = 3  # one row of a fourth class: the fit without it never saw that class
    with pytest.warns(UserWarning, match="least populated class"):
        inside, scores = cross_fitted(strong, y, strong[:4], "multiclass")
    assert inside.shape == (120, 4) and scores.shape == (4, 4)
    assert inside[7, 3] == pytest.approx(np.log(FLOOR))
    # the other rows: log-probabilities over the classes their fit saw
    np.testing.assert_allclose(np.exp(inside[8:]).sum(axis=1), 1.0, atol=1e-4)
    assert (np.argmax(inside, axis=1) == y).mean() > 0.8


def table(strong: np.ndarray, noise: np.ndarray) -> pd.DataFrame:
    return pd.DataFrame(
        {"id": np.arange(len(strong))}
        | {f"a{j}": strong[:, j] for j in range(strong.shape[1])}
        | {"embedding": list(noise)}
    )


def test_a_stacked_noise_block_costs_the_probe_less_than_its_columns():
    strong, noise = blocks(240, noise=120, seed=5)
    y = strong @ np.array([1.0, 0.7, -0.5]) + np.random.default_rng(6).normal(size=240) > 0
    labels = pd.DataFrame({"id": np.arange(240), "y": y.astype(int)})
    features = table(strong, noise)
    kw = {"label_column": "y", "on": ["id"], "seed": 0}
    alone = probe(features.drop(columns="embedding"), labels, **kw).mean("roc_auc")
    concat = probe(features, labels, **kw).mean("roc_auc")
    stacked = probe(features, labels, stack=["embedding"], **kw)
    assert stacked.n_features == 3 + 120
    assert stacked.mean("roc_auc") > concat + 0.01
    assert stacked.mean("roc_auc") > alone - 0.02
    # A block that carries the signal is read through its score.
    informative = probe(table(noise[:, :3], strong), labels, stack=["embedding"], **kw)
    assert informative.mean("roc_auc") > alone - 0.02


def test_compare_stacks_the_table_paired_with_the_reference():
    strong, noise = blocks(150, noise=40, seed=7)
    y = (strong[:, 0] > 0).astype(int)
    labels = pd.DataFrame({"id": np.arange(150), "y": y})
    features = table(strong, noise)
    sets = {"aggregates": features.drop(columns="embedding"), "emb": features[["id", "embedding"]]}
    kw = {"on": ["id"], "n_splits": 3, "reference": "aggregates"}
    stacked = compare(labels, "y", sets, **kw).set_index("features")
    concat = compare(labels, "y", sets, stack=False, **kw).set_index("features")
    by_hand = probe(features, labels, label_column="y", on=["id"], n_splits=3)
    assert concat.loc["aggregates+emb", "roc_auc_mean"] == pytest.approx(by_hand.mean("roc_auc"))
    once = probe(features, labels, label_column="y", on=["id"], n_splits=3, stack=["embedding"])
    assert stacked.loc["aggregates+emb", "roc_auc_mean"] == pytest.approx(once.mean("roc_auc"))
    for name in ("aggregates", "emb"):  # single tables are not changed by stacking
        assert stacked.loc[name, "roc_auc_mean"] == concat.loc[name, "roc_auc_mean"]


def test_stack_refuses_what_it_cannot_read():
    strong, noise = blocks(60, noise=4)
    y = (strong[:, 0] > 0).astype(int)
    labels = pd.DataFrame({"id": np.arange(60), "y": y})
    with pytest.raises(SeqencError, match=r"stack names \['emb'\], not columns of the features"):
        probe(table(strong, noise), labels, label_column="y", on=["id"], stack=["emb"])
    with pytest.raises(SeqencError, match="give features and labels as tables"):
        probe(strong, y, stack=["embedding"])


def test_the_stacked_columns_are_computed_once_per_fold_for_every_probe(monkeypatch):
    strong, noise = blocks(90, noise=6, seed=8)
    y = (strong[:, 0] + noise[:, 0] > 0).astype(int)
    labels = pd.DataFrame({"id": np.arange(90), "y": y})
    calls = []
    monkeypatch.setattr(
        stacking, "cross_fitted", lambda *a, **k: calls.append(1) or fitted(*a, **k)
    )
    kw = {"label_column": "y", "on": ["id"], "n_splits": 3, "stack": ["embedding"]}
    both = probes(table(strong, noise), labels, models=("linear", "trees"), **kw)
    assert len(calls) == 3  # one per fold, not one per fold and probe
    # Each probe's fold scores equal a by-hand fold: the block's cross-fitted scores beside the
    # other columns, then the probe fitted on the training rows.
    task, codes, _, splits = cv_folds(y, n_splits=3)
    for model, result in both.items():
        for k, (train, test) in enumerate(splits):
            inside, new = fitted(noise[train], codes[train], noise[test], task, 0)
            search = estimator(task, model, 3, 0)[1]
            fit_estimator(search, np.hstack([strong[train], inside]), codes[train])
            proba = search.predict_proba(np.hstack([strong[test], new]))
            expected = prediction_scores(task, codes[test], proba, search.classes_)
            for metric, value in expected.items():
                assert result.folds[metric][k] == pytest.approx(value, abs=1e-12)
