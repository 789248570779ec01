"""Trivial next-item baselines on the model's split, ranking the full catalogue with its metrics:

- **popularity**: items by their count in the training part of the split, ties by smaller id;
- **repeat**: the history's items first, the most recently used first, then popularity (its HR@1
  is "repeat the last item");
- **topfreq** (P-TopFreq): the history's items first, the most often used first (ties: the most
  recent), then popularity;
- **timedecay** (with timestamps): the history's items by their purchases decayed with per-item
  rates fitted on the training part (:mod:`seqenc.training.decay`), then popularity.

Without baskets a target's rank comes from its history's distinct items (no score per item);
under the basket protocol they rank the target basket (:class:`~seqenc.training.metrics.BasketMetrics`).
The history is the sample's whole input, not cut to ``history_len``: what the seen filter removes."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import torch

from seqenc.data.batches import target_sets
from seqenc.data.split import SequenceView, flat_events
from seqenc.data.vocab import N_SPECIAL
from seqenc.training.decay import (
    DECAY_SPANS,
    decay_scores,
    decayed_history,
    interval_statistics,
    newest_basket_view,
    newest_event_view,
    scales_from,
)
from seqenc.training.metrics import BasketMetrics, RankingMetrics

BASELINES = ("popularity", "repeat", "topfreq", "timedecay")  # timedecay: with timestamps
BASKET_BASELINES = ("popularity", "topfreq", "timedecay", "repeat")
_BLOCK_CELLS = 1 << 22  # basket protocol: samples x items per dense score block (float64)

# Sums a tensor over the processes of a run whose entities are sharded (every process calls it).
Reduce = Callable[[torch.Tensor], torch.Tensor]


def item_counts(train_view: SequenceView, n_items: int | None = None) -> np.ndarray:
    """``[n_items]`` int64 occurrences of each item id in the input events of ``train_view``."""
    _, event = flat_events(train_view, np.arange(len(train_view)))
    minlength = int(train_view.store.items.max(initial=N_SPECIAL - 1)) + 1
    return np.bincount(train_view.store.items[event], minlength=max(minlength, n_items or 0))


def popularity_scores(counts: np.ndarray) -> np.ndarray:
    """``[n_items]`` float64 strict popularity scores: more counts first, then smaller ids; the
    special ids are ``-inf``. Distinct values, so the pessimistic tie rule never applies."""
    order = np.lexsort((np.arange(len(counts)), -counts))  # count descending, then id ascending
    scores = np.empty(len(counts), dtype=np.float64)
    scores[order] = np.arange(len(counts), 0, -1, dtype=np.float64)
    scores[:N_SPECIAL] = -np.inf
    return scores


def popularity_ranks(counts: np.ndarray) -> np.ndarray:
    """``[n_items]`` int64 0-based popularity rank of each real item: more counts first, then
    smaller ids (distinct, so no ties); the special ids rank behind every real item."""
    order = np.lexsort((np.arange(len(counts)), -counts))  # count descending, then id ascending
    order = order[order >= N_SPECIAL]
    ranks = np.full(len(counts), len(counts), dtype=np.int64)
    ranks[order] = np.arange(len(order))
    return ranks


def target_ranks(
    method: str,
    view: SequenceView,
    popularity: np.ndarray,
    filter_seen: bool,
    scales: np.ndarray | None = None,
) -> np.ndarray:
    """``[len(view)]`` float64 0-based rank of each target under a baseline, ``inf`` if filtered.

    Computed from each history's distinct items, never a score per catalogue item: popularity
    ranks the target by its popularity rank, less the seen items ahead of it when they are
    filtered; the history baselines put the history first, in their order
    (:func:`_history_keys`), then the rest by popularity. ``scales``: ``timedecay``'s.
    """
    target = view.store.items[view.targets]
    sample, items, major, minor = _history_keys(method, view, popularity, scales)
    n = len(view)
    is_target = items == target[sample]
    seen = np.bincount(sample[is_target], minlength=n) > 0
    more_popular = np.bincount(
        sample, weights=popularity[items] < popularity[target[sample]], minlength=n
    )
    rank = (popularity[target] - more_popular).astype(np.float64)  # among the unseen items
    if method != "popularity" and not filter_seen:
        # the target's keys on every row of its sample, then the history items ahead of it
        t_major, t_minor = np.full(n, -np.inf), np.full(n, -np.inf)
        t_major[sample[is_target]], t_minor[sample[is_target]] = major[is_target], minor[is_target]
        ahead = (major > t_major[sample]) | ((major == t_major[sample]) & (minor > t_minor[sample]))
        distinct = np.bincount(sample, minlength=n)
        rank = np.where(seen, np.bincount(sample, weights=ahead, minlength=n), distinct + rank)
    elif method == "popularity" and not filter_seen:
        rank = popularity[target].astype(np.float64)
    return np.where((target < N_SPECIAL) | (seen & filter_seen), np.inf, rank)


def _history_keys(
    method: str, view: SequenceView, popularity: np.ndarray, scales: np.ndarray | None
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(sample, item, major, minor)``: each distinct (sample, real history item) of ``view``,
    and the keys its baseline orders the history by (greater first: ``major``, then ``minor``):
    repeat the last use; topfreq the uses, then the last use; timedecay the decayed score
    (:func:`~seqenc.training.decay.decayed_history`), then popularity."""
    if method == "timedecay":
        sample, items, score = decayed_history(view, np.arange(len(view)), scales)
        return sample, items, score, -popularity[items].astype(np.float64)
    sample, event = flat_events(view, np.arange(len(view)))
    items = view.store.items[event]
    real = items >= N_SPECIAL
    sample, event, items = sample[real], event[real], items[real]
    order = np.lexsort((event, items, sample))  # each (sample, item) run, oldest use first
    sample, event, items = sample[order], event[order], items[order]
    last = np.ones(len(sample), dtype=bool)
    last[:-1] = (sample[1:] != sample[:-1]) | (items[1:] != items[:-1])
    ends = np.flatnonzero(last)
    uses = np.diff(ends, prepend=-1).astype(np.float64)
    newest = event[ends].astype(np.float64)
    major, minor = (uses, newest) if method == "topfreq" else (newest, np.zeros(len(ends)))
    return sample[ends], items[ends], major, minor


