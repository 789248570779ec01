"""Encode throughput of the backends on one event log: torch, ONNX Runtime, the single-process
Parquet export, and Spark in ``local[N]`` mode (N = cores); each checked against torch's embeddings.

Run from the repository root (needs the ``onnx`` and ``spark`` extras and Java; a few minutes on
2 CPU cores)::

    .venv/bin/python benchmarks/bench_backends.py [--events ../shared/data/ml-100k/u.data]

Data: MovieLens-100K (``../shared/data/ml-100k/u.data``) when present, else the synthetic account
log (1000 entities). Model: a random-weights causal encoder of the ``sasrec_ml100k_time`` shape
(d=64, 2 layers, 2 heads, time inputs, max_len 200), CPU float32, batch size 256. Every path reads
the same Parquet file; the export and Spark also write Parquet. Timings are the median of 3
interleaved rounds; the Spark session starts before the first round (its start is not timed), and
its Python workers load the bundle in the first round. Every path uses all the machine's cores:
torch and ONNX Runtime one thread per core (ONNX Runtime's default), Spark ``local[N]`` with N =
cores, one task per core, one torch thread per task.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnxruntime
import pandas as pd
import pyspark
import torch
from bench_encode import cpu_name

from seqenc.atomic import write_text
from seqenc.data.loaders import load_dataset
from seqenc.data.schema import EventSchema
from seqenc.data.synthetic import generate_events
from seqenc.encoding import spark as seqenc_spark
from seqenc.encoding.onnx import export_onnx
from seqenc.export import export_embeddings
from seqenc.inference import load_encoder
from seqenc.testing import random_bundle

ROOT = Path(__file__).resolve().parents[1]
ML100K = ROOT.parent / "shared" / "data" / "ml-100k" / "u.data"
RUNS, MAX_LEN, BATCH_SIZE, CORES = 3, 200, 256, os.cpu_count() or 1
SPARK_PARTITIONS = 2 * CORES
RESULTS = Path(__file__).resolve().parent / "results" / "backends.md"


def events_table(path: str | None) -> tuple[pd.DataFrame, str]:
    """The benchmark log and its description."""
    if path or ML100K.is_file():
        source = Path(path) if path else ML100K
        df = load_dataset(source, "auto" if path else "movielens")
        return df[["entity_id", "item_id", "timestamp"]], f"{source.name} ({source.parent.name})"
    return generate_events(1000, n_items=2000, seed=0)[
        ["entity_id", "item_id", "timestamp"]
    ], "synthetic account log, 1000 entities"


def make_bundle(events: pd.DataFrame, path: Path) -> Path:
    return random_bundle(
        path, events, EventSchema(), MAX_LEN, name="bench", d_model=64, dropout=0.0
    )


def by_entity(df: pd.DataFrame) -> np.ndarray:
    df = df.sort_values("entity_id")
    return np.stack(df["embedding"].to_numpy())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", default=None, help="a dataset file (default: ML-100K)")
    parser.add_argument("--runs", type=int, default=RUNS, help="rounds; the median is reported")
    args = parser.parse_args()
    from pyspark.sql import SparkSession

    torch.set_num_threads(CORES)

    tmp = Path(tempfile.mkdtemp(prefix="bench-backends-"))
    events, source = events_table(args.events)
    parquet = tmp / "events.parquet"
    events.to_parquet(parquet)
    bundle = make_bundle(events, tmp / "bundle")
    export_onnx(bundle)
    encoders = {b: load_encoder(bundle, "cpu", backend=b) for b in ("torch", "onnxruntime")}
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = (
        SparkSession.builder.master(f"local[{CORES}]")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.memory", "2g")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")

    def run_export() -> pd.DataFrame:
        out = tmp / "export.parquet"
        export_embeddings(
            bundle, parquet, out, batch_size=BATCH_SIZE, accelerator="cpu", progress=False
        )
        return pd.read_parquet(out)

    def run_spark() -> pd.DataFrame:
        out = tmp / "spark"
        df = spark.read.parquet(str(parquet))
        result = seqenc_spark.encode(
            df, bundle, batch_size=BATCH_SIZE, num_partitions=SPARK_PARTITIONS
        )
        result.write.mode("overwrite").parquet(str(out))
        return pd.read_parquet(out)

    paths = {
        "torch `Encoder.encode`": lambda: encoders["torch"].encode(parquet, batch_size=BATCH_SIZE),
        "onnxruntime `Encoder.encode`": lambda: encoders["onnxruntime"].encode(
            parquet, batch_size=BATCH_SIZE
        ),
        "torch `seqenc embed` export (Parquet → Parquet)": run_export,
        f"Spark local[{CORES}] `seqenc.encoding.spark.encode` ({SPARK_PARTITIONS} partitions, → Parquet)": run_spark,
    }
    times: dict[str, list[float]] = {name: [] for name in paths}
    outputs: dict[str, pd.DataFrame] = {}
    for _ in range(args.runs):
        for name, fn in paths.items():
            start = time.perf_counter()
            outputs[name] = fn()
            times[name].append(time.perf_counter() - start)
    spark.stop()

    n_events, n_entities = len(events), events["entity_id"].nunique()
    reference = by_entity(outputs["torch `Encoder.encode`"])
    base = float(np.median(times["torch `Encoder.encode`"]))
    lines = [
        "# Encode throughput by backend",
        "",
        f"Command: `{' '.join([Path(sys.executable).name, *sys.argv])}`  ",
        f"Date: {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M UTC}  ",
        f"Machine: {cpu_name()}, {os.cpu_count()} logical CPUs, torch {torch.__version__} with "
        f"{torch.get_num_threads()} threads, onnxruntime {onnxruntime.__version__}, pyspark "
        f"{pyspark.__version__}, Python {platform.python_version()} (a shared machine: other "
        "jobs may run at the same time)",
        "",
        f"Data: {source}, {n_entities:,} entities, {n_events:,} events. Model: random-weights "
        f"causal encoder d=64, 2 layers, 2 heads, time inputs, max_len {MAX_LEN}, batch size "
        f"{BATCH_SIZE}, CPU float32. Median of {args.runs} interleaved rounds.",
        "",
        "| path | seconds (median) | events/s | ratio to torch encode() | max abs diff to torch |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, runs in times.items():
        seconds = float(np.median(runs))
        diff = float(np.abs(by_entity(outputs[name]) - reference).max())
        lines.append(
            f"| {name} | {seconds:.2f} | {n_events / seconds:,.0f} | {base / seconds:.2f} "
            f"| {diff:.1e} |"
        )
    text = "\n".join(lines + [""])
    print(text)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    print(f"written to {write_text(RESULTS, text)}")


if __name__ == "__main__":
    main()
