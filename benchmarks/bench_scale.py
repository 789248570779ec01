"""Training and full-ranking test cost as the catalogue and the log grow, on synthetic account logs.

    python benchmarks/bench_scale.py [--events 1e6 1e7] [--items 5000 300000 3000000] [--steps 20]
    python benchmarks/bench_scale.py --crossover [--items 2000 5000 10000 20000 50000]
    python benchmarks/bench_scale.py --events 2e6 --items 300000 --steps 5 --compare DIR

The log (:func:`write_log`): log-normal history lengths (median 8 events, mean about 20), items
drawn from a Zipf law over the catalogue (exponent 1.05), 30 % of events repeat the entity's
previous item, exponential gaps. It has the shape of the account logs seqenc is for, not their
structure: it measures cost, never quality.

Each cell of the grid runs in its own process (so its peak RSS is its own) and builds the model and
data as ``seqenc fit --config configs/clicks.yaml --data.history_len 64`` would, with the shipped
defaults (``model.loss: auto``). It times ``--steps`` training steps after two untimed ones (the
module's training step, backward, clipping, the optimiser: what ``fit`` runs per step), then the
full-ranking test of every entity (or ``--test-entities`` of them), and reports s/step, events/s,
the test's time against its matmul bound and peak RSS. The bound is entities x items x d x 2
flops at the fp32 matmul rate measured in the cell's process just before and after its test (two
passes with the repeat head: its normaliser's and the rank's); beside it, the time of those
chunked catalogue matmuls alone at the test's shapes (timed between the test's batches, scaled to
every entity). Ratios are to the row with the fewest items at the same event count. ``--compare DIR``
runs every cell a second time, interleaved, with ``seqenc`` imported from ``DIR`` (e.g. an older
revision: ``git archive REV seqenc | tar -x -C DIR``). ``--crossover`` times ``ce`` against
``sampled_softmax`` per catalogue size (the threshold of ``loss: auto``). Writes
``benchmarks/results/scale.md`` (``scale_crossover.md``).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import resource
import statistics
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
from bench_train import build, cpu_name, matmul_gflops  # noqa: E402

from seqenc.atomic import write_text  # noqa: E402

MEAN_LENGTH = 20.0
REPEAT_SHARE = 0.3
ZIPF_EXPONENT = 1.05
ENTITIES_PER_CHUNK = 200_000


def write_log(path: Path, n_events: int, n_items: int, seed: int = 0) -> Path:
    """A synthetic account log of about ``n_events`` events over ``n_items`` items (Parquet,
    columns entity_id, item_id, timestamp), written a chunk of entities at a time."""
    if path.exists():
        return path
    rng = np.random.default_rng(seed)
    sigma = 1.3  # log-normal spread: median 8 when the mean is 20
    mu = np.log(MEAN_LENGTH) - sigma**2 / 2
    n_entities = int(n_events / MEAN_LENGTH)
    ranks = np.arange(1, n_items + 1, dtype=np.float64)
    cdf = np.cumsum(ranks**-ZIPF_EXPONENT)
    cdf /= cdf[-1]
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    path.parent.mkdir(parents=True, exist_ok=True)
    schema = pa.schema(
        [("entity_id", pa.int64()), ("item_id", pa.int64()), ("timestamp", pa.int64())]
    )
    with pq.ParquetWriter(tmp, schema) as writer:
        for first in range(0, n_entities, ENTITIES_PER_CHUNK):
            count = min(ENTITIES_PER_CHUNK, n_entities - first)
            lengths = np.maximum(1, rng.lognormal(mu, sigma, count).round().astype(np.int64))
            entity = np.repeat(np.arange(first, first + count), lengths)
            items = np.searchsorted(cdf, rng.random(len(entity))).astype(np.int64)
            starts = np.cumsum(lengths) - lengths
            repeat = rng.random(len(entity)) < REPEAT_SHARE
            repeat[starts] = False
            # a repeat takes the item of the nearest earlier event that is not itself a repeat
            source = np.maximum.accumulate(np.where(repeat, 0, np.arange(len(entity))))
            items = items[source]
            gaps = rng.exponential(3600.0, len(entity)).astype(np.int64) + 1
            gaps[starts] = rng.integers(1_600_000_000, 1_700_000_000, count)
            times = np.cumsum(gaps) - np.repeat(np.cumsum(gaps)[starts] - gaps[starts], lengths)
            writer.write_table(
                pa.table({"entity_id": entity, "item_id": items, "timestamp": times}, schema=schema)
            )
    tmp.rename(path)
    return path


def build_clicks(path: Path, extra: list[str]):
    """The module and data module ``seqenc fit --config configs/clicks.yaml`` would build."""
    args = ["--config", str(ROOT / "configs/clicks.yaml"), "--data.path", str(path)]
    cli = build([*args, "--data.history_len", "64", *extra])
    return cli.model, cli.datamodule


def optimizer_step(model, optimizer, batch, i: int) -> None:
    """One training step as the trainer takes it: the loss, its gradients, the module's norm clip
    (which counts the item table's sparse gradient) and the update."""
    from seqenc.model.optim import clip_grad_norm

    loss = model.training_step(batch, i)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    clip_grad_norm(model.parameters(), 1.0)
    optimizer.step()


def train_steps(model, data, steps: int) -> tuple[float, int]:
    """(seconds, events) of ``steps`` training steps after two untimed ones."""
    from seqenc.model.optim import RowSparseAdamW

    optimizer = RowSparseAdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    model.train()
    batches = iter(data.train_dataloader())
    spent, events = 0.0, 0
    for i in range(steps + 2):
        batch = next(batches)
        start = time.perf_counter()
        optimizer_step(model, optimizer, batch, i)
        if i >= 2:
            spent += time.perf_counter() - start
            events += int(batch.lengths.sum())
    return spent, events


def test_time(model, data, limit: int | None) -> tuple[float, int, float]:
    """(seconds, entities, alone) of the full-ranking test over every entity (or the first
    ``limit``); ``alone``: what its catalogue matmuls alone take (:func:`bare_matmuls`), timed
    after every fourth batch on that batch's size (so under the same load) and scaled."""
    from seqenc.training.metrics import RankingMetrics

    model.eval()
    weight = model.encoder.item_embedding.weight.detach().float()
    passes = 2 if model.encoder.repeat is not None else 1
    metrics, entities, spent, alone, timed = RankingMetrics(), 0, 0.0, 0.0, 0
    with torch.no_grad():
        for i, batch in enumerate(data.test_dataloader()):
            start = time.perf_counter()
            model._evaluate(batch, metrics)
            spent += time.perf_counter() - start
            entities += len(batch)
            if i % 4 == 0:
                alone += bare_matmuls(weight, len(batch), passes)
                timed += len(batch)
            if limit and entities >= limit:
                break
    return spent, entities, alone * entities / timed


def bare_matmuls(weight: torch.Tensor, rows: int, passes: int) -> float:
    """Seconds that ``passes`` chunked catalogue matmuls alone take for one batch of ``rows``
    states: spans of 2**19 scores written into one reused buffer, as the scorer's passes."""
    state = torch.randn(rows, weight.shape[1])
    step = max(256, 2**19 // rows)
    buffer = torch.empty(rows * step)
    start = time.perf_counter()
    for _ in range(passes):
        for first in range(0, len(weight), step):
            chunk = weight[first : first + step]
            torch.mm(state, chunk.T, out=buffer[: rows * len(chunk)].view(rows, len(chunk)))
    return time.perf_counter() - start


def run_cell(args: argparse.Namespace) -> dict:
    """One grid cell, in this process: build, train ``--steps``, test; a JSON-able record."""
    warnings.filterwarnings("ignore")
    path = write_log(args.data / f"log_{args.cell[0]}_{args.cell[1]}.parquet", *args.cell)
    start = time.perf_counter()
    model, data = build_clicks(path, args.extra)
    data.setup("fit")
    built = time.perf_counter() - start
    spent, events = train_steps(model, data, args.steps)
    record = {
        "events": args.cell[0],
        "items": args.cell[1],
        "vocabulary": model.config.n_items - 3,  # the distinct items the log drew
        "loss": model.loss,
        "build_s": built,
        "s_per_step": spent / args.steps,
        "events_per_s": events / spent,
    }
    if not args.no_test:
        data.setup("test")
        rate = matmul_gflops()
        seconds, entities, bare = test_time(model, data, args.test_entities)
        rate = (rate + matmul_gflops()) / 2
        passes = 2 if model.encoder.repeat is not None else 1
        flops = passes * entities * model.config.n_items * model.config.d_model * 2
        record |= {
            "test_s": seconds,
            "test_entities": entities,
            "test_flop": flops,
            "gflops": rate,
            "bound_s": flops / (rate * 1e9),
            "bare_s": bare,
        }
    record["peak_rss_gb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    return record


def run_grid(
    cells: list[tuple[int, int, list[str], Path | None]], args: argparse.Namespace
) -> list[dict]:
    """Each cell in a fresh process (``seqenc`` from the cell's tree, if any, else this one's);
    ``--repeats`` rounds, interleaved; medians per cell."""
    runs: dict[int, list[dict]] = {}
    for _ in range(args.repeats):
        for i, (n_events, n_items, extra, tree) in enumerate(cells):
            command = [sys.executable, __file__, "--cell", str(n_events), str(n_items)]
            env = dict(os.environ)
            if tree:
                env["PYTHONPATH"] = os.pathsep.join([str(tree), env.get("PYTHONPATH", "")])
            command += ["--steps", str(args.steps), "--data", str(args.data)]
            command += ["--no-test"] if args.no_test else []
            if args.test_entities:
                command += ["--test-entities", str(args.test_entities)]
            command += ["--extra", *extra] if extra else []
            done = subprocess.run(command, capture_output=True, text=True, check=False, env=env)
            if done.returncode != 0:
                sys.exit(f"cell {n_events} x {n_items} failed: {done.stderr.strip()[-2000:]}")
            record = json.loads(done.stdout.strip().splitlines()[-1])
            runs.setdefault(i, []).append(record | {"seqenc": tree.name if tree else "this tree"})
            print(runs[i][-1], flush=True)
    medians = []
    for i, records in sorted(runs.items()):
        median = dict(records[0])
        for key, value in records[0].items():
            if isinstance(value, float):
                median[key] = statistics.median(r[key] for r in records)
        median["extra"] = " ".join(cells[i][2])
        medians.append(median)
    return medians


def table(rows: list[dict], compare: bool) -> list[str]:
    lines = [
        "| events | catalogue | items in the log | loss | "
        + ("seqenc | " if compare else "")
        + "s/step | events/s | × rate of fewest items | test s | matmul GFLOP/s | bound s "
        "| test ÷ bound | catalogue matmuls alone s | test ÷ matmuls alone | peak RSS GB |",
        "|---:|---:|---:|---|" + ("---|" if compare else "") + "---:|" * 10,
    ]
    base = {}
    for row in rows:
        base.setdefault((row["events"], row["extra"], row["seqenc"]), row)
        ref = base[(row["events"], row["extra"], row["seqenc"])]
        test = "— | — | — | — | — | —"
        if "test_s" in row:
            test = (
                f"{row['test_s']:.1f} ({row['test_entities']:,} entities) | {row['gflops']:.0f} | "
                f"{row['bound_s']:.1f} | {row['test_s'] / row['bound_s']:.2f} | "
                f"{row['bare_s']:.1f} | {row['test_s'] / row['bare_s']:.2f}"
            )
        loss = row["loss"] + (f" ({row['extra']})" if row["extra"] else "")
        tree = f"{row['seqenc']} | " if compare else ""
        lines.append(
            f"| {row['events']:,} | {row['items']:,} | {row['vocabulary']:,} | {loss} | {tree}"
            f"{row['s_per_step']:.3f} | "
            f"{row['events_per_s']:,.0f} | {row['events_per_s'] / ref['events_per_s']:.2f} | "
            f"{test} | {row['peak_rss_gb']:.2f} |"
        )
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=float, nargs="+", default=[1e6])
    parser.add_argument("--items", type=int, nargs="+", default=[5000, 300_000, 3_000_000])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--test-entities", type=int, default=None)
    parser.add_argument("--no-test", action="store_true")
    parser.add_argument("--crossover", action="store_true")
    parser.add_argument("--compare", type=Path, default=None, help="another seqenc tree")
    parser.add_argument("--data", type=Path, default=ROOT / "runs/scale_data")
    parser.add_argument("--cell", type=int, nargs=2, help=argparse.SUPPRESS)
    parser.add_argument("--extra", nargs=argparse.REMAINDER, default=[], help=argparse.SUPPRESS)
    parser.add_argument("--output", type=Path, default=None)
    args = parser.parse_args()
    if args.cell:
        print(json.dumps(run_cell(args)))
        return 0
    gflops = matmul_gflops()
    if args.crossover:
        losses = [["--model.loss", "ce"], ["--model.loss", "sampled_softmax"]]
        cells = [(int(e), i, x, None) for e in args.events for x in losses for i in args.items]
        args.no_test = True
    else:
        trees = [args.compare.resolve(), None] if args.compare else [None]
        cells = [(int(e), i, [], t) for e in args.events for i in args.items for t in trees]
    rows = run_grid(cells, args)
    gflops = (gflops + matmul_gflops()) / 2
    name = "scale_crossover.md" if args.crossover else "scale.md"
    out = args.output or ROOT / "benchmarks/results" / name
    lines = [
        f"# {'ce against sampled softmax by catalogue size' if args.crossover else 'Scale grid'}",
        "",
        f"`python benchmarks/bench_scale.py {' '.join(sys.argv[1:])}`, "
        f"{datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC, {cpu_name()}, "
        f"{torch.get_num_threads()} threads, fp32 matmul {gflops:.0f} GFLOP/s, "
        f"median of {args.repeats} run(s), {args.steps} timed steps each.",
        "",
        *table(rows, args.compare is not None),
        "",
    ]
    write_text(out, "\n".join(lines))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