def _block_scores(
    view: SequenceView, idx: np.ndarray, popularity: np.ndarray, method: str, filter_seen: bool
) -> torch.Tensor:
    """``[len(idx), n_items]`` float64 scores of one block of samples."""
    scores = np.broadcast_to(popularity, (len(idx), len(popularity))).copy()
    sample, event = flat_events(view, idx)
    items = view.store.items[event]
    if method in ("repeat", "topfreq"):
        # Seen items above every popularity score (which lie in 1..n_items), ordered by the
        # position of their last use (events are oldest first, so the maximum is the last use),
        # for topfreq after their count.
        position = (event - view.starts[idx][sample] + 1).astype(np.float64)
        seen_score = np.zeros_like(scores)
        np.maximum.at(seen_score, (sample, items), position)
        if method == "topfreq":
            np.add.at(seen_score, (sample, items), position.max(initial=0.0) + 1.0)
        scores = np.where(seen_score > 0, len(popularity) + seen_score, scores)
        scores[:, :N_SPECIAL] = -np.inf
    if filter_seen:
        scores[sample, items] = -np.inf
    return torch.from_numpy(scores)


def ranking_metrics(
    method: str,
    eval_view: SequenceView,
    counts: np.ndarray,
    ks: Sequence[int] = (10, 20),
    filter_seen: bool = False,
    reduce: Reduce | None = None,
    scales: np.ndarray | None = None,
) -> dict[str, float]:
    """The metrics of :class:`~seqenc.training.metrics.RankingMetrics` (``hr@K``, ``ndcg@K``, ``mrr``) of
    one baseline (one of :func:`baseline_names`) on the targets of ``eval_view``; with target
    baskets, those of :class:`~seqenc.training.metrics.BasketMetrics`.

    ``counts``: training item counts (:func:`item_counts`). ``scales``: ``timedecay``'s time
    scale per item (:func:`~seqenc.training.decay.scales_from`), needed by it alone. ``filter_seen``: the honest filter,
    every item of the sample's history is removed from the ranking, the target included, so a
    repeated target is a miss (repeat-recent then ranks like popularity over unseen items).
    ``reduce``: the metrics of every process's targets, each process holding its own entities.
    """
    known = baseline_names(eval_view)
    if method not in known:
        raise ValueError(f"unknown baseline {method!r}; known: {list(known)}")
    if eval_view.targets is None:
        raise ValueError("the evaluation view has no targets (use the val or test split)")
    n_items = max(len(counts), int(eval_view.store.items.max(initial=0)) + 1)
    counts = np.pad(counts, (0, n_items - len(counts)))
    if scales is not None:
        scales = np.pad(scales, (0, n_items - len(scales)), constant_values=1.0)
    baskets = eval_view.target_ends is not None
    if method == "timedecay" and scales is None:
        raise ValueError("the timedecay baseline needs the items' time scales (scales=)")
    if baskets:
        metrics = _basket_metrics(method, eval_view, counts, ks, filter_seen, scales)
    else:  # one rank per target from its history's distinct items: no score per item
        metrics = RankingMetrics(ks, sync_on_compute=False)  # summed by ``reduce`` only
        ranks = target_ranks(method, eval_view, popularity_ranks(counts), filter_seen, scales)
        metrics.update(None, ranks=torch.from_numpy(ranks))
    if reduce is not None:
        for name, value in metrics.metric_state.items():
            setattr(metrics, name, reduce(value))
    values = metrics.compute()
    if not baskets:
        values.pop("repeat_targets")  # see baseline_metrics' share_repeat_targets
    return {name: float(value) for name, value in values.items()}


