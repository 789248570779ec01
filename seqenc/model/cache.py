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
from torch import Tensor

from seqenc.errors import SeqencError
from seqenc.model.batch import Batch
from seqenc.model.config import SCORED_POOLINGS
from seqenc.model.encoder import SequenceEncoder
from seqenc.model.readout import newest_state, pool, real_sum


@dataclass
class KVCache:
    """Keys and values of a batch of histories, with room for the positions being added.

    Row ``b`` holds ``lengths[b]`` cached positions; slots from ``lengths[b]`` on are free (any
    finite values) and :func:`extend` writes the new positions' keys and values there, in place.

    Attributes:
        keys: ``[n_layers, B, W, d]`` per-layer keys, heads concatenated, rotary positions applied.
        values: ``[n_layers, B, W, d]`` per-layer values.
        lengths: ``[B]`` int64 cached positions per row.
    """

    keys: Tensor
    values: Tensor
    lengths: Tensor


def check_incremental(model: SequenceEncoder) -> None:
    """Refuse a model whose older positions' states change when events are appended."""
    config = model.config
    if not config.causal:
        raise SeqencError(
            "incremental encoding needs a causal model: a masked (bidirectional) model's every "
            "position attends to the new events; use encode() on the whole history"
        )
    if model.head is not None and model.head.wide is not None:
        raise SeqencError(
            "incremental encoding cannot serve a head fused with aggregates (they summarise the "
            "whole history at its cut-off); use encode() on the whole history"
        )
    if config.pooling in SCORED_POOLINGS:
        raise SeqencError(
            f"incremental encoding cannot serve {config.pooling} pooling (each new event re-weighs every "
            "older state); use encode() on the whole history"
        )
    if config.time and config.recency:
        raise SeqencError(
            "incremental encoding cannot serve a model with the legacy recency input (every "
            "position reads the gap to the query time); use encode() on the whole history"
        )


def extend(model: SequenceEncoder, cache: KVCache, batch: Batch) -> Tensor:
    """``[B, M, d]`` final hidden states (after the final LayerNorm) of the positions in ``batch``,
    which follow the cached ones; their keys and values are written into ``cache``.

    ``batch`` holds, per row, the inputs of positions ``cache.lengths[b]`` on (right-padded,
    query gaps included); ``cache`` must have room for them (``W >= lengths + M``). Runs the model
    as in eval mode (no dropout).
    """
    config = model.config
    rows, width = batch.items.shape
    device = batch.items.device
    slots = cache.lengths[:, None] + torch.arange(width, device=device)[None, :]  # [B, M]
    positions = slots.clamp(max=config.n_positions - 1)  # padding rows past the table stay finite
    x = model.embed(batch, positions)
    total = cache.keys.shape[2]
    slots = slots.clamp(max=total - 1)
    mask = (torch.arange(total, device=device)[None, None, :] <= slots[:, :, None])[:, None]
    fresh = not bool(cache.lengths.any())
    at = None if fresh else slots[:, :, None].expand(-1, -1, config.d_model)
    for layer, block in enumerate(model.blocks):
        past = (cache.keys[layer], cache.values[layer])
        x = block.extend(x, past, at, mask, model.rope, positions)
    return model.ln_final(x)


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
    newest = newest_state(hidden, lengths)
    prefix_sum = prefix_sum + real_sum(hidden, lengths - 1)
    config = model.config
    return pool(newest, prefix_sum + newest, total, config.pooling, config.normalize), prefix_sum
