"""A linear layer with its bias and the pointwise op after it (GELU, a residual add) in one call.

On a CPU at inference (float32, no autograd, not being traced for ONNX, at least
``MIN_FUSED_ROWS`` rows) this is oneDNN's fused linear, the kernel torch.compile's CPU backend
emits for the same pattern: the bias, the GELU or the residual add happen inside the matmul instead
of as separate passes over a ``[tokens, 4d]`` tensor.
Anywhere else, and in builds without that kernel, it is the plain eager sequence; both compute the
same values (exact GELU).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn


def _onednn_linear() -> object | None:
    try:
        return torch.ops.mkldnn._linear_pointwise if torch.backends.mkldnn.is_available() else None
    except (AttributeError, RuntimeError):
        return None


ONEDNN_LINEAR = _onednn_linear()
# Below this many rows the plain sequence is faster: the fused call's fixed cost, larger than
# F.linear's, outweighs the pass it saves.
MIN_FUSED_ROWS = 128


def eager_inference() -> bool:
    """No autograd, and not being traced or exported: free to take kernels a graph cannot hold."""
    return (
        not torch.is_grad_enabled()
        and not torch.jit.is_tracing()
        and not torch.onnx.is_in_onnx_export()
    )


def fusable(x: Tensor, dropout: nn.Dropout | None = None) -> bool:
    """Whether :func:`linear` may take the fused kernel for ``x`` (never while training)."""
    return (
        ONEDNN_LINEAR is not None
        and (dropout is None or not dropout.training or dropout.p == 0)
        and x.dtype == torch.float32
        and x.device.type == "cpu"
        and x.numel() >= MIN_FUSED_ROWS * x.shape[-1]
        and eager_inference()
    )


def linear(
    x: Tensor,
    weight: Tensor,
    bias: Tensor,
    gelu: bool = False,
    residual: Tensor | None = None,
    dropout: nn.Dropout | None = None,
) -> Tensor:
    """``F.linear(x, weight, bias)``, then exact GELU when ``gelu``, or ``residual +
    dropout(...)`` when ``residual`` is given."""
    if fusable(x, dropout):
        if residual is not None:
            return ONEDNN_LINEAR.binary(x, residual, weight, bias, "add")
        return ONEDNN_LINEAR(
            x, weight, bias, "gelu" if gelu else "none", [], "none" if gelu else ""
        )
    y = F.linear(x, weight, bias)
    if gelu:
        y = F.gelu(y)
    if residual is None:
        return y
    return residual + (y if dropout is None else dropout(y))
