"""A reference model for the ICU-stay log (PhysioNet 2012): a plain GRU on hourly bins.

What irregular-series papers compare against (GRU with forward filling, as in GRU-D's baselines):
each stay's 48 hours as 48 steps, per time series the hour's mean (standardised on the training
stays, forward-filled, 0 before the first measurement), whether it was measured that hour and the
hours since its last measurement; the descriptors (age, gender, height, ICU type) beside the final
state. A GRU of 64 units, 30 epochs of Adam, the epoch whose ROC-AUC on 10 % of the training stays
is best predicts the held-out ones. One thread (``torch.set_num_threads(1)``), seeded.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import torch
from torch import nn

from seqenc.evaluate import prediction_scores

HOURS, UNITS, EPOCHS, BATCH, HOLDOUT = 48, 64, 30, 64, 0.1
DESCRIPTORS = ("Age", "Gender", "Height", "ICUType")


def hourly_bins(
    events: pd.DataFrame, rows: pd.DataFrame, train: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """``([n, 48, 3p] series, [n, d] descriptors)`` of the stays of ``rows`` (``stay_id``,
    ``as_of`` = admission + 48 h), standardised with the events of the stays at ``train``."""
    stay = pd.Index(rows["stay_id"])
    ev = events[events["stay_id"].isin(stay)]
    start = ev["stay_id"].map(rows.set_index("stay_id")["as_of"]) - pd.Timedelta(hours=HOURS)
    hour = ((ev["timestamp"] - start).dt.total_seconds() // 3600).clip(0, HOURS - 1).astype(int)
    fit = ev["stay_id"].isin(stay[train])
    stats = ev[fit].groupby("parameter")["value"].agg(["mean", "std"])
    value = (ev["value"] - ev["parameter"].map(stats["mean"])) / ev["parameter"].map(
        stats["std"]
    ).replace(0.0, 1.0).fillna(1.0)
    frame = pd.DataFrame(
        {"row": stay.get_indexer(ev["stay_id"]), "hour": hour, "p": ev["parameter"], "v": value}
    )
    series = [p for p in stats.index if p not in DESCRIPTORS]
    means = frame[frame["p"].isin(series)].groupby(["row", "hour", "p"])["v"].mean()
    grid = np.full((len(stay), HOURS, len(series)), np.nan)
    r, h, p = (means.index.get_level_values(i) for i in range(3))
    grid[r.to_numpy(), h.to_numpy(), pd.Index(series).get_indexer(p)] = means.to_numpy()
    observed = ~np.isnan(grid)
    hours = np.arange(HOURS)[None, :, None]
    last = np.maximum.accumulate(np.where(observed, hours, -1), axis=1)
    since = np.where(last >= 0, hours - last, hours + 1) / HOURS
    filled = np.take_along_axis(np.nan_to_num(grid), np.maximum(last, 0), axis=1)
    filled = np.where(last >= 0, filled, 0.0)
    x = np.concatenate([filled, observed, since], axis=2).astype(np.float32)
    static = descriptors(frame.assign(raw=ev["value"].to_numpy()), len(stay))
    return x, static.astype(np.float32)


def descriptors(frame: pd.DataFrame, n: int) -> np.ndarray:
    """``[n, 10]``: standardised age, gender and height (``v``), each with a missing mask, and
    the ICU type (``raw``: 1-4) one-hot."""
    first = frame[frame["p"].isin(DESCRIPTORS)].groupby(["row", "p"])[["v", "raw"]].first()
    numeric = first["v"].unstack().reindex(index=range(n), columns=list(DESCRIPTORS[:3]))
    icu = first["raw"].unstack().reindex(index=range(n), columns=["ICUType"])["ICUType"]
    one_hot = (icu.to_numpy()[:, None] == np.arange(1, 5)[None, :]).astype(float)
    return np.concatenate([numeric.fillna(0.0), numeric.isna(), one_hot], axis=1)


class HourlyGRU(nn.Module):
    """GRU over the hourly steps; its final state and the descriptors → one logit."""

    def __init__(self, n_inputs: int, n_static: int) -> None:
        super().__init__()
        self.gru = nn.GRU(n_inputs, UNITS, batch_first=True)
        self.out = nn.Sequential(nn.Linear(UNITS + n_static, UNITS), nn.ReLU(), nn.Linear(UNITS, 1))

    def forward(self, x: torch.Tensor, static: torch.Tensor) -> torch.Tensor:
        return self.out(torch.cat([self.gru(x)[1][-1], static], dim=1))[:, 0]


def gru_fold(
    events: pd.DataFrame, rows: pd.DataFrame, y: np.ndarray, train: np.ndarray, test: np.ndarray
) -> dict[str, float]:
    """The GRU trained on the stays at ``train`` (binary labels ``y``), its checkpoint picked on
    a stratified :data:`HOLDOUT` of them, scored on the stays at ``test``."""
    torch.set_num_threads(1)
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    x, static = map(torch.from_numpy, hourly_bins(events, rows, train))
    held = np.concatenate(
        [rng.choice(c, max(1, round(HOLDOUT * len(c))), replace=False)
         for c in (train[y[train] == 0], train[y[train] == 1])]
    )  # fmt: skip
    fit = np.setdiff1d(train, held)
    model = HourlyGRU(x.shape[2], static.shape[1])
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    target = torch.from_numpy(y.astype(np.float32))
    best, state = -1.0, None
    for _ in range(EPOCHS):
        model.train()
        for batch in np.array_split(rng.permutation(fit), max(1, len(fit) // BATCH)):
            optimizer.zero_grad()
            logit = model(x[batch], static[batch])
            nn.functional.binary_cross_entropy_with_logits(logit, target[batch]).backward()
            optimizer.step()
        score = prediction_scores("binary", y[held], _probabilities(model, x, static, held))
        if score["roc_auc"] > best:
            best, state = score["roc_auc"], {k: v.clone() for k, v in model.state_dict().items()}
    model.load_state_dict(state)
    return prediction_scores("binary", y[test], _probabilities(model, x, static, test))


def _probabilities(
    model: HourlyGRU, x: torch.Tensor, static: torch.Tensor, rows: np.ndarray
) -> np.ndarray:
    """``[len(rows), 2]`` class probabilities."""
    model.eval()
    with torch.no_grad():
        p = torch.sigmoid(model(x[rows], static[rows])).numpy()
    return np.stack([1 - p, p], axis=1)
