"""Training split by entity over processes against one process, on the bundled sample.

    OMP_NUM_THREADS=1 python benchmarks/bench_ddp.py [--seeds 0 1 2] [--epochs 4] [--parts 4]
        [--processes 1 2]

The sample (``datasets/sample/events.parquet``) is written as a partitioned Parquet directory
(``--parts`` files, each holding events of every entity, as an export by time would). Each seed
trains ``seqenc fit --config configs/quickstart.yaml --data.shard_entities true`` on it with one
process and with two (``--trainer.strategy ddp``, gloo on CPU), every run in its own process. The
two-process run gives each process half the quickstart's batch, so both take as many optimiser
steps of as many samples. Prints each run's test NDCG@10 (over every entity: the processes' sums
are reduced) and wall time, then each setting's mean and standard deviation over the seeds: done
when the two-process mean lies within the seed spread of the one-process one. Writes
``benchmarks/results/ddp.md``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "datasets" / "sample" / "events.parquet"
QUICKSTART_BATCH = 64


def write_parts(folder: Path, parts: int) -> Path:
    """The sample as ``parts`` Parquet files, rows dealt round-robin (entities span files)."""
    folder.mkdir(parents=True, exist_ok=True)
    table = pq.read_table(SAMPLE)
    for i in range(parts):
        rows = list(range(i, table.num_rows, parts))
        pq.write_table(table.take(rows), folder / f"part-{i:03d}.parquet")
    return folder


def fit(data: Path, work: Path, seed: int, processes: int, epochs: int) -> tuple[float, float]:
    """``(test NDCG@10, wall seconds)`` of one ``seqenc fit`` run in ``work``."""
    command = [
        sys.executable, "-m", "seqenc.cli", "fit",
        "--config", str(ROOT / "configs" / "quickstart.yaml"),
        "--data.path", str(data),
        "--data.shard_entities", "true",
        "--data.batch_size", str(QUICKSTART_BATCH // processes),
        "--seed_everything", str(seed),
        "--trainer.max_epochs", str(epochs),
        "--trainer.devices", str(processes),
        "--trainer.strategy", "ddp" if processes > 1 else "auto",
        "--trainer.enable_progress_bar", "false",
    ]  # fmt: skip
    env = os.environ | {"PYTHONPATH": str(ROOT)}
    start = time.perf_counter()
    done = subprocess.run(command, cwd=work, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if done.returncode:
        raise SystemExit(f"seqenc fit failed ({processes} processes):\n{done.stderr[-3000:]}")
    bundle = next(line for line in done.stdout.splitlines() if line.startswith("bundle: "))
    run = work / bundle.removeprefix("bundle: ").rsplit("/bundle", 1)[0]
    metrics = pd.read_csv(run / "metrics.csv").dropna(subset=["test/ndcg@10"])
    return float(metrics["test/ndcg@10"].iloc[-1]), seconds


def summary(rows: list[dict]) -> list[str]:
    """A Markdown table of the runs and a line per setting: mean ± std over the seeds."""
    lines = ["| processes | seed | test NDCG@10 | wall s |", "|---|---|---|---|"]
    lines += [f"| {r['processes']} | {r['seed']} | {r['ndcg']:.4f} | {r['s']:.0f} |" for r in rows]
    lines.append("")
    for processes in sorted({r["processes"] for r in rows}):
        values = [r["ndcg"] for r in rows if r["processes"] == processes]
        spread = statistics.stdev(values) if len(values) > 1 else 0.0
        lines.append(
            f"- {processes} process(es): test NDCG@10 {statistics.mean(values):.4f} ± "
            f"{spread:.4f} (mean ± std over {len(values)} seeds)"
        )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--parts", type=int, default=4)
    parser.add_argument("--processes", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--work", type=Path, default=ROOT / "runs" / "bench_ddp")
    args = parser.parse_args()
    data = write_parts(args.work / "sample-parts", args.parts)
    rows = []
    for seed in args.seeds:
        for processes in args.processes:
            ndcg, seconds = fit(data, args.work, seed, processes, args.epochs)
            rows.append({"processes": processes, "seed": seed, "ndcg": ndcg, "s": seconds})
            print(f"processes {processes} seed {seed}: test NDCG@10 {ndcg:.4f} ({seconds:.0f} s)")
    lines = summary(rows)
    print("\n".join(lines))
    header = [
        "# Two processes (DDP, entities sharded) against one",
        "",
        f"`python benchmarks/bench_ddp.py --seeds {' '.join(map(str, args.seeds))} "
        f"--epochs {args.epochs} --parts {args.parts} --processes "
        f"{' '.join(map(str, args.processes))}` on the bundled sample.",
        "",
    ]
    (ROOT / "benchmarks" / "results" / "ddp.md").write_text("\n".join(header + lines) + "\n")


if __name__ == "__main__":
    main()