def _basket_metrics(
    method: str,
    view: SequenceView,
    counts: np.ndarray,
    ks: Sequence[int],
    filter_seen: bool,
    scales: np.ndarray | None,
) -> BasketMetrics:
    """:class:`~seqenc.training.metrics.BasketMetrics` of one baseline, scored a block of samples at a time."""
    popularity = popularity_scores(counts)
    metrics = BasketMetrics(ks, sync_on_compute=False)  # summed by ``reduce`` only
    block = max(1, _BLOCK_CELLS // len(counts))
    for begin in range(0, len(view), block):
        idx = np.arange(begin, min(begin + block, len(view)))
        if method == "timedecay" and not filter_seen:
            scores = torch.from_numpy(decay_scores(view, idx, scales, popularity))
        else:  # with the filter, every baseline ranks the unseen items by popularity
            scores = _block_scores(view, idx, popularity, method, filter_seen)
        metrics.update(scores, target_sets(view, idx), _seen(view, idx, len(counts)))
    return metrics


def baseline_names(view: SequenceView) -> tuple[str, ...]:
    """The baselines of an evaluation view: :data:`BASKET_BASELINES` with target baskets, else
    :data:`BASELINES` (``timedecay`` only when the log has timestamps)."""
    if view.target_ends is not None:
        return BASKET_BASELINES
    return BASELINES if view.store.has_time else tuple(b for b in BASELINES if b != "timedecay")


def _seen(view: SequenceView, idx: np.ndarray, n_items: int) -> torch.Tensor:
    """``[len(idx), n_items]`` bool: the items of each sample's history."""
    sample, event = flat_events(view, idx)
    seen = np.zeros((len(idx), n_items), dtype=bool)
    seen[sample, view.store.items[event]] = True
    return torch.from_numpy(seen)


def repeat_targets(view: SequenceView) -> np.ndarray:
    """``[len(view)]`` bool: the sample's target item occurs in its history (a repeat)."""
    if view.targets is None:
        raise ValueError("the view has no targets (use the val or test split)")
    sample, event = flat_events(view, np.arange(len(view)))
    target = view.store.items[view.targets]
    hit = view.store.items[event] == target[sample]
    return (np.bincount(sample[hit], minlength=len(view)) > 0) & (target >= N_SPECIAL)


def fitted_scales(
    train_view: SequenceView, counts: np.ndarray, reduce: Reduce | None = None, baskets: bool = True
) -> np.ndarray:
    """``[len(counts)]`` the ``timedecay`` baseline's time scale per item, all fitted on
    ``train_view`` (:mod:`seqenc.training.decay`): each item's shrunk repurchase interval times the
    multiplier of :data:`~seqenc.training.decay.DECAY_SPANS` that ranks the training histories'
    newest baskets (``baskets``), else their newest events, best (NDCG@10; the smaller multiplier
    on a tie)."""
    stats = interval_statistics(train_view, len(counts))
    if reduce is not None:
        stats = reduce(torch.from_numpy(stats)).numpy()
    scales = scales_from(stats)
    held = (newest_basket_view if baskets else newest_event_view)(train_view)
    scores = [  # every process runs every span: the same collectives
        ranking_metrics("timedecay", held, counts, (10,), False, reduce, scales * span)["ndcg@10"]
        for span in DECAY_SPANS
    ]
    return scales * DECAY_SPANS[int(np.argmax(scores))]


def baseline_metrics(
    train_view: SequenceView,
    eval_view: SequenceView,
    ks: Sequence[int] = (10, 20),
    filter_seen: bool = False,
    n_items: int | None = None,
    reduce: Reduce | None = None,
) -> dict[str, float]:
    """The baselines of ``eval_view`` (:func:`baseline_names`) with popularity from
    ``train_view``, and the repeat share.

    Keys: ``popularity/<metric>`` and ``repeat/<metric>`` for every metric of
    :class:`~seqenc.training.metrics.RankingMetrics`, ``n_repeat_targets`` (targets already in their
    history) and ``share_repeat_targets`` (their share of all targets). With target baskets:
    ``<baseline>/<metric>`` for the three baselines and every metric of
    :class:`~seqenc.training.metrics.BasketMetrics`, and ``share_repeat_targets`` (the mean share of a
    basket's items already in its history).

    ``reduce`` (with ``n_items``, the vocabulary's size, so every process counts as many items):
    each process holds its own entities, and the popularity counts, the metrics and the repeat
    share are those of all of them (every process must call this).
    """
    counts = item_counts(train_view, n_items)
    if reduce is not None:
        counts = reduce(torch.from_numpy(counts)).numpy()
    scales = None
    if "timedecay" in baseline_names(eval_view):
        scales = fitted_scales(train_view, counts, reduce, eval_view.target_ends is not None)
    out = {
        f"{method}/{name}": value
        for method in baseline_names(eval_view)
        for name, value in ranking_metrics(
            method, eval_view, counts, ks, filter_seen, reduce, scales
        ).items()
    }
    size = torch.tensor([len(eval_view)])
    if eval_view.target_ends is not None:
        shares = [out.pop(f"{m}/repeat_targets") for m in baseline_names(eval_view)]
        n_targets = (reduce(size) if reduce is not None else size).item()
        return out | {"share_repeat_targets": shares[0], "n_targets": float(n_targets)}
    repeats = torch.tensor([int(repeat_targets(eval_view).sum()), len(eval_view)])
    n_repeats, n_targets = (reduce(repeats) if reduce is not None else repeats).tolist()
    out["n_targets"] = float(n_targets)
    out["n_repeat_targets"] = float(n_repeats)
    out["share_repeat_targets"] = n_repeats / n_targets if n_targets else 0.0
    return out
