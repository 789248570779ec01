"""A fused head's wide part: the ridge-penalised linear model of the aggregates alone, fitted on
the labelled training rows before the first step (the logistic regression a practitioner would
fit, its penalty chosen by cross-validation on those rows) and then kept: the training steps move
the encoder and its readout's map (zero at the start), so the fused model starts as the
aggregates' own model and learns what they miss, where a wide part trained by the steps would
lose the chosen penalty within a few hundred noisy steps."""

from __future__ import annotations

import numpy as np
import torch

from seqenc.errors import SeqencError
from seqenc.model.head import SupervisedHead

PENALTIES = (1e-4, 1e-3, 1e-2, 1e-1, 1.0)  # L2 per unit weight, on standardised aggregates
FOLDS = 3


def _fit(
    head: SupervisedHead, z: torch.Tensor, y: torch.Tensor, weights, penalty: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(weight, bias)`` of the linear model minimising the head's loss plus the L2 penalty."""
    k = head.wide.out_features
    w = torch.zeros(k, z.shape[1], device=z.device, requires_grad=True)
    b = torch.zeros(k, device=z.device, requires_grad=True)
    optimizer = torch.optim.LBFGS([w, b], max_iter=200, line_search_fn="strong_wolfe")

    def closure() -> torch.Tensor:
        optimizer.zero_grad()
        loss = head.loss(z @ w.T + b, y, weights) + penalty * w.pow(2).sum()
        loss.backward()
        return loss

    optimizer.step(closure)
    return w.detach(), b.detach()


def fit_wide_start(
    head: SupervisedHead, wide: np.ndarray, targets: np.ndarray, weights, score
) -> str:
    """Set ``head.wide`` to the penalised linear model of ``wide`` (``[n, n_wide]`` raw
    aggregates) for ``targets``, the penalty the best mean held-out ``score(task, outputs,
    targets)`` of :data:`FOLDS` folds picks; the line the fit prints."""
    with torch.no_grad():
        z = head.standardise(torch.from_numpy(wide).to(head.wide.weight.device))
    y = torch.from_numpy(targets).to(z.device)
    folds = np.random.default_rng(0).permutation(len(y)) % FOLDS
    means = []
    with torch.enable_grad():
        for penalty in PENALTIES:
            scores = []
            for fold in range(FOLDS):
                train, held = folds != fold, folds == fold
                w, b = _fit(head, z[train], y[train], weights, penalty)
                try:
                    scores.append(score(head.task, z[held] @ w.T + b, y[held]))
                except SeqencError:  # a fold of a tiny table may hold one class or one row
                    continue
            means.append(float(np.mean(scores)) if scores else -np.inf)
        # no fold scored (a tiny table): the middle of the grid
        best = PENALTIES[int(np.argmax(means)) if max(means) > -np.inf else len(PENALTIES) // 2]
        w, b = _fit(head, z, y, weights, best)
    with torch.no_grad():
        head.wide.weight.copy_(w)
        head.wide.bias.copy_(b)
    head.wide.requires_grad_(False)
    return (
        f"fusion: the aggregates' part is their own penalised linear model (penalty {best:g}"
        f", cross-validated score {max(means):.4f} on the training rows)"
    )
