"""Where ``sasrec_beauty``'s sampled training step goes, beside the exact one, in one process.

Both modules are built as ``benchmarks/bench_train.py`` builds the config (``loss: auto``: the
sampled term; ``--model.loss ce``: the exact softmax) on the same 10 batches picked across the
epoch's widths. Prints: CPU seconds of a pass of steps per round (interleaved) and their ratio;
each step's parts (bench_train's ``--parts``: encoder, next-item head + loss, clipping + AdamW);
and the sampled head's pass (encoder included) split by the shapes its ops work on (the shared
candidates ``[*, 4096]``, the exact rows ``[*, 12101]``, the item table, the rest) from
torch.profiler's self CPU time.

    PYTHONPATH=$PWD OMP_NUM_THREADS=1 python benchmarks/results/rank7/beauty_step.py
"""

from __future__ import annotations

import collections
import dataclasses
import sys
import tempfile
from pathlib import Path

from torch.profiler import ProfilerActivity, profile

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "benchmarks"))
import bench_train  # noqa: E402


def head_pass(timed: bench_train.Timed) -> None:
    """The next-item loss (encoder included), forward and backward, over the sample."""
    for batch in timed.sample:
        timed.model.next_item_loss(batch).backward()
        timed.model.zero_grad(set_to_none=True)


def by_shape(timed: bench_train.Timed) -> dict[str, float]:
    """Self CPU ms of the head pass's ops, by the shapes they work on."""
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        head_pass(timed)
    kinds: collections.Counter = collections.Counter()
    for op in prof.key_averages(group_by_input_shape=True):
        shapes = str(op.input_shapes)
        kind = "rest (the encoder, own windows, draws)"
        for mark, name in (
            ("4096", "shared candidates"),
            ("12101", "exact rows"),
            ("12104", "table"),
        ):
            if mark in shapes:
                kind = name
                break
        kinds[kind] += op.self_cpu_time_total / 1e3
    return dict(kinds.most_common())


def main() -> None:
    case = next(c for c in bench_train.CASES if c.name == "sasrec_beauty")
    path = bench_train.data_path(case, Path(tempfile.mkdtemp()))
    sampled = bench_train.Timed(case, path, 10)
    exact = bench_train.Timed(dataclasses.replace(case, args=("--model.loss", "ce")), path, 10)
    print(f"loss {sampled.model.loss} {sampled.model.hparams.loss_options} / {exact.model.loss}")
    for round_ in range(5):
        s, e = sampled.time()[1], exact.time()[1]
        print(f"round {round_}: sampled {s:.3f} s, exact {e:.3f} s, sampled / exact {s / e:.2f}")
    for name, timed in (("sampled", sampled), ("exact", exact)):
        print(f"parts, {name}:", {k: round(v, 3) for k, v in timed.parts().items()})
    print("sampled head pass by shape (ms):", {k: round(v) for k, v in by_shape(sampled).items()})


if __name__ == "__main__":
    main()
