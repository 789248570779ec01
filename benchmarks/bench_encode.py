"""Encode / export throughput, model FLOP utilisation, and export peak memory versus input size.

Run from the repository root (about 2 minutes on 2 CPU cores)::

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_encode.py

Model: a random-weights causal encoder, d=128, 2 layers, 2 heads, FFN 4d, max_len 512, on the
synthetic account log (:func:`seqenc.data.synthetic.generate_events`, 2000 items). Each path runs
once untimed, then in 7 interleaved rounds (matmul peak, encode, ONNX Runtime, export); timings are
medians over rounds. FLOPs are counted analytically on *real* events only (padding is overhead):
per layer and history of ``L`` events, ``2·L·12·d²`` for the QKV, output and FFN matmuls plus
``4·d·L²`` for the attention scores and weighted sum. They are compared with this machine's dense
float32 matmul rate (``torch.mm`` of 2048×2048, median of 5) measured at the start of each round:
the share is the median over rounds of the round's useful FLOP/s over the round's matmul rate.

Peak memory: ``seqenc embed``-style exports of N and 10·N entities (same ``chunk_events``), each in
its own subprocess, reporting its peak resident set (``VmHWM``); bounded streaming keeps it flat.
These use a d=32, 1-layer model to stay fast: data memory, not the model, is what is measured
(both logs hold max_len-long histories, so the largest activation batch is the same).
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from seqenc.atomic import write_text
from seqenc.data.sampling import token_batches
from seqenc.data.schema import EventSchema
from seqenc.data.sequences import build_sequences
from seqenc.data.synthetic import generate_events
from seqenc.encoding import MAX_TOKENS
from seqenc.export import export_embeddings
from seqenc.inference import Encoder, load_encoder
from seqenc.testing import random_bundle

D_MODEL, N_LAYERS, N_HEADS, FFN_MULT, MAX_LEN = 128, 2, 2, 4, 512
N_ENTITIES, N_ITEMS = 1000, 2000
RSS_ENTITIES, RSS_CHUNK_EVENTS, RSS_D_MODEL = (2000, 20000), 50_000, 32
RUNS = 7
RESULTS = Path(__file__).resolve().parent / "results" / "encode.md"


def median_time(fn, runs: int = RUNS) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def matmul_flops_per_s(n: int = 2048, runs: int = 5) -> float:
    a, b = torch.randn(n, n), torch.randn(n, n)
    torch.mm(a, b)  # warm-up
    return 2 * n**3 / median_time(lambda: torch.mm(a, b), runs)


def model_flops(lengths: np.ndarray) -> float:
    """Matmul FLOPs an embedding needs from histories of ``lengths`` events: every layer but the
    last over all positions; the last only its keys and values there, the rest at the newest one."""
    lengths = lengths.astype(np.float64)
    linear = 2 * lengths.sum() * (4 + 2 * FFN_MULT) * D_MODEL**2
    attention = 4 * D_MODEL * (lengths**2).sum()
    last_layer = (
        2 * lengths.sum() * 2 * D_MODEL**2
        + len(lengths) * (2 * (2 + 2 * FFN_MULT) * D_MODEL**2)
        + 4 * D_MODEL * lengths.sum()
    )
    return (N_LAYERS - 1) * (linear + attention) + last_layer


def padded_lengths(lengths: np.ndarray, batch_size: int = 256) -> np.ndarray:
    """Every history padded to its batch's longest, as ``encode`` batches them (length-sorted,
    at most ``batch_size`` rows and ``MAX_TOKENS`` padded positions)."""
    order = np.argsort(lengths, kind="stable")
    batches = token_batches(order, lengths, MAX_TOKENS, batch_size)
    return np.concatenate([np.full(len(b), lengths[b].max()) for b in batches])


def peak_rss_mb(bundle: Path, events: Path, output: Path) -> float:
    """Peak RSS of an export in a fresh process."""
    # VmHWM, not ru_maxrss: Linux carries ru_maxrss over fork + exec from the (large) parent.
    code = (
        "import sys; from seqenc.export import export_embeddings; "
        "export_embeddings(sys.argv[1], sys.argv[2], sys.argv[3], accelerator='cpu', "
        f"chunk_events={RSS_CHUNK_EVENTS}, progress=False); "
        "print([l.split()[1] for l in open('/proc/self/status') if l.startswith('VmHWM')][0])"
    )
    run = subprocess.run(
        [sys.executable, "-c", code, str(bundle), str(events), str(output)],
        capture_output=True,
        text=True,
        check=True,
    )
    return int(run.stdout.strip().splitlines()[-1]) / 1024


def onnx_encoder(bundle: Path) -> Encoder | None:
    """The bundle on the ONNX Runtime backend (same thread count as torch), or None without the
    ``onnx`` extra."""
    try:
        import onnxruntime  # noqa: F401

        from seqenc.encoding.onnx import export_onnx
    except ImportError:
        return None
    export_onnx(bundle)
    return load_encoder(bundle, "cpu", backend="onnxruntime")


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def main() -> None:
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()  # --help
    torch.manual_seed(0)
    tmp = Path(tempfile.mkdtemp(prefix="bench-encode-"))
    schema = EventSchema()
    events = generate_events(N_ENTITIES, N_ITEMS, seed=0)
    store, _ = build_sequences(events, schema, keep_newest=MAX_LEN)
    shape = dict(d_model=D_MODEL, n_layers=N_LAYERS, n_heads=N_HEADS, ffn_mult=FFN_MULT)
    bundle = random_bundle(tmp / "bundle", events, schema, MAX_LEN, name="bundle", **shape)
    small = shape | dict(d_model=RSS_D_MODEL, n_layers=1)
    rss_bundle = random_bundle(tmp / "small", events, schema, MAX_LEN, name="small", **small)
    encoder = load_encoder(bundle, "cpu")
    runtime = onnx_encoder(bundle)
    n_events, flops = store.n_events, model_flops(store.lengths)
    executed = model_flops(padded_lengths(store.lengths))
    events_path = tmp / "events.parquet"
    events.to_parquet(events_path)

    def export() -> None:
        export_embeddings(
            bundle, events_path, tmp / "emb.parquet", accelerator="cpu", progress=False
        )

    # Interleaved rounds, so that load from other jobs on a shared machine hits every measurement.
    paths = {"encode() in memory": lambda: encoder.encode(events)}
    if runtime is not None:
        paths["encode() in memory, ONNX Runtime backend"] = lambda: runtime.encode(events)
    paths["export Parquet → Parquet"] = export
    for fn in paths.values():  # warm-up: oneDNN builds a kernel the first time it sees a shape
        fn()
    timings = {"peak": [], **{name: [] for name in paths}}
    for _ in range(RUNS):
        timings["peak"].append(matmul_flops_per_s())
        for name, fn in paths.items():
            timings[name].append(median_time(fn, runs=1))
    peak = float(np.median(timings["peak"]))
    # Each round's share is against the peak measured at the start of that round: the host's
    # speed drifts from round to round, and a ratio within one round cancels the slow part of it.
    shares = {
        name: [flops / t / p for t, p in zip(timings[name], timings["peak"], strict=True)]
        for name in paths
    }

    rss = []
    for n in RSS_ENTITIES:
        path = tmp / f"events-{n}.parquet"
        log = generate_events(n, N_ITEMS, seed=1)
        log.to_parquet(path, row_group_size=100_000)  # readers decode a row group at a time
        rss.append((n, len(log), peak_rss_mb(rss_bundle, path, tmp / f"emb-{n}.parquet")))

    rows = [
        (name, float(np.median(timings[name])), float(np.median(shares[name]))) for name in paths
    ]
    lines = [
        "# Encode and export throughput",
        "",
        f"Command: `OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', '')} "
        f"{' '.join([Path(sys.executable).name, *sys.argv])}`  ",
        f"Date: {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M UTC}  ",
        f"Machine: {cpu_name()}, {os.cpu_count()} logical CPUs, torch {torch.__version__} "
        f"with {torch.get_num_threads()} threads, Python {platform.python_version()} "
        f"(a shared machine: load average {os.getloadavg()[0]:.1f} at the start of the run)",
        "",
        f"Model: causal encoder d={D_MODEL}, {N_LAYERS} layers, {N_HEADS} heads, FFN {FFN_MULT}d, "
        f"max_len {MAX_LEN}, random weights, CPU float32, length-sorted batches of at most 256 "
        f"histories and {MAX_TOKENS:,} padded positions. Data: synthetic log, "
        f"{N_ENTITIES} entities, {len(events):,} events ({n_events:,} within max_len), "
        f"{N_ITEMS} items. Each path ran once untimed, then {RUNS} interleaved rounds (matmul "
        "peak, then each path); seconds are the median over rounds.",
        "",
        f"Dense float32 matmul (torch.mm 2048×2048, median of 5 per round): {peak / 1e9:.1f} GFLOP/s "
        f"(rounds: {', '.join(f'{p / 1e9:.0f}' for p in timings['peak'])}). Model "
        f"FLOPs counted on real events: {flops / 1e9:.1f} GFLOP per pass "
        f"(2·L·12·d² linear + 4·d·L² attention per layer but the last, which the embedding "
        "needs only as keys and values, 2·L·2·d², plus its newest position; the encoder skips "
        f"the rest); {executed / 1e9:.1f} GFLOP including "
        "the padding of those batches. The attention term counts the full L² square, as the "
        "figures of earlier runs did: causal attention needs only its lower half, but at "
        "L=512 the fused CPU kernel takes as long with the causal mask as without it (the "
        "convention of PaLM's model FLOPs utilisation).",
        "",
        "Share of the peak: in each round, useful FLOP/s over the matmul rate measured at the "
        "start of that round; the table gives the median over rounds. `encode()` rounds: "
        + ", ".join(f"{share:.3f}" for share in shares["encode() in memory"])
        + ".",
        "",
        "| path | seconds | events/s | entities/s | useful GFLOP/s (share of matmul peak) "
        "| executed GFLOP/s incl. padding (share) |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for name, seconds, share in rows:
        lines.append(
            f"| {name} | {seconds:.2f} | {n_events / seconds:,.0f} | {N_ENTITIES / seconds:,.0f} "
            f"| {flops / seconds / 1e9:.1f} ({share:.3f}) "
            f"| {executed / seconds / 1e9:.1f} ({share * executed / flops:.3f}) |"
        )
    lines += [
        "",
        f"Peak RSS of an export (own process, d={RSS_D_MODEL} 1-layer model, "
        f"chunk_events={RSS_CHUNK_EVENTS:,}; includes Python, torch and Lightning):",
        "",
        "| entities | events | peak RSS (MiB) |",
        "|---:|---:|---:|",
        *[f"| {n:,} | {e:,} | {mb:,.0f} |" for n, e, mb in rss],
        "",
        f"Peak RSS ratio for 10× the entities: {rss[1][2] / rss[0][2]:.2f}.",
        "",
    ]
    text = "\n".join(lines)
    print(text)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    print(f"written to {write_text(RESULTS, text)}")


if __name__ == "__main__":
    main()
