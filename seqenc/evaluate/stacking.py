"""A block of feature columns as its own linear probe's cross-fitted scores (stacking).

Many weak columns (an embedding) beside strong ones (hand-made aggregates) on a few thousand
labelled rows: concatenated, every weak column gets a weight fitted from those rows, and the
extra variance can cost the probe more than the block adds. Stacked, the block is first fitted
alone, and the probe then weighs one score per class (or one number) beside the strong columns.
A training row's score comes from a fit that did not see it (k folds inside the training rows),
so the probe learns how far to trust the block from scores like those it gets on new rows."""

from __future__ import annotations

import numpy as np

from seqenc.evaluate.estimators import STACK_FOLDS, estimator, fit_estimator

FOLDS = STACK_FOLDS  # cross-fitting folds inside the training rows (sizes checked before any fit:
# seqenc.evaluate.estimators.check_fold_sizes)
FLOOR = 1e-6  # probability floor of the log-probability scores (a class a fit never saw)


def cross_fitted(
    x: np.ndarray, y: np.ndarray, x_new: np.ndarray, task: str, seed: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """``(scores of x, scores of x_new)``: each training row's score from the linear probe
    fitted on the other :data:`FOLDS` − 1 parts of ``x`` (with labels ``y``, coded as
    :func:`~seqenc.evaluate.probe.cv_folds` codes them), and each new row's from the probe
    fitted on all of ``x``. Scores: the number (regression), the log-odds (binary) or one
    log-probability per class (multiclass)."""
    splitter, linear = estimator(task, "linear", FOLDS, seed)  # first: imports scikit-learn
    from sklearn.base import clone

    n_classes = 0 if task == "regression" else int(y.max()) + 1
    width = 1 if task != "multiclass" else n_classes
    inside = np.empty((len(x), width))
    for fit_rows, held in splitter.split(x, y):
        model = clone(linear)
        fit_estimator(model, x[fit_rows], y[fit_rows])
        inside[held] = _scores(model, x[held], task, n_classes)
    model = clone(linear)
    fit_estimator(model, x, y)
    return inside, _scores(model, x_new, task, n_classes)


def stacked_columns(
    block: np.ndarray, y: np.ndarray, train: np.ndarray, test: np.ndarray, task: str, seed: int = 0
) -> np.ndarray:
    """``[n, width]``: :func:`cross_fitted` scores of ``block`` for one fold, on the rows
    ``train`` (each from a fit without it) and ``test`` (from the fit on every training row), NaN
    on the rows of neither. They depend on the block, the labels and the fold only: computed
    once per fold and appended to the matrix every probe of the fold reads."""
    inside, new = cross_fitted(block[train], y[train], block[test], task, seed)
    columns = np.full((len(block), inside.shape[1]), np.nan)
    columns[train], columns[test] = inside, new
    return columns


def _scores(model, x: np.ndarray, task: str, n_classes: int) -> np.ndarray:
    """``[n, width]`` scores of a fitted probe (:func:`cross_fitted`)."""
    if task == "regression":
        return model.predict(x)[:, None]
    log_p = np.full((len(x), n_classes), np.log(FLOOR))
    log_p[:, model.classes_] = np.log(np.clip(model.predict_proba(x), FLOOR, None))
    if task == "binary":
        return log_p[:, 1:] - log_p[:, :1]
    return log_p
