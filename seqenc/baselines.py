"""Trivial next-item baselines on the model's own leave-one-out split: popularity and repeat-recent.

A model's ranking metrics mean little alone: on an event stream dominated by repeats, "the entity's
most recent distinct items" can beat a trained model, and on a catalogue with a strong head,
"the most popular items" sets the floor. Both rank the full catalogue with the same
:class:`~seqenc.metrics.RankingMetrics` as the model, so their figures sit beside its figures.

- **popularity**: items ranked by their count in the training part of the split (each entity's
  events but the last two), ties broken by the smaller item id;
- **repeat**: items of the sample's history first, the most recently used first (an item's score
  is the position of its last occurrence); items the entity never used follow in popularity order.

The history of a sample is its whole input ``[start, end)``, not truncated to the model's
``history_len``, the same events the evaluation's seen-item filter removes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import torch

from seqenc.data.split import SequenceView, flat_events
from seqenc.data.vocab import N_SPECIAL
from seqenc.metrics import RankingMetrics

BASELINES = ("popularity", "repeat")

# Sums a tensor over the processes of a run whose entities are sharded (every process calls it).
Reduce = Callable[[torch.Tensor], torch.Tensor]


def item_counts(train_view: SequenceView, n_items: int | None = None) -> np.ndarray:
    """``[n_items]`` int64 occurrences of each item id in the input events of ``train_view``."""
    _, event = flat_events(train_view, np.arange(len(train_view)))
    minlength = int(train_view.store.items.max(initial=N_SPECIAL - 1)) + 1
    return np.bincount(train_view.store.items[event], minlength=max(minlength, n_items or 0))


def popularity_ranks(counts: np.ndarray) -> np.ndarray:
    """``[n_items]`` int64 0-based popularity rank of each real item: more counts first, then
    smaller ids (distinct, so no ties); the special ids rank behind every real item."""
    order = np.lexsort((np.arange(len(counts)), -counts))  # count descending, then id ascending
    order = order[order >= N_SPECIAL]
    ranks = np.full(len(counts), len(counts), dtype=np.int64)
    ranks[order] = np.arange(len(order))
    return ranks


def target_ranks(
    method: str, view: SequenceView, popularity: np.ndarray, filter_seen: bool
) -> np.ndarray:
    """``[len(view)]`` float64 0-based rank of each target under a baseline, ``inf`` if filtered.

    Computed from each history's distinct items, never a score per catalogue item: popularity
    ranks the target by its popularity rank, less the seen items ahead of it when they are
    filtered; repeat-recent puts the history first (the last used first), then popularity.
    """
    target = view.store.items[view.targets]
    sample, event = flat_events(view, np.arange(len(view)))
    items = view.store.items[event]
    real = items >= N_SPECIAL
    sample, event, items = sample[real], event[real], items[real]
    # each history's distinct items with their last use (events are oldest first)
    order = np.lexsort((event, items, sample))
    sample, event, items = sample[order], event[order], items[order]
    last = np.ones(len(sample), dtype=bool)
    last[:-1] = (sample[1:] != sample[:-1]) | (items[1:] != items[:-1])
    sample, event, items = sample[last], event[last], items[last]
    n = len(view)
    is_target = items == target[sample]
    seen = np.bincount(sample[is_target], minlength=n) > 0
    more_popular = np.bincount(
        sample, weights=popularity[items] < popularity[target[sample]], minlength=n
    )
    rank = (popularity[target] - more_popular).astype(np.float64)  # among the unseen items
    if method == "repeat" and not filter_seen:
        target_use = np.zeros(n, dtype=np.int64)
        target_use[sample[is_target]] = event[is_target]
        used_later = np.bincount(sample, weights=event > target_use[sample], minlength=n)
        distinct = np.bincount(sample, minlength=n)
        rank = np.where(seen, used_later, distinct + rank)
    elif method == "popularity" and not filter_seen:
        rank = popularity[target].astype(np.float64)
    return np.where((target < N_SPECIAL) | (seen & filter_seen), np.inf, rank)


def ranking_metrics(
    method: str,
    eval_view: SequenceView,
    counts: np.ndarray,
    ks: Sequence[int] = (10, 20),
    filter_seen: bool = False,
    reduce: Reduce | None = None,
) -> dict[str, float]:
    """The metrics of :class:`~seqenc.metrics.RankingMetrics` (``hr@K``, ``ndcg@K``, ``mrr``) of
    one baseline (``"popularity"`` or ``"repeat"``) on the targets of ``eval_view``.

    ``counts``: training item counts (:func:`item_counts`). ``filter_seen``: the honest filter,
    every item of the sample's history is removed from the ranking, the target included, so a
    repeated target is a miss (repeat-recent then ranks like popularity over unseen items).
    ``reduce``: the metrics of every process's targets, each process holding its own entities.
    """
    if method not in BASELINES:
        raise ValueError(f"unknown baseline {method!r}; known: {list(BASELINES)}")
    if eval_view.targets is None:
        raise ValueError("the evaluation view has no targets (use the val or test split)")
    n_items = max(len(counts), int(eval_view.store.items.max(initial=0)) + 1)
    popularity = popularity_ranks(np.pad(counts, (0, n_items - len(counts))))
    metrics = RankingMetrics(ks, sync_on_compute=False)  # summed by ``reduce`` only
    ranks = target_ranks(method, eval_view, popularity, filter_seen)
    metrics.update(None, ranks=torch.from_numpy(ranks))
    if reduce is not None:
        for name, value in metrics.metric_state.items():
            setattr(metrics, name, reduce(value))
    values = metrics.compute()
    values.pop("repeat_targets")  # see baseline_metrics' share_repeat_targets
    return {name: float(value) for name, value in values.items()}


def repeat_targets(view: SequenceView) -> np.ndarray:
    """``[len(view)]`` bool: the sample's target item occurs in its history (a repeat)."""
    if view.targets is None:
        raise ValueError("the view has no targets (use the val or test split)")
    sample, event = flat_events(view, np.arange(len(view)))
    target = view.store.items[view.targets]
    hit = view.store.items[event] == target[sample]
    return (np.bincount(sample[hit], minlength=len(view)) > 0) & (target >= N_SPECIAL)


