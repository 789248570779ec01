"""Incremental encode (``Encoder.update`` on a KV-cache state) against a full re-encode.

Run from the repository root (about 5 minutes on 2 CPU cores)::

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_incremental.py

Histories of 512 events per entity; then 1, 10 or 100 new events arrive for every entity. Timed:
``enc.update(state, new)`` (the whole public call: reading the new events, the cached forward
pass, the new state) against ``enc.encode(old + new)`` (what one would run without a state), in
interleaved rounds, median of ``RUNS``; the ratio is of the medians in the same run, and the
largest difference between the two embeddings is reported. Two random-weights causal models,
d=128, 2 layers, 2 heads, time and query-time inputs on:

- ``max_len`` 1024: the histories fit, every entity is *extended* (the exact cached path);
- ``max_len`` 512: the histories are full, every new event slides the window, and the state
  *re-encodes* the last 512 events (no gain; shown so nobody expects one).

With ``../shared/data/ml-100k/u.data`` present it also checks MovieLens-100K: the state of the
first 90 % of the ratings (by time) updated with the last 10 %, against ``encode`` of all.
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
import pandas as pd
import torch

from seqenc.atomic import write_text
from seqenc.data.loaders import load_dataset
from seqenc.data.schema import EventSchema
from seqenc.inference import Encoder, load_encoder
from seqenc.testing import random_bundle

D_MODEL, N_LAYERS, N_HEADS = 128, 2, 2
N_ENTITIES, HISTORY, N_ITEMS = 64, 512, 2000
NEW = (1, 10, 100)
RUNS = 5
ROOT = Path(__file__).resolve().parents[1]
ML100K = ROOT.parent / "shared" / "data" / "ml-100k" / "u.data"
RESULTS = Path(__file__).resolve().parent / "results" / "incremental.md"


def synthetic_log(seed: int = 0) -> pd.DataFrame:
    """``N_ENTITIES`` entities with ``HISTORY + max(NEW)`` events each, gaps of 1 s to 1 day."""
    rng = np.random.default_rng(seed)
    n = HISTORY + max(NEW)
    gaps = np.exp(rng.uniform(0, np.log(86400), size=(N_ENTITIES, n)))
    return pd.DataFrame(
        {
            "entity_id": np.repeat(np.arange(N_ENTITIES), n),
            "item_id": rng.integers(0, N_ITEMS, size=N_ENTITIES * n),
            "timestamp": (1.6e9 + np.cumsum(gaps, axis=1)).round().ravel(),
            "rank": np.tile(np.arange(n), N_ENTITIES),
        }
    )


def make_encoder(tmp: Path, events: pd.DataFrame, history_len: int, name: str) -> Encoder:
    """Weights drawn from N(0, 0.1): large enough that every input moves the embedding."""
    options = dict(d_model=D_MODEL, n_layers=N_LAYERS, n_heads=N_HEADS)
    bundle = random_bundle(tmp / name, events, EventSchema(), history_len, 0.1, name, **options)
    return load_encoder(bundle, "cpu")


def timed(fn) -> tuple[float, object]:
    start = time.perf_counter()
    out = fn()
    return time.perf_counter() - start, out


def compare(enc: Encoder, old: pd.DataFrame, new: pd.DataFrame) -> dict[str, float]:
    """Median seconds of update and of a full encode (interleaved), their max difference."""
    state = enc.state(old)
    everything = pd.concat([old, new])
    t_update, t_full = [], []
    for _ in range(RUNS):
        seconds, (got, after) = timed(lambda: enc.update(state, new, output="numpy"))
        t_update.append(seconds)
        seconds, want = timed(lambda: enc.encode(everything, output="numpy"))
        t_full.append(seconds)
    assert list(got.entity_ids) == list(want.entity_ids)
    had = pd.Index(want.entity_ids).get_indexer(state.entity_ids.to_pylist())
    return {
        "update": float(np.median(t_update)),
        "full": float(np.median(t_full)),
        "diff": float(np.abs(got.embeddings - want.embeddings).max()),
        # what the new events move (so the difference above is not trivially small)
        "moved": float(np.abs(want.embeddings[had] - state.embeddings).mean()),
        "extended": after.stats["n_extended"],
        "reencoded": after.stats["n_reencoded"],
        "new": after.stats["n_new"],
        "positions": after.stats["n_positions"],
    }


def main() -> None:
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()  # --help
    tmp = Path(tempfile.mkdtemp(prefix="bench-incremental-"))
    log = synthetic_log()
    old = log[log["rank"] < HISTORY]
    lines = [
        "# Incremental encode against a full re-encode",
        "",
        f"Command: `OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', '')} "
        f"{' '.join([Path(sys.executable).name, *sys.argv])}`  ",
        f"Date: {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M UTC}  ",
        f"Machine: {platform.processor() or platform.machine()}, {os.cpu_count()} logical CPUs "
        f"shared with other sessions' training jobs (load average at start "
        f"{os.getloadavg()[0]:.1f}), torch {torch.__version__} with {torch.get_num_threads()} "
        f"thread(s), Python {platform.python_version()}",
        "",
        f"{N_ENTITIES} entities with {HISTORY}-event histories (synthetic, {N_ITEMS} items); every "
        f"entity then gets k new events. Random-weights causal model d={D_MODEL}, {N_LAYERS} "
        f"layers, {N_HEADS} heads, time + query-time inputs. `update` = `enc.update(state, new)`, "
        "the whole call; `encode` = `enc.encode(old + new)`. Median of "
        f"{RUNS} interleaved runs; speed-up = encode / update in the same run. Max abs diff: "
        "between the two embeddings (float32); mean abs change: how far the new events move the "
        "embeddings from the state's (the scale the difference is measured against).",
        "",
        "| model max_len | k new events per entity | update (s) | encode (s) | speed-up "
        "| positions run | extended / re-encoded | max abs diff | mean abs change |",
        "|---:|---:|---:|---:|---:|---:|---|---:|---:|",
    ]
    for max_len in (1024, 512):
        enc = make_encoder(tmp, log, max_len, f"len{max_len}")
        enc.encode(old.head(5000))  # warm-up
        for k in NEW:
            r = compare(enc, old, log[(log["rank"] >= HISTORY) & (log["rank"] < HISTORY + k)])
            lines.append(
                f"| {max_len} | {k} | {r['update']:.3f} | {r['full']:.3f} "
                f"| {r['full'] / r['update']:.1f}× | {r['positions']:,} "
                f"| {r['extended']} / {r['reencoded']} | {r['diff']:.1e} | {r['moved']:.1e} |"
            )
            print(lines[-1], flush=True)
    state = make_encoder(tmp, log, 1024, "size").state(old)
    size = state.save(tmp / "state.safetensors").stat().st_size
    lines += [
        "",
        f"State file of the {N_ENTITIES} × {HISTORY} events (max_len 1024 model): "
        f"{size / 2**20:.1f} MiB, {size / N_ENTITIES / HISTORY:,.0f} bytes per event "
        f"(keys and values: 2 · {N_LAYERS} layers · {D_MODEL} float32 = "
        f"{2 * N_LAYERS * D_MODEL * 4:,} bytes).",
    ]
    if ML100K.is_file():
        events = load_dataset(ML100K, "movielens")
        cut = events["timestamp"].quantile(0.9)
        enc = make_encoder(tmp, events, 200, "ml100k")
        r = compare(enc, events[events["timestamp"] <= cut], events[events["timestamp"] > cut])
        lines += [
            "",
            f"MovieLens-100K (`../shared/data/ml-100k/u.data`), max_len 200 model: state of the "
            f"ratings up to the 90 % time quantile, updated with the last 10 % "
            f"({int((events['timestamp'] > cut).sum()):,} ratings): {r['extended']} users "
            f"extended, {r['reencoded']} re-encoded (window slid), {r['new']} new; update "
            f"{r['update']:.2f} s, "
            f"encode {r['full']:.2f} s ({r['full'] / r['update']:.1f}×); max abs difference to "
            f"`encode` of all ratings {r['diff']:.1e} (the new ratings move the embeddings of "
            f"the state's users by {r['moved']:.1e} on average).",
        ]
    text = "\n".join(lines) + "\n"
    print(text)
    print(f"written to {write_text(RESULTS, text)}")


if __name__ == "__main__":
    main()
