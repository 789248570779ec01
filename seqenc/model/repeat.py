"""The repeat head: "the same item again", scored from the entity's own history.

Real event streams are dominated by repeats (the same merchant, category, page). A catalogue score
``h · w_item`` cannot say "again"; this head can. At position i it attends over the earlier events
j <= i of the same history (a pointer / copy attention, as in RepeatNet and pointer-generator
networks): the score of event j is a learned match of the two hidden states plus learned biases for
how long ago event j happened before the query time and how many events ago it was. An item's
repeat probability is the attention mass on its occurrences, so items used often and recently rise.
A learned gate mixes it with the catalogue softmax:

    P(v | i) = (1 - g_i) softmax(h_i W^T)_v + g_i sum_{j <= i, item_j = v} a_ij

Training minimises the cross-entropy of that mixture (:func:`mixture_nll`): the copy part exact,
the catalogue part :func:`~seqenc.model.losses.target_log_softmax` (exact or sampled).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from seqenc.model.baskets import basket_positions
from seqenc.model.batch import N_SPECIAL, Batch
from seqenc.model.embeddings import time_bucket
from seqenc.model.losses import target_log_softmax

N_STEP_BUCKETS = 16  # how many events ago: 0, 1, 2, 3-4, 5-8, ... (log2 buckets)


def step_bucket(steps: Tensor) -> Tensor:
    """Log2 bucket of a distance in events: 0 → 0, 1 → 1, 2 → 2, 3-4 → 3, 5-8 → 4, …"""
    return (
        torch.ceil(torch.log2(steps.float().clamp(min=1.0)))
        .long()
        .add(1)
        .where(steps > 0, 0)
        .clamp(max=N_STEP_BUCKETS - 1)
    )


def purchase_features(batch: Batch, baskets: bool) -> tuple[Tensor, Tensor, Tensor]:
    """``(order, count, until)``, each ``[B, L]``, for the copy keys of a ``counts`` head.

    ``order``: the position of each event's purchase (its basket's start with ``baskets``, else
    its own position); ``count``: purchases of the event's item up to and including its own
    (0 for an event that is not its item's first line in its purchase, or not a real item: it is
    never a key); ``until``: the order of the item's next purchase (``L``: none in the window).
    Position i may copy event j when ``count_j > 0`` and ``order_j <= order_i < until_j``: j is
    then its item's newest purchase as of i. Only earlier-or-equal orders decide ``count``, and
    ``until`` is compared with ``order_i`` only, so nothing after position i's purchase moves
    what it copies.
    """
    width = batch.items.shape[1]
    positions = torch.arange(width, device=batch.items.device)
    order = basket_positions(batch) if baskets else positions[None, :].expand(len(batch), -1)
    real = (batch.items >= N_SPECIAL) & batch.padding_mask
    same = (
        (batch.items[:, :, None] == batch.items[:, None, :]) & real[:, :, None] & real[:, None, :]
    )
    o_j, o_k = order[:, :, None], order[:, None, :]
    duplicate = same & (o_k == o_j) & (positions[None, :] < positions[:, None])[None]
    first = real & ~duplicate.any(-1)  # the item's first line in its purchase
    count = (same & (o_k <= o_j) & first[:, None, :]).sum(-1) * first
    later = torch.where(same & (o_k > o_j), o_k, torch.full_like(o_k, width))
    return order, count, later.amin(-1)


class RepeatHead(nn.Module):
    """Copy attention over a history's earlier events, and the gate that mixes it in.

    ``counts``: position i attends to one key per item, its newest purchase up to i, scored also
    by ``log(purchases)`` and a learned bias per (purchases, recency) cell of log buckets
    (:func:`purchase_features`): what P-TopFreq and TIFU-KNN live on. ``baskets``: steps and
    purchases read basket starts (the basket rule), never the order of lines in a basket.
    """

    def __init__(
        self,
        d_model: int,
        n_time_buckets: int,
        time: bool,
        query_time: bool,
        counts: bool = False,
        baskets: bool = False,
    ) -> None:
        super().__init__()
        self.d_key = max(8, d_model // 2)
        self.query = nn.Linear(d_model, self.d_key)
        self.key = nn.Linear(d_model, self.d_key)
        self.steps = nn.Embedding(N_STEP_BUCKETS, 1)
        self.n_time_buckets = n_time_buckets
        self.ago = nn.Embedding(n_time_buckets, 1) if time else None
        self.query_time = query_time
        self.gate = nn.Linear(d_model, 1)
        self.baskets = baskets
        # counts: a bias per (purchases bucket, recency bucket): time ago with time, else steps
        self.n_recency = n_time_buckets if time else N_STEP_BUCKETS
        self.frequency = nn.Embedding(N_STEP_BUCKETS * self.n_recency, 1) if counts else None

    def attention(self, hidden: Tensor, batch: Batch, at: Tensor | None = None) -> Tensor:
        """``[B, Q, L]`` copy weights a_ij of the query positions ``at`` (``[B, Q]``; default every
        position, Q = L): rows sum to 1 over the allowed j, 0 elsewhere.

        Position i may copy event j when j <= i, j is a real event and its item a real item
        (with ``baskets``, j's basket is not newer than i's, and steps count events between the
        baskets' starts, so no order inside a basket matters; with ``counts``, j must be its
        item's newest purchase as of i, :func:`purchase_features`).
        The ``[B, Q, L]`` biases are table lookups by plain indexing: ``nn.Embedding``'s backward
        over that many indices is much slower on a CPU. With the default ``at`` the steps ago,
        the same for every history, are bucketed once (``[1, L, L]``) and broadcast.
        """
        positions = torch.arange(hidden.shape[1], device=hidden.device)
        at = positions[None, :] if at is None else at  # [1 or B, Q]
        rows_at = at.expand(len(batch), -1)
        if self.baskets:  # in basket starts: a basket's lines are one time, in no order
            order = basket_positions(batch)
            steps = order.gather(1, rows_at)[:, :, None] - order[:, None, :]  # [B, Q, L]
        else:
            steps = at[:, :, None] - positions[None, None, :]  # [1 or B, Q, L]
        allowed = (steps >= 0) & ((batch.items >= N_SPECIAL) & batch.padding_mask)[:, None, :]
        h = hidden.float()
        queries = h.gather(1, rows_at[..., None].expand(-1, -1, h.shape[-1]))
        scores = self.query(queries) @ self.key(h).transpose(1, 2) / math.sqrt(self.d_key)
        scores = scores + self.steps.weight[:, 0][step_bucket(steps.clamp(min=0))]
        ago = None
        if self.ago is not None:
            # time from event j to the time position i predicts for: (t_i - t_j) + query gap of i,
            # as dt_ref_j - (dt_ref_i - gap_i): one pass over [B, Q, L] instead of two
            query_ref = batch.dt_ref.gather(1, rows_at)
            if self.query_time:
                query_ref = query_ref - batch.query_gaps.gather(1, rows_at)
            ago = time_bucket(batch.dt_ref[:, None, :] - query_ref[:, :, None], self.n_time_buckets)
            scores = scores + self.ago.weight[:, 0][ago]
        if self.frequency is not None:
            allowed, bias = self._purchases(batch, rows_at, ago)
            scores = scores + bias
        scores = scores.masked_fill(~allowed, float("-inf"))
        # a position with nothing to copy gets zeros (its gate mass then goes nowhere: see below)
        return torch.softmax(scores, dim=-1).nan_to_num(0.0)

    def _purchases(
        self, batch: Batch, rows_at: Tensor, ago: Tensor | None
    ) -> tuple[Tensor, Tensor]:
        """``(allowed, bias)`` ``[B, Q, L]`` of a ``counts`` head: the keys each query may copy
        (its items' newest purchases) and the learned bias of their (purchases, recency) cell."""
        order, count, until = purchase_features(batch, self.baskets)
        order_i = order.gather(1, rows_at)[:, :, None]
        allowed = (count > 0)[:, None, :] & (order[:, None, :] <= order_i)
        allowed = allowed & (until[:, None, :] > order_i)
        if ago is None:
            ago = step_bucket((order_i - order[:, None, :]).clamp(min=0))
        cell = step_bucket(count)[:, None, :] * self.n_recency + ago
        # log(count) fixed: at the start an item's mass grows with its purchases, as the per-event
        # head's summed mass does; the learned cells then shape it (small bias tables move slowly)
        prior = count.float().clamp(min=1.0).log()[:, None, :]
        return allowed, prior + self.frequency.weight[:, 0][cell]

    def log_gates(self, hidden: Tensor) -> tuple[Tensor, Tensor]:
        """``(log g, log(1 - g))``, each ``[B, L]``."""
        logit = self.gate(hidden.float()).squeeze(-1)
        return F.logsigmoid(logit), F.logsigmoid(-logit)


def mixture_nll(
    head: RepeatHead,
    hidden: Tensor,
    batch: Batch,
    weight: Tensor,
    labels: Tensor,
    loss: str = "ce",
    **loss_options: object,
) -> Tensor:
    """Mean negative log-likelihood of ``labels`` (``[B, L]``, ignored where < N_SPECIAL) under the
    mixture of the catalogue softmax over ``weight[N_SPECIAL:]`` and the copy distribution; the
    catalogue term is ``loss``'s (``"ce"`` or ``"sampled_softmax"`` with ``loss_options``)."""
    keep = labels >= N_SPECIAL
    if not bool(keep.any()):
        return hidden.float().sum() * 0.0
    copy = head.attention(hidden, batch)  # [B, L, L]
    # copy mass on the target's occurrences at every position, then the kept rows: dense
    # [B, L, L] products are cheaper than gathering [N, L] rows of ``copy`` (and scattering back)
    match = batch.items[:, None, :] == labels[:, :, None]  # [B, L, L]: occurrences of the target
    copied_all = (copy * match).sum(-1)  # [B, L]
    log_g, log_not_g = head.log_gates(hidden)
    rows, cols = keep.nonzero(as_tuple=True)
    targets = labels[rows, cols]
    log_catalogue = target_log_softmax(hidden[rows, cols], weight, targets, loss, **loss_options)
    copied = copied_all[rows, cols]
    log_copied = torch.log(copied.clamp(min=1e-30)).where(copied > 0, float("-inf"))
    log_p = torch.logaddexp(log_not_g[rows, cols] + log_catalogue, log_g[rows, cols] + log_copied)
    return -log_p.mean()


def newest_copy(head: RepeatHead, hidden: Tensor, batch: Batch) -> tuple[Tensor, Tensor, Tensor]:
    """``(copy, log_g, log_not_g)`` at each history's newest position: ``[B, L]`` copy weights of
    its events (their items are ``batch.items``) and ``[B]`` the gate's two log-weights."""
    rows = torch.arange(len(batch), device=hidden.device)
    last = (batch.lengths - 1).clamp(min=0)
    copy = head.attention(hidden, batch, last[:, None])[:, 0]
    log_g, log_not_g = head.log_gates(hidden)
    return copy, log_g[rows, last], log_not_g[rows, last]
