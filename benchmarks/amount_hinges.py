"""Do nonlinear views of the amounts add to the aggregates on Berka's age tasks? (no training)

A ceiling check for "better numeric handling in the model": the linear probe on the aggregates
(``seqenc.evaluate.aggregate_features``) vs the same plus hinge functions ``max(0, x - knot)`` of
every amount mean (overall and per category) at its 7 inner octiles, same 5 folds::

    OMP_NUM_THREADS=1 python benchmarks/amount_hinges.py
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


def hinges(aggregates: pd.DataFrame) -> pd.DataFrame:
    """``max(0, x - q)`` for the inner octiles q of each ``amount_mean*`` column (non-zero values)."""
    extra = {}
    for column in [c for c in aggregates.columns if c.startswith("amount_mean")]:
        values = aggregates[column].fillna(0).to_numpy()
        if (values != 0).sum() <= 20:
            continue
        knots = np.unique(np.quantile(values[values != 0], np.linspace(0, 1, 9)))[1:-1]
        for i, knot in enumerate(knots):
            extra[f"{column}_hinge{i}"] = np.maximum(values - knot, 0)
    return pd.concat([aggregates, pd.DataFrame(extra, index=aggregates.index)], axis=1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default="../shared/data/berka")
    parser.add_argument("--work", default=str(ROOT / "benchmarks/out/amount_hinges"))
    args = parser.parse_args()
    events, labels = prepare(BERKA, args.data, Path(args.work).resolve())
    on = ["account_id", "as_of"]
    aggregates = aggregate_features(events, BERKA.schema, labels[on].drop_duplicates())
    extended = hinges(aggregates)
    print(f"{extended.shape[1] - aggregates.shape[1]} hinge columns")
    for task, metric in (("age", "r2"), ("age_group", "roc_auc")):
        rows = labels[labels[task].notna()][[*on, task]]
        a = np.array(scores(aggregates, rows, task, on, "linear")["folds"][metric])
        b = np.array(scores(extended, rows, task, on, "linear")["folds"][metric])
        print(
            f"{task} ({metric}): aggregates {a.mean():.4f} ± {a.std():.4f}, "
            f"+ hinges {b.mean():.4f} ± {b.std():.4f}, paired {(b - a).mean():+.4f} ± {(b - a).std():.4f}"
        )


if __name__ == "__main__":
    main()
