"""Full-ranking leave-one-out metrics: HR@K, NDCG@K and MRR over every item of the catalogue, and the
share of targets that repeat an item of their history."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
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


@dataclass(frozen=True)
class Ranking:
    """How a next-event fit is evaluated (``model.ks``, ``model.filter_seen``).

    Attributes:
        ks: cut-offs for HR@K and NDCG@K (recall@K and NDCG@K over the target basket under the
            basket protocol: :class:`BasketMetrics`).
        filter_seen: drop the history's items from the ranking at evaluation (a repeated target
            is then a miss). ``None``: on when few events repeat an earlier item of their entity
            (MovieLens-style logs); where repeats are common, ranking them is the task.
    """

    ks: tuple[int, ...] = (10, 20)
    filter_seen: bool | None = None


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
        over the processes first, as :meth:`compute` does, so every process must call it. Fewer
        than two targets have no interval: none is returned."""
        with self.sync_context(dist_sync_fn=self.dist_sync_fn, should_sync=self.sync_on_compute):
            n = int(self.count)
            out = {}
            if n < 2:
                return out
            for name in self.names:
                mean = float(getattr(self, f"sum_{name}")) / n
                variance = max(float(getattr(self, f"sq_{name}")) / n - mean**2, 0.0)
                out[name] = 1.96 * math.sqrt(variance / (n - 1))
        return out


def basket_ranks(scores: torch.Tensor, target_sets: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """``(row, item, rank)`` of each distinct (row, item) pair of ``target_sets`` (``[2, T]``):
    the 0-based pessimistic rank of the item among all columns of its row (as
    :func:`target_ranks`), ``inf`` where it is scored -inf (filtered: a miss at every K)."""
    n = scores.shape[1]
    pair = torch.unique(target_sets[0] * n + target_sets[1])  # sorted: rows in order
    row, item = pair // n, pair % n
    counts = torch.bincount(row, minlength=len(scores))
    slot = torch.arange(len(row), device=row.device) - (torch.cumsum(counts, 0) - counts)[row]
    width = int(counts.max()) if len(row) else 0
    values = torch.full((len(scores), width), torch.inf, dtype=scores.dtype, device=scores.device)
    target_score = scores[row, item]
    values[row, slot] = target_score
    ahead = n - torch.searchsorted(scores.sort(1).values.contiguous(), values.contiguous())
    rank = (ahead[row, slot] - 1).double()
    return row, item, rank.masked_fill(target_score == -torch.inf, torch.inf)


class BasketMetrics(Metric):
    """Next-basket metrics over a held-out set of items (the basket protocol,
    :mod:`seqenc.data.baskets`), averaged over baskets, as in the next-basket literature (Li et al.,
    "A Next Basket Recommendation Reality Check", TOIS 2023):

    - ``recall@K``: share of the basket's distinct items in the top K;
    - ``ndcg@K``: DCG of the basket's items in the top K over the ideal DCG of ``min(K, |basket|)``;
    - ``hr@1``: an item of the basket is ranked first;
    - ``repeat_targets``: share of the basket's items already in the history; ``recall_rep@K`` and
      ``recall_new@K``: recall on those items and on the others, over the baskets that have any.
    """

    full_state_update = False
    higher_is_better = True

    def __init__(self, ks: Sequence[int] = (10, 20), **kwargs: Any) -> None:
        super().__init__(**kwargs)  # torchmetrics' options, e.g. sync_on_compute
        self.ks = tuple(ks)
        names = ["hr_1", "repeat_targets", "n_rep", "n_new"]
        names += [
            f"{m}_{k}" for k in self.ks for m in ("recall", "ndcg", "recall_rep", "recall_new")
        ]
        for name in names:
            self.add_state(name, torch.tensor(0.0, dtype=torch.float64), dist_reduce_fx="sum")
        self.add_state("count", torch.tensor(0, dtype=torch.int64), dist_reduce_fx="sum")

    def update(
        self, scores: torch.Tensor, target_sets: torch.Tensor, seen: torch.Tensor | None = None
    ) -> None:
        """``scores``: ``[B, n_items]`` (filtered items -inf); ``target_sets``: ``[2, T]`` (row,
        item) pairs of each row's basket (every row has one); ``seen``: ``[B, n_items]`` bool, the
        items of each row's history."""
        row, item, rank = basket_ranks(scores, target_sets)
        n_rows = len(scores)
        size = torch.bincount(row, minlength=n_rows).double()
        repeat = seen[row, item] if seen is not None else torch.zeros_like(row, dtype=torch.bool)
        n_rep = torch.bincount(row, weights=repeat.double(), minlength=n_rows)
        self.hr_1 += (torch.bincount(row, weights=(rank < 1).double(), minlength=n_rows) > 0).sum()
        self.repeat_targets += (n_rep / size).sum()
        self.n_rep += (n_rep > 0).sum()
        self.n_new += (size - n_rep > 0).sum()
        for k in self.ks:
            hit = (rank < k).double()
            gain = torch.where(rank < k, 1.0 / torch.log2(rank + 2.0), torch.zeros_like(rank))
            ideal = (1.0 / torch.log2(torch.arange(k, dtype=torch.float64) + 2.0)).cumsum(0)
            idcg = ideal.to(size.device)[size.long().clamp(1, k) - 1]
            hits = torch.bincount(row, weights=hit, minlength=n_rows)
            rep_hits = torch.bincount(row, weights=hit * repeat, minlength=n_rows)
            setattr(self, f"recall_{k}", getattr(self, f"recall_{k}") + (hits / size).sum())
            dcg = torch.bincount(row, weights=gain, minlength=n_rows)
            setattr(self, f"ndcg_{k}", getattr(self, f"ndcg_{k}") + (dcg / idcg).sum())
            rep = (rep_hits / n_rep).nan_to_num(0.0).sum()
            new = ((hits - rep_hits) / (size - n_rep)).nan_to_num(0.0).sum()
            setattr(self, f"recall_rep_{k}", getattr(self, f"recall_rep_{k}") + rep)
            setattr(self, f"recall_new_{k}", getattr(self, f"recall_new_{k}") + new)
        self.count += n_rows

    def compute(self) -> dict[str, torch.Tensor]:
        n = self.count.clamp(min=1).double()
        out = {"hr@1": self.hr_1 / n}
        for k in self.ks:
            out[f"recall@{k}"] = getattr(self, f"recall_{k}") / n
            out[f"ndcg@{k}"] = getattr(self, f"ndcg_{k}") / n
            out[f"recall_rep@{k}"] = getattr(self, f"recall_rep_{k}") / self.n_rep.clamp(min=1)
            out[f"recall_new@{k}"] = getattr(self, f"recall_new_{k}") / self.n_new.clamp(min=1)
        out["repeat_targets"] = self.repeat_targets / n  # share of basket items already seen
        return {name: value.float() for name, value in out.items()}
