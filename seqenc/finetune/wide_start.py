"""A fused head's wide part: the ridge-penalised linear model of the aggregates alone, fitted on
the labelled training rows before the first step (the logistic regression a practitioner would
fit, and the probe fits: unweighted, its penalty chosen by the held-out log loss of a
cross-validation on those rows) and then kept: the training steps move the encoder and its
readout's map (zero at the start), so the fused model starts as the aggregates' own model and
learns what they miss, where a wide part trained by the steps would lose the chosen penalty within
a few hundred noisy steps. The label loss's class weights (rare classes weigh more) train the
sequence part; in the wide fit they tilted the fitted rows toward the rare class, and the held-out
AUC that chose the penalty was noisy on small label tables, so neither is used here.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from seqenc.data.aggregates import is_value_stat
from seqenc.model.head import SupervisedHead

PENALTIES = (1e-4, 1e-3, 1e-2, 1e-1, 1.0)  # L2 per unit weight, on standardised aggregates
FOLDS = 3


def _fit(
    head: SupervisedHead, z: torch.Tensor, y: torch.Tensor, penalty: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(weight, bias)`` of the linear model minimising the head's unweighted loss plus the L2
    penalty."""
    k = head.wide.out_features
    w = torch.zeros(k, z.shape[1], device=z.device, requires_grad=True)
    b = torch.zeros(k, device=z.device, requires_grad=True)
    optimizer = torch.optim.LBFGS([w, b], max_iter=200, line_search_fn="strong_wolfe")

    def closure() -> torch.Tensor:
        optimizer.zero_grad()
        loss = head.loss(z @ w.T + b, y) + penalty * w.pow(2).sum()
        loss.backward()
        return loss

    optimizer.step(closure)
    return w.detach(), b.detach()


def value_stat_columns(layout: dict[str, Any]) -> np.ndarray:
    """``[n_wide]`` bool: the layout's per-value statistics (the mean, min, max and last of a
    numeric column at each kept value: :func:`~seqenc.data.aggregates.is_value_stat`), the wide
    part's optional block."""
    spec = layout.get("spec") or {}
    numeric, stats = spec.get("numeric", []), spec.get("value_stats", [])
    return np.array([is_value_stat(name, numeric, stats) for name in layout["names"]], dtype=bool)


def _held_out_loss(
    head: SupervisedHead, z: torch.Tensor, y: torch.Tensor, folds: np.ndarray, penalty: float
) -> float:
    """The mean held-out loss over ``folds`` (each row's fold) of the penalised model; ``inf``
    when no fold can be held out (fewer rows than folds)."""
    losses = []
    for fold in range(FOLDS):
        train, held = folds != fold, folds == fold
        if train.all() or not train.any():
            continue
        w, b = _fit(head, z[train], y[train], penalty)
        with torch.no_grad():
            losses.append(float(head.loss(z[held] @ w.T + b, y[held])))
    return float(np.mean(losses)) if losses else np.inf


def fit_wide_start(head: SupervisedHead, wide: np.ndarray, targets: np.ndarray) -> str:
    """Set ``head.wide`` to the penalised linear model of ``wide`` (``[n, n_wide]`` raw
    aggregates) for ``targets``; the line the fit prints. The penalty, and whether the per-value
    statistics (:func:`value_stat_columns`: the clinician's per-parameter summary, but hundreds
    of noisy columns on a small account log) are read, are what the lowest mean held-out loss of
    :data:`FOLDS` folds picks (log loss for classes, squared error for numbers); a column left
    out gets weight 0."""
    with torch.no_grad():
        z = head.standardise(torch.from_numpy(wide).to(head.wide.weight.device))
    y = torch.from_numpy(targets).to(z.device)
    stats = torch.from_numpy(value_stat_columns(head.aggregates)).to(z.device)
    subsets = [torch.ones_like(stats)] + ([~stats] if stats.any() else [])
    folds = np.random.default_rng(0).permutation(len(y)) % FOLDS  # one draw for every candidate
    with torch.enable_grad():
        losses = {
            (s, p): _held_out_loss(head, z[:, subset], y, folds, p)
            for s, subset in enumerate(subsets)
            for p in PENALTIES
        }
        # no fold held out (a tiny table): every column, the middle of the grid
        s, best = min(losses, key=losses.get)
        if losses[s, best] == np.inf:
            s, best = 0, PENALTIES[len(PENALTIES) // 2]
        w, b = _fit(head, z[:, subsets[s]], y, best)
    with torch.no_grad():
        head.wide.weight.zero_()
        head.wide.weight[:, subsets[s]] = w
        head.wide.bias.copy_(b)
    head.wide.requires_grad_(False)
    read = f"{int(subsets[s].sum())} of {len(stats)} columns"
    if stats.any():
        kept = min(v for (t, _), v in losses.items() if t == 0)
        dropped = min(v for (t, _), v in losses.items() if t == 1)
        read += (
            f"; the per-value statistics {'read' if s == 0 else 'left out'}: held-out loss "
            f"{kept:.4f} with them, {dropped:.4f} without"
        )
    return (
        f"fusion: the aggregates' part is their own penalised linear model ({read}; penalty "
        f"{best:g}, cross-validated held-out loss {losses[s, best]:.4f} on the training rows)"
    )
