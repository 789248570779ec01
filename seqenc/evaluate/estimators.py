"""The probes' estimators: a linear model (logistic or ridge regression, scaled, its strength
searched inside the training rows) and gradient-boosted trees (leaf count chosen on a held-out part
of the training rows, trees by early stopping), each with the outer k-fold splitter it is scored
under. scikit-learn is imported only when one is built (``pip install 'seqenc[eval]'``)."""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Literal

import numpy as np

from seqenc.errors import SeqencError

Model = Literal["linear", "trees"]
MODELS = ("linear", "trees")
# Regularisation grids searched inside each training fold (never on its test fold).
C_GRID = (1e-4, 1e-3, 1e-2, 1e-1, 1.0)
ALPHA_GRID = (1e-1, 1.0, 10.0, 100.0, 1000.0)
LEAF_GRID = (15, 63)  # max_leaf_nodes of the tree probe: shallow and deep trees
TREE_HOLDOUT = 0.2  # share of a training fold that scores the tree probe's grid


def sklearn_modules():
    """The scikit-learn modules the probes use; one line naming the extra where it is missing."""
    try:
        import sklearn  # noqa: F401
    except ImportError as e:
        raise SeqencError(
            "seqenc.evaluate.probe needs scikit-learn: pip install 'seqenc[eval]'"
        ) from e
    from sklearn import ensemble, linear_model, metrics, model_selection, pipeline, preprocessing

    return ensemble, linear_model, metrics, model_selection, pipeline, preprocessing


def estimator(task: str, model: str, n_splits: int = 5, seed: int = 0):
    """The outer k-fold splitter and the estimator a probe fits on each training fold, its
    hyperparameters searched inside that fold only. ``"linear"``: standardisation and the
    regularisation strength (``C_GRID`` by an inner 3-fold search for classes, ``ALPHA_GRID`` by
    leave-one-out for ridge). ``"trees"``: ``HistGradientBoostingClassifier`` / ``Regressor``
    with ``max_leaf_nodes`` from ``LEAF_GRID`` chosen on a held-out ``TREE_HOLDOUT`` of the
    training fold, where early stopping also picks the number of trees; the chosen model (fitted
    on the rest of the training fold) predicts."""
    if model not in MODELS:
        raise SeqencError(f"model must be one of {MODELS}, got {model!r}")
    ensemble, linear_model, metrics, model_selection, pipeline, preprocessing = sklearn_modules()
    if task == "regression":
        splitter = model_selection.KFold(n_splits, shuffle=True, random_state=seed)
        holdout = model_selection.ShuffleSplit(1, test_size=TREE_HOLDOUT, random_state=seed)
        # Leave-one-out over the alpha grid in closed form (generalised cross-validation).
        linear = linear_model.RidgeCV(alphas=ALPHA_GRID)
        trees, scoring = ensemble.HistGradientBoostingRegressor, "r2"
    else:
        splitter = model_selection.StratifiedKFold(n_splits, shuffle=True, random_state=seed)
        inner = model_selection.StratifiedKFold(3, shuffle=True, random_state=seed)
        holdout = model_selection.StratifiedShuffleSplit(
            1, test_size=TREE_HOLDOUT, random_state=seed
        )
        # The C grid as one warm-started path per inner fold, scored by log loss.
        linear = linear_model.LogisticRegressionCV(
            Cs=list(C_GRID), cv=inner, scoring="neg_log_loss", max_iter=2000
        )
        trees, scoring = ensemble.HistGradientBoostingClassifier, "neg_log_loss"
    if model == "trees":
        booster = trees(max_iter=500, early_stopping=True, n_iter_no_change=20, random_state=seed)
        return splitter, _HoldoutSearch(booster, LEAF_GRID, holdout, metrics.get_scorer(scoring))
    return splitter, pipeline.make_pipeline(preprocessing.StandardScaler(), linear)


