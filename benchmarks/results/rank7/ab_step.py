"""Paired, in one process: the training step of ``tafeng + account_embeddings`` with this branch's
cuts switched off and on (the exact normaliser's kept exponentials, ``KEPT_ELEMENTS``; the
contrastive views embedded by length, ``LENGTH_GROUPS``; the copy attention at the baskets read,
``basket_loss._basket_queries``; one ``[B, L, L]`` time relation computed per call,
``baskets._relation``), beside ``sasrec_ml1m``'s, as
``benchmarks/bench_train.py`` builds and times them (6 batches picked across the epoch's widths,
step = training_step + backward + clipping + AdamW). Rounds interleave every variant; medians of
events per CPU second, ratios to sasrec_ml1m's in the same round.

    PYTHONPATH=$PWD OMP_NUM_THREADS=1 python benchmarks/results/rank7/ab_step.py [--rounds 5]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "benchmarks"))
import bench_train  # noqa: E402

import seqenc.model.basket_loss as basket_loss  # noqa: E402
import seqenc.model.baskets as baskets  # noqa: E402
import seqenc.model.contrastive as contrastive  # noqa: E402
import seqenc.model.normaliser as normaliser  # noqa: E402

KEPT = normaliser.KEPT_ELEMENTS
BASKETS = basket_loss._basket_queries
ONE = baskets._relation


def all_three(batch, kind: str) -> torch.Tensor:
    """The three time relations computed at every call, the one asked returned (before)."""
    relations = {name: ONE(batch, name) for name in ("earlier", "later", "same")}
    return relations[kind]


def every_line(rows: torch.Tensor, at: torch.Tensor, n_rows: int):
    """The copy attention at every line (before this branch): query positions 0 … L-1."""
    queries = torch.arange(int(at.max()) + 1).expand(n_rows, -1)
    return queries, rows, at


VARIANTS = {  # (KEPT_ELEMENTS, LENGTH_GROUPS, copy attention's queries, time relations)
    "before (main)": (0, 1, every_line, all_three),
    "exponentials kept": (KEPT, 1, every_line, all_three),
    "+ views in 2 length groups": (KEPT, 2, every_line, all_three),
    "+ copy at the baskets read": (KEPT, 2, BASKETS, all_three),
    "+ one time relation per call (this branch)": (KEPT, 2, BASKETS, ONE),
    "this branch, views in 4 length groups": (KEPT, 4, BASKETS, ONE),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=6)
    args = parser.parse_args()
    small = Path(tempfile.mkdtemp())
    cases = {c.name: c for c in bench_train.CASES}
    built = {
        name: bench_train.Timed(cases[name], bench_train.data_path(cases[name], small), args.steps)
        for name in ("sasrec_ml1m", "tafeng + account_embeddings")
    }
    reference, tafeng = built["sasrec_ml1m"], built["tafeng + account_embeddings"]
    rates: dict[str, list[float]] = {name: [] for name in ("sasrec_ml1m", *VARIANTS)}
    ratios: dict[str, list[float]] = {name: [] for name in VARIANTS}
    for _ in range(args.rounds):
        base = reference.events / reference.time()[1]
        rates["sasrec_ml1m"].append(base)
        for name, (kept, groups, queries, relation) in VARIANTS.items():
            normaliser.KEPT_ELEMENTS, contrastive.LENGTH_GROUPS = kept, groups
            basket_loss._basket_queries, baskets._relation = queries, relation
            rate = tafeng.events / tafeng.time()[1]
            rates[name].append(rate)
            ratios[name].append(rate / base)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} thread(s), {args.rounds} rounds")
    print("| case | events/CPU s (median) | vs sasrec_ml1m (median of per-round ratios) |")
    print("|---|---:|---:|")
    print(f"| sasrec_ml1m | {statistics.median(rates['sasrec_ml1m']):,.0f} | 1.00 |")
    for name in VARIANTS:
        rate, ratio = statistics.median(rates[name]), statistics.median(ratios[name])
        print(f"| tafeng + account_embeddings, {name} | {rate:,.0f} | {ratio:.3f} |")


if __name__ == "__main__":
    main()
