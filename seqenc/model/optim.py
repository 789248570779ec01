"""AdamW that also takes row-sparse gradients, and gradient clipping that counts them.

Under a sampled catalogue term a step reads a few thousand rows of an item table that may hold
millions; a dense AdamW step would still read and write every row (the table, both moments).
:class:`RowSparseAdamW` updates a parameter whose gradient is sparse lazily, as Adam
implementations for large embedding tables do: only the rows the step touched, their moments and
their decoupled weight decay included. Dense parameters get exactly :class:`torch.optim.AdamW`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import torch
from torch import Tensor


class RowSparseAdamW(torch.optim.AdamW):
    """:class:`torch.optim.AdamW` whose sparse-gradient parameters update only their touched rows.

    The bias correction uses the parameter's own step count (one per step it got a gradient), as
    :class:`torch.optim.SparseAdam` does; a row untouched by a step keeps its value and moments.
    """

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> float | None:
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        sparse = []
        for group in self.param_groups:
            for param in group["params"]:
                if param.grad is not None and param.grad.is_sparse:
                    sparse.append((group, param, param.grad))
                    param.grad = None  # AdamW refuses sparse gradients: hide them from it
        super().step()
        for group, param, grad in sparse:
            param.grad = grad
            self._sparse_step(group, param, grad.coalesce())
        return loss

    def _sparse_step(self, group: dict, param: Tensor, grad: Tensor) -> None:
        rows, values = grad.indices()[0], grad.values()
        state = self.state[param]
        if not state:
            state["step"] = torch.tensor(0.0)
            state["exp_avg"] = torch.zeros_like(param, memory_format=torch.preserve_format)
            state["exp_avg_sq"] = torch.zeros_like(param, memory_format=torch.preserve_format)
        state["step"] += 1
        step = float(state["step"])
        beta1, beta2 = group["betas"]
        lr, eps, decay = group["lr"], group["eps"], group["weight_decay"]
        m = state["exp_avg"][rows].mul_(beta1).add_(values, alpha=1 - beta1)
        v = state["exp_avg_sq"][rows].mul_(beta2).addcmul_(values, values, value=1 - beta2)
        state["exp_avg"][rows], state["exp_avg_sq"][rows] = m, v
        denom = (v / (1 - beta2**step)).sqrt_().add_(eps)
        updated = param[rows].mul_(1 - lr * decay).addcdiv_(m, denom, value=-lr / (1 - beta1**step))
        param[rows] = updated


def clip_grad_norm(parameters: Iterable[Tensor], max_norm: float) -> Tensor:
    """Scale every gradient so that their joint 2-norm is at most ``max_norm`` (as
    :func:`torch.nn.utils.clip_grad_norm_`, sparse gradients included); returns the norm before."""
    params = [p for p in parameters if p.grad is not None]
    for param in params:
        if param.grad.is_sparse:
            param.grad = param.grad.coalesce()  # duplicate rows summed, so their norm is right
    squares = [
        (p.grad._values() if p.grad.is_sparse else p.grad).float().square().sum() for p in params
    ]
    total = torch.stack(squares).sum().sqrt() if squares else torch.zeros(())
    scale = (max_norm / (total + 1e-6)).clamp(max=1.0)
    for param in params:
        param.grad.mul_(scale.to(param.grad.dtype))
    return total
