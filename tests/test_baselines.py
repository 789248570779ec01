import math
from collections import Counter

import numpy as np
import pandas as pd
import pytest
import torch

from seqenc.data.schema import EventSchema
from seqenc.data.sequences import build_sequences
from seqenc.data.split import leave_one_out
from seqenc.data.vocab import N_SPECIAL
from seqenc.training.baselines import (
    baseline_metrics,
    fitted_scales,
    item_counts,
    ranking_metrics,
    repeat_targets,
)
from seqenc.training.decay import DECAY_SPANS, interval_statistics, newest_event_view, scales_from
from seqenc.training.metrics import RankingMetrics

SCHEMA = EventSchema(timestamp=None)


def split(histories: dict[int, list[str]], min_len: int = 3):
    """Leave-one-out views of a log given as entity → items in order."""
    df = pd.DataFrame(
        [(e, item) for e, items in histories.items() for item in items],
        columns=["entity_id", "item_id"],
    )
    store, vocabs = build_sequences(df, SCHEMA, keep_newest=None)
    return leave_one_out(store, min_len), vocabs


def naive_history(method, history, times, query, place, scales):
    """The history's distinct real items in a baseline's order, written from its definition."""
    recent = [i for i in dict.fromkeys(reversed(history)) if i >= N_SPECIAL]  # most recent first
    if method == "repeat":
        return recent
    if method == "topfreq":  # most uses first; ties: the most recent (recent's order, stable)
        return sorted(recent, key=lambda i: -history.count(i))
    # timedecay: sum over the item's distinct purchase times of exp(-age / scale), then popularity
    bought = {(i, t) for i, t in zip(history, times, strict=True) if i >= N_SPECIAL}
    score = {
        i: sum(math.exp(-(query - t) / scales[i]) for j, t in bought if j == i) for i in recent
    }
    return sorted(recent, key=lambda i: (-score[i], place[i]))


def naive_metrics(method, train, view, ks, filter_seen, scales=None):
    """One entity at a time, in plain Python: the ranking each baseline defines."""
    store = view.store
    n_items = int(store.items.max()) + 1
    counts = Counter()
    for s, e in zip(train.starts, train.ends, strict=True):
        counts.update(store.items[s:e].tolist())
    popular = sorted(range(N_SPECIAL, n_items), key=lambda i: (-counts[i], i))
    place = {item: rank for rank, item in enumerate(popular)}
    hit_ks = sorted({1, *ks})  # HR@1 is always reported
    sums = {f"hr@{k}": 0.0 for k in hit_ks} | {f"ndcg@{k}": 0.0 for k in ks} | {"mrr": 0.0}
    for s, e, t in zip(view.starts, view.ends, view.targets, strict=True):
        history, target = store.items[s:e].tolist(), int(store.items[t])
        ranking = popular
        if method != "popularity":
            times, query = store.timestamps[s:e].tolist(), float(store.timestamps[t])
            first = naive_history(method, history, times, query, place, scales)
            ranking = first + [i for i in popular if i not in first]
        if filter_seen:
            ranking = [i for i in ranking if i not in history]
        if target not in ranking:
            continue  # a miss at every cut-off
        rank = ranking.index(target)
        for k in hit_ks:
            sums[f"hr@{k}"] += rank < k
        for k in ks:
            sums[f"ndcg@{k}"] += 1 / math.log2(rank + 2) if rank < k else 0.0
        sums["mrr"] += 1 / (rank + 1)
    return {name: value / len(view) for name, value in sums.items()}


def random_log(seed: int, n_entities: int = 40, n_items: int = 25) -> dict[int, list[str]]:
    rng = np.random.default_rng(seed)
    weights = rng.dirichlet(np.full(n_items, 0.3))
    log = {}
    for e in range(n_entities):
        favourites = rng.choice(n_items, size=3, p=weights)
        n = int(rng.integers(1, 30))
        own = rng.random(n) < 0.5  # half the events repeat the entity's own favourites
        items = np.where(
            own, rng.choice(favourites, size=n), rng.choice(n_items, size=n, p=weights)
        )
        log[e] = [f"i{i}" for i in items]
    return log


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("method", ["popularity", "repeat", "topfreq"])
@pytest.mark.parametrize("filter_seen", [False, True])
def test_matches_naive_reference(seed, method, filter_seen):
    (train, val, test), _ = split(random_log(seed))
    counts = item_counts(train)
    for view in (val, test):
        got = ranking_metrics(method, view, counts, ks=(1, 5, 10), filter_seen=filter_seen)
        want = naive_metrics(method, train, view, (1, 5, 10), filter_seen)
        assert got.keys() == want.keys()
        for name in want:
            assert got[name] == pytest.approx(want[name], abs=1e-6), name


def timed_split(seed: int):
    """Leave-one-out views of :func:`random_log` with random event times (some tied: the same
    item twice at one time is one purchase), and random per-item time scales."""
    log = random_log(seed)
    rng = np.random.default_rng(seed + 100)
    df = pd.DataFrame(
        [(e, item) for e, items in log.items() for item in items], columns=["entity_id", "item_id"]
    )
    df["timestamp"] = pd.to_datetime(rng.integers(0, 400, len(df)) * 3600, unit="s", utc=True)
    store, _ = build_sequences(df, EventSchema(), keep_newest=None)
    scales = rng.uniform(1e4, 1e6, int(store.items.max()) + 1)
    return (*leave_one_out(store), scales)


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("method", ["topfreq", "timedecay"])
@pytest.mark.parametrize("filter_seen", [False, True])
@pytest.mark.parametrize("endless", [False, True])
def test_timed_history_baselines_match_naive_reference(seed, method, filter_seen, endless):
    """``endless``: no decay, every purchase weighs 1, so many scores tie (popularity decides)."""
    train, val, test, scales = timed_split(seed)
    scales = np.full_like(scales, np.inf) if endless else scales
    counts = item_counts(train)
    for view in (val, test):
        got = ranking_metrics(
            method, view, counts, ks=(1, 5, 10), filter_seen=filter_seen, scales=scales
        )
        want = naive_metrics(method, train, view, (1, 5, 10), filter_seen, scales)
        for name in want:
            assert got[name] == pytest.approx(want[name], abs=1e-6), name


