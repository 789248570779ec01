"""The sampled catalogue term: shared candidates drawn per batch, and the logQ-corrected estimate
of each row's log-softmax at its target. Its cost depends on the candidates, not the catalogue."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from seqenc.errors import SeqencError
from seqenc.model.batch import N_SPECIAL
from seqenc.model.masking import randint

SAMPLERS = ("mixed", "catalogue", "in_batch")
N_NEGATIVES = 1024  # candidates per step of the sampled softmax
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
    ``None``), ``"mixed"`` half each. For mixed draws the expected count sums both proposals (the
    balance heuristic of multiple importance sampling), which keeps the estimate unbiased.
    """
    if sampler not in SAMPLERS:
        raise SeqencError(f"sampled_softmax: sampler={sampler!r} not in {SAMPLERS}")
    if n_negatives < 1:
        raise SeqencError(f"sampled_softmax: n_negatives={n_negatives} must be >= 1")
    n_batch = {"mixed": n_negatives // 2, "catalogue": 0, "in_batch": n_negatives}[sampler]
    n_other = n_negatives - n_batch
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


def sampled_log_softmax(
    hidden: Tensor,
    weight: Tensor,
    targets: Tensor,
    n_negatives: int = N_NEGATIVES,
    sampler: str = "mixed",
    generator: torch.Generator | None = None,
    proposal: Proposal | None = None,
) -> Tensor:
    """``[N]`` float32 estimate of each row's ``log softmax(hidden @ weight[3:].T)`` at its target:
    the exact target logit against ``log(e^{s+} + sum_j e^{s_j} / E[count_j])`` over the shared
    candidates j (:func:`sample_candidates`), a candidate equal to the row's target dropped.

    Rows must be kept rows (targets >= N_SPECIAL). Item vectors are gathered with sparse
    gradients, so a step's update of the item table touches only the rows it read.
    """
    candidates, log_count = sample_candidates(
        targets, weight.shape[0], n_negatives, sampler, generator, proposal
    )
    positive = (hidden * F.embedding(targets, weight, sparse=True)).sum(-1).float()
    negative = (hidden @ F.embedding(candidates, weight, sparse=True).T).float() - log_count
    negative = negative.masked_fill(candidates[None, :] == targets[:, None], float("-inf"))
    return positive - torch.logaddexp(positive, torch.logsumexp(negative, dim=1))