class _HoldoutSearch:
    """The tree probe's search: one booster per ``max_leaf_nodes`` in ``leaves``, each fitted on
    the inner training part of ``split`` (where early stopping picks its number of trees) and
    scored on the held-out part; the best one, as fitted, predicts. Two fits per fold instead of
    a cross-validated grid plus a refit: boosting is the expensive probe."""

    def __init__(self, booster, leaves: Sequence[int], split, scorer) -> None:
        self.booster, self.leaves, self.split, self.scorer = booster, leaves, split, scorer

    def fit(self, x: np.ndarray, y: np.ndarray) -> _HoldoutSearch:
        from sklearn.base import clone

        ((fit_rows, held_out),) = self.split.split(x, y)
        best = -np.inf
        for leaves in self.leaves:
            model = clone(self.booster).set_params(max_leaf_nodes=leaves)
            model.fit(x[fit_rows], y[fit_rows])
            score = self.scorer(model, x[held_out], y[held_out])
            if score > best:
                best, self.model_ = score, model
        self.classes_ = getattr(self.model_, "classes_", None)
        return self

    def predict(self, x: np.ndarray) -> np.ndarray:
        return self.model_.predict(x)

    def predict_proba(self, x: np.ndarray) -> np.ndarray:
        return self.model_.predict_proba(x)


def fit_estimator(search, x: np.ndarray, y: np.ndarray) -> None:
    """Fit a probe on a training fold; one too small for the inner splits is one line."""
    try:
        with warnings.catch_warnings():  # LogisticRegressionCV's API-transition notices (1.8+)
            warnings.simplefilter("ignore", FutureWarning)
            search.fit(x, y)
    except ValueError as e:
        raise SeqencError(
            f"a training fold of {len(y)} rows is too small for the probe's inner splits: "
            f"{' '.join(str(e).split())} (give more label rows or fewer folds)"
        ) from e


INNER_FOLDS = 3  # the linear classifier's inner folds (C_GRID's search)
STACK_FOLDS = 5  # a stacked block's cross-fitting folds (seqenc.evaluate.stacking)
EARLY_STOP_SHARE = 0.1  # the share of a tree fit that its early stopping scores (sklearn's)


def check_fold_sizes(
    y: np.ndarray, task: str, model: Model, splits: list, seed: int, stacked: bool
) -> None:
    """Refuse, before any fit, folds whose training rows are too few for what fits on them: the
    linear probe's inner folds (each class :data:`INNER_FOLDS` times), the tree probe's held-out
    part and early stopping (each class on both sides), a stacked block's :data:`STACK_FOLDS`
    cross-fitting folds and the linear fit inside each; one line naming the fold."""
    _, _, _, model_selection, _, _ = sklearn_modules()
    for k, (train, _) in enumerate(splits):
        rows = y[train]
        try:
            if stacked:
                inner = estimator(task, "linear", STACK_FOLDS, seed)[0]
                for fit_rows, _ in inner.split(np.zeros((len(rows), 1)), rows):
                    _linear_fits(rows[fit_rows], task)
            if model == "linear":
                _linear_fits(rows, task)
            else:
                holdout = estimator(task, "trees", 2, seed)[1].split
                ((fit_rows, held),) = holdout.split(np.zeros((len(rows), 1)), rows)
                if task == "regression" and len(held) < 2:  # its R² picks the leaf count
                    raise ValueError(f"the held-out part has {len(held)} row, R² needs 2")
                stratify = None if task == "regression" else rows[fit_rows]
                model_selection.train_test_split(
                    rows[fit_rows], test_size=EARLY_STOP_SHARE, stratify=stratify
                )
        except ValueError as e:
            raise SeqencError(
                f"fold {k + 1} of {len(splits)}: its {len(rows)} training rows are too few for "
                f"the {'stacked ' if stacked else ''}{model} probe: {' '.join(str(e).split())} "
                "(give more label rows or fewer folds)"
            ) from None


def _linear_fits(y: np.ndarray, task: str) -> None:
    """A ValueError unless the linear probe can fit on labels ``y``: two rows (ridge), else two
    classes of at least :data:`INNER_FOLDS` rows each (its inner folds)."""
    if task == "regression":
        if len(y) < 2:
            raise ValueError(f"ridge needs 2 rows, got {len(y)}")
        return
    counts = np.bincount(y)
    counts = counts[counts > 0]
    if len(counts) < 2 or counts.min() < INNER_FOLDS:
        raise ValueError(
            f"the inner {INNER_FOLDS} folds need two classes of {INNER_FOLDS} rows each, "
            f"got class counts {sorted(counts.tolist())}"
        )
