"""The time-aware repeat baseline (``timedecay``): each past purchase of an item decayed by its
age at the query time with the item's own rate (time-aware item weighting, Romanov et al.,
RecSys 2023, in its simplest form). A purchase is a basket under the basket protocol, an event's
time otherwise (same-time events of an item count once).

An item's time scale is the geometric mean of its repurchase intervals (two purchases of one
entity that both hold it) in the training split, shrunk toward the pooled one with the weight of
:data:`PRIOR_INTERVALS` intervals, times one multiplier from :data:`DECAY_SPANS` fitted on the
training split too (the one that best ranks the training histories' newest baskets, or newest
events: purchases fade at different paces in a grocery and a bank). A history item scores
``log sum_b exp(-age_b / scale_item)`` over its purchases, ``age_b`` to the query time (the
target's, as the model's); the history's items rank first by that score (ties: the more
popular), then the rest by popularity."""

from __future__ import annotations

import numpy as np

from seqenc.data.baskets import basket_starts
from seqenc.data.split import SequenceView, flat_events
from seqenc.data.vocab import N_SPECIAL

# The pooled scale's weight, in intervals: an item with that many repurchases in training sits
# halfway (in log time) between its own intervals and the pool's.
PRIOR_INTERVALS = 5.0
# Multipliers of the items' scales tried on the training split: from a quarter of the typical
# repurchase interval (recency rules) to 64 of them (nearly a count of purchases).
DECAY_SPANS = (0.25, 1.0, 4.0, 16.0, 64.0)
FIT_SAMPLES = 2000  # training histories that score each multiplier (evenly spaced, no draw)


