"""The time-aware repeat baseline (``timedecay``) against hand-computed cases: the items' time
scales, the decayed scores and their order, the view it is fitted on, and its place in
``baseline_metrics``."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from seqenc.data.baskets import leave_one_basket_out
from seqenc.data.sequences import build_sequences
from seqenc.training.baselines import (
    BASKET_BASELINES,
    baseline_metrics,
    fitted_scales,
    item_counts,
    popularity_scores,
)
from seqenc.training.decay import (
    DECAY_SPANS,
    PRIOR_INTERVALS,
    decay_scores,
    interval_statistics,
    newest_basket_view,
    scales_from,
)

DAY = 86400.0
# entity a: baskets on days 0 {10, 11}, 2 {10}, 6 {11, 12}, 8 {10} (validation), 10 {11} (test)
# entity b: days 0 {10}, 4 {10, 12, 12}, 5 {13}, 9 {12} (validation), 12 {10} (test)
ROWS = [
    ("a", 10, 0), ("a", 11, 0), ("a", 10, 2), ("a", 11, 6), ("a", 12, 6), ("a", 10, 8),
    ("a", 11, 10),
    ("b", 10, 0), ("b", 10, 4), ("b", 12, 4), ("b", 12, 4), ("b", 13, 5), ("b", 12, 9),
    ("b", 10, 12),
]  # fmt: skip
LOG = pd.DataFrame(
    {
        "entity_id": [r[0] for r in ROWS],
        "item_id": [r[1] for r in ROWS],
        "timestamp": pd.to_datetime([r[2] for r in ROWS], unit="D", utc=True),
    }
)


@pytest.fixture
def split():
    store, vocabs = build_sequences(LOG)
    ids = dict(
        zip([10, 11, 12, 13], vocabs.item.encode(pd.Series([10, 11, 12, 13]))[0], strict=True)
    )
    return store, ids, *leave_one_basket_out(store)


def test_scales_are_shrunk_geometric_mean_repurchase_intervals(split):
    store, ids, train, _, _ = split
    n_items = int(store.items.max()) + 1
    stats = interval_statistics(train, n_items)
    # training inputs: a's days 0, 2, 6 (item 10 after 2 days, 11 after 6); b's days 0, 4, 5
    # (10 after 4 days; 12 twice in one basket is one purchase)
    logs = {10: [math.log(2 * DAY), math.log(4 * DAY)], 11: [math.log(6 * DAY)], 12: [], 13: []}
    pooled = sum(sum(v) for v in logs.values()) / 3
    scales = scales_from(stats)
    for item, own in logs.items():
        want = math.exp((sum(own) + PRIOR_INTERVALS * pooled) / (len(own) + PRIOR_INTERVALS))
        assert scales[ids[item]] == pytest.approx(want, rel=1e-12)
    # basket gaps (the fallback): a 2 and 4 days, b 4 and 1 day
    gaps = [math.log(d * DAY) for d in (2, 4, 4, 1)]
    assert stats[:, -1] == pytest.approx([4, sum(gaps)])


def test_a_log_without_repurchases_reads_the_basket_gaps():
    log = LOG.assign(item_id=np.arange(len(LOG)) + 100)  # no item bought twice
    store, _ = build_sequences(log)
    train, _, _ = leave_one_basket_out(store)
    stats = interval_statistics(train, int(store.items.max()) + 1)
    assert stats[0, :-1].sum() == 0
    # a's training days 0, 2, 6, b's 0, 4, 5
    want = math.exp(sum(math.log(d * DAY) for d in (2, 4, 4, 1)) / 4)
    assert scales_from(stats)[3:] == pytest.approx(want, rel=1e-12)


def test_decayed_scores_rank_the_history_by_hand(split):
    store, ids, train, _, test = split
    n_items = int(store.items.max()) + 1
    counts = item_counts(train, n_items)
    popularity = popularity_scores(counts)
    scales = np.full(n_items, DAY)
    scales[ids[12]] = 1000 * DAY
    scores = decay_scores(test, np.arange(2), scales, popularity)
    # a at day 10: 10 bought on days 0, 2, 8, 11 on 0, 6, 12 on 6 (scale 1000 days)
    a = {
        10: math.exp(-10) + math.exp(-8) + math.exp(-2),
        11: math.exp(-10) + math.exp(-4),
        12: math.exp(-4 / 1000),
    }
    order = sorted(a, key=a.get, reverse=True)
    assert order == [12, 10, 11]
    got = [ids[i] for i in order]
    assert np.all(np.diff(scores[0, got]) < 0)
    assert scores[0, ids[11]] > scores[0, ids[13]]  # every history item above the rest
    assert scores[0, ids[13]] == popularity[ids[13]]
    # b at day 12: 10 (days 0, 4) vs 12 (day 4 once, day 9) vs 13 (day 5): by the decayed sums
    b = {
        10: math.exp(-12) + math.exp(-8),
        12: math.exp(-8 / 1000) + math.exp(-3 / 1000),
        13: math.exp(-7),
    }
    order = [ids[i] for i in sorted(b, key=b.get, reverse=True)]
    assert np.all(np.diff(scores[1, order]) < 0)


def test_equal_decayed_scores_fall_back_to_popularity(split):
    store, ids, train, _, test = split
    n_items = int(store.items.max()) + 1
    popularity = popularity_scores(item_counts(train, n_items))
    scales = np.full(n_items, np.inf)  # every purchase weighs exactly 1: the score counts them
    scores = decay_scores(test, np.array([1]), scales, popularity)
    # b: 10 twice, 12 twice (days 4 and 9), 13 once; 10 and 12 tie on the score
    more_popular = max((10, 12), key=lambda i: popularity[ids[i]])
    other = 22 - more_popular
    assert scores[0, ids[more_popular]] > scores[0, ids[other]] > scores[0, ids[13]]


def test_the_multiplier_is_fitted_on_the_training_baskets(split):
    store, ids, train, _, _ = split
    held = newest_basket_view(train)
    # a's training input, days 0, 2, 6: the newest basket (day 6) is the target; b's (day 5) too
    assert list(held.rows) == [0, 1]
    assert store.timestamps[held.targets[0]] == 6 * DAY
    assert store.items[held.targets[0] : held.target_ends[0]].tolist() == [ids[11], ids[12]]
    assert store.timestamps[held.ends[0] - 1] == 2 * DAY
    counts = item_counts(train, int(store.items.max()) + 1)
    scales = fitted_scales(train, counts)
    base = scales_from(interval_statistics(train, len(counts)))
    assert any(np.allclose(scales, base * span) for span in DECAY_SPANS)


def test_timedecay_is_printed_beside_the_other_baselines(split):
    _, _, train, _, test = split
    values = baseline_metrics(train, test, ks=(1, 3))
    assert "timedecay" in BASKET_BASELINES
    assert {f"timedecay/{m}" for m in ("recall@1", "ndcg@3", "hr@1")} <= set(values)
    filtered = baseline_metrics(train, test, ks=(1, 3), filter_seen=True)
    assert filtered["timedecay/ndcg@3"] == filtered["popularity/ndcg@3"]
