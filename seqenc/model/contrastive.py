"""An entity-level contrastive objective over sub-sequences of one history (CoLES-style).

Idea from Babaev et al., "CoLES: Contrastive Learning for Event Sequences with Self-Supervision"
(SIGMOD 2022): two random contiguous slices of the same entity's history are a positive pair, the
slices of the other entities in the batch are negatives. A next-event objective learns what comes
next; this one learns what stays the same across an entity's history, which is what an entity
embedding used as a feature should carry.

Here the pair's embeddings are the model's own readout (:meth:`SequenceEncoder.entity_embedding`,
so the configured pooling, e.g. the mean over the slice), and the loss is InfoNCE (NT-Xent, as in
SimCLR) on their cosine similarity. Slices are drawn with tensors over the whole batch.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import torch
import torch.nn.functional as F
from torch import Tensor

from seqenc.model.batch import Batch

# Sub-batches of similar slice lengths the views are embedded in: a slice's length is drawn over
# [min_share n, n], so one batch padded to the longest slice is largely padding.
LENGTH_GROUPS = 2
SLICED = ("items", "dt_prev", "dt_ref", "categorical", "numeric")  # the views' [2B, L, ...] inputs


def slice_views(batch: Batch, min_share: float, generator: torch.Generator | None = None) -> Batch:
    """``[2B]`` batch: rows ``b`` and ``B + b`` are two random contiguous slices of row ``b``.

    A slice of a history of ``n`` real events has a length drawn uniformly from
    ``[max(1, ceil(min_share * n)), n]`` and a start drawn uniformly among the positions where it
    fits; it never reaches PAD. Its ``dt_ref`` is re-measured from its newest event and its query
    gap is 0 (the embedding is for the slice's end); ``dt_prev`` keeps the gap to the event before
    the slice, as a truncated history has at inference. Empty rows give empty slices.
    """
    if not 0.0 < min_share <= 1.0:
        raise ValueError(f"min_share={min_share} not in (0, 1]")
    b, width = batch.items.shape
    device = batch.items.device
    n = batch.lengths.repeat(2)
    lo = torch.ceil(min_share * n.double()).long().clamp(min=1)
    draw = torch.rand(2, 2 * b, generator=generator, device=device, dtype=torch.float64)
    k = torch.minimum(lo + (draw[0] * (n - lo + 1).clamp(min=0)).long(), n)
    start = (draw[1] * (n - k + 1)).long()
    positions = torch.arange(max(int(k.max()) if b else 1, 1), device=device)
    valid = positions[None, :] < k[:, None]
    source = torch.where(valid, start[:, None] + positions[None, :], 0).clamp(max=width - 1)
    rows = torch.arange(b, device=device).repeat(2)[:, None]

    def take(t: Tensor) -> Tensor:
        picked = t[rows, source]
        shape = (*valid.shape, *([1] * (picked.dim() - 2)))
        return torch.where(valid.view(shape), picked, torch.zeros_like(picked))

    dt_ref = take(batch.dt_ref)
    newest = dt_ref.gather(1, (k - 1).clamp(min=0)[:, None])
    return Batch(
        items=take(batch.items),
        lengths=k,
        dt_prev=take(batch.dt_prev),
        dt_ref=(dt_ref - newest).clamp(min=0) * valid,
        categorical=take(batch.categorical),
        numeric=take(batch.numeric),
        index=batch.index.repeat(2),
        dt_query=torch.zeros(2 * b, dtype=batch.dt_prev.dtype, device=device),
    )


def embed_by_length(
    embed: Callable[[Batch], Tensor], views: Batch, groups: int | None = None
) -> Tensor:
    """``embed(views)``, row by row, computed on ``groups`` (:data:`LENGTH_GROUPS`) sub-batches of
    rows of similar length, each cut to its longest row: less padding, the same embeddings (a
    row's embedding reads its own real events only: attention masks padding out and the readout
    pools real positions; dropout draws differ)."""
    if not len(views):
        return embed(views)
    order = torch.argsort(views.lengths)
    parts = order.tensor_split(min(groups or LENGTH_GROUPS, len(order)))
    return torch.cat([embed(_rows(views, rows)) for rows in parts])[torch.argsort(order)]


def _rows(views: Batch, rows: Tensor) -> Batch:
    """The ``rows`` of ``views`` (a :func:`slice_views` batch), cut to their longest history."""
    width = max(int(views.lengths[rows].max()), 1)
    return replace(
        views,
        **{name: getattr(views, name)[rows, :width] for name in SLICED},
        dt_query=views.dt_query[rows],
        index=views.index[rows],
        lengths=views.lengths[rows],
    )


def info_nce(embeddings: Tensor, temperature: float) -> Tensor:
    """NT-Xent over ``[2B, d]`` embeddings where rows ``b`` and ``B + b`` are a positive pair.

    Each row's positive competes with every other row but itself (the 2B − 2 slices of the other
    entities): the mean over rows of
    ``-log(exp(s(i, pos) / t) / sum_{k != i} exp(s(i, k) / t))``, ``s`` the cosine similarity.
    """
    z = F.normalize(embeddings.float(), dim=-1)
    rows = z.shape[0]
    half = rows // 2
    logits = (z @ z.T) / temperature
    eye = torch.eye(rows, dtype=torch.bool, device=z.device)
    logits = logits.masked_fill(eye, float("-inf"))
    positive = (torch.arange(rows, device=z.device) + half) % rows
    return F.cross_entropy(logits, positive)
