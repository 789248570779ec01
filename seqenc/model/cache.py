"""Incremental encoding of a causal encoder: new positions against cached keys and values.

In a causal pre-LN model the hidden state at position p depends only on the inputs of positions
<= p, and position p's keys and values at every layer are a function of its own hidden state there.
So a history can be extended by running only its new positions through the blocks, each attending
to the cached keys and values of the older positions plus the new ones up to itself: the result is
the full forward pass restricted to those rows (exact up to float rounding), at O(new x history)
attention cost and O(new) for everything else.

A :class:`KVCache` row holds ``lengths[b]`` cached positions (right-padded); :func:`extend` takes a
right-padded :class:`~seqenc.model.batch.Batch` of the positions that follow them.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.nn.functional import scaled_dot_product_attention

from seqenc.errors import SeqencError
from seqenc.model.batch import Batch
from seqenc.model.embeddings import time_bucket
from seqenc.model.encoder import SequenceEncoder


@dataclass
class KVCache:
    """Keys and values of the cached positions of a batch of histories.

    Attributes:
        keys: ``[B, n_layers, K, d]`` per-layer keys, heads concatenated, rotary positions applied.
        values: ``[B, n_layers, K, d]`` per-layer values.
        lengths: ``[B]`` int64 cached positions per row (the rest of ``K`` is padding).
        times: ``[B, K]`` float64 event times in seconds (read only by a time-bias model).
    """

    keys: Tensor
    values: Tensor
    lengths: Tensor
    times: Tensor


def check_incremental(model: SequenceEncoder) -> None:
    """Refuse a model whose older positions' states change when events are appended."""
    config = model.config
    if not config.causal:
        raise SeqencError(
            "incremental encoding needs a causal model: a masked (bidirectional) model's every "
            "position attends to the new events; use encode() on the whole history"
        )
    if config.time and config.recency:
        raise SeqencError(
            "incremental encoding cannot serve a model with the legacy recency input (every "
            "position reads the gap to the query time); use encode() on the whole history"
        )


def _append(cached: Tensor, lengths: Tensor, new: Tensor, width: int) -> Tensor:
    """``[B, width, ...]``: each row's ``cached`` entries, ``new`` written from ``lengths[b]`` on."""
    out = new.new_zeros(new.shape[0], width, *new.shape[2:])
    out[:, : cached.shape[1]] = cached
    at = lengths[:, None] + torch.arange(new.shape[1], device=new.device)[None, :]
    out.scatter_(1, at.view(*at.shape, *[1] * (new.dim() - 2)).expand_as(new), new)
    return out


def extend(
    model: SequenceEncoder, cache: KVCache, batch: Batch, times: Tensor
) -> tuple[Tensor, Tensor, Tensor]:
    """``(hidden, keys, values)`` of the positions in ``batch``, which follow the cached ones.

    ``batch`` holds, per row, the inputs of positions ``cache.lengths[b]`` on (right-padded,
    query gaps included); ``times`` (``[B, M]`` float64) their event times. Returns the final
    hidden states ``[B, M, d]`` (after the final LayerNorm) and the new positions' keys and values
    ``[B, n_layers, M, d]`` to append to the cache. Runs the model as in eval mode (no dropout).
    """
    config = model.config
    rows, width = batch.items.shape
    positions = cache.lengths[:, None] + torch.arange(width, device=batch.items.device)[None, :]
    positions = positions.clamp(max=config.max_len)  # padding rows past the table stay finite
    x = model.embed(
        batch.items,
        batch.padding_mask,
        batch.dt_prev,
        batch.dt_ref,
        batch.query_gaps,
        batch.categorical,
        batch.numeric,
        positions,
    )
    total = cache.keys.shape[2] + width
    key_positions = torch.arange(total, device=x.device)
    mask = (key_positions[None, None, :] <= positions[:, :, None])[:, None]  # [B, 1, M, total]
    buckets = None
    if config.time and config.time_bias:
        key_times = _append(cache.times, cache.lengths, times, total)
        gaps = (times[:, :, None] - key_times[:, None, :]).abs()
        buckets = time_bucket(gaps, config.n_time_buckets)
    keys, values = [], []
    for layer, block in enumerate(model.blocks):
        q, k, v = block.attn.project(block.ln_attn(x), model.rope, positions)
        k, v = (t.transpose(1, 2).reshape(rows, width, -1) for t in (k, v))
        keys.append(k)
        values.append(v)
        all_k, all_v = (
            _append(past[:, layer], cache.lengths, new, total)
            .view(rows, total, config.n_heads, -1)
            .transpose(1, 2)
            for past, new in ((cache.keys, k), (cache.values, v))
        )
        layer_mask = mask
        if buckets is not None:
            bias = block.time_bias(buckets).permute(0, 3, 1, 2).to(q.dtype)
            layer_mask = bias.masked_fill(~mask, float("-inf"))
        y = scaled_dot_product_attention(q, all_k, all_v, attn_mask=layer_mask, dropout_p=0.0)
        x = block.feed_forward(x + block.attn.merge(y))
    return model.ln_final(x), torch.stack(keys, dim=1), torch.stack(values, dim=1)


def readout(
    model: SequenceEncoder, hidden: Tensor, lengths: Tensor, prefix_sum: Tensor, total: Tensor
) -> tuple[Tensor, Tensor]:
    """``(embeddings [B, d], prefix_sums [B, d])`` after an :func:`extend`.

    ``hidden``: its ``[B, M, d]`` output, ``lengths`` new positions per row (>= 1), ``prefix_sum``
    the sum of the final hidden states of the cached positions, ``total`` positions in all. The
    embedding is the newest position's state (``pooling="last"``) or the mean over all positions
    (``"mean"``, from the running sum); the returned ``prefix_sums`` exclude the newest position,
    which the next extension recomputes.
    """
    rows = torch.arange(hidden.shape[0], device=hidden.device)
    older = torch.arange(hidden.shape[1], device=hidden.device)[None, :] < (lengths - 1)[:, None]
    newest = hidden[rows, lengths - 1]
    prefix_sum = prefix_sum + (hidden * older[..., None].to(hidden.dtype)).sum(1)
    if model.config.pooling == "mean":
        pooled = (prefix_sum + newest) / total.to(hidden.dtype)[:, None]
    else:
        pooled = newest
    pooled = F.normalize(pooled, dim=-1) if model.config.normalize else pooled
    return pooled, prefix_sum
