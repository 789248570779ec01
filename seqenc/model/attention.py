"""Multi-head self-attention through ``torch.nn.functional.scaled_dot_product_attention`` only.

Causal attention passes ``is_causal=True`` and no mask: histories are right-padded, so a real event
only ever sees earlier real events and the fused (Flash) kernel runs on mixed-length batches.
Bidirectional attention passes a boolean key-padding mask, or none at all when every row fills the
batch width (exact-length bucketing), so the Flash kernel runs there too. ``dropout_p`` drops attention
probabilities in training only (SASRec's regulariser for sparse logs; SDPA then trains with its math
kernel); inference never drops.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn
from torch.nn.functional import scaled_dot_product_attention

from seqenc.model.embeddings import RotaryEmbedding
from seqenc.model.linear import linear


def key_padding_mask(lengths: Tensor, width: int) -> Tensor | None:
    """``[B, 1, 1, L]`` bool, True where a key may be attended, or ``None`` when no key is padding.

    An empty row (length 0) may attend to key 0 so that its softmax is over a non-empty set (no NaN);
    its outputs are meaningless but finite, and nothing real depends on them.
    """
    if bool((lengths == width).all()):
        return None
    positions = torch.arange(width, device=lengths.device)
    mask = positions[None, :] < lengths.clamp(min=1)[:, None]
    return mask[:, None, None, :]


class SelfAttention(nn.Module):
    """Fused QKV projection, SDPA, output projection (``out``, given a smaller init std);
    ``dropout_p`` on the attention probabilities while training."""

    def __init__(self, d_model: int, n_heads: int, dropout_p: float = 0.0) -> None:
        super().__init__()
        self.n_heads, self.dropout_p = n_heads, dropout_p
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.out = nn.Linear(d_model, d_model)

    def split_heads(self, t: Tensor) -> Tensor:
        """``[B, L, d]`` → ``[B, H, L, head_dim]``."""
        batch, length, d_model = t.shape
        return t.view(batch, length, self.n_heads, d_model // self.n_heads).transpose(1, 2)

    def project(
        self, x: Tensor, rope: RotaryEmbedding | None = None, positions: Tensor | None = None
    ) -> tuple[Tensor, Tensor, Tensor]:
        """``(q, k, v)``, each ``[B, H, L, head_dim]``, rotary positions applied to q and k
        (``positions``: ``[B, L]``, default ``0 … L-1``)."""
        d_model = x.shape[-1]
        qkv = linear(x, self.qkv.weight, self.qkv.bias).split(d_model, dim=-1)
        q, k, v = (self.split_heads(t) for t in qkv)
        if rope is not None:
            q, k = rope(q, positions), rope(k, positions)
        return q, k, v

    def project_newest(
        self, x: Tensor, newest: Tensor, rope: RotaryEmbedding | None = None
    ) -> tuple[Tensor, Tensor, Tensor]:
        """As :meth:`project`, but the query only at each row's ``newest`` position (``[B]``):
        ``q`` is ``[B, H, 1, head_dim]``; keys and values cover every position. A last-position
        readout needs no other query, and skipping them saves a third of the projection."""
        d_model = x.shape[-1]
        weight, bias = self.qkv.weight, self.qkv.bias
        rows = torch.arange(x.shape[0], device=x.device)
        q = self.split_heads(linear(x[rows, newest][:, None], weight[:d_model], bias[:d_model]))
        kv = linear(x, weight[d_model:], bias[d_model:]).split(d_model, dim=-1)
        k, v = (self.split_heads(t) for t in kv)
        if rope is not None:
            q, k = rope(q, newest[:, None]), rope(k)
        return q, k, v

    def attend(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, causal: bool) -> Tensor:
        """SDPA of ``q`` against ``k``/``v``, with attention dropout while training."""
        return scaled_dot_product_attention(
            q,
            k,
            v,
            attn_mask=mask,
            dropout_p=self.dropout_p if self.training else 0.0,
            is_causal=causal,
        )

    def merge(
        self, y: Tensor, residual: Tensor | None = None, dropout: nn.Dropout | None = None
    ) -> Tensor:
        """``[B, L, d]`` output projection of the per-head attention outputs ``y`` ``[B, H, L, hd]``,
        added to ``residual`` after ``dropout`` when given (one fused call at CPU inference)."""
        batch, _, length, _ = y.shape
        y = y.transpose(1, 2).reshape(batch, length, -1)
        return linear(y, self.out.weight, self.out.bias, residual=residual, dropout=dropout)

    def forward(
        self,
        x: Tensor,
        causal: bool,
        mask: Tensor | None = None,
        rope: RotaryEmbedding | None = None,
        residual: Tensor | None = None,
        dropout: nn.Dropout | None = None,
        positions: Tensor | None = None,
    ) -> Tensor:
        """``x``: ``[B, L, d]``; ``mask``: a bool mask of allowed keys (:func:`key_padding_mask`,
        or the basket rule's with ``causal`` False); ``residual``, ``dropout``: as in
        :meth:`merge`; ``positions``: rotary positions, as in :meth:`project`."""
        q, k, v = self.project(x, rope, positions)
        y = self.attend(q, k, v, None if causal else mask, causal)
        return self.merge(y, residual, dropout)
