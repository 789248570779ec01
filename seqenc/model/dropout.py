"""Dropout whose CPU training mask costs a quarter of a random draw per element.

On a CPU, ``nn.Dropout`` fills its mask with ``bernoulli_``: one generator call per element, the
biggest single cost of a small training step after the matmuls. Here each element instead gets 16 bits of one full 64-bit draw (four elements per
draw) and is kept when those bits clear a threshold, so the drop probability is ``p`` rounded to a
multiple of 1/65536 and the kept values are scaled by the exact ``1 / (1 - p_rounded)``: the
output's expectation is the input, as with ``nn.Dropout``. Elsewhere (GPUs, eval mode) it is
``nn.Dropout``. It has no parameters, so checkpoints and bundles are unchanged.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

LEVELS = 2**16  # the mask's resolution: one int16 lane of a 64-bit random draw per element


def fast_dropout(x: Tensor, p: float) -> Tensor:
    """``x`` with each element zeroed with probability ``round(p * 65536) / 65536`` and the rest
    scaled to keep the expectation; differentiable in ``x`` (the mask is a constant)."""
    dropped = round(p * LEVELS)
    if dropped == 0:
        return x
    n = x.numel()
    draws = torch.empty((n + 3) // 4, dtype=torch.int64, device=x.device)
    draws.random_(-(2**63), None)  # all 64 bits uniform, from the default generator
    lanes = draws.view(torch.int16)[:n].view(x.shape)  # uniform on [-32768, 32767]
    keep = lanes >= dropped - LEVELS // 2
    return x.mul(keep).mul_(LEVELS / (LEVELS - dropped))


class Dropout(nn.Dropout):
    """``nn.Dropout`` that uses :func:`fast_dropout` while training on a CPU."""

    def forward(self, x: Tensor) -> Tensor:
        if self.training and self.p > 0 and x.device.type == "cpu" and not self.inplace:
            return fast_dropout(x, self.p)
        return F.dropout(x, self.p, self.training, self.inplace)
