"""The labelled validation score of a fine-tuning fit: ROC-AUC of classes, R² of numbers.

Computed here (no scikit-learn, an optional dependency) from the label head's outputs of every
held-out labelled entity; the score picks the checkpoint and drives early stopping.
"""

from __future__ import annotations

import numpy as np
import torch

CHANCE_AUC = 0.5  # the score of a validation set with a single class (AUC undefined)


def roc_auc(scores: np.ndarray, positive: np.ndarray) -> float:
    """ROC-AUC of ``scores`` for the boolean ``positive``: the Mann-Whitney statistic, ties
    counted half; NaN when one of the two kinds is absent."""
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


def score_name(task: str) -> str:
    """The score's name: ``roc_auc`` (classes) or ``r2`` (numbers)."""
    return "r2" if task == "regression" else "roc_auc"


def label_score(task: str, outputs: torch.Tensor, targets: torch.Tensor) -> float:
    """The score of the head's raw ``outputs`` (``[n, k]`` class scores or ``[n, 1]`` standardised
    numbers) against ``targets``: two classes, ROC-AUC of the second; more, the mean one-vs-rest
    ROC-AUC over the classes present (and absent somewhere); numbers, R² (unit-free, so the same
    on the standardised scale). A set where it is undefined scores chance (0.5, or 0)."""
    y = targets.detach().cpu().numpy()
    out = outputs.detach().float().cpu()
    if task == "regression":
        pred = out[:, 0].numpy()
        total = float(((y - y.mean()) ** 2).sum())
        return 1.0 - float(((y - pred) ** 2).sum()) / total if total > 0 else 0.0
    probabilities = torch.softmax(out, dim=-1).numpy()
    classes = [1] if probabilities.shape[1] == 2 else range(probabilities.shape[1])
    aucs = [roc_auc(probabilities[:, c], y == c) for c in classes]
    aucs = [a for a in aucs if not np.isnan(a)]
    return float(np.mean(aucs)) if aucs else CHANCE_AUC
