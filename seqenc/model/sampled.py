"""The sampled catalogue term: shared candidates drawn per batch, and the logQ-corrected estimate
of each row's log-softmax at its target. Its cost depends on the candidates, not the catalogue."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.autograd.function import once_differentiable
from torch.linalg import vector_norm

from seqenc.errors import SeqencError
from seqenc.model.batch import N_SPECIAL
from seqenc.model.masking import randint
from seqenc.model.workspace import lending

SAMPLERS = ("mixed", "mixed_uniform", "catalogue", "uniform", "in_batch")
# Which rows' normalisers train the item table (seqenc.model.losses.partly_exact_log_softmax).
ITEM_GRADIENTS = ("all_rows", "exact_rows")
# The default: the exact rows' alone. The sampled rows' candidates, weighted by 1 / E[count], give a
# rare item's row a rare large gradient that shrinks its Adam steps; on real catalogues this ranks
# closer to the exact softmax at no more cost (docs/scale.md).
ITEM_GRADIENT = "exact_rows"
N_NEGATIVES = 4096  # candidates per step of the sampled softmax
# At most this share of a step's rows get the exact normaliser (and never more rows than make its
# cost the candidates' own): under Adam the exact term moves every item row at every step, which a
# few exact rows restore (docs/scale.md measures it).
EXACT_SHARE = 0.1
FREQUENCY_POWER = 0.75  # the frequency proposal flattened toward the tail, as word2vec's


@dataclass
class Proposal:
    """A distribution over item ids to draw shared negatives from: the training items' counts
    (plus one, so every real item can be drawn) raised to :data:`FREQUENCY_POWER`."""

    probs: Tensor  # [n_items] float64, 0 for the special ids
    cdf: Tensor  # [n_items] float64, its running sum

    @classmethod
    def from_counts(cls, counts: Tensor, power: float = FREQUENCY_POWER) -> Proposal:
        weights = (counts.double() + 1.0).pow(power)
        weights[:N_SPECIAL] = 0.0
        probs = weights / weights.sum()
        return cls(probs, probs.cumsum(0))

    def to(self, device: torch.device) -> Proposal:
        return Proposal(self.probs.to(device), self.cdf.to(device))

    def draw(self, k: int, generator: torch.Generator | None, device: torch.device) -> Tensor:
        """``[k]`` item ids drawn with replacement (inverse CDF: no per-step pass over the items)."""
        source = generator.device if generator is not None else device
        u = torch.rand(k, generator=generator, dtype=torch.float64, device=source).to(device)
        ids = torch.searchsorted(self.cdf, u * self.cdf[-1], right=True)
        return ids.clamp(N_SPECIAL, len(self.cdf) - 1)


def sample_candidates(
    targets: Tensor,
    n_items: int,
    n_negatives: int,
    sampler: str = "mixed",
    generator: torch.Generator | None = None,
    proposal: Proposal | None = None,
) -> tuple[Tensor, Tensor]:
    """``(candidates, log_count)``: ``[K]`` item ids shared by every row of a batch and the log of
    each one's expected number of copies among the K draws, the logQ correction.

    ``"in_batch"`` draws from the batch's ``targets`` (hard negatives: what this batch asks for),
    ``"catalogue"`` from ``proposal`` (the training item frequency; all real items alike when
    ``None``), ``"mixed"`` half each; ``"uniform"`` and ``"mixed_uniform"`` as ``"catalogue"`` and
    ``"mixed"`` with all real items alike (``proposal`` ignored: the tail drawn as often as the
    head, so each of its rows is updated as often). For mixed draws the expected count
    sums both proposals (the balance heuristic of multiple importance sampling), which keeps the
    estimate unbiased.
    """
    if sampler not in SAMPLERS:
        raise SeqencError(f"sampled_softmax: sampler={sampler!r} not in {SAMPLERS}")
    if n_negatives < 1:
        raise SeqencError(f"sampled_softmax: n_negatives={n_negatives} must be >= 1")
    n_batch = {"catalogue": 0, "uniform": 0, "in_batch": n_negatives}.get(sampler, n_negatives // 2)
    n_other = n_negatives - n_batch
    proposal = None if sampler.endswith("uniform") else proposal
    device = targets.device
    from_batch = targets[randint(0, len(targets), (n_batch,), generator, device)]
    if proposal is None:
        other = randint(N_SPECIAL, n_items, (n_other,), generator, device)
    else:
        other = proposal.draw(n_other, generator, device)
    candidates = torch.cat([from_batch, other])
    if proposal is None:
        count = torch.full((len(candidates),), n_other / (n_items - N_SPECIAL), device=device)
    else:
        count = (proposal.probs[candidates] * n_other).float()
    if n_batch:  # copies of each candidate among the targets, without an [n_items] table
        values, copies = torch.unique(targets, return_counts=True)
        at = torch.searchsorted(values, candidates).clamp(max=len(values) - 1)
        found = torch.where(values[at] == candidates, copies[at], 0)
        count = count + found.float() * (n_batch / len(targets))
    return candidates, count.log()


def distinct_items(items: Tensor) -> Tensor:
    """``[G, M]``: each row's distinct real items (ids >= N_SPECIAL; ids below are padding) in
    ascending order, then padding (0); ``M`` the most any row holds."""
    items = items.sort(dim=1).values
    first = items >= N_SPECIAL
    first[:, 1:] &= items[:, 1:] != items[:, :-1]
    width = max(int(first.sum(1).max()), 1)
    front = torch.argsort((~first).to(torch.uint8), dim=1, stable=True)[:, :width]
    return items.gather(1, front).where(first.gather(1, front), 0)


def _segments(counts: Tensor) -> tuple[Tensor, Tensor]:
    """``(segment, place)`` of every element of segments of sizes ``counts``, laid end to end."""
    segment = torch.repeat_interleave(torch.arange(len(counts), device=counts.device), counts)
    place = torch.arange(len(segment), device=counts.device) - (counts.cumsum(0) - counts)[segment]
    return segment, place


def _by_group(group: Tensor, n_groups: int) -> tuple[Tensor, Tensor, Tensor]:
    """``(order, counts, place)``: the rows sorted by group (stable), each group's number of rows
    and each row's place among its group's rows."""
    order = torch.argsort(group, stable=True)
    counts = torch.bincount(group, minlength=n_groups)
    place = torch.empty_like(group)
    place[order] = _segments(counts)[1]
    return order, counts, place


def own_scores(
    hidden: Tensor, weight: Tensor, groups: tuple[Tensor, Tensor]
) -> tuple[Tensor, Tensor]:
    """``(scores, items)``: each row's exact scores ``[N, M]`` of its group's distinct items
    ``[G, M]`` (:func:`distinct_items`; ``-inf`` on padding: an item counts once).

    ``groups = (group, items)``: ``group [N]`` the group of each row, ``items [G, W]`` the item ids
    of each group's window (ids below N_SPECIAL are padding). The rows of a group are laid out
    ``[G, R, d]`` and scored in one batched matmul, never as ``[N, M, d]`` gathered vectors.
    """
    group, items = groups[0], distinct_items(groups[1])
    _, counts, place = _by_group(group, len(items))
    rows = hidden.new_zeros(len(items), int(counts.max()), hidden.shape[1])
    rows = rows.index_put((group, place), hidden)
    vectors = F.embedding(items, weight, sparse=True)  # [G, M, d]
    scores = torch.bmm(rows, vectors.transpose(1, 2))[group, place].float()
    return scores.masked_fill(items[group] < N_SPECIAL, float("-inf")), items


def window_groups(items: Tensor, labels: Tensor) -> tuple[Tensor, Tensor]:
    """The ``groups`` of :func:`sampled_log_softmax` for the kept rows (``labels >= N_SPECIAL``,
    in order) of a ``[B, L]`` batch: each row's sequence, whose window is its items and targets."""
    return (labels >= N_SPECIAL).nonzero()[:, 0], torch.cat([items, labels.clamp(min=0)], dim=1)


