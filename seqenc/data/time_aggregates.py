"""The time columns of the hand-made aggregates (:mod:`seqenc.data.aggregates`): tenure,
recency and rates of each cut-off row's events, and the gaps between its events and between its
sessions (the events that share one time)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from seqenc.data.cut import reference_seconds

DAY = 86400.0


def gap_stats(ev: pd.DataFrame, prefix: str) -> pd.DataFrame:
    """Mean, std, median, max of the days between consecutive times ``_t`` of each ``_row``
    (``ev`` sorted by row then time)."""
    rows = ev["_row"].to_numpy()
    same = rows[1:] == rows[:-1]
    gaps = np.where(same, np.diff(ev["_t"].to_numpy()) / DAY, np.nan)
    frame = pd.DataFrame({"_row": rows, "_gap": np.concatenate([[np.nan], gaps])})
    gap = frame.groupby("_row", sort=True)["_gap"].agg(["mean", "std", "median", "max"])
    return gap.rename(columns=lambda s: f"{prefix}_{s}")


def time_features(ev: pd.DataFrame, g, n: pd.Series) -> pd.DataFrame:
    """Tenure, recency, rate, gaps between events, and the same for *sessions*: the events of an
    entity that share one timestamp (a basket on a day-resolution log, a burst on a finer one)."""
    first, last = g["_t"].min(), g["_t"].max()
    ref = pd.Series(reference_seconds(g["_ref"].first().to_numpy(), last.to_numpy()), last.index)
    tenure = (ref - first) / DAY
    sessions = ev.drop_duplicates(["_row", "_t"])
    per_session = ev.groupby(["_row", "_t"], sort=True).size().groupby(level=0)
    size = per_session.agg(["size", "mean", "max"])
    n_sessions = size["size"].astype(float)
    out = pd.DataFrame(
        {
            "tenure_days": tenure,
            "recency_days": (ref - last) / DAY,
            "events_per_day": n / tenure.clip(lower=1.0),
            "n_sessions": n_sessions,
            "sessions_per_day": n_sessions / tenure.clip(lower=1.0),
            "session_size_mean": size["mean"].astype(float),
            "session_size_max": size["max"].astype(float),
        }
    )
    return out.join(gap_stats(ev, "gap_days")).join(gap_stats(sessions, "session_gap_days"))