def test_single_event_streams_print_every_history_baseline():
    train, _, test, _ = timed_split(3)
    out = baseline_metrics(train, test, ks=(1, 10))
    for method in ("popularity", "repeat", "topfreq", "timedecay"):
        assert {f"{method}/hr@1", f"{method}/ndcg@10"} <= set(out)
    # the decay's scales are fitted on the training histories' newest events
    held = newest_event_view(train)
    ends = dict(zip(train.rows.tolist(), train.ends.tolist(), strict=True))
    assert held.targets.tolist() == [ends[row] - 1 for row in held.rows.tolist()]
    assert (held.ends == held.targets).all() and (held.lengths >= 1).all()
    counts = item_counts(train)
    base = scales_from(interval_statistics(train, len(counts)))
    fitted = fitted_scales(train, counts, baskets=False)
    assert any(np.allclose(fitted, base * span) for span in DECAY_SPANS)
    # with the honest filter every history baseline ranks the unseen items by popularity
    honest = baseline_metrics(train, test, ks=(10,), filter_seen=True)
    assert honest["timedecay/ndcg@10"] == honest["topfreq/ndcg@10"] == honest["repeat/ndcg@10"]
    # without timestamps there is no decay to fit
    (untimed, _, untimed_test), _ = split(random_log(3))
    assert "timedecay/hr@1" not in baseline_metrics(untimed, untimed_test, ks=(1,))


def test_hand_computed_case():
    # a: x y x z x -> train x y x; val: history x y x, target z; test: history x y x z, target x.
    # b: y y y w   -> train y y;   val: history y y,   target y; test: history y y y,   target w.
    (train, val, test), vocabs = split({"a": list("xyxzx"), "b": list("yyyw")})
    # Training counts y 3, x 2, z 0, w 0: popularity ranks y, x, then z and w by id.
    w, z = vocabs.item.encode(np.array(["w", "z"]))[0]
    w_rank, z_rank = (2, 3) if w < z else (3, 2)
    out = baseline_metrics(train, test, ks=(1, 2))
    # repeat: a ranks z, x, y, w (target x at 1); b ranks y, x, then z/w (target w at w_rank)
    assert out["repeat/hr@1"] == 0.0
    assert out["repeat/hr@2"] == pytest.approx(0.5)
    assert out["repeat/mrr"] == pytest.approx((1 / 2 + 1 / (w_rank + 1)) / 2)
    # popularity: both rank y, x, z/w: a's x at 1, b's w at w_rank
    assert out["popularity/mrr"] == pytest.approx((1 / 2 + 1 / (w_rank + 1)) / 2)
    assert out["n_repeat_targets"] == 1.0  # a's x repeats, b's w is new
    assert out["share_repeat_targets"] == 0.5
    out = baseline_metrics(train, val, ks=(1,))
    # repeat: a ranks x, y, then z/w (target z at z_rank); b ranks y first (target y at 0)
    assert out["repeat/hr@1"] == pytest.approx(0.5)
    assert out["repeat/mrr"] == pytest.approx((1 / (z_rank + 1) + 1) / 2)
    # honest filter: b's repeated y is removed; a ranks z/w only (target z at z_rank - 2)
    out = baseline_metrics(train, val, ks=(1,), filter_seen=True)
    assert out["repeat/mrr"] == pytest.approx(1 / (z_rank - 1) / 2)


def test_honest_filter_zero_when_every_target_repeats():
    log = {e: ["a", "b", "c", "a", "b", "c", "a", "b"][e % 3 :] for e in range(12)}
    (train, val, test), _ = split(log)
    assert repeat_targets(test).all()
    honest = baseline_metrics(train, test, ks=(10,), filter_seen=True)
    # the catalogue is 3 items, so without the honest rule every target would be a hit at K = 10
    assert honest["repeat/hr@10"] == 0.0
    assert honest["popularity/hr@10"] == 0.0
    assert honest["repeat/mrr"] == 0.0
    assert honest["n_repeat_targets"] == len(test)
    unfiltered = baseline_metrics(train, test, ks=(1,), filter_seen=False)
    assert unfiltered["repeat/hr@1"] == 0.0  # the newest item is never the next one here
    assert baseline_metrics(train, test, ks=(3,))["repeat/hr@3"] == 1.0


def test_repeat_targets_matches_naive():
    (train, val, test), _ = split(random_log(5))
    for view in (val, test):
        want = [
            int(view.store.items[t]) in view.store.items[s:e].tolist()
            for s, e, t in zip(view.starts, view.ends, view.targets, strict=True)
        ]
        assert repeat_targets(view).tolist() == want


def test_filtered_target_is_a_miss_in_ranking_metrics():
    metric = RankingMetrics(ks=(3,))
    metric.update(torch.tensor([[1.0, -torch.inf, 0.5]]), torch.tensor([1]))
    out = metric.compute()
    assert out["hr@3"].item() == 0.0
    assert out["mrr"].item() == 0.0


def test_views_without_targets_are_refused():
    (train, _, _), _ = split(random_log(0))
    with pytest.raises(ValueError, match="no targets"):
        baseline_metrics(train, train)
