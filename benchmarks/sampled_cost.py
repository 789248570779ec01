"""The training step's cost under the exact softmax and under sampled catalogue terms, in one process.

    python benchmarks/sampled_cost.py --data runs/r2/data/tafeng_events.parquet \\
        --args --data.schema.entity customer_id --data.schema.item product_id --data.baskets false \\
        --variants ce "sampled_softmax {n_negatives: 4096}" --steps 10 --rounds 2

Every variant is the module ``seqenc fit --config CONFIG`` (default ``configs/clicks.yaml``) builds with
``--model.loss`` (and ``--model.loss_options``) of the variant; all of them train on the same
``--steps`` batches of the data's training split (drawn once), one round after the other, so the
variants see the same load (``--rounds`` rounds, interleaved; the median per variant). A step is
what ``fit`` runs: the module's training step, backward, clipping and the optimiser. The sampled
term's proposal is the training split's item frequency, as at fit. Writes ``--output`` (markdown).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import warnings
from pathlib import Path

import torch
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
import sampled_common as common  # noqa: E402
from bench_scale import optimizer_step  # noqa: E402
from bench_train import matmul_gflops  # noqa: E402

from seqenc.model.optim import RowSparseAdamW  # noqa: E402


def variant_args(variant: str) -> list[str]:
    """``"sampled_softmax {n_negatives: 4096}"`` → the loss's command-line overrides."""
    loss, _, options = variant.partition(" ")
    args = ["--model.loss", loss]
    if options:
        args += ["--model.loss_options", yaml.safe_dump(yaml.safe_load(options)).strip()]
    return args


def build_variant(config: Path, data: Path, extra: list[str], variant: str):
    """The module and data module of one variant (the sampled term's proposal set as at fit)."""
    model, datamodule = common.build_fit(config, data, [*extra, *variant_args(variant)])
    if model.loss == "sampled_softmax":
        model.proposal = common.fit_proposal(model, datamodule)
    return model, datamodule


def time_steps(model, batches: list) -> float:
    """Median seconds per training step over ``batches`` (after one untimed step)."""
    optimizer = RowSparseAdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    model.train()
    spent = []
    for i, batch in enumerate([batches[0], *batches]):
        start = time.perf_counter()
        optimizer_step(model, optimizer, batch, i)
        if i:
            spent.append(time.perf_counter() - start)
    return statistics.median(spent)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    common.add_arguments(parser, ["ce", "sampled_softmax"], "sampled_cost.md")
    parser.add_argument("--config", type=Path, default=ROOT / "configs/clicks.yaml")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    gflops = matmul_gflops()
    models = {v: build_variant(args.config, args.data, args.args, v) for v in args.variants}
    batches = common.training_batches(next(iter(models.values()))[1], args.steps, args.seed)
    seconds: dict[str, list[float]] = {v: [] for v in args.variants}
    for _ in range(args.rounds):
        for variant, (model, _) in models.items():
            seconds[variant].append(time_steps(model, batches))
            print(variant, f"{seconds[variant][-1]:.3f} s/step", flush=True)
    base = statistics.median(seconds[args.variants[0]])
    events = sum(int(b.lengths.sum()) for b in batches) / len(batches)
    lines = [
        "# The training step: exact softmax against sampled catalogue terms",
        "",
        f"{common.run_line()}, {torch.get_num_threads()} thread(s), fp32 matmul "
        f"{gflops:.0f} GFLOP/s at the start; {args.steps} steps of {events:,.0f} events on "
        f"average, median of {args.rounds} interleaved rounds.",
        "",
        "| variant | loss | items | s/step | ÷ first variant |",
        "|---|---|---:|---:|---:|",
    ]
    for variant, (model, _) in models.items():
        value = statistics.median(seconds[variant])
        n_items = model.config.n_items - 3
        lines.append(
            f"| `{variant}` | {model.loss} | {n_items:,} | {value:.3f} | {value / base:.3f} |"
        )
    common.report(args.output, lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
