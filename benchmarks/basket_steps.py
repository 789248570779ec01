"""Training-step cost of the basket objectives on one log: the drawn next-basket item against
every item of the next basket (``model.basket_positives``), with and without the repeat head's
purchase counts (``model.encoder.repeat_counts``), in one process, interleaved.

    OMP_NUM_THREADS=1 python benchmarks/basket_steps.py --data EVENTS.parquet \\
        --schema customer_id product_id timestamp --steps 20 --rounds 3

Prints seconds per step (median over rounds) and events per second of each variant, with the
CPU's name and fp32 matmul rate measured in the same process.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
from bench_scale import train_steps  # noqa: E402
from bench_train import build, cpu_name, matmul_gflops  # noqa: E402

VARIANTS = {
    "one": [],
    "all": ["--model.basket_positives", "all"],
    "all+counts": ["--model.basket_positives", "all", "--model.encoder.repeat_counts", "true"],
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", required=True)
    parser.add_argument("--schema", nargs=3, default=["entity_id", "item_id", "timestamp"])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS))
    args = parser.parse_args()
    torch.set_num_threads(1)
    entity, item, timestamp = args.schema
    base = ["--config", str(ROOT / "configs/clicks.yaml"), "--data.path", args.data]
    base += ["--data.schema.entity", entity, "--data.schema.item", item]
    base += ["--data.schema.timestamp", timestamp]
    built = {}
    for name in args.variants:
        cli = build([*base, *VARIANTS[name]])
        cli.datamodule.setup("fit")
        built[name] = (cli.model, cli.datamodule)
    print(f"{cpu_name()}, fp32 matmul {matmul_gflops():.0f} GFLOP/s, one thread")
    times = {name: [] for name in built}
    for _ in range(args.rounds):
        for name, (model, data) in built.items():
            spent, events = train_steps(model, data, args.steps)
            times[name].append((spent / args.steps, events / spent))
    for name, cells in times.items():
        step = statistics.median(c[0] for c in cells)
        rate = statistics.median(c[1] for c in cells)
        print(f"{name:<12} {step:.3f} s/step  {rate:,.0f} events/s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
