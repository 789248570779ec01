"""Which readout of a trained bundle carries the forward signal? Mean, newest state, or both (no training).

The same trained Ta-Feng bundles read three ways at the forward cut-off (2001-01-31): the mean of
the states (``pooling: mean``, what ``configs/account_embeddings.yaml`` ships), the newest state (the
one the next-event head reads, which is told the time to ``as_of``), and both side by side. Each is
probed (linear, 5 folds, the downstream benchmark's folds) alone and beside the aggregates on the
forward tasks::

    OMP_NUM_THREADS=1 python benchmarks/readout_forward.py --bundles RUN/bundle [RUN2/bundle ...]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from seqenc import load_encoder
from seqenc.evaluate import aggregate_features, embed_at

sys.path.insert(0, str(Path(__file__).resolve().parent))
from downstream import DATASETS, ROOT, ScoreCache, evaluate, prepare  # noqa: E402

TAFENG = DATASETS["tafeng"]
TASKS = {"buys_february": "roc_auc", "february_spend": "r2"}


def readouts(bundle: str, events: pd.DataFrame, cutoffs: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """The bundle's embeddings at ``cutoffs`` read as ``mean``, ``newest`` and ``both``."""
    encoder = load_encoder(bundle, "cpu")
    out = {}
    for name, pooling in (("mean", "mean"), ("newest", "last")):
        encoder.model.config.pooling = pooling
        out[name] = embed_at(encoder, events, cutoffs)
    both = out["mean"].merge(out["newest"], on=TAFENG.on, suffixes=("_m", "_n"))
    both["embedding"] = list(np.hstack([np.stack(both.embedding_m), np.stack(both.embedding_n)]))
    out["both"] = both[[*TAFENG.on, "embedding"]]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bundles", nargs="+", required=True)
    parser.add_argument("--data", default=str(ROOT.parent / "shared/data/ta-feng"))
    parser.add_argument("--work", default=str(ROOT / "benchmarks/out/downstream-tafeng"))
    args = parser.parse_args()
    work = Path(args.work).resolve()
    events, labels = prepare(TAFENG, args.data, work)
    cutoffs = labels[labels["buys_february"].notna()][TAFENG.on]
    aggregates = aggregate_features(
        events, TAFENG.schema, cutoffs, max_categories=TAFENG.max_categories
    )
    cache = ScoreCache(work / "aggregate_scores.json")
    print("| bundle | readout | task | embeddings | aggregates | both | both − aggregates |")
    print("|---|---|---|---:|---:|---:|---:|")
    for bundle in args.bundles:
        for name, embeddings in readouts(bundle, events, cutoffs).items():
            result = evaluate(TASKS, [], labels, aggregates, embeddings, TAFENG.on, cache)
            for key, sets in result.items():
                metric = TASKS[key.split("/")[0]]
                folds = {s: np.array(v["folds"][metric]) for s, v in sets.items()}
                gain = folds["both"] - folds["aggregates"]
                print(
                    f"| {Path(bundle).parent.name} | {name} | {key} | {folds['embeddings'].mean():.4f} "
                    f"| {folds['aggregates'].mean():.4f} | {folds['both'].mean():.4f} "
                    f"| {gain.mean():+.4f} ± {gain.std():.4f} |",
                    flush=True,
                )


if __name__ == "__main__":
    main()
