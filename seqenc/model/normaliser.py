"""The exact catalogue normaliser, ``logsumexp(hidden @ weight.T)`` per row, for losses whose
gradient per row is known only after the forward pass (the repeat head's mixture, the next
basket's items): its exponentials kept for the backward matmuls where they fit, else computed a
chunk of rows at a time and recomputed in the backward pass."""

from __future__ import annotations

import torch
from torch import Tensor

from seqenc.model.sampled import shared_logsumexp

# Logits per chunk of the fused CE (seqenc.model.losses) and of the chunked normaliser. On a CPU a
# chunk should stay in cache (4 MB in float32: ~280 rows of a 3,700-item catalogue); on a GPU
# bigger chunks mean fewer, fuller kernels (128 MB).
CHUNK_ELEMENTS = {"cpu": 2**20, "cuda": 2**25}
MIN_CHUNK_ROWS = 64
# Up to this many logits (rows x items, float32) the exact normaliser keeps its exponentials for
# the backward matmuls (shared_logsumexp: no second matmul and exp); above, no logit matrix is
# kept and each chunk's logits are recomputed in the backward pass.
KEPT_ELEMENTS = 2**25


class _ChunkedLogSumExp(torch.autograd.Function):
    """Row-wise ``logsumexp(hidden @ weight.T)`` in chunks of rows; the backward pass recomputes each
    chunk's logits, so no ``[N, n_items]`` matrix is kept. For losses whose gradient per row is not
    known in the forward pass (the repeat head's mixture), unlike
    :class:`~seqenc.model.losses._FusedLinearCE`, where the logits are too many to keep
    (:data:`KEPT_ELEMENTS`)."""

    @staticmethod
    def forward(ctx, hidden, weight, chunk_size):
        out = torch.empty(hidden.shape[0], dtype=torch.float32, device=hidden.device)
        for start in range(0, hidden.shape[0], chunk_size):
            logits = (hidden[start : start + chunk_size] @ weight.T).float()
            out[start : start + chunk_size] = torch.logsumexp(logits, dim=1)
        ctx.save_for_backward(hidden, weight, out)
        ctx.chunk_size = chunk_size
        return out

    @staticmethod
    def backward(ctx, grad_out):
        hidden, weight, lse = ctx.saved_tensors
        grad_h = torch.empty_like(hidden, dtype=torch.float32)
        grad_w = torch.zeros_like(weight, dtype=torch.float32)
        w = weight.float()
        for start in range(0, hidden.shape[0], ctx.chunk_size):
            stop = start + ctx.chunk_size
            h = hidden[start:stop].float()
            logits = h @ w.T
            probs = (logits - lse[start:stop, None]).exp_() * grad_out[start:stop, None]
            grad_h[start:stop] = probs @ w
            grad_w.addmm_(probs.T, h)
        return grad_h.to(hidden.dtype), grad_w.to(weight.dtype), None


def exact_logsumexp(hidden: Tensor, weight: Tensor) -> Tensor:
    """``[N]`` float32 ``logsumexp(hidden @ weight.T, dim=1)``: up to :data:`KEPT_ELEMENTS` logits
    with their exponentials kept for the backward pass (:func:`shared_logsumexp`), above without
    the logit matrix (:class:`_ChunkedLogSumExp`)."""
    if 0 < hidden.shape[0] * weight.shape[0] <= KEPT_ELEMENTS:
        return shared_logsumexp(hidden, weight)
    chunk = max(MIN_CHUNK_ROWS, CHUNK_ELEMENTS.get(hidden.device.type, 2**22) // weight.shape[0])
    return _ChunkedLogSumExp.apply(hidden, weight, chunk)
