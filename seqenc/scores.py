"""The one scorer of a label's predictions: ROC-AUC (and accuracy) of classes, R² of numbers.

Used by a fine-tuning fit's labelled validation (the score that picks the checkpoint), its printed
aggregates baseline and the probe's folds, so the three report the same number for the same
predictions. numpy only (scikit-learn is optional). A set on which the score is undefined (one
row, one class, constant numbers) is refused in one line naming why: never a constant stand-in.
"""

from __future__ import annotations

import numpy as np

from seqenc.errors import SeqencError


def scored_kind(task: str, n_classes: int) -> str:
    """What is scored, from a label's task (``classification`` or ``regression``, the one rule
    :func:`~seqenc.data.labels.infer_task`) and its number of classes: ``binary``,
    ``multiclass`` or ``regression`` (the probe's ``task`` and :func:`prediction_scores`' kind)."""
    if task == "regression":
        return "regression"
    return "binary" if n_classes == 2 else "multiclass"


def score_name(task: str) -> str:
    """The score's name: ``r2`` (numbers) or ``roc_auc`` (classes)."""
    return "r2" if task == "regression" else "roc_auc"


def roc_auc(scores: np.ndarray, positive: np.ndarray) -> float:
    """ROC-AUC of ``scores`` for the boolean ``positive``: the Mann-Whitney statistic, ties
    counted half; NaN when one of the two kinds is absent."""
    scores, positive = np.ravel(scores), np.ravel(positive).astype(bool)
    n_pos = int(positive.sum())
    n_neg = len(positive) - n_pos
    if n_pos == 0 or n_neg == 0:
        return float("nan")
    order = np.argsort(scores, kind="stable")
    ordered = scores[order]
    starts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]])
    ends = np.r_[starts[1:], len(ordered)]
    ranks = np.empty(len(scores))
    ranks[order] = np.repeat((starts + ends + 1) / 2, ends - starts)  # 1-based mean rank of ties
    return float((ranks[positive].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def r2(y: np.ndarray, predicted: np.ndarray) -> float:
    """R² of ``predicted`` for numbers ``y``; refused when ``y`` has fewer than two distinct
    values (its variance, the denominator, is 0)."""
    y, predicted = np.ravel(y).astype(np.float64), np.ravel(predicted).astype(np.float64)
    total = float(((y - y.mean()) ** 2).sum())
    if len(y) < 2 or total == 0:
        raise SeqencError(
            f"R² is undefined on {len(y)} row(s) of one value ({y[0] if len(y) else None}): "
            "the scored set needs at least two different labels"
        )
    return 1.0 - float(((y - predicted) ** 2).sum()) / total


def class_scores(
    y: np.ndarray, probabilities: np.ndarray, classes: np.ndarray | None = None
) -> dict[str, float]:
    """ROC-AUC and accuracy of ``[n, k]`` ``probabilities`` of ``classes`` (default ``0..k-1``;
    column j scores class ``classes[j]``) for labels ``y``. Two columns: the AUC of the second;
    more: the mean one-vs-rest AUC over the classes ``y`` holds (scikit-learn's ``ovr`` macro
    when it holds them all). Refused when ``y`` holds fewer than two of the classes."""
    y = np.ravel(y)
    probabilities = np.asarray(probabilities, dtype=np.float64).reshape(len(y), -1)
    classes = np.arange(probabilities.shape[1]) if classes is None else np.asarray(classes)
    columns = [1] if len(classes) == 2 else range(len(classes))
    aucs = np.array([roc_auc(probabilities[:, j], y == classes[j]) for j in columns])
    if np.isnan(aucs).all():
        held = np.unique(y)
        raise SeqencError(
            f"ROC-AUC is undefined on {len(y)} row(s) of {len(held)} class(es) "
            f"{held[:5].tolist()}: the scored set needs at least two classes"
        )
    accuracy = float(np.mean(classes[probabilities.argmax(axis=1)] == y))
    return {"roc_auc": float(np.nanmean(aucs)), "accuracy": accuracy}


def prediction_scores(
    task: str, y: np.ndarray, output: np.ndarray, classes: np.ndarray | None = None
) -> dict[str, float]:
    """The scores of predictions ``output`` for labels ``y``: ``{"r2"}`` of numbers (``task``
    ``regression``), else :func:`class_scores` of ``[n, k]`` probabilities."""
    if task == "regression":
        return {"r2": r2(y, output)}
    return class_scores(y, output, classes)
