"""Full-ranking leave-one-out metrics: HR@K, NDCG@K and MRR over every item of the catalogue, and the
share of targets that repeat an item of their history."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
from torchmetrics import Metric


def target_ranks(scores: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """0-based rank of each row's target among all columns of ``scores``.

    Ties count against the target (pessimistic), so a constant scorer ranks every target last
    instead of first.
    """
    target_score = scores.gather(1, target[:, None])
    ahead = (scores > target_score) | (scores == target_score)
    return ahead.sum(1) - 1


class RankingMetrics(Metric):
    """Accumulates HR@K, NDCG@K (one relevant item, so IDCG = 1) and MRR; sums reduce under DDP.
    HR@1 (the first slot, what a next-activity user acts on) is always reported, whatever ``ks``.
    Sums of squares are kept too, for each metric's confidence interval (:meth:`half_widths`)."""

    full_state_update = False
    higher_is_better = True

    def __init__(self, ks: Sequence[int] = (10, 20), **kwargs: Any) -> None:
        super().__init__(**kwargs)  # torchmetrics' options, e.g. sync_on_compute
        self.ks = tuple(ks)
        self.hit_ks = tuple(sorted({1, *self.ks}))
        self.names = [f"hr@{k}" for k in self.hit_ks] + [f"ndcg@{k}" for k in self.ks] + ["mrr"]
        for name in self.names:
            for kind in ("sum", "sq"):
                zero = torch.tensor(0.0, dtype=torch.float64)
                self.add_state(f"{kind}_{name}", zero, dist_reduce_fx="sum")
        self.add_state("repeats", torch.tensor(0, dtype=torch.int64), dist_reduce_fx="sum")
        self.add_state("count", torch.tensor(0, dtype=torch.int64), dist_reduce_fx="sum")

    def update(
        self,
        scores: torch.Tensor | None,
        target: torch.Tensor | None = None,
        repeat: torch.Tensor | None = None,
        ranks: torch.Tensor | None = None,
    ) -> None:
        """``scores``: ``[B, n_items]`` (filtered items set to -inf) with ``target``: ``[B]`` item
        ids; or ``scores=None`` and ``ranks``: ``[B]`` 0-based ranks already computed (``inf`` for
        a filtered target; the chunked ranking of :mod:`seqenc.model.ranking`). ``repeat``:
        ``[B]`` bool, whether each target already occurs in its history.

        A target scored -inf (filtered out, e.g. a repeated item under the seen-item filter) is a
        miss at every K and adds 0 to MRR, however small the catalogue.
        """
        if scores is not None:
            ranks = target_ranks(scores, target).double()
            filtered = scores.gather(1, target[:, None]).squeeze(1) == -torch.inf
            ranks = ranks.masked_fill(filtered, torch.inf)
        rank = ranks.double()
        values = {f"hr@{k}": (rank < k).double() for k in self.hit_ks}
        for k in self.ks:
            values[f"ndcg@{k}"] = torch.where(rank < k, 1.0 / torch.log2(rank + 2.0), 0.0)
        values["mrr"] = 1.0 / (rank + 1.0)
        for name, value in values.items():
            setattr(self, f"sum_{name}", getattr(self, f"sum_{name}") + value.sum())
            setattr(self, f"sq_{name}", getattr(self, f"sq_{name}") + value.square().sum())
        self.count += rank.numel()
        if repeat is not None:
            self.repeats += repeat.sum()

    def compute(self) -> dict[str, torch.Tensor]:
        n = self.count.clamp(min=1).double()
        out = {name: getattr(self, f"sum_{name}") / n for name in self.names}
        out["repeat_targets"] = self.repeats / n  # share of targets already in their history
        return {name: value.float() for name, value in out.items()}

    def half_widths(self) -> dict[str, float]:
        """Half-width of each metric's confidence interval at the 0.95 level over the evaluated targets
        (normal approximation of a mean: 1.96 standard errors). Under DDP the states are summed
        over the processes first, as :meth:`compute` does, so every process must call it."""
        with self.sync_context(dist_sync_fn=self.dist_sync_fn, should_sync=self.sync_on_compute):
            n = max(int(self.count), 1)
            out = {}
            for name in self.names:
                mean = float(getattr(self, f"sum_{name}")) / n
                variance = max(float(getattr(self, f"sq_{name}")) / n - mean**2, 0.0)
                out[name] = 1.96 * math.sqrt(variance / max(n - 1, 1))
        return out