def hits(candidates: Tensor, group: Tensor, items: Tensor) -> tuple[Tensor, Tensor]:
    """``(rows, cols)``: every (row, candidate) pair whose candidate is among the items of the
    row's group (``items [G, M]``, padding below N_SPECIAL). Found by binary search in the sorted
    candidates, so the cost grows with the pairs, never with rows x candidates."""
    values, perm = candidates.sort()
    low = torch.searchsorted(values, items)
    found = (torch.searchsorted(values, items, right=True) - low) * (items >= N_SPECIAL)
    entry, k = _segments(found.flatten())  # entry: a flat (group, item) index
    pair_group, pair_col = entry // items.shape[1], perm[low.flatten()[entry] + k]
    order, counts, _ = _by_group(group, len(items))
    pair, place = _segments(counts[pair_group])
    starts = counts.cumsum(0) - counts
    return order[starts[pair_group[pair]] + place], pair_col[pair]


class _SharedLogSumExp(torch.autograd.Function):
    """Each row's ``logsumexp`` of ``hidden @ vectors.T - log_count`` with the pairs ``(rows,
    cols)`` left out: three passes over the ``[N, K]`` logits (the matmul into ``matrix``'s
    workspace, the logQ shift, ``exp`` in place and its row sums; no shift for ``log_count``
    ``None``), whose exponentials are kept for the two matmuls of the backward pass. ``-inf``
    (gradient 0) for a row whose every candidate is left out."""

    @staticmethod
    def forward(ctx, hidden, vectors, log_count, rows, cols, matrix):
        with torch.autocast(hidden.device.type, enabled=False):
            h, v = hidden.float(), vectors.float()
            logits = torch.mm(h, v.T, out=matrix(len(h), len(v), h.device))
            if log_count is not None:
                logits.sub_(log_count)
            if len(rows):
                logits.index_put_((rows, cols), torch.tensor(float("-inf"), device=h.device))
            # |logit| <= |h| |v| + |log_count|: below 80 - ln(K), exp neither overflows nor
            # underflows in float32 and no max is subtracted (as in the exact term)
            bound = vector_norm(h, dim=1).max() * vector_norm(v, dim=1).max()
            if log_count is not None and len(log_count):
                bound = bound + log_count.abs().max()
            shift = torch.zeros(len(h), 1, device=h.device)
            if bool(bound > 80.0 - math.log(max(len(v), 1))):
                shift = logits.amax(1, keepdim=True).nan_to_num(0.0, 0.0, 0.0)
                logits.sub_(shift)
            exp = logits.exp_()
            sums = exp.sum(1)
        ctx.save_for_backward(h, v, exp, sums)
        ctx.dtypes = hidden.dtype, vectors.dtype
        return sums.log() + shift[:, 0]

    @staticmethod
    @once_differentiable  # exp (a lent workspace) is read here, never by a graph of this pass
    def backward(ctx, grad_out):
        h, v, exp, sums = ctx.saved_tensors
        scale = (grad_out / sums).where(sums > 0, 0.0)[:, None]
        grad_h = grad_v = None  # a matmul each, skipped where no gradient is asked for
        if ctx.needs_input_grad[0]:
            grad_h = ((exp @ v) * scale).to(ctx.dtypes[0])
        if ctx.needs_input_grad[1]:
            grad_v = (exp.T @ (h * scale)).to(ctx.dtypes[1])
        return grad_h, grad_v, None, None, None, None