def baseline_metrics(
    train_view: SequenceView,
    eval_view: SequenceView,
    ks: Sequence[int] = (10, 20),
    filter_seen: bool = False,
    n_items: int | None = None,
    reduce: Reduce | None = None,
) -> dict[str, float]:
    """Both baselines on ``eval_view`` with popularity from ``train_view``, and the repeat share.

    Keys: ``popularity/<metric>`` and ``repeat/<metric>`` for every metric of
    :class:`~seqenc.metrics.RankingMetrics`, ``n_targets``, ``n_repeat_targets`` (targets already
    in their history) and ``share_repeat_targets`` (their share of all targets).

    ``reduce`` (with ``n_items``, the vocabulary's size, so every process counts as many items):
    each process holds its own entities, and the popularity counts, the metrics and the repeat
    share are those of all of them (every process must call this).
    """
    counts = item_counts(train_view, n_items)
    if reduce is not None:
        counts = reduce(torch.from_numpy(counts)).numpy()
    out = {
        f"{method}/{name}": value
        for method in BASELINES
        for name, value in ranking_metrics(
            method, eval_view, counts, ks, filter_seen, reduce
        ).items()
    }
    repeats = torch.tensor([int(repeat_targets(eval_view).sum()), len(eval_view)])
    n_repeats, n_targets = (reduce(repeats) if reduce is not None else repeats).tolist()
    out["n_targets"] = float(n_targets)
    out["n_repeat_targets"] = float(n_repeats)
    out["share_repeat_targets"] = n_repeats / n_targets if n_targets else 0.0
    return out
