"""Trivial next-item baselines on the model's own leave-one-out split: popularity and repeat-recent.

A model's ranking metrics mean little alone: on an event stream dominated by repeats, "the entity's
most recent distinct items" can beat a trained model, and on a catalogue with a strong head,
"the most popular items" sets the floor. Both rank the full catalogue with the same
:class:`~seqenc.metrics.RankingMetrics` as the model, so their figures sit beside its figures.

- **popularity**: items ranked by their count in the training part of the split (each entity's
  events but the last two), ties broken by the smaller item id;
- **repeat**: items of the sample's history first, the most recently used first (an item's score
  is the position of its last occurrence); items the entity never used follow in popularity order;
- **topfreq** (under the basket protocol, P-TopFreq of the next-basket literature): items of the
  history first, the most often used first (ties: the most recent), then popularity order.

Under the basket protocol (a view with ``target_ends``) the three rank the target basket with
:class:`~seqenc.metrics.BasketMetrics`, the model's metrics there.

The history of a sample is its whole input ``[start, end)``, not truncated to the model's
``history_len``, the same events the evaluation's seen-item filter removes.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from seqenc.data.batches import target_sets
from seqenc.data.split import SequenceView, flat_events
from seqenc.data.vocab import N_SPECIAL
from seqenc.metrics import BasketMetrics, RankingMetrics

BASELINES = ("popularity", "repeat")
BASKET_BASELINES = ("popularity", "topfreq", "repeat")
_BLOCK_CELLS = 1 << 22  # samples x items per dense score block (32 MiB of float64)


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
) -> dict[str, float]:
    """The metrics of :class:`~seqenc.metrics.RankingMetrics` (``hr@K``, ``ndcg@K``, ``mrr``) of
    one baseline (``"popularity"`` or ``"repeat"``) on the targets of ``eval_view``; with target
    baskets, those of :class:`~seqenc.metrics.BasketMetrics` (and ``"topfreq"`` too).

    ``counts``: training item counts (:func:`item_counts`). ``filter_seen``: the honest filter,
    every item of the sample's history is removed from the ranking, the target included, so a
    repeated target is a miss (repeat-recent then ranks like popularity over unseen items).
    """
    known = baseline_names(eval_view)
    if method not in known:
        raise ValueError(f"unknown baseline {method!r}; known: {list(known)}")
    if eval_view.targets is None:
        raise ValueError("the evaluation view has no targets (use the val or test split)")
    n_items = max(len(counts), int(eval_view.store.items.max(initial=0)) + 1)
    popularity = popularity_scores(np.pad(counts, (0, n_items - len(counts))))
    baskets = eval_view.target_ends is not None
    metrics = BasketMetrics(ks) if baskets else RankingMetrics(ks)
    block = max(1, _BLOCK_CELLS // n_items)
    for begin in range(0, len(eval_view), block):
        idx = np.arange(begin, min(begin + block, len(eval_view)))
        scores = _block_scores(eval_view, idx, popularity, method, filter_seen)
        if baskets:
            metrics.update(scores, target_sets(eval_view, idx), _seen(eval_view, idx, n_items))
        else:
            metrics.update(scores, torch.from_numpy(eval_view.store.items[eval_view.targets[idx]]))
    values = metrics.compute()
    if not baskets:
        values.pop("repeat_targets")  # see baseline_metrics' share_repeat_targets
    return {name: float(value) for name, value in values.items()}


def baseline_names(view: SequenceView) -> tuple[str, ...]:
    """The baselines of an evaluation view: :data:`BASKET_BASELINES` with target baskets, else
    :data:`BASELINES`."""
    return BASELINES if view.target_ends is None else BASKET_BASELINES


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


def baseline_metrics(
    train_view: SequenceView,
    eval_view: SequenceView,
    ks: Sequence[int] = (10, 20),
    filter_seen: bool = False,
) -> dict[str, float]:
    """The baselines of ``eval_view`` (:func:`baseline_names`) with popularity from
    ``train_view``, and the repeat share.

    Keys: ``popularity/<metric>`` and ``repeat/<metric>`` for every metric of
    :class:`~seqenc.metrics.RankingMetrics`, ``n_repeat_targets`` (targets already in their
    history) and ``share_repeat_targets`` (their share of all targets). With target baskets:
    ``<baseline>/<metric>`` for the three baselines and every metric of
    :class:`~seqenc.metrics.BasketMetrics`, and ``share_repeat_targets`` (the mean share of a
    basket's items already in its history).
    """
    counts = item_counts(train_view)
    out = {
        f"{method}/{name}": value
        for method in baseline_names(eval_view)
        for name, value in ranking_metrics(method, eval_view, counts, ks, filter_seen).items()
    }
    if eval_view.target_ends is not None:
        shares = [out.pop(f"{m}/repeat_targets") for m in baseline_names(eval_view)]
        return out | {"share_repeat_targets": shares[0]}
    repeats = repeat_targets(eval_view)
    out["n_repeat_targets"] = float(repeats.sum())
    out["share_repeat_targets"] = float(repeats.mean()) if len(repeats) else 0.0
    return out
