"""Issue 56, round six: the logits' memory, reused (``seqenc/model/workspace.py``) against fresh
(the allocator's, ``workspace.MIN_ELEMENTS`` set past every matrix), and glibc's malloc tuned for
the whole process (``--malloc tuned``: ``mallopt`` of the mmap threshold, the trim threshold and
the top pad, what rank7's environment variables set) against its defaults.

    PYTHONPATH=$PWD OMP_NUM_THREADS=1 python benchmarks/results/rank8/ab_alloc.py train [--rounds 7] [--malloc tuned]
    PYTHONPATH=$PWD OMP_NUM_THREADS=1 python benchmarks/results/rank8/ab_alloc.py beauty [--rounds 5] [--malloc tuned]
    PYTHONPATH=$PWD OMP_NUM_THREADS=1 python benchmarks/results/rank8/ab_alloc.py rss --variant fresh|workspace [--malloc tuned]

``train``: ``tafeng + account_embeddings`` (fresh, workspace) beside ``sasrec_ml1m`` as
``benchmarks/bench_train.py`` builds and times them (6 batches across the epoch's widths; a step
is training_step + backward + clipping + AdamW), rounds interleaved; events per process CPU
second, medians, and the median of the per-round ratios to sasrec_ml1m.
``beauty``: ``sasrec_beauty`` with ``--model.loss ce`` and with ``loss: auto`` (the sampled term,
fresh and workspace) on the same 10 training batches, as ``benchmarks/sampled_cost.py`` builds
them; CPU seconds per step, medians, the sampled / exact ratio per round.
``rss``: Ta-Feng alone, its 6 batches stepped ``--passes`` times; the process's peak RSS after
the build and at the end (``ru_maxrss``) and its RSS at the end.
Every mode ends with the process's peak RSS.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import platform
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "benchmarks"))
import bench_train  # noqa: E402
import sampled_common as common  # noqa: E402
from bench_scale import optimizer_step  # noqa: E402

from seqenc.model import workspace  # noqa: E402
from seqenc.model.optim import RowSparseAdamW  # noqa: E402

M_TRIM_THRESHOLD, M_TOP_PAD, M_MMAP_THRESHOLD = -1, -2, -3
TUNED = {M_MMAP_THRESHOLD: 2**30, M_TRIM_THRESHOLD: 2**31 - 1, M_TOP_PAD: 2**29}
LENT = workspace.MIN_ELEMENTS
VARIANTS = {"fresh": 10**12, "workspace": LENT}
TAFENG = "tafeng + account_embeddings"


def tune_malloc() -> None:
    """glibc only: large requests from the heap, which is never trimmed (rank7's settings)."""
    assert platform.libc_ver()[0] == "glibc", "glibc's mallopt"
    libc = ctypes.CDLL(None)
    for option, value in TUNED.items():
        assert libc.mallopt(option, value) == 1, (option, value)


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def rss_mb() -> float:
    pages = int(Path("/proc/self/statm").read_text().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


def built(names: list[str], steps: int = 6) -> dict[str, bench_train.Timed]:
    small = Path(tempfile.mkdtemp())
    cases = {c.name: c for c in bench_train.CASES}
    return {
        n: bench_train.Timed(cases[n], bench_train.data_path(cases[n], small), steps) for n in names
    }


def train(rounds: int) -> list[str]:
    timed = built(["sasrec_ml1m", TAFENG])
    reference, tafeng = timed["sasrec_ml1m"], timed[TAFENG]
    rates: dict[str, list[float]] = {"sasrec_ml1m": [], **{v: [] for v in VARIANTS}}
    ratios: dict[str, list[float]] = {v: [] for v in VARIANTS}
    for r in range(rounds):
        workspace.MIN_ELEMENTS = LENT
        base = reference.events / reference.time()[1]
        rates["sasrec_ml1m"].append(base)
        for variant in _order(r):
            workspace.MIN_ELEMENTS = VARIANTS[variant]
            rate = tafeng.events / tafeng.time()[1]
            rates[variant].append(rate)
            ratios[variant].append(rate / base)
        print(f"round {r}: " + ", ".join(f"{k} {v[-1]:,.0f}" for k, v in rates.items()), flush=True)
    lines = [
        "| case | events/CPU s (median) | vs sasrec_ml1m (median of per-round ratios) | per round |"
    ]
    lines += [
        "|---|---:|---:|---|",
        f"| sasrec_ml1m | {statistics.median(rates['sasrec_ml1m']):,.0f} | 1.00 | |",
    ]
    for variant in VARIANTS:
        each = ", ".join(f"{x:.3f}" for x in ratios[variant])
        lines.append(
            f"| {TAFENG}, {variant} | {statistics.median(rates[variant]):,.0f} | "
            f"{statistics.median(ratios[variant]):.3f} | {each} |"
        )
    gain = [w / f for w, f in zip(ratios["workspace"], ratios["fresh"], strict=True)]
    lines.append(
        f"\nworkspace / fresh per round: {', '.join(f'{g:.3f}' for g in gain)} (median {statistics.median(gain):.3f})"
    )
    return lines


def _order(r: int) -> list[str]:
    """The variants' order in round ``r``: alternated, so neither always runs first."""
    names = list(VARIANTS)
    return names if r % 2 == 0 else names[::-1]


def beauty_steps(model, batches: list) -> float:
    """Process CPU seconds per step over ``batches`` (after one untimed step)."""
    optimizer = RowSparseAdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    model.train()
    optimizer_step(model, optimizer, batches[0], 0)
    start = time.process_time()
    for i, batch in enumerate(batches, 1):
        optimizer_step(model, optimizer, batch, i)
    return (time.process_time() - start) / len(batches)


def beauty(rounds: int) -> list[str]:
    config, data = (
        ROOT / "configs/sasrec_beauty.yaml",
        bench_train.shared_data() / "beauty/Beauty.txt",
    )
    exact, datamodule = common.build_fit(config, data, ["--model.loss", "ce"])
    sampled, _ = common.build_fit(config, data, [])
    assert sampled.loss == "sampled_softmax", sampled.loss
    sampled.proposal = common.fit_proposal(sampled, datamodule)
    batches = common.training_batches(datamodule, 10, 0)
    spent: dict[str, list[float]] = {"ce": [], **{v: [] for v in VARIANTS}}
    for r in range(rounds):
        workspace.MIN_ELEMENTS = LENT
        spent["ce"].append(beauty_steps(exact, batches))
        for variant in _order(r):
            workspace.MIN_ELEMENTS = VARIANTS[variant]
            spent[variant].append(beauty_steps(sampled, batches))
        print(f"round {r}: " + ", ".join(f"{k} {v[-1]:.4f}" for k, v in spent.items()), flush=True)
    lines = [
        "| variant | CPU s/step (median) | sampled / exact (median of per-round ratios) | per round |"
    ]
    lines += [
        "|---|---:|---:|---|",
        f"| ce (exact, fused) | {statistics.median(spent['ce']):.4f} | 1.00 | |",
    ]
    for variant in VARIANTS:
        ratio = [s / e for s, e in zip(spent[variant], spent["ce"], strict=True)]
        lines.append(
            f"| sampled_softmax (auto), {variant} | {statistics.median(spent[variant]):.4f} | "
            f"{statistics.median(ratio):.3f} | {', '.join(f'{x:.3f}' for x in ratio)} |"
        )
    return lines


def rss(variant: str, passes: int) -> list[str]:
    workspace.MIN_ELEMENTS = VARIANTS[variant]  # the build's untimed step too
    tafeng = built([TAFENG])[TAFENG]
    after_build = peak_rss_mb()
    for _ in range(passes):
        tafeng.time()
    return [
        f"rss {variant}: peak RSS after the build {after_build:,.0f} MB, after {passes} passes "
        f"{peak_rss_mb():,.0f} MB; RSS at the end {rss_mb():,.0f} MB"
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", choices=["train", "beauty", "rss"])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--malloc", choices=["default", "tuned"], default="default")
    parser.add_argument("--variant", choices=list(VARIANTS), default="workspace")
    parser.add_argument("--passes", type=int, default=5)
    args = parser.parse_args()
    if args.malloc == "tuned":
        tune_malloc()
    import torch

    start = time.strftime("%H:%M:%S", time.gmtime())
    load = os.getloadavg()
    lines = {
        "train": lambda: train(args.rounds),
        "beauty": lambda: beauty(args.rounds),
        "rss": lambda: rss(args.variant, args.passes),
    }[args.mode]()
    print(
        f"\n`{' '.join(sys.argv[1:])}`: {start}-{time.strftime('%H:%M:%S', time.gmtime())} UTC, "
        f"{bench_train.cpu_name()}, torch {torch.__version__}, {torch.get_num_threads()} thread(s), "
        f"malloc {args.malloc}, load {load[0]:.2f} at the start, {os.getloadavg()[0]:.2f} at the end, "
        f"peak RSS {peak_rss_mb():,.0f} MB\n"
    )
    print("\n".join(lines))


if __name__ == "__main__":
    main()
