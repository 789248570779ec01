"""The synthetic generator: determinism, dtypes, and its planted structure, checked with plain
statistics that know nothing about how the generator works (item histograms, bigram counts, gaps)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import seqenc.data.synthetic as synthetic
from seqenc.data.synthetic import PEAK_HOURS, behaviour_profile, generate_events
from seqenc.errors import SeqencError

REPO = Path(__file__).resolve().parents[1]
N_ITEMS = 300


@pytest.fixture(scope="module")
def log() -> pd.DataFrame:
    """A mid-size log sorted by (account, time), as the structure tests need it."""
    df = generate_events(n_entities=1200, n_items=N_ITEMS, n_types=4, seed=1)
    return df.sort_values(["entity_id", "timestamp"], kind="stable").reset_index(drop=True)


def _account_codes(df: pd.DataFrame) -> np.ndarray:
    return pd.factorize(df["entity_id"])[0]


def _total_variation(df: pd.DataFrame, type_a: int, type_b: int) -> float:
    def hist(t: int) -> np.ndarray:
        counts = np.bincount(df.loc[df["account_type"] == t, "item_id"], minlength=N_ITEMS)
        return counts / counts.sum()

    return 0.5 * float(np.abs(hist(type_a) - hist(type_b)).sum())


def test_same_seed_same_frame_other_seed_differs() -> None:
    a = generate_events(n_entities=200, n_items=50, seed=3)
    pd.testing.assert_frame_equal(a, generate_events(n_entities=200, n_items=50, seed=3))
    b = generate_events(n_entities=200, n_items=50, seed=4)
    assert len(a) != len(b) or not a["item_id"].equals(b["item_id"])


def test_columns_and_dtypes() -> None:
    df = generate_events(n_entities=50, n_items=20, seed=0)
    assert list(df.columns) == [
        "entity_id",
        "item_id",
        "timestamp",
        "event_type",
        "channel",
        "amount",
        "account_type",
    ]
    assert pd.api.types.is_string_dtype(df["entity_id"])
    assert df["entity_id"].str.fullmatch(r"acct_\d{6}").all()
    assert df["item_id"].dtype == np.int64
    assert df["timestamp"].dtype == "datetime64[ns, UTC]"
    assert isinstance(df["event_type"].dtype, pd.CategoricalDtype)
    assert set(df["event_type"].cat.categories) == {"view", "click", "cart", "purchase", "login"}
    assert list(df["channel"].cat.categories) == ["web", "app", "api"]
    assert df["amount"].dtype == np.float64
    assert df["account_type"].dtype == np.int64
    assert df["timestamp"].min() >= pd.Timestamp("2024-01-01", tz="UTC")


@settings(max_examples=15, deadline=None)
@given(
    n_entities=st.integers(1, 40),
    n_items=st.integers(2, 30),
    n_types=st.integers(1, 5),
    min_events=st.integers(1, 6),
    extra=st.integers(0, 60),
    seed=st.integers(0, 2**32 - 1),
)
def test_log_invariants(n_entities, n_items, n_types, min_events, extra, seed) -> None:
    max_events = min_events + extra
    df = generate_events(n_entities, n_items, n_types, seed, min_events, max_events)
    lengths = df.groupby("entity_id").size()
    assert len(lengths) == n_entities
    assert lengths.between(min_events, max_events).all()
    assert df["item_id"].between(0, n_items - 1).all()
    assert df["account_type"].between(0, n_types - 1).all()
    assert df["timestamp"].is_monotonic_increasing  # a log: rows in time order
    within = df.sort_values(["entity_id", "timestamp"], kind="stable")
    gaps = within.groupby("entity_id")["timestamp"].diff().dropna()
    assert (gaps >= pd.Timedelta(seconds=1)).all()  # no ties inside an account
    assert (df.groupby("entity_id")["account_type"].nunique() == 1).all()
    purchase = df["event_type"] == "purchase"
    assert (df.loc[~purchase, "amount"] == 0).all() and (df.loc[purchase, "amount"] > 0).all()


def test_history_lengths_span_a_wide_range() -> None:
    lengths = generate_events(seed=0).groupby("entity_id").size()
    assert lengths.min() <= 5 and lengths.max() >= 500
    assert 15 <= lengths.median() <= 60


def test_item_histograms_separate_profiles_but_not_time_twins(log: pd.DataFrame) -> None:
    codes = _account_codes(log)
    counts = np.zeros((codes.max() + 1, N_ITEMS))
    np.add.at(counts, (codes, log["item_id"].to_numpy()), 1)
    freq = counts / counts.sum(axis=1, keepdims=True)
    account_type = log.groupby(codes)["account_type"].first().to_numpy()
    train = np.random.default_rng(0).random(len(freq)) < 0.5

    def nearest_centroid_accuracy(labels: np.ndarray) -> float:
        centroids = np.stack([freq[train & (labels == c)].mean(0) for c in range(labels.max() + 1)])
        dist = ((freq[~train, None, :] - centroids[None]) ** 2).sum(-1)
        return float((dist.argmin(1) == labels[~train]).mean())

    # 3 item profiles (chance 1/3) are told apart from items alone ...
    assert nearest_centroid_accuracy(behaviour_profile(4)[account_type]) > 0.85
    # ... but the 4 types only up to the time twins 0 and 3: about 3 of 4 at best (chance 1/4).
    assert 0.55 < nearest_centroid_accuracy(account_type) < 0.8


def test_time_twins_share_items_but_not_gaps(log: pd.DataFrame) -> None:
    assert _total_variation(log, 0, 3) < 0.12  # sampling noise only
    assert _total_variation(log, 0, 1) > 0.3 and _total_variation(log, 0, 2) > 0.3
    gaps = log.groupby("entity_id")["timestamp"].diff().dt.total_seconds()
    median_gap = gaps.groupby(log["account_type"]).median()
    assert median_gap[0] < 120 and median_gap[3] > 86400
    assert median_gap.is_monotonic_increasing


def test_bigram_predictor_beats_popularity_on_last_events(log: pd.DataFrame) -> None:
    codes = _account_codes(log)
    item = log["item_id"].to_numpy()
    first = np.r_[True, codes[1:] != codes[:-1]]
    last = np.r_[codes[1:] != codes[:-1], True]
    prev = np.r_[-1, item[:-1]]
    fit = ~first & ~last  # transitions that do not end in a held-out last event
    bigram = np.zeros((N_ITEMS, N_ITEMS))
    np.add.at(bigram, (prev[fit], item[fit]), 1)
    bigram_acc = (bigram[prev[last]].argmax(1) == item[last]).mean()
    popular = np.bincount(item[~last], minlength=N_ITEMS).argmax()
    popularity_acc = (item[last] == popular).mean()
    assert bigram_acc > 0.3 and bigram_acc > 5 * popularity_acc


def test_recent_items_repeat_and_repeat_recent_beats_popularity(log: pd.DataFrame) -> None:
    codes = _account_codes(log)
    item = log["item_id"].to_numpy()
    starts = np.flatnonzero(np.r_[True, codes[1:] != codes[:-1]])
    ends = np.r_[starts[1:], len(item)]
    recent_hits = popular_hits = in_window = 0
    popular = set(np.bincount(item, minlength=N_ITEMS).argsort()[::-1][:10].tolist())
    for s, e in zip(starts, ends, strict=True):
        history, target = item[s : e - 1].tolist(), int(item[e - 1])
        recent = list(dict.fromkeys(reversed(history)))[:10]  # 10 most recent distinct items
        recent_hits += target in recent
        popular_hits += target in popular
        window = item[max(s, e - 11) : e - 1]
        in_window += target in window.tolist()
    n = len(starts)

    assert in_window / n > 0.15  # the next item is often one of the last ten events' items
    assert recent_hits > 2 * popular_hits


def _min_gap_spread(df: pd.DataFrame) -> pd.Series:
    """Per account (types 2 and 3: tempo of hours or more), the lowest coefficient of variation of
    the gaps between consecutive uses of one item, over items used at least three times."""
    df = df[df["account_type"] >= 2].sort_values(["entity_id", "timestamp"], kind="stable")
    gaps = df.groupby(["entity_id", "item_id"])["timestamp"].diff().dt.total_seconds()
    stats = gaps.groupby([df["entity_id"], df["item_id"]]).agg(["count", "mean", "std"])
    stats = stats[stats["count"] >= 2]
    return (stats["std"] / stats["mean"]).groupby(level=0).min()


def test_periodic_revisits_give_an_item_a_regular_rhythm(monkeypatch) -> None:
    with_habits = _min_gap_spread(generate_events(n_entities=800, n_items=N_ITEMS, seed=1))
    monkeypatch.setattr(synthetic, "PERIOD_GAPS", 1e15)  # no account lives long enough
    without = _min_gap_spread(generate_events(n_entities=800, n_items=N_ITEMS, seed=1))
    assert len(with_habits) > 100 and len(without) > 100
    assert with_habits.median() < 0.3 and with_habits.median() < 0.6 * without.median()


def test_hour_of_day_follows_each_profile_and_shifts_items(log: pd.DataFrame) -> None:
    hour = log["timestamp"].dt.hour.to_numpy()
    profile = behaviour_profile(4)[log["account_type"].to_numpy()]
    item = log["item_id"].to_numpy()
    night = (hour >= 22) | (hour < 6)
    shuffled = np.random.default_rng(0).permutation(night)
    for p in range(3):
        counts = np.bincount(hour[profile == p], minlength=24)
        off_peak = (counts.argmax() - PEAK_HOURS[p]) % 24
        assert min(off_peak, 24 - off_peak) <= 1 and counts.max() > 4 * counts.min()

        def tv(split: np.ndarray, p: int = p) -> float:
            a = np.bincount(item[(profile == p) & split], minlength=N_ITEMS)
            b = np.bincount(item[(profile == p) & ~split], minlength=N_ITEMS)
            return 0.5 * float(np.abs(a / a.sum() - b / b.sum()).sum())

        assert tv(night) > 0.2 and tv(night) > 1.8 * tv(shuffled)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"n_entities": 0}, "n_entities=0"),
        ({"n_items": 1}, "n_items=1"),
        ({"n_types": 0}, "n_types=0"),
        ({"min_events": 0}, "min_events=0"),
        ({"min_events": 5, "max_events": 4}, r"max_events=4 .* min_events \(5\)"),
        ({"start": "not a date"}, "start='not a date'"),
    ],
)
def test_bad_arguments_raise_seqenc_error(kwargs: dict, message: str) -> None:
    with pytest.raises(SeqencError, match=message):
        generate_events(**{"n_entities": 5, **kwargs})


def test_bundled_sample_matches_generator() -> None:
    spec = importlib.util.spec_from_file_location("make_sample", REPO / "datasets/make_sample.py")
    make_sample = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(make_sample)
    sample = REPO / "datasets" / "sample"
    expected = generate_events(**make_sample.SAMPLE_PARAMS)
    stored = pd.read_parquet(sample / "events.parquet")
    # Series.equals rather than assert_frame_equal, which takes seconds on categoricals.
    assert list(stored.columns) == list(expected.columns) and len(stored) == len(expected)
    assert dict(stored.dtypes) == dict(expected.dtypes)
    drifted = [c for c in expected.columns if not stored[c].equals(expected[c])]
    assert not drifted, f"sample drifted in {drifted}: run python datasets/make_sample.py"
    assert (sample / "README.md").read_text() == make_sample.card(
        expected, make_sample.SAMPLE_PARAMS
    )
    assert not (REPO / "datasets" / "__init__.py").exists()
