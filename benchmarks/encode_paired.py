"""Encode speed of two checkouts, paired: a git revision against the working tree.

Refactors of the encoding path (issue 30) must not slow ``encode``. Each round times both trees in
fresh subprocesses (alternating which goes first), best of ``--repeats`` encodes of the same events
with the same bundle (made by the older tree, whose bundle format both read), and reports the
per-round ratio (older time / newer time: above 1 means the working tree is faster) and that the
embeddings agree::

    OMP_NUM_THREADS=1 python benchmarks/encode_paired.py --before 6f89e33 --rounds 20
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
N_ITEMS, HISTORY = 2000, 512


def make(work: Path, entities: int) -> None:
    """Events and a random-weights bundle (d=128, 2 layers), with the tree first on sys.path
    (:func:`seqenc.testing.random_bundle`, which both trees have)."""
    from seqenc.data.schema import EventSchema
    from seqenc.data.synthetic import generate_events
    from seqenc.testing import random_bundle

    events = generate_events(entities, N_ITEMS, seed=0)
    events.to_parquet(work / "events.parquet")
    random_bundle(work / "bundle", events, EventSchema(), HISTORY, d_model=128)


def timed(work: Path, repeats: int) -> None:
    """Best of ``repeats`` encodes (after one untimed), printed as JSON; the embeddings saved."""
    import pandas as pd

    from seqenc.inference import load_encoder

    events = pd.read_parquet(work / "events.parquet")
    encoder = load_encoder(work / "bundle", "cpu")
    embeddings = encoder.encode(events, output="numpy").embeddings
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        encoder.encode(events, output="numpy")
        times.append(time.perf_counter() - start)
    np.save(work / f"emb-{os.getpid()}.npy", embeddings)
    print(json.dumps({"seconds": min(times), "embeddings": str(work / f"emb-{os.getpid()}.npy")}))


def run(tree: Path, *args: str) -> dict:
    env = dict(os.environ, PYTHONPATH=str(tree), OMP_NUM_THREADS="1")
    done = subprocess.run(
        [sys.executable, __file__, *args], capture_output=True, text=True, env=env, cwd="/"
    )
    if done.returncode:
        sys.exit(f"{tree}: {done.stderr[-2000:]}")
    lines = done.stdout.strip().splitlines()
    return json.loads(lines[-1]) if lines else {}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", default="6f89e33", help="git revision to compare against")
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--entities", type=int, default=400)
    parser.add_argument("--step", nargs=2, help=argparse.SUPPRESS)  # internal: make/time WORK
    args = parser.parse_args()
    if args.step:
        import seqenc  # the tree under test, not the installed one

        assert seqenc.__file__.startswith(os.environ["PYTHONPATH"]), seqenc.__file__
        step, work = args.step
        return (
            make(Path(work), args.entities) if step == "make" else timed(Path(work), args.repeats)
        )
    with tempfile.TemporaryDirectory() as tmp:
        old, work = Path(tmp) / "before", Path(tmp) / "work"
        work.mkdir()
        subprocess.run(["git", "worktree", "add", "-f", "--detach", str(old), args.before],
                       cwd=ROOT, check=True, capture_output=True)  # fmt: skip
        try:
            run(old, "--step", "make", str(work), "--entities", str(args.entities))
            trees, seconds, outputs = (
                {"before": old, "after": ROOT},
                {"before": [], "after": []},
                {},
            )
            for i in range(args.rounds):
                for name in ("before", "after") if i % 2 == 0 else ("after", "before"):
                    got = run(
                        trees[name], "--step", "time", str(work), "--repeats", str(args.repeats)
                    )
                    seconds[name].append(got["seconds"])
                    outputs[name] = np.load(got["embeddings"])
        finally:
            subprocess.run(
                ["git", "worktree", "remove", "--force", str(old)], cwd=ROOT, check=False
            )
    ratios = [b / a for b, a in zip(seconds["before"], seconds["after"], strict=True)]
    print(
        f"before {args.before}: best {min(seconds['before']):.3f} s; after: best {min(seconds['after']):.3f} s"
    )
    print(f"ratio before/after over {args.rounds} paired rounds: median {statistics.median(ratios):.3f}, "
          f"geometric mean {float(np.exp(np.mean(np.log(ratios)))):.3f} (above 1: the working tree is faster)")  # fmt: skip
    print(f"embeddings max |difference|: {np.abs(outputs['before'] - outputs['after']).max():.2e}")


if __name__ == "__main__":
    main()
