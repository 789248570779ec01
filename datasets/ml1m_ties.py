"""How ML-1M's sequence order breaks timestamp ties, measured on the users that have timestamps.

    python datasets/ml1m_ties.py [../shared/data/ml-1m]

Published ML-1M figures depend on it: sorting ties by item id puts a learnable pattern (a higher id
follows a lower one) into half of the sequence, reported to inflate NDCG by about a fifth
(https://github.com/yueqirex/LRURec/issues/1). This prints the
share of consecutive events of a user that share a timestamp, and within those ties how often the
item id and the official file position increase (0.5 and 1.0 mean: official order, no id sort).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd


def main(folder: Path) -> None:
    seqs = pd.read_parquet(folder / "ml-1m_sequences.parquet")
    ratings = pd.read_csv(
        folder / "ratings_partial_users1-2999.dat",
        sep="::",
        engine="python",
        names=["user_id", "item_id", "rating", "ts"],
    )
    ratings["file_row"] = np.arange(len(ratings))
    timed = seqs.merge(ratings, on=["user_id", "item_id"]).sort_values(["user_id", "position"])
    user, ts = timed["user_id"].to_numpy(), timed["ts"].to_numpy()
    same_user = user[1:] == user[:-1]
    tie = same_user & (ts[1:] == ts[:-1])
    print(f"users with timestamps: {timed['user_id'].nunique():,}, events {len(timed):,}")
    print(f"consecutive pairs sharing a timestamp: {tie.sum() / same_user.sum():.3f}")
    for column in ("item_id", "file_row"):
        values = timed[column].to_numpy()
        print(f"within ties, {column} increases: {(values[1:] > values[:-1])[tie].mean():.3f}")


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "../shared/data/ml-1m"))