class _ScaleGradient(torch.autograd.Function):
    """The identity whose backward multiplies the gradient by ``factor``."""

    @staticmethod
    def forward(ctx, x, factor):
        ctx.factor = factor
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        return grad * ctx.factor, None


def scale_gradient(x: Tensor, factor: float) -> Tensor:
    """``x`` unchanged, its gradient multiplied by ``factor``: the exact rows' share of the item
    table's gradient stands for every row's (:func:`~seqenc.model.losses.partly_exact_log_softmax`)."""
    return _ScaleGradient.apply(x, factor)


def shared_logsumexp(
    hidden: Tensor,
    vectors: Tensor,
    log_count: Tensor | None = None,
    left_out: tuple[Tensor, Tensor] | None = None,
) -> Tensor:
    """``[N]`` float32 ``logsumexp(hidden @ vectors.T - log_count, dim=1)`` with the ``left_out``
    ``(rows, cols)`` pairs excluded, at three passes over the logits (:class:`_SharedLogSumExp`)."""
    if left_out is None:
        left_out = (torch.zeros(0, dtype=torch.long, device=hidden.device),) * 2
    with lending() as matrix:  # the logits' memory: reused, never while a backward may read it
        return _SharedLogSumExp.apply(hidden, vectors, log_count, *left_out, matrix)


def sampled_log_softmax(
    hidden: Tensor,
    weight: Tensor,
    targets: Tensor,
    n_negatives: int = N_NEGATIVES,
    sampler: str = "mixed",
    generator: torch.Generator | None = None,
    proposal: Proposal | None = None,
    own_items: bool = True,
    groups: tuple[Tensor, Tensor] | None = None,
    table_gradient: bool = True,
) -> Tensor:
    """``[N]`` float32 estimate of each row's ``log softmax(hidden @ weight[3:].T)`` at its target.

    The normaliser is split in two: the items of the row's own window (``groups``, see
    :func:`own_scores`; used when ``own_items``), summed exactly, and the rest of the catalogue,
    estimated from shared candidates j (:func:`sample_candidates`) as ``sum_j e^{s_j} /
    E[count_j]`` over the candidates outside the row's window (and other than its target). Each
    item is counted once in expectation, so the split keeps the logQ estimate unbiased while the
    items a row is most likely to confuse with its target (its history, which the repeat head
    copies from) are never left to chance. Without ``groups`` only the target is exact.

    Rows must be kept rows (targets >= N_SPECIAL). Item vectors are gathered with sparse
    gradients, so a step's update of the item table touches only the rows it read. Without
    ``table_gradient`` the normaliser (window and candidates) gives the item table no gradient:
    only the target's score does, and ``hidden`` gets its gradient as before.
    """
    candidates, log_count = sample_candidates(
        targets, weight.shape[0], n_negatives, sampler, generator, proposal
    )
    each = torch.arange(len(targets), device=targets.device)
    if not own_items or groups is None:  # every row its own group, of its target alone
        groups = (each, targets[:, None])
    positive = (hidden * F.embedding(targets, weight, sparse=True)).sum(-1).float()
    weight = weight if table_gradient else weight.detach()  # the normaliser's table
    scores, items = own_scores(hidden, weight, groups)
    missing = ~(items[groups[0]] == targets[:, None]).any(1)  # a target outside its window
    target = positive if table_gradient else (hidden * weight[targets]).sum(-1).float()
    own = torch.cat([target.where(missing, float("-inf"))[:, None], scores], dim=1)
    # left out of the sampled part: the candidates in the row's window, and its target
    pairs = [hits(candidates, groups[0], items), hits(candidates, each, targets[:, None])]
    rows, cols = (torch.cat(part) for part in zip(*pairs, strict=True))
    vectors = F.embedding(candidates, weight, sparse=True)
    negative = shared_logsumexp(hidden, vectors, log_count.float(), (rows, cols))
    return positive - torch.logaddexp(torch.logsumexp(own, dim=1), negative)