def _purchases(view: SequenceView, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(sample, item, time)`` of each distinct (sample, real item, basket time) of the samples
    ``idx``, sorted by sample, item, then time."""
    sample, event = flat_events(view, idx)
    items, times = view.store.items[event], view.store.timestamps[event]
    real = items >= N_SPECIAL
    sample, items, times = sample[real], items[real], times[real]
    order = np.lexsort((times, items, sample))
    sample, items, times = sample[order], items[order], times[order]
    new = np.ones(len(sample), dtype=bool)
    new[1:] = (sample[1:] != sample[:-1]) | (items[1:] != items[:-1]) | (times[1:] != times[:-1])
    return sample[new], items[new], times[new]


def interval_statistics(train_view: SequenceView, n_items: int) -> np.ndarray:
    """``[2, n_items + 1]`` float64 sums that fit the scales (:func:`scales_from`): per item, the
    number of its repurchase intervals among the input events of ``train_view`` and the sum of
    their logs (seconds); the last column, the same of the gaps between an entity's consecutive
    baskets (the fallback of a log without repurchases). Sums, so the processes of a sharded run
    add theirs."""
    sample, items, times = _purchases(train_view, np.arange(len(train_view)))
    again = (sample[1:] == sample[:-1]) & (items[1:] == items[:-1])
    log_gap = np.log(times[1:][again] - times[:-1][again])  # distinct times: gaps > 0
    owner = items[1:][again]
    stats = np.zeros((2, n_items + 1), dtype=np.float64)
    stats[0, :n_items] = np.bincount(owner, minlength=n_items)[:n_items]
    stats[1, :n_items] = np.bincount(owner, weights=log_gap, minlength=n_items)[:n_items]
    baskets = np.unique(np.stack([sample, times]), axis=1)  # (sample, time) sorted
    same = baskets[0, 1:] == baskets[0, :-1]
    basket_gaps = np.log(np.diff(baskets[1])[same])
    stats[:, n_items] = len(basket_gaps), basket_gaps.sum()
    return stats


def scales_from(stats: np.ndarray) -> np.ndarray:
    """``[n_items]`` float64 time scale (seconds) of each item's decay from
    :func:`interval_statistics`: its shrunk geometric mean repurchase interval (module
    docstring); without any repurchase, the geometric mean gap between an entity's consecutive
    baskets for every item (1 s when there is none either)."""
    count, total = stats[:, :-1]
    n_all = count.sum()
    pool_count, pool_total = (n_all, total.sum()) if n_all else stats[:, -1]
    pooled = pool_total / pool_count if pool_count else 0.0
    return np.exp((total + PRIOR_INTERVALS * pooled) / (count + PRIOR_INTERVALS))


def decayed_history(
    view: SequenceView, idx: np.ndarray, scales: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(sample, item, score)``: each distinct (sample, real history item) of the samples ``idx``
    of an evaluation view, sorted by sample then item, and its decayed purchase score
    ``log sum_b exp(-age_b / scale_item)`` at the sample's query time (its target's)."""
    sample, items, times = _purchases(view, idx)
    query = view.store.timestamps[view.targets[idx]]
    decayed = -(query[sample] - times) / scales[items]
    # log-sum-exp per (sample, item) run, shifted by the run's maximum (no underflow to 0)
    run = np.ones(len(sample), dtype=bool)
    run[1:] = (sample[1:] != sample[:-1]) | (items[1:] != items[:-1])
    group = np.cumsum(run) - 1
    peak = np.maximum.reduceat(decayed, np.flatnonzero(run)) if len(run) else decayed
    score = peak + np.log(np.bincount(group, weights=np.exp(decayed - peak[group])))
    return sample[run], items[run], score


def decay_scores(
    view: SequenceView, idx: np.ndarray, scales: np.ndarray, popularity: np.ndarray
) -> np.ndarray:
    """``[len(idx), n_items]`` float64 strict scores of the samples ``idx`` of an evaluation view
    (its targets give the query times): the history's items above every other, ordered by their
    decayed purchase score (:func:`decayed_history`), then by ``popularity``
    (:func:`~seqenc.training.baselines.popularity_scores`, distinct values in ``1 … n_items``),
    which also orders the rest."""
    sample, items, score = decayed_history(view, idx, scales)
    # strict order of each history's items: score descending, then popularity descending
    order = np.lexsort((-popularity[items], -score, sample))
    sample, items = sample[order], items[order]
    n_seen = np.bincount(sample, minlength=len(idx))
    place = np.arange(len(sample)) - np.repeat(np.cumsum(n_seen) - n_seen, n_seen)
    out = np.broadcast_to(popularity, (len(idx), len(popularity))).copy()
    out[sample, items] = len(popularity) + n_seen[sample] - place
    return out


def newest_basket_view(train_view: SequenceView, limit: int = FIT_SAMPLES) -> SequenceView:
    """At most ``limit`` samples of ``train_view`` (evenly spaced) whose input holds two baskets
    or more, as an evaluation view: the input's newest basket is the target, the rest the
    history."""
    store = train_view.store
    opens = np.flatnonzero(basket_starts(store))
    # the newest basket start inside each sample's input [start, end)
    last = opens[np.clip(np.searchsorted(opens, train_view.ends, side="left") - 1, 0, None)]
    keep = np.flatnonzero((last > train_view.starts) & (train_view.ends > train_view.starts))
    keep = _evenly(keep, limit)
    return SequenceView(
        store,
        train_view.rows[keep],
        train_view.starts[keep],
        last[keep],
        targets=last[keep],
        target_ends=train_view.ends[keep],
    )


def newest_event_view(train_view: SequenceView, limit: int = FIT_SAMPLES) -> SequenceView:
    """At most ``limit`` samples of ``train_view`` (evenly spaced) whose input holds two events or
    more, as a next-event evaluation view: the input's newest event is the target, the rest the
    history (the single-event stream's :func:`newest_basket_view`)."""
    keep = _evenly(np.flatnonzero(train_view.lengths >= 2), limit)
    last = train_view.ends[keep] - 1
    return SequenceView(
        train_view.store, train_view.rows[keep], train_view.starts[keep], last, targets=last
    )


def _evenly(keep: np.ndarray, limit: int) -> np.ndarray:
    """At most ``limit`` of ``keep``, evenly spaced (no draw: the same samples every run)."""
    return keep[np.unique(np.linspace(0, len(keep) - 1, min(limit, len(keep))).astype(np.int64))]
