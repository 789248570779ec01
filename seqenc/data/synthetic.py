"""A deterministic synthetic account-event log with planted, checkable structure and the dynamics
of real event streams: sessions and bursts, periodic revisits of a habit item, item chains, repeats
of recent items, a daily rhythm, event types, channels and amounts.

Every account has a latent ``account_type`` (returned so tests and benchmarks can score
embeddings; never a model feature) that picks a behaviour profile (:func:`behaviour_profile`) and a
tempo, the median gap within a session. The last type is a *time twin* of type 0: the same profile
at another tempo; every rule runs in tempo units on the account's own activity clock, so order
alone cannot tell the twins apart and time can. The module's constants set the rates;
``tests/test_synthetic.py`` measures each planted signal with plain statistics.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from seqenc.errors import SeqencError

EVENT_TYPES = ("view", "click", "cart", "purchase", "login")
CHANNELS = ("web", "app", "api")
P_FOLLOW = 0.6  # within a session: the next item is the profile's successor of the previous one
P_REPEAT = 0.2  # within a session: the next item repeats a recent event of the account
P_REPEAT_START = 0.3  # a session opens with a repeat (else a fresh draw)
P_LAG = 0.4  # a repeat copies the event ``lag`` back, lag - 1 ~ Geometric(P_LAG) (mean 2.5)
SHARED_WEIGHT = 0.3  # share of fresh draws taken from the global popularity Zipf
ZIPF_EXPONENT = 1.1
GAP_MEDIAN_S = (30.0, 2 * 86400.0)  # median within-session gap of type 0 and of the last type
GAP_SIGMA = 1.0  # log-normal spread of the gaps
SESSION_MEAN = 8.0  # mean events per session (geometric)
SESSION_BREAK = 10.0  # gaps between sessions are this many times longer than within
PERIOD_GAPS = 80.0  # a habit item recurs every PERIOD_GAPS tempos of activity time ...
PERIOD_JITTER = 0.05  # ... with this relative spread
DIURNAL_AMPLITUDE = 0.8  # daily intensity 1 ± 0.8: peak hours 1.8 / 0.2 of the trough
PEAK_HOURS = (14.0, 20.0, 9.0)  # UTC peak hour of profile p: PEAK_HOURS[p % 3]
NIGHT_HOURS = (22, 6)  # fresh draws in [22:00, 06:00) use the profile's night-time preference
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
    ``timestamp`` (datetime64[ns, UTC], at least one second apart within an account),
    ``event_type`` and ``channel`` (categorical), ``amount`` (float64) and ``account_type`` (int64
    ground truth, not a feature). The same arguments always give an identical frame.
    """
    _check_args(n_entities, n_items, n_types, min_events, max_events)
    t0 = _start_time(start)
    rng = np.random.default_rng(seed)

    account_type, lengths = _accounts(rng, n_entities, n_types, min_events, max_events)
    type_profile = behaviour_profile(n_types)
    n_profiles = int(type_profile.max()) + 1
    account_profile = type_profile[account_type]
    tempo = np.geomspace(*GAP_MEDIAN_S, n_types)[account_type]

    preference, successor, event_mix, channel_mix, log_price = _profiles(rng, n_items, n_profiles)
    habit = rng.integers(0, n_items, n_entities)  # an account-specific item, not a popular one

    entity, activity, periodic, session_start = _activity_clock(rng, lengths, max_events)
    profile = account_profile[entity]
    wall_s = _wall_clock(rng, entity, activity * tempo[entity], profile, t0)
    time_ms = _at_least_one_second_apart(entity, np.round(wall_s * 1000).astype(np.int64))
    hour = ((t0.value // 1_000_000 + time_ms) // 3_600_000) % 24
    night = (hour >= NIGHT_HOURS[0]) | (hour < NIGHT_HOURS[1])
    parent, chain_step, fresh = _item_rules(rng, entity, periodic, session_start)
    root = habit[entity]
    for p, is_night in np.ndindex(n_profiles, 2):
        rows = np.flatnonzero(fresh & (profile == p) & (night == is_night))
        root[rows] = rng.choice(n_items, size=len(rows), p=preference[p, is_night])
    item = _follow(parent, chain_step, root, profile, successor)

    event_code, channel_code, amount = _features(
        rng, profile, item, event_mix, channel_mix, log_price
    )
    ts_ns = t0.value + time_ms * 1_000_000
    order = np.lexsort((np.arange(len(entity)), entity, ts_ns))
    labels = np.char.add("acct_", np.char.zfill(np.arange(n_entities).astype(str), 6))
    columns = {
        "entity_id": pd.Series(labels, dtype="str").take(entity[order]).reset_index(drop=True),
        "item_id": item[order],
        "timestamp": pd.to_datetime(ts_ns[order], unit="ns", utc=True),
        "event_type": pd.Categorical.from_codes(event_code[order], categories=EVENT_TYPES),
        "channel": pd.Categorical.from_codes(channel_code[order], categories=CHANNELS),
        "amount": amount[order],
        "account_type": account_type[entity[order]].astype(np.int64),
    }
    return pd.DataFrame(columns)


def _start_time(start: str) -> pd.Timestamp:
    try:
        return pd.Timestamp(start, tz="UTC")
    except ValueError as err:
        raise SeqencError(f"start={start!r} is not a parseable date") from err


def _accounts(
    rng: np.random.Generator, n_entities: int, n_types: int, min_events: int, max_events: int
) -> tuple[np.ndarray, np.ndarray]:
    """Each account's type (balanced) and its log-normal number of ordinary (non-habit) events."""
    account_type = rng.permutation(np.arange(n_entities) % n_types)
    lengths = np.exp(rng.normal(np.log(LENGTH_MEDIAN), LENGTH_SIGMA, n_entities))
    return account_type, np.clip(np.round(lengths), min_events, max_events).astype(np.int64)


def _features(
    rng: np.random.Generator,
    profile: np.ndarray,
    item: np.ndarray,
    event_mix: np.ndarray,
    channel_mix: np.ndarray,
    log_price: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each event's categorical codes (event type, channel: the profile's mixes) and amount (the
    item's price with noise, for purchases; 0 otherwise)."""
    event_code = _sample_rows(rng, event_mix[profile])
    channel_code = _sample_rows(rng, channel_mix[profile])
    purchase = event_code == EVENT_TYPES.index("purchase")
    price = np.exp(log_price[item] + rng.normal(0.0, 0.2, len(item)))
    return event_code, channel_code, np.where(purchase, np.round(price, 2), 0.0)


def _profiles(
    rng: np.random.Generator, n_items: int, n_profiles: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per-profile parameters: day and night item preferences ``[profile, day/night, item]``,
    chains (each item's successor), event-type and channel mixes; and per-item log prices."""
    global_zipf = _zipf(n_items)
    preference = np.stack(
        [
            [
                (1 - SHARED_WEIGHT) * _zipf(n_items)[rng.permutation(n_items)]
                + SHARED_WEIGHT * global_zipf
                for _ in range(2)
            ]
            for _ in range(n_profiles)
        ]
    )
    successor = np.stack([rng.permutation(n_items) for _ in range(n_profiles)])
    event_mix = rng.dirichlet([8.0, 4.0, 2.0, 1.0, 1.0], size=n_profiles)
    channel_mix = rng.dirichlet([2.0, 2.0, 1.0], size=n_profiles)
    return preference, successor, event_mix, channel_mix, rng.normal(3.0, 1.0, n_items)


def _activity_clock(
    rng: np.random.Generator, lengths: np.ndarray, max_events: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Ordinary events in sessions plus each account's periodic habit events, merged.

    Returns ``(entity, activity, periodic, session_start)`` per event, grouped by entity and in
    activity-time order (activity in tempo units since the account's first event); accounts longer
    than ``max_events`` lose their newest events.
    """
    n_entities = len(lengths)
    entity = np.repeat(np.arange(n_entities), lengths)
    first = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    session_start = rng.random(len(entity)) < 1 / SESSION_MEAN
    session_start[first] = True
    gap = np.exp(rng.normal(0.0, GAP_SIGMA, len(entity)))
    gap = np.where(session_start, SESSION_BREAK * gap, gap)
    gap[first] = 0.0
    cum = np.cumsum(gap)
    activity = cum - cum[first][entity]

    span = activity[np.cumsum(lengths) - 1]
    phase = rng.random(n_entities) * PERIOD_GAPS
    n_habit = np.where(span >= phase, np.floor((span - phase) / PERIOD_GAPS) + 1, 0).astype(int)
    habit_entity = np.repeat(np.arange(n_entities), n_habit)
    k = np.arange(len(habit_entity)) - np.repeat(np.cumsum(n_habit) - n_habit, n_habit)
    jitter = rng.normal(0.0, PERIOD_JITTER * PERIOD_GAPS, len(k))
    habit_time = np.maximum(phase[habit_entity] + k * PERIOD_GAPS + jitter, 0.0)

    entity = np.concatenate([entity, habit_entity])
    activity = np.concatenate([activity, habit_time])
    periodic = np.concatenate([np.zeros(len(gap), bool), np.ones(len(k), bool)])
    session_start = np.concatenate([session_start, np.zeros(len(k), bool)])
    order = np.lexsort((np.arange(len(entity)), activity, entity))
    entity, activity = entity[order], activity[order]
    periodic, session_start = periodic[order], session_start[order]
    keep = _rank_in_entity(entity) < max_events
    return entity[keep], activity[keep], periodic[keep], session_start[keep]


def _wall_clock(
    rng: np.random.Generator,
    entity: np.ndarray,
    activity_s: np.ndarray,
    profile: np.ndarray,
    t0: pd.Timestamp,
) -> np.ndarray:
    """Seconds since ``t0`` of each event: activity seconds run faster in the profile's active
    hours (intensity ``1 + DIURNAL_AMPLITUDE * cos(2π (hour - peak) / 24)``, mean 1 a day)."""
    # Accounts start uniformly in activity time, so first events follow the daily rhythm too.
    account_start = rng.random(int(entity.max(initial=0)) + 1) * START_SPREAD_S
    n_hours = int(np.ceil((START_SPREAD_S + activity_s.max(initial=0.0)) / 3600)) + 48
    grid = np.arange(n_hours + 1) * 3600.0
    hour_of_day = (t0.hour + t0.minute / 60 + np.arange(n_hours) + 0.5) % 24
    wall = np.empty(len(entity))
    for p in np.unique(profile):
        peak = PEAK_HOURS[p % len(PEAK_HOURS)]
        rate = 1 + DIURNAL_AMPLITUDE * np.cos(2 * np.pi * (hour_of_day - peak) / 24)
        clock = np.concatenate([[0.0], np.cumsum(rate * 3600.0)])  # activity seconds at grid
        rows = profile == p
        begin = account_start[entity[rows]]
        wall[rows] = np.interp(begin + activity_s[rows], clock, grid)
    return wall


def _at_least_one_second_apart(entity: np.ndarray, time_ms: np.ndarray) -> np.ndarray:
    """Push events forward so that consecutive events of an entity are >= 1000 ms apart."""
    step = 1000 * _rank_in_entity(entity)
    slack = time_ms - step
    span = int(slack.max() - slack.min()) + 1
    lifted = slack - slack.min() + entity.astype(np.int64) * span  # entities never interleave
    return np.maximum.accumulate(lifted) - entity * span + slack.min() + step


def _item_rules(
    rng: np.random.Generator, entity: np.ndarray, periodic: np.ndarray, session_start: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Where each event's item comes from: ``(parent, chain_step, fresh)``.

    A chain event takes the successor of its parent's item (the previous event, ``chain_step`` 1),
    a repeat copies its parent's item (an event ``lag`` back, ``chain_step`` 0); fresh and habit
    events are their own parent (roots, drawn by the caller).
    """
    n = len(entity)
    index = np.arange(n)
    rank = _rank_in_entity(entity)
    u = rng.random(n)
    lag = np.minimum(rng.geometric(P_LAG, n), rank)
    ordinary = ~periodic & (rank > 0)
    chain = ordinary & ~session_start & (u < P_FOLLOW)
    repeat_below = np.where(session_start, P_REPEAT_START, P_FOLLOW + P_REPEAT)
    # Habit events are scheduled, not browsed: nothing repeats them, so their rhythm stays clean.
    repeat = ordinary & ~chain & (u < repeat_below) & ~periodic[index - lag]
    parent = np.where(chain, index - 1, np.where(repeat, index - lag, index))
    return parent, chain.astype(np.int64), ~periodic & ~chain & ~repeat


def _follow(
    parent: np.ndarray,
    chain_step: np.ndarray,
    root: np.ndarray,
    profile: np.ndarray,
    successor: np.ndarray,
) -> np.ndarray:
    """Resolve the item of every event: ``successor^s(root[r])``, ``r`` the root reached through
    ``parent`` and ``s`` the chain steps on the way; pointer jumping, O(log depth) passes."""
    parent, steps = parent.copy(), chain_step.copy()
    while True:
        grand = parent[parent]
        if np.array_equal(grand, parent):
            break
        steps = steps + steps[parent]
        parent = grand
    item = root[parent]
    power = successor.copy()  # successor^(2^bit), per profile
    bit = 0
    while (steps >> bit).any():
        move = ((steps >> bit) & 1).astype(bool)
        item[move] = power[profile[move], item[move]]
        power = np.take_along_axis(power, power, axis=1)
        bit += 1
    return item


def _rank_in_entity(entity: np.ndarray) -> np.ndarray:
    """Position of each event within its entity's run (``entity`` grouped, non-decreasing)."""
    starts = np.flatnonzero(np.r_[True, entity[1:] != entity[:-1]])
    lengths = np.diff(np.r_[starts, len(entity)])
    return np.arange(len(entity)) - np.repeat(starts, lengths)


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
