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

import numpy as np
import torch

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


def fit_wide_start(head: SupervisedHead, wide: np.ndarray, targets: np.ndarray) -> str:
    """Set ``head.wide`` to the penalised linear model of ``wide`` (``[n, n_wide]`` raw
    aggregates) for ``targets``, the penalty the lowest mean held-out loss of :data:`FOLDS` folds
    picks (log loss for classes, squared error for numbers); the line the fit prints."""
    with torch.no_grad():
        z = head.standardise(torch.from_numpy(wide).to(head.wide.weight.device))
    y = torch.from_numpy(targets).to(z.device)
    folds = np.random.default_rng(0).permutation(len(y)) % FOLDS
    means = []
    with torch.enable_grad():
        for penalty in PENALTIES:
            losses = []
            for fold in range(FOLDS):
                train, held = folds != fold, folds == fold
                if train.all() or not train.any():  # a table of fewer rows than folds
                    continue
                w, b = _fit(head, z[train], y[train], penalty)
                with torch.no_grad():
                    losses.append(float(head.loss(z[held] @ w.T + b, y[held])))
            means.append(float(np.mean(losses)) if losses else np.inf)
        # no fold held out (a tiny table): the middle of the grid
        best = PENALTIES[int(np.argmin(means)) if min(means) < np.inf else len(PENALTIES) // 2]
        w, b = _fit(head, z, y, best)
    with torch.no_grad():
        head.wide.weight.copy_(w)
        head.wide.bias.copy_(b)
    head.wide.requires_grad_(False)
    return (
        f"fusion: the aggregates' part is their own penalised linear model (penalty {best:g}"
        f", cross-validated held-out loss {min(means):.4f} on the training rows)"
    )
