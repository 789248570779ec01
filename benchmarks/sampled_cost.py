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
import datetime
import shlex
import statistics
import sys
import time
import warnings
from pathlib import Path

import torch
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
from bench_scale import optimizer_step  # noqa: E402
from bench_train import build, cpu_name, matmul_gflops  # noqa: E402

from seqenc.atomic import write_text  # noqa: E402
from seqenc.model.optim import RowSparseAdamW  # noqa: E402
from seqenc.model.sampled import Proposal  # noqa: E402
from seqenc.training.baselines import item_counts  # noqa: E402


def variant_args(variant: str) -> list[str]:
    """``"sampled_softmax {n_negatives: 4096}"`` → the loss's command-line overrides."""
    loss, _, options = variant.partition(" ")
    args = ["--model.loss", loss]
    if options:
        args += ["--model.loss_options", yaml.safe_dump(yaml.safe_load(options)).strip()]
    return args


def build_variant(config: Path, data: Path, extra: list[str], variant: str):
    """The module and data module (set up for fit) of ``seqenc fit --config CONFIG --data.path
    DATA EXTRA`` with the variant's loss; the sampled term's proposal as at fit: the training
    split's item frequency."""
    cli = build(["--config", str(config), "--data.path", str(data), *extra, *variant_args(variant)])
    model, datamodule = cli.model, cli.datamodule
    datamodule.setup("fit")
    if model.loss == "sampled_softmax":
        counts = item_counts(datamodule.splits[0], model.config.n_items)[: model.config.n_items]
        model.proposal = Proposal.from_counts(torch.from_numpy(counts))
    return model, datamodule


def training_batches(datamodule, n: int, seed: int) -> list:
    """The first ``n`` batches of the training loader, drawn once with ``seed``."""
    torch.manual_seed(seed)
    loader = iter(datamodule.train_dataloader())
    return [next(loader) for _ in range(n)]


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
    parser.add_argument("--data", type=Path, required=True)
    parser.add_argument("--variants", nargs="+", default=["ce", "sampled_softmax"])
    parser.add_argument("--output", type=Path, default=ROOT / "benchmarks/results/sampled_cost.md")
    parser.add_argument("--args", nargs=argparse.REMAINDER, default=[], help="fit overrides")
    parser.add_argument("--config", type=Path, default=ROOT / "configs/clicks.yaml")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    gflops = matmul_gflops()
    models = {v: build_variant(args.config, args.data, args.args, v) for v in args.variants}
    batches = training_batches(next(iter(models.values()))[1], args.steps, args.seed)
    seconds: dict[str, list[float]] = {v: [] for v in args.variants}
    for _ in range(args.rounds):
        for variant, (model, _) in models.items():
            seconds[variant].append(time_steps(model, batches))
            print(variant, f"{seconds[variant][-1]:.3f} s/step", flush=True)
    base = statistics.median(seconds[args.variants[0]])
    events = sum(int(b.lengths.sum()) for b in batches) / len(batches)
    command = f"python benchmarks/sampled_cost.py {shlex.join(sys.argv[1:])}"
    now = datetime.datetime.now(datetime.UTC)
    lines = [
        "# The training step: exact softmax against sampled catalogue terms",
        "",
        f"`{command}`, {now:%Y-%m-%d %H:%M} UTC, {cpu_name()}, {torch.get_num_threads()} thread(s), fp32 matmul "
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
    write_text(args.output, "\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
