"""The approximate item index against the exact scan: recall@10, time per account, build time and
memory, on vectors drawn directly (no model: what is measured is the search).

Run from the repository root (the issue's size: 1M items × 100k accounts, d=64; a few minutes of
exact scan on 2 CPU cores)::

    .venv/bin/python benchmarks/bench_retrieval.py --output benchmarks/results/retrieval.md
    .venv/bin/python benchmarks/bench_retrieval.py --small   # 20k items × 2k accounts, seconds

Vectors: item and account vectors around ``--centres`` shared centres (trained embeddings cluster;
uniform noise in 64 dimensions has no near neighbours to find), each a centre plus isotropic
noise, seeded. The index is :func:`seqenc.retrieval.index.build_index` with ``kind="approximate"``
(faiss's inverted file), its ``nprobe`` tuned at build on 1,000 sampled accounts to ``--recall``.
Then every account is searched twice, on the same cores: the exact scan
(:func:`seqenc.retrieval.topk.exact_search`, a BLAS matmul a chunk of items at a time) and the
index; recall@10 is the share of each account's exact top-10 the index returns, over every
account. Build memory: the growth of the process's peak resident set (``VmHWM``) during the build,
and the index's own size (vectors plus faiss's serialised inverted file).
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import torch

from seqenc.atomic import write_text
from seqenc.retrieval.approximate import recall, require_faiss
from seqenc.retrieval.index import VectorIndex, build_index
from seqenc.retrieval.space import Space
from seqenc.retrieval.topk import exact_search

QUERY_CHUNK = 4096  # accounts searched at once (exact: [chunk, items chunk] scores held)


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--items", type=int, default=1_000_000)
    parser.add_argument("--accounts", type=int, default=100_000)
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--centres", type=int, default=2000, help="shared cluster centres")
    parser.add_argument("--noise", type=float, default=0.5, help="noise std around a centre")
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--recall", type=float, default=0.95, help="recall@k the build keeps")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--small", action="store_true", help="20k items × 2k accounts")
    parser.add_argument("--output", default=None, help="also write the Markdown report here")
    args = parser.parse_args(argv)
    if args.small:
        args.items, args.accounts, args.centres = 20_000, 2_000, 200
    return args


def draw(n: int, centres: np.ndarray, noise: float, rng: np.random.Generator) -> np.ndarray:
    """``n`` vectors, each a random centre plus N(0, noise²) noise, float32."""
    pick = rng.integers(0, len(centres), n)
    out = centres[pick]
    out += rng.normal(scale=noise, size=out.shape).astype(np.float32)
    return out


def peak_rss() -> int:
    """The process's peak resident set in bytes (``VmHWM``; 0 where /proc is absent)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def timed_search(search, queries: np.ndarray, k: int) -> tuple[np.ndarray, float]:
    """``(positions [n, k], seconds)`` of ``search`` over ``queries`` a chunk at a time."""
    found = np.empty((len(queries), k), dtype=np.int64)
    start = time.perf_counter()
    for at in range(0, len(queries), QUERY_CHUNK):
        found[at : at + QUERY_CHUNK] = search(queries[at : at + QUERY_CHUNK], k)[1]
    return found, time.perf_counter() - start


def build(items: np.ndarray, accounts: np.ndarray, args: argparse.Namespace) -> dict:
    """The approximate index, with its build time, memory growth and size."""
    space = Space("bench", "bench-space", "items")
    before = peak_rss()
    start = time.perf_counter()
    index = build_index(
        pa.array(np.arange(len(items))),
        items,
        space,
        kind="approximate",
        target=args.recall,
        queries=accounts,
        k=args.k,
    )
    seconds = time.perf_counter() - start
    faiss = require_faiss("the benchmark")
    size = index.vectors.nbytes + faiss.serialize_index(index.ivf).nbytes
    return {"index": index, "build_s": seconds, "peak_growth": peak_rss() - before, "size": size}


def measure(args: argparse.Namespace) -> dict:
    """Everything the report prints, measured once."""
    faiss = require_faiss("the benchmark")
    torch.set_num_threads(args.threads)
    faiss.omp_set_num_threads(args.threads)
    rng = np.random.default_rng(0)
    centres = rng.normal(size=(args.centres, args.dim)).astype(np.float32)
    items = draw(args.items, centres, args.noise, rng)
    accounts = draw(args.accounts, centres, args.noise, rng)
    built = build(items, accounts, args)
    index: VectorIndex = built["index"]
    exact, exact_s = timed_search(lambda q, k: exact_search(q, items, k), accounts, args.k)
    approx, approx_s = timed_search(lambda q, k: index.search(q, k), accounts, args.k)
    return built | {
        "exact_s": exact_s,
        "index_s": approx_s,
        "recall": recall(approx, exact),
        "info": index.info,
    }


def report(args: argparse.Namespace, got: dict) -> str:
    """The Markdown report."""
    n = args.accounts
    per_exact, per_index = got["exact_s"] / n * 1e3, got["index_s"] / n * 1e3
    info = got["info"]
    lines = [
        f"# Retrieval: approximate item index vs exact scan ({datetime.date.today()})",
        "",
        f"`{' '.join(['python', 'benchmarks/bench_retrieval.py', *sys.argv[1:]])}`",
        "",
        f"{args.items:,} items × {args.accounts:,} accounts, d={args.dim}, around "
        f"{args.centres:,} centres (noise {args.noise}); {args.threads} threads; "
        f"{platform.processor() or platform.machine()}, torch {torch.__version__}.",
        "",
        "| measure | value |",
        "|---|---|",
        f"| index | faiss IVF, {info['nlist']:,} cells, nprobe {info['nprobe']} |",
        f"| recall@{args.k} at build (1,000 sampled accounts) | {info['recall']:.4f} |",
        f"| recall@{args.k}, every account, vs the exact top-{args.k} | {got['recall']:.4f} |",
        f"| exact scan per account | {per_exact:.4f} ms ({got['exact_s']:.2f} s in all) |",
        f"| index per account | {per_index:.4f} ms ({got['index_s']:.2f} s in all) |",
        f"| speed-up | {per_exact / per_index:.1f}× |",
        f"| build time (k-means, adds, nprobe tuning) | {got['build_s']:.1f} s |",
        f"| index size (vectors + inverted file) | {got['size'] / 2**20:,.0f} MiB |",
        f"| peak memory growth during the build | {got['peak_growth'] / 2**20:,.0f} MiB |",
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    args = parse(argv)
    text = report(args, measure(args))
    print(text)
    if args.output:
        write_text(args.output, text)


if __name__ == "__main__":
    main()
