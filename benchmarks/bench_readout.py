"""Entity readout: the last block at the newest position only, against the full forward + pool.

Run from the repository root::

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_readout.py

A random-weights causal encoder (d=128, 2 layers, 2 heads, max_len 512) embeds three batches of
4,096 positions each (8 × 512, 32 × 128, 128 × 32 events), both ways, interleaved, 7 rounds; the
median of each and their ratio are printed. Both give the same embeddings (tests/test_encoder.py).
"""

from __future__ import annotations

import statistics
import time

import torch

from seqenc.model.batch import Batch
from seqenc.model.encoder import EncoderConfig, SequenceEncoder
from seqenc.model.readout import entity_readout

N_ITEMS, ROUNDS = 2003, 7


def full_batch(rows: int, length: int) -> Batch:
    """``rows`` histories of ``length`` random items, no time or features."""
    return Batch(
        items=torch.randint(3, N_ITEMS, (rows, length)),
        lengths=torch.full((rows,), length),
        dt_prev=torch.zeros(rows, length),
        dt_ref=torch.zeros(rows, length),
        categorical=torch.zeros(rows, length, 0, dtype=torch.long),
        numeric=torch.zeros(rows, length, 0),
        index=torch.arange(rows),
    )


def main() -> None:
    torch.manual_seed(0)
    config = EncoderConfig(n_items=N_ITEMS, d_model=128, n_layers=2, n_heads=2, n_positions=513)
    model = SequenceEncoder(config).eval()
    batches = [full_batch(8, 512), full_batch(32, 128), full_batch(128, 32)]
    ways = {
        "full forward, then the newest row": lambda b: entity_readout(
            model(b), b.lengths, "last", False
        ),
        "newest position only in the last block": model.entity_embedding,
    }
    times: dict[str, list[float]] = {name: [] for name in ways}
    with torch.inference_mode():
        for _ in range(ROUNDS):
            for name, embed in ways.items():
                start = time.perf_counter()
                for batch in batches:
                    embed(batch)
                times[name].append(time.perf_counter() - start)
    medians = {name: statistics.median(t) for name, t in times.items()}
    for name, seconds in medians.items():
        print(f"{name}: {seconds:.3f} s (rounds: {', '.join(f'{t:.3f}' for t in times[name])})")
    full, newest = medians.values()
    print(
        f"speed-up {full / newest:.2f}x, torch {torch.__version__}, {torch.get_num_threads()} threads"
    )


if __name__ == "__main__":
    main()
