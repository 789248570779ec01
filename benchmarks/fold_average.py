"""Does averaging several fine-tuned models help? Scores each label-head bundle on one held-out fold
of `benchmarks/downstream.py`'s folds, then the mean of their logits, so a user knows whether
training several seeds and averaging them is worth its cost; with ``--wide-only``, a fused head's
aggregates part alone, so the pooled sequence's own share of the fused score shows.

    OMP_NUM_THREADS=1 python benchmarks/fold_average.py --data physionet --work WORK --fold 0 \
        --bundles RUN1/bundle RUN2/bundle ...

Every bundle must have been fine-tuned on that fold's training rows (the same ``--work`` folder
and data, as ``downstream.py --folds K --finetune ...`` trains them); two classes only.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pandas as pd
from downstream_data import DATASETS, ROOT, prepare, task_rows  # beside this script
from downstream_fit import held_predictions

from seqenc import load_encoder
from seqenc.evaluate import aggregate_features, cv_folds
from seqenc.scores import class_scores


def fold_probabilities(
    bundle: Path, events: pd.DataFrame, held: pd.DataFrame, wide_only: bool = False
) -> np.ndarray:
    """The positive class's probability of each row of ``held`` (in its order) from ``bundle``;
    ``wide_only``: a fused head's aggregates part alone (the pooled sequence's map set to zero)."""
    encoder = load_encoder(bundle, "cpu")
    if wide_only:
        if encoder.model.head.wide is None:
            raise SystemExit(f"{bundle}: --wide-only needs a fused head (model.fusion aggregates)")
        for weights in (encoder.model.head.linear.weight, encoder.model.head.linear.bias):
            weights.data.zero_()
    rows_at, output = held_predictions(bundle, events, held, encoder)
    probabilities = np.empty(len(held))
    probabilities[rows_at] = output[:, -1]
    return probabilities


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", choices=sorted(DATASETS), default="physionet")
    parser.add_argument("--source", default=None, help="raw data folder (../shared/data/DATA)")
    parser.add_argument("--work", required=True, help="downstream.py's --work folder")
    parser.add_argument("--task", default=None, help="the label (default: the data set's first)")
    parser.add_argument("--fold", type=int, required=True, help="the held-out fold (0-4)")
    parser.add_argument("--bundles", nargs="+", required=True)
    parser.add_argument(
        "--wide-only", action="store_true", help="fused heads: score their aggregates' part alone"
    )
    args = parser.parse_args()
    dataset = DATASETS[args.data]
    task = args.task or next(iter(dataset.tasks))
    source = args.source or str(ROOT.parent / "shared/data" / dataset.source)
    events, labels = prepare(dataset, source, Path(args.work))
    aggregates = aggregate_features(
        events, dataset.schema, labels[dataset.on].drop_duplicates(),
        max_categories=dataset.max_categories or 20, value_stats=dataset.value_stats,
    )  # fmt: skip
    rows = task_rows(labels, aggregates, task, dataset.on)
    kind, y, _, splits = cv_folds(rows[task].to_numpy())
    if kind != "binary":
        raise SystemExit(f"{task}: two classes only, got a {kind} label")
    test = splits[args.fold][1]
    held = rows.iloc[test][dataset.on].reset_index(drop=True)
    p = np.stack([fold_probabilities(Path(b), events, held, args.wide_only) for b in args.bundles])
    logits = np.log(np.clip(p, 1e-7, 1.0)) - np.log(np.clip(1.0 - p, 1e-7, 1.0))

    def auc(probability: np.ndarray) -> float:
        two = np.stack([1.0 - probability, probability], axis=1)
        return class_scores(y[test], two)["roc_auc"]

    scores = {b: auc(q) for b, q in zip(args.bundles, p, strict=True)}
    scores["mean of the logits"] = auc(1.0 / (1.0 + np.exp(-logits.mean(0))))
    print(json.dumps(scores, indent=1))


if __name__ == "__main__":
    main()
