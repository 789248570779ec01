"""Time build_sequences against a plain pandas reference on real and synthetic event logs.

    .venv/bin/python benchmarks/bench_sequences.py [--repeats 5] [--events 10000000]

Each timing is the median of ``--repeats`` runs after one warm-up, on a DataFrame already in memory
(file reading is not timed). The pandas reference does the sort / truncate / time-delta part only:
``sort_values([entity, ts], kind="stable").groupby(entity).tail(max_len)`` plus groupby diff / max
for ``dt_prev`` / ``dt_ref``; seqenc also validates, fits and applies the item vocabulary. Both
results are checked to agree before timing. The ml-1m files come from ``../shared/data`` and are
skipped when absent. Writes the table to ``benchmarks/results/sequences.md``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import shlex
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa

from seqenc.atomic import write_text
from seqenc.data.loaders import load_dataset
from seqenc.data.schema import EventSchema
from seqenc.data.sequences import SequenceStore, build_sequences

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "data"
MAX_LEN = 200


def pandas_reference(df: pd.DataFrame, has_time: bool) -> pd.DataFrame:
    """The same histories with plain pandas: stable sort, deltas over the full history, tail."""
    keys = ["entity_id", "timestamp"] if has_time else ["entity_id"]
    out = df.sort_values(keys, kind="stable")
    if has_time:
        by_entity = out.groupby("entity_id", sort=False)["timestamp"]
        out = out.assign(
            dt_prev=by_entity.diff().fillna(0.0),
            dt_ref=by_entity.transform("max") - out["timestamp"],
        )
    return out.groupby("entity_id", sort=False).tail(MAX_LEN)


def check_same(store: SequenceStore, item_values: pa.Array, ref: pd.DataFrame) -> None:
    """Fail loudly if seqenc and pandas disagree (items, times, deltas)."""
    items = item_values.to_numpy()[store.items - 3]
    np.testing.assert_array_equal(items, ref["item_id"].to_numpy())
    if store.has_time:
        np.testing.assert_array_equal(store.timestamps, ref["timestamp"].to_numpy())
        np.testing.assert_allclose(store.dt_prev, ref["dt_prev"].to_numpy(), rtol=1e-6)
        np.testing.assert_allclose(store.dt_ref, ref["dt_ref"].to_numpy(), rtol=1e-6)


def median_seconds(fn: Callable[[], object], repeats: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def synthetic(n: int, seed: int = 0) -> pd.DataFrame:
    """``n`` events of ~200k entities over ~50k items, times spread over a year, in random order."""
    rng = np.random.default_rng(seed)
    return pd.DataFrame(
        {
            "entity_id": rng.integers(0, 200_000, n),
            "item_id": rng.integers(0, 50_000, n),
            "timestamp": rng.integers(1_700_000_000, 1_700_000_000 + 365 * 86_400, n),
        }
    )


def datasets(n_synthetic: int) -> list[tuple[str, pd.DataFrame, bool]]:
    """(name, events, has_time)."""
    found = []
    sequences = SHARED / "ml-1m" / "ml-1m_sequences.parquet"
    if sequences.exists():
        found.append(("ml-1m sequences (no time)", load_dataset(sequences), False))
    partial = SHARED / "ml-1m" / "ratings_partial_users1-2999.dat"
    if partial.exists():
        found.append(("ml-1m ratings users 1-2999", load_dataset(partial), True))
    found.append((f"synthetic {n_synthetic / 1e6:g}M, random order", synthetic(n_synthetic), True))
    return found


def machine() -> str:
    lscpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    model = next(
        (ln.split(":", 1)[1].strip() for ln in lscpu.splitlines() if ln.startswith("Model name")),
        "unknown CPU",
    )
    versions = f"numpy {np.__version__}, pandas {pd.__version__}, pyarrow {pa.__version__}"
    cores = len(os.sched_getaffinity(0))
    load = os.getloadavg()[0]  # the machine is shared: a load above the core count slows both sides
    return (
        f"{model}, {cores} cores, 1-min load average {load:.1f} at the end; "
        f"Python {platform.python_version()}, {versions}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--events", type=int, default=10_000_000, help="synthetic log size")
    args = parser.parse_args()

    rows = []
    for name, df, has_time in datasets(args.events):
        schema = EventSchema(timestamp="timestamp" if has_time else None)
        store, vocabs = build_sequences(df, schema, keep_newest=MAX_LEN)
        check_same(store, vocabs.item.values, pandas_reference(df, has_time))
        ours = median_seconds(
            partial(build_sequences, df, schema, keep_newest=MAX_LEN), args.repeats
        )
        theirs = median_seconds(partial(pandas_reference, df, has_time), args.repeats)
        rows.append(
            f"| {name} | {len(df):,} | {ours:.2f} | {theirs:.2f} | {theirs / ours:.1f}x "
            f"| {len(df) / ours / 1e6:.2f}M |"
        )
        print(rows[-1], flush=True)

    command = " ".join(shlex.quote(a) for a in [".venv/bin/python", *sys.argv])
    report = "\n".join(
        [
            "## build_sequences vs pandas",
            "",
            f"`{command}` on {dt.date.today().isoformat()}; {machine()}.",
            f"keep_newest={MAX_LEN}; median of {args.repeats} runs after one warm-up; input is a "
            "DataFrame in memory; both outputs checked equal first. seqenc also validates the "
            "columns and fits + applies the item vocabulary; the pandas reference only sorts, "
            "truncates and computes dt_prev / dt_ref. 'ratio' = pandas s / seqenc s.",
            "",
            "| dataset | events | seqenc s | pandas s | ratio | seqenc events/s |",
            "|---|---:|---:|---:|---:|---:|",
            *rows,
            "",
        ]
    )
    out = ROOT / "benchmarks" / "results" / "sequences.md"
    out.parent.mkdir(parents=True, exist_ok=True)
    write_text(out, report)
    print("\n" + report)


if __name__ == "__main__":
    main()
