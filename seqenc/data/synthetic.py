"""A deterministic synthetic account-event log with planted, checkable structure.

Every account has a latent ``account_type`` (the ground-truth label; it is returned so tests and
benchmarks can score embeddings, and must NOT be fed to a model as a feature). The type drives:

* **Items.** Each type follows a *behaviour profile*: a Zipf preference over its own permutation of
  the items, mixed with a Zipf over globally popular items shared by all profiles, plus chains: with
  probability ``P_FOLLOW`` the next item is ``successor[profile, previous item]`` (a fixed
  per-profile permutation), otherwise a fresh draw from the preference. Next-item prediction from the
  previous item therefore beats popularity by a wide margin.
* **Event types, channels, amounts.** Per-profile ``event_type`` / ``channel`` mixes; purchases carry
  an item-specific log-normal price, every other event has ``amount`` 0.
* **Time gaps.** Log-normal gaps whose median grows geometrically with the type, from
  ``GAP_MEDIAN_S[0]`` (bursty) to ``GAP_MEDIAN_S[1]`` (slow).

The last type is a *time twin* of type 0 (see :func:`behaviour_profile`): it shares type 0's profile
(items, chains, event types, channels, amounts, history lengths) and differs only in its gaps — 30 s
versus 2 days. Order alone cannot tell them apart; time can.

How a test checks this with simple statistics (``tests/test_synthetic.py`` does):

1. per-account item-count vectors → nearest-centroid classifier predicts the profile far above chance;
2. the pooled item histograms of types 0 and ``n_types - 1`` agree up to sampling noise, while their
   median within-account gaps differ by orders of magnitude;
3. a bigram (previous item → most frequent next item) predictor beats the most-popular-item baseline on
   each account's held-out last event.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from seqenc.errors import SeqencError

EVENT_TYPES = ("view", "click", "cart", "purchase", "login")
CHANNELS = ("web", "app", "api")
P_FOLLOW = 0.6  # chance that the next item is the profile's successor of the previous one
SHARED_WEIGHT = 0.3  # share of fresh draws taken from the global popularity Zipf
ZIPF_EXPONENT = 1.1
GAP_MEDIAN_S = (30.0, 2 * 86400.0)  # median gap of type 0 and of the last type, in seconds
GAP_SIGMA = 1.0  # log-normal spread of the gaps
LENGTH_MEDIAN, LENGTH_SIGMA = 30.0, 1.2  # log-normal history length before clipping
START_SPREAD_S = 60 * 86400  # accounts start uniformly within 60 days of ``start``


def behaviour_profile(n_types: int) -> np.ndarray:
    """``[n_types]`` profile of each account type: type ``t`` → ``t``, except the last type → 0.

    Types sharing a profile differ only in their time gaps; with ``n_types >= 2`` these are
    type 0 and type ``n_types - 1``.
    """
    profile = np.arange(n_types)
    if n_types >= 2:
        profile[-1] = 0
    return profile


def generate_events(
    n_entities: int = 2000,
    n_items: int = 500,
    n_types: int = 4,
    seed: int = 0,
    min_events: int = 3,
    max_events: int = 2000,
    start: str = "2024-01-01",
) -> pd.DataFrame:
    """A synthetic event log, one row per event, sorted by timestamp like a log file.

    Columns: ``entity_id`` (str, ``acct_000123``), ``item_id`` (int64, ``0..n_items-1``),
    ``timestamp`` (datetime64[ns, UTC], strictly increasing within an account), ``event_type`` and
    ``channel`` (categorical), ``amount`` (float64) and ``account_type`` (int64 ground truth, not a
    feature). The same arguments always give an identical frame.
    """
    _check_args(n_entities, n_items, n_types, min_events, max_events)
    try:
        t0 = pd.Timestamp(start, tz="UTC")
    except ValueError as err:
        raise SeqencError(f"start={start!r} is not a parseable date") from err
    rng = np.random.default_rng(seed)

    # Accounts: balanced types, log-normal history lengths.
    account_type = rng.permutation(np.arange(n_entities) % n_types)
    lengths = np.exp(rng.normal(np.log(LENGTH_MEDIAN), LENGTH_SIGMA, n_entities))
    lengths = np.clip(np.round(lengths), min_events, max_events).astype(np.int64)
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    entity = np.repeat(np.arange(n_entities), lengths)
    etype = account_type[entity]
    type_profile = behaviour_profile(n_types)
    n_profiles = int(type_profile.max()) + 1
    profile = type_profile[etype]
    n = len(entity)
    is_first = np.zeros(n, dtype=bool)
    is_first[offsets[:-1]] = True

    # Per-profile parameters.
    global_zipf = _zipf(n_items)
    preference = np.stack(
        [
            (1 - SHARED_WEIGHT) * _zipf(n_items)[rng.permutation(n_items)]
            + SHARED_WEIGHT * global_zipf
            for _ in range(n_profiles)
        ]
    )
    successor = np.stack([rng.permutation(n_items) for _ in range(n_profiles)])
    event_mix = rng.dirichlet([8.0, 4.0, 2.0, 1.0, 1.0], size=n_profiles)
    channel_mix = rng.dirichlet([2.0, 2.0, 1.0], size=n_profiles)
    log_price = rng.normal(3.0, 1.0, n_items)

    # Items: runs of successors starting at fresh draws from the profile's preference.
    fresh = np.empty(n, dtype=np.int64)
    for p in range(n_profiles):
        rows = np.flatnonzero(profile == p)
        fresh[rows] = rng.choice(n_items, size=len(rows), p=preference[p])
    restart = is_first | (rng.random(n) >= P_FOLLOW)
    run_start = np.flatnonzero(restart)[np.cumsum(restart) - 1]
    depth = np.arange(n) - run_start
    item = fresh[run_start]
    for k in range(1, int(depth.max()) + 1):
        deeper = np.flatnonzero(depth >= k)
        item[deeper] = successor[profile[deeper], item[deeper]]

    # Categorical columns and amounts.
    event_code = _sample_rows(rng, event_mix[profile])
    channel_code = _sample_rows(rng, channel_mix[profile])
    purchase = event_code == EVENT_TYPES.index("purchase")
    price = np.exp(log_price[item] + rng.normal(0.0, 0.2, n))
    amount = np.where(purchase, np.round(price, 2), 0.0)

    # Times: integer milliseconds, gaps of at least one second, so no ties within an account.
    log_median = np.log(np.geomspace(*GAP_MEDIAN_S, n_types))
    gap_ms = np.maximum(1000, np.round(1000 * np.exp(rng.normal(log_median[etype], GAP_SIGMA))))
    gap_ms = np.where(is_first, 0, gap_ms).astype(np.int64)
    account_start_ms = rng.integers(0, START_SPREAD_S * 1000, n_entities)
    cum = np.cumsum(gap_ms)
    time_ms = account_start_ms[entity] + cum - cum[offsets[:-1]][entity]
    ts_ns = t0.value + time_ms * 1_000_000

    order = np.lexsort((np.arange(n), entity, ts_ns))
    labels = np.char.add("acct_", np.char.zfill(np.arange(n_entities).astype(str), 6))
    return pd.DataFrame(
        {
            "entity_id": pd.Series(labels, dtype="str").take(entity[order]).reset_index(drop=True),
            "item_id": item[order],
            "timestamp": pd.to_datetime(ts_ns[order], unit="ns", utc=True),
            "event_type": pd.Categorical.from_codes(event_code[order], categories=EVENT_TYPES),
            "channel": pd.Categorical.from_codes(channel_code[order], categories=CHANNELS),
            "amount": amount[order],
            "account_type": account_type[entity[order]].astype(np.int64),
        }
    )


def _zipf(n: int) -> np.ndarray:
    """Zipf probabilities over ranks ``0..n-1``."""
    weights = 1.0 / np.arange(1, n + 1) ** ZIPF_EXPONENT
    return weights / weights.sum()


def _sample_rows(rng: np.random.Generator, probs: np.ndarray) -> np.ndarray:
    """One category index per row of ``probs`` (``[n, k]``, rows summing to 1), by inverse CDF."""
    cdf = np.cumsum(probs, axis=1)
    u = rng.random(len(probs))[:, None] * cdf[:, -1:]
    return np.minimum((u >= cdf).sum(axis=1), probs.shape[1] - 1)


def _check_args(
    n_entities: int, n_items: int, n_types: int, min_events: int, max_events: int
) -> None:
    checks = {
        "n_entities": (n_entities, n_entities >= 1, ">= 1"),
        "n_items": (n_items, n_items >= 2, ">= 2"),
        "n_types": (n_types, n_types >= 1, ">= 1"),
        "min_events": (min_events, min_events >= 1, ">= 1"),
        "max_events": (max_events, max_events >= min_events, f">= min_events ({min_events})"),
    }
    for name, (value, ok, rule) in checks.items():
        if not ok:
            raise SeqencError(
                f"generate_events: {name}={value!r} is out of range; need {name} {rule}"
            )
