"""The next basket as a set of positives: one loss term per (basket, item of the next basket).

Under the basket rule (:mod:`seqenc.model.baskets`) every line of a basket holds the basket's
pooled state, so the loss reads each basket once, at its first line, and scores every distinct
item of the next basket there (:func:`~seqenc.model.baskets.next_basket_pairs`), instead of one
item drawn per line and step. The loss is the mean negative log-likelihood over those pairs: a
basket weighs as many items as its successor holds. The catalogue's normaliser is computed once
per basket, not once per pair, so the exact softmax costs a basket's rows, not its lines.
"""

from __future__ import annotations

import torch
from torch import Tensor

from seqenc.model.baskets import next_basket_pairs
from seqenc.model.batch import N_SPECIAL, Batch
from seqenc.model.losses import compute_loss, target_log_softmax
from seqenc.model.normaliser import exact_logsumexp
from seqenc.model.repeat import RepeatHead


def _catalogue(
    hidden: Tensor, slot: Tensor, weight: Tensor, targets: Tensor, loss: str, **options: object
) -> Tensor:
    """``[P]`` catalogue log-probability of each pair's item at its basket's state, the row
    ``slot`` (``[P]``) of ``hidden`` (``[N, d]``); the exact normaliser once per basket."""
    if loss != "ce":
        return target_log_softmax(hidden[slot], weight, targets, loss, **options)
    baskets, inverse = torch.unique(slot, return_inverse=True)
    exact = (hidden[slot] * weight[targets]).sum(-1).float()
    return exact - exact_logsumexp(hidden[baskets], weight[N_SPECIAL:])[inverse]


def _basket_queries(rows: Tensor, at: Tensor, n_rows: int) -> tuple[Tensor, Tensor, Tensor]:
    """``(queries, row, column)``: the distinct baskets read, ``(rows, at)``, as ``[n_rows, Q]``
    query positions (Q: the most of one row; spare cells read position 0), and each pair's cell:
    the copy attention runs at the baskets read, not at every line."""
    width = int(at.max()) + 1
    starts, pair = torch.unique(rows * width + at, return_inverse=True)
    row, position = starts // width, starts % width
    column = torch.arange(len(starts), device=at.device) - torch.searchsorted(row, row)
    queries = torch.zeros(n_rows, int(column.max()) + 1, dtype=torch.long, device=at.device)
    queries[row, column] = position
    return queries, row[pair], column[pair]


def basket_nll(
    hidden: Tensor,
    batch: Batch,
    weight: Tensor,
    loss: str = "ce",
    repeat: RepeatHead | None = None,
    **options: object,
) -> Tensor:
    """Mean negative log-likelihood of every next-basket item at its basket (``hidden``
    ``[B, L, d]``, ``batch`` with the basket rule's inputs): under the catalogue term ``loss``,
    or with ``repeat`` its mixture with the copy distribution (:mod:`seqenc.model.repeat`)."""
    rows, at, targets = next_basket_pairs(batch)
    if not len(targets):
        return hidden.float().sum() * 0.0
    if repeat is None and loss != "ce":
        return compute_loss(loss, hidden[rows, at], weight, targets, **options)
    slot = rows * hidden.shape[1] + at
    log_catalogue = _catalogue(hidden.flatten(0, 1), slot, weight, targets, loss, **options)
    if repeat is None:
        return -log_catalogue.mean()
    queries, row, column = _basket_queries(rows, at, len(batch))
    copy = repeat.attention(hidden, batch, queries)[row, column]  # [P, L]
    copied = (copy * (batch.items[rows] == targets[:, None])).sum(-1)
    log_copied = torch.log(copied.clamp(min=1e-30)).where(copied > 0, float("-inf"))
    log_g, log_not_g = repeat.log_gates(hidden)
    log_p = torch.logaddexp(log_not_g[rows, at] + log_catalogue, log_g[rows, at] + log_copied)
    return -log_p.mean()
