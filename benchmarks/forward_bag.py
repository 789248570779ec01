"""Is there forward signal the aggregates lack? A ceiling check on Ta-Feng's forward tasks (no training).

Which products a customer buys says much about their age (issue 27: a TF-IDF bag of the 23,812
products scores 0.698 on age under 35, the aggregates 0.664). This asks the same of "buys in
February": a TF-IDF bag of every product bought up to the cut-off, fitted by a logistic regression
inside each training fold (its out-of-fold score on the training rows, its score on the test rows),
is stacked as one more column onto the aggregates (``seqenc.evaluate.aggregate_features``, the
downstream benchmark's 638 columns). If the stacked bag adds nothing, the products hold no forward
signal beyond recency, frequency and spend, and no embedding of them can either. Same 5 stratified
folds for both sets (paired)::

    OMP_NUM_THREADS=1 python benchmarks/forward_bag.py
"""

from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import scipy.sparse as sp
from sklearn import linear_model, metrics, model_selection, preprocessing
from sklearn.feature_extraction.text import TfidfTransformer

from seqenc.evaluate import aggregate_features

sys.path.insert(0, str(Path(__file__).resolve().parent))
from downstream import DATASETS, ROOT, prepare  # noqa: E402

TAFENG = DATASETS["tafeng"]


def product_bag(events: pd.DataFrame, customers: pd.Index, cutoff) -> sp.csr_matrix:
    """``[customers, products]`` TF-IDF (sublinear counts) of the products bought up to ``cutoff``."""
    seen = events[events[TAFENG.schema.timestamp] <= cutoff]
    rows = customers.get_indexer(seen[TAFENG.schema.entity])
    keep = rows >= 0
    products, cols = np.unique(seen[TAFENG.schema.item][keep], return_inverse=True)
    counts = sp.csr_matrix(
        (np.ones(keep.sum()), (rows[keep], cols)), shape=(len(customers), len(products))
    )
    return TfidfTransformer(sublinear_tf=True).fit_transform(counts)


def fold_scores(x_agg, bag, y, train, test) -> dict[str, float]:
    """ROC-AUC on ``test`` of the aggregates, the bag alone, and the aggregates + stacked bag."""
    scaler = preprocessing.StandardScaler().fit(x_agg[train])
    agg = np.clip(scaler.transform(x_agg), -10, 10)
    bag_model = linear_model.LogisticRegression(C=1.0, max_iter=2000)
    stacked = np.zeros(len(y))
    stacked[train] = model_selection.cross_val_predict(
        bag_model, bag[train], y[train], cv=5, method="decision_function"
    )
    stacked[test] = bag_model.fit(bag[train], y[train]).decision_function(bag[test])
    stacked = (stacked - stacked[train].mean()) / stacked[train].std()
    out = {
        "aggregates": agg,
        "bag": stacked[:, None],
        "aggregates + bag": np.column_stack([agg, stacked]),
    }
    scores = {}
    for name, x in out.items():
        model = linear_model.LogisticRegressionCV(Cs=[1e-3, 1e-2, 1e-1], cv=3, max_iter=2000)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            model.fit(x[train], y[train])
        scores[name] = metrics.roc_auc_score(y[test], model.decision_function(x[test]))
    return scores


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=str(ROOT.parent / "shared/data/ta-feng"))
    parser.add_argument("--work", default=str(ROOT / "benchmarks/out/downstream-tafeng"))
    parser.add_argument("--task", default="buys_february")
    args = parser.parse_args()
    events, labels = prepare(TAFENG, args.data, Path(args.work).resolve())
    labels = labels[labels[args.task].notna()].reset_index(drop=True)
    aggregates = aggregate_features(
        events, TAFENG.schema, labels[TAFENG.on], max_categories=TAFENG.max_categories
    )
    rows = labels[[*TAFENG.on, args.task]].merge(aggregates, on=TAFENG.on, how="inner")
    x_agg = rows.drop(columns=[*TAFENG.on, args.task]).to_numpy(float)
    y = rows[args.task].to_numpy().astype(int)
    cutoff = rows[TAFENG.on[1]].max()  # the forward tasks' one cut-off, 2001-01-31
    bag = product_bag(events, pd.Index(rows[TAFENG.on[0]]), cutoff)
    folds = model_selection.StratifiedKFold(5, shuffle=True, random_state=0).split(x_agg, y)
    table = [fold_scores(x_agg, bag, y, train, test) for train, test in folds]
    print(f"{args.task}: {len(y):,} customers, {bag.shape[1]:,} products, 5 folds (ROC-AUC)")
    for name in table[0]:
        values = np.array([t[name] for t in table])
        print(f"  {name:<18} {values.mean():.4f} ± {values.std():.4f}")
    gain = np.array([t["aggregates + bag"] - t["aggregates"] for t in table])
    print(f"  paired gain of the bag: {gain.mean():+.4f} ± {gain.std():.4f}")


if __name__ == "__main__":
    main()
