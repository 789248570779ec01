"""Does recent behaviour add to the aggregates on forward-looking Berka labels? (no training)

A ceiling check for "labels that depend on order or timing": at one cut-off (1993-12-31), three
labels from the following quarter (1994-01-01 … 1994-03-30; the log's last day may be cut short):
``log1p`` of the money going out, of the money coming in, and of the number of transactions. The
linear probe on the aggregates (``seqenc.evaluate.aggregate_features`` at the cut-off) against the
same plus what an order-aware model could add and the aggregates lack: the last 90 days' count,
money out and money in, and the last balance. Same 5 folds::

    OMP_NUM_THREADS=1 python benchmarks/forward_windows.py
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from seqenc.evaluate import aggregate_features

sys.path.insert(0, str(Path(__file__).resolve().parent))
from downstream import DATASETS, ROOT, prepare, scores  # noqa: E402

BERKA = DATASETS["berka"]

CUTOFF = pd.Timestamp("1993-12-31", tz="UTC")
HORIZON_END = pd.Timestamp("1994-03-30", tz="UTC")
RECENT = pd.Timedelta(days=90)
OUTGOING = ["VYDAJ", "VYBER"]  # Berka transaction types that take money out


def per_account(events: pd.DataFrame, accounts: pd.Index) -> dict[str, np.ndarray]:
    """``log1p`` of money out, money in and the event count of ``events``, per account."""
    out = events["type"].isin(OUTGOING)

    def total(values: pd.Series) -> np.ndarray:
        sums = values.groupby(events["account_id"]).sum()
        return np.log1p(sums.reindex(accounts).fillna(0).to_numpy())

    return {
        "out": total(events["amount"].where(out, 0.0)),
        "in": total(events["amount"].where(~out, 0.0)),
        "n": total(pd.Series(1.0, index=events.index)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default="../shared/data/berka")
    parser.add_argument("--work", default=str(ROOT / "benchmarks/out/forward_windows"))
    args = parser.parse_args()
    events, _ = prepare(BERKA, args.data, Path(args.work).resolve())
    past = events[events["timestamp"] <= CUTOFF]
    future = events[(events["timestamp"] > CUTOFF) & (events["timestamp"] <= HORIZON_END)]
    accounts = pd.Index(past["account_id"].unique())
    on = ["account_id", "as_of"]
    labels = pd.DataFrame({"account_id": accounts, "as_of": CUTOFF})
    for name, values in per_account(future, accounts).items():
        labels[f"{name}_next_quarter"] = values
    aggregates = aggregate_features(events, BERKA.schema, labels[on])
    recent = per_account(past[past["timestamp"] > CUTOFF - RECENT], accounts)
    last_balance = past.groupby("account_id")["balance"].last().reindex(accounts)
    extra = pd.DataFrame({f"last_90d_{k}": v for k, v in recent.items()})
    extra["last_balance"] = last_balance.to_numpy()
    extended = pd.concat([aggregates, extra.set_index(aggregates.index)], axis=1)
    print(f"{len(labels)} accounts with events by {CUTOFF.date()}")
    for task in [c for c in labels.columns if c.endswith("_next_quarter")]:
        a = np.array(scores(aggregates, labels[[*on, task]], task, on, "linear")["folds"]["r2"])
        b = np.array(scores(extended, labels[[*on, task]], task, on, "linear")["folds"]["r2"])
        print(
            f"{task} (r2): aggregates {a.mean():.4f} ± {a.std():.4f}, "
            f"+ recent {b.mean():.4f} ± {b.std():.4f}, paired {(b - a).mean():+.4f} ± {(b - a).std():.4f}"
        )


if __name__ == "__main__":
    main()
