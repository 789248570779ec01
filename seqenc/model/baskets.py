"""The basket rule of a causal encoder: events of one entity that share a time are a set.

A basket's lines carry an artificial order (the store's tie order); under this rule nothing
depends on it: attention (:func:`basket_mask`) sees strictly earlier times and itself; every line
of a basket takes the basket's start position (:func:`basket_positions`), the gap from the
previous basket and the next basket's time as its query time (:func:`basket_inputs`); final
states are pooled per basket (:func:`basket_pool`), so the newest position reads the whole newest
basket; a position's target is one item of the next basket drawn per step
(:func:`next_basket_labels`, an unbiased estimate of the multi-positive loss averaged per
position), so the existing loss runs unchanged. Times are compared through ``dt_ref``: equal
timestamps give equal values exactly.
"""

from __future__ import annotations

from dataclasses import replace

import torch
from torch import Tensor

from seqenc.model.batch import N_SPECIAL, PAD, Batch


def _relation(batch: Batch, kind: str) -> Tensor:
    """``[B, L, L]`` bool: key k is a real event at a strictly ``"earlier"`` time, a strictly
    ``"later"`` time, or the ``"same"`` time as query position i (a real one, for ``"same"``); one
    relation at a time, as each caller reads one or two."""
    real = batch.padding_mask
    ref = batch.dt_ref  # seconds before the reference time: larger is older
    keys, queries = ref[:, None, :], ref[:, :, None]
    if kind == "earlier":
        return (keys > queries) & real[:, None, :]
    if kind == "later":
        return (keys < queries) & real[:, None, :]
    return (keys == queries) & real[:, None, :] & real[:, :, None]


def _next_ref(batch: Batch, later: Tensor) -> Tensor:
    """``[B, L]`` ``dt_ref`` of the next basket after each position (-inf where none)."""
    ref = batch.dt_ref[:, None, :].expand_as(later)
    return ref.masked_fill(~later, -torch.inf).amax(-1)


def basket_mask(batch: Batch) -> Tensor:
    """``[B, 1, L, L]`` bool, True where query i may attend to key k: an earlier position at a
    strictly earlier time, or itself (so a padding row keeps one key and no softmax is empty)."""
    earlier = _relation(batch, "earlier")
    width = batch.items.shape[1]
    positions = torch.arange(width, device=batch.items.device)
    itself = positions[None, :] == positions[:, None]
    before = positions[None, :] < positions[:, None]
    return ((earlier & before) | itself)[:, None]


def basket_positions(batch: Batch) -> Tensor:
    """``[B, L]`` int64 position of each line: the number of real events at earlier times in the
    window (the basket's start); padding keeps its own index."""
    earlier = _relation(batch, "earlier")
    positions = torch.arange(batch.items.shape[1], device=batch.items.device)
    return torch.where(batch.padding_mask, earlier.sum(-1), positions[None, :])


def basket_inputs(batch: Batch) -> Batch:
    """``batch`` with the basket's time inputs: ``dt_prev`` of every line is its basket's gap from
    the previous event (carried by the basket's first line), and :attr:`Batch.query_gaps` the gap
    to the next basket in the window, or the query gap for the newest basket."""
    later, same = _relation(batch, "later"), _relation(batch, "same")
    dt_prev = (batch.dt_prev[:, None, :] * same).amax(-1)
    ref = batch.dt_ref
    gaps = torch.where(
        later.any(-1), ref - _next_ref(batch, later), batch.query_gap[:, None].to(ref.dtype)
    )
    real = batch.padding_mask
    return replace(
        batch,
        dt_prev=dt_prev * real,
        next_gaps=(gaps * real).to(batch.dt_prev.dtype),
    )


def basket_pool(hidden: Tensor, batch: Batch) -> Tensor:
    """``[B, L, d]``: each real position's state replaced by the mean over its basket's lines."""
    same = _relation(batch, "same")
    weights = same.to(hidden.dtype)
    pooled = weights @ hidden / weights.sum(-1, keepdim=True).clamp(min=1.0)
    return torch.where(batch.padding_mask[..., None], pooled, hidden)


def next_basket_labels(batch: Batch, generator: torch.Generator | None = None) -> Tensor:
    """``[B, L]`` int64: for each line, an item of the next basket in the window drawn uniformly
    (PAD for the newest basket and padding, which then train nothing)."""
    later = _relation(batch, "later")
    ref = batch.dt_ref
    nxt = later & (ref[:, None, :] == _next_ref(batch, later)[:, :, None])
    draw = torch.rand(nxt.shape, device=ref.device, generator=generator).masked_fill(~nxt, -1.0)
    picked = batch.items.gather(1, draw.argmax(-1))
    return torch.where(nxt.any(-1) & batch.padding_mask, picked, torch.full_like(picked, PAD))


def next_basket_pairs(batch: Batch) -> tuple[Tensor, Tensor, Tensor]:
    """``(rows, positions, items)``, each ``[P]``: every pair of a basket and a distinct real item
    of the next basket in the window, the basket read at its first line (every line of a basket
    holds its pooled state). The multi-positive loss of the basket rule trains on these pairs."""
    later, same = _relation(batch, "later"), _relation(batch, "same")
    width = batch.items.shape[1]
    positions = torch.arange(width, device=batch.items.device)
    before = positions[None, :] < positions[:, None]  # key k sorts before query i
    opens = batch.padding_mask & ~(same & before).any(-1)
    same_item = batch.items[:, :, None] == batch.items[:, None, :]
    first_line = ~(same & same_item & before).any(-1) & (batch.items >= N_SPECIAL)
    nxt = later & (batch.dt_ref[:, None, :] == _next_ref(batch, later)[:, :, None])
    rows, at, key = (nxt & opens[:, :, None] & first_line[:, None, :]).nonzero(as_tuple=True)
    return rows, at, batch.items[rows, key]
