"""ml-1m training speed on this CPU: seqenc as configured, with one part swapped out, and RePlay.

    .venv/bin/python benchmarks/bench_train_speed.py [--batches 3] [--repeats 3]
        [--replay-python /work/peers/replay/bin/python [--replay-full-epoch]]

Config: causal (SASRec), 2 layers, d=64, 2 heads, max_len 200, batch 128, full-softmax CE, AdamW.
Data: ``ml-1m_sequences.parquet`` from the shared data folder through ``SequenceDataModule``, the
same training batches ``seqenc fit`` uses: each user's last 2 items are left out, the rest is one
window of its newest 201 events (inputs + next-item targets at every position), length-bucketed.

A fixed sample of ``--batches`` batches (one per width stratum) is timed per repeat,
repeats of every variant interleaved (round robin) so that load from other users of the machine hits
all variants alike; s/epoch is extrapolated by padded tokens (compute grows with batch width).
The naive attention baseline lives only here and is swapped in by patching the module attribute.
With ``--replay-python``, RePlay's SASRec (``peer_replay.py``, run by that interpreter in its own
environment, same thread count) is timed in every round right after seqenc's variants and gets its
own row; ``--replay-full-epoch`` also times one whole RePlay ``Trainer.fit`` epoch, once.
Writes ``benchmarks/results/train_speed.md``.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import functools
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

import seqenc.model.attention as attention_module
from seqenc.atomic import write_text
from seqenc.data.batches import Batch
from seqenc.data.datamodule import SequenceDataModule
from seqenc.data.vocab import N_SPECIAL
from seqenc.model.encoder import EncoderConfig, SequenceEncoder
from seqenc.model.losses import full_softmax_ce
from seqenc.model.objectives import Causal

ROOT = Path(__file__).resolve().parents[1]
BATCH, MAX_LEN = 128, 200


def shared_data() -> Path:
    return Path(os.environ.get("SEQENC_SHARED_DATA", ROOT.parent / "shared" / "data"))


def epoch_batches(path: Path, seed: int = 0) -> tuple[list[tuple[Batch, torch.Tensor]], int]:
    """One epoch of (input batch, next-item labels) as ``seqenc fit`` builds them (the DataModule's
    length-bucketed leave-one-out samples), and the item vocabulary size. Each history's newest
    window only (``windows=False``), as RePlay and RecTools train, so an epoch is the same work."""
    data = SequenceDataModule(
        str(path), format="ml1m-sequences", history_len=MAX_LEN, batch_size=BATCH, windows=False
    )
    data.seed = seed
    pairs = []
    for window in data.train_dataloader():
        inputs, labels = Causal().training_pair(window, data.spec.n_items)
        pairs.append((inputs, labels.flatten()))
    return pairs, data.spec.n_items


def naive_sdpa(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    attn_mask: torch.Tensor | None = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
) -> torch.Tensor:
    """softmax(QK^T / sqrt(d) + mask) V, materialising the [B, H, L, L] scores (the baseline)."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    length = q.shape[-2]
    if is_causal:
        future = torch.ones(length, length, dtype=torch.bool, device=q.device).triu(1)
        scores = scores.masked_fill(future, float("-inf"))
    if attn_mask is not None:
        scores = scores.masked_fill(~attn_mask, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


def naive_ce(hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Materialised [N, n_real] logits + F.cross_entropy (the loss baseline)."""
    keep = targets >= N_SPECIAL
    return F.cross_entropy(hidden[keep] @ weight[N_SPECIAL:].T, targets[keep] - N_SPECIAL)


@contextlib.contextmanager
def attention(fn: Callable[..., torch.Tensor] | None) -> Iterator[None]:
    """Swap the attention function used by seqenc.model.attention (None: keep SDPA)."""
    original = attention_module.scaled_dot_product_attention
    attention_module.scaled_dot_product_attention = fn or original
    try:
        yield
    finally:
        attention_module.scaled_dot_product_attention = original


def variant(
    loss: Callable = full_softmax_ce,
    attn: Callable | None = None,
    autocast: bool = False,
    bf16: bool = False,
    torch_dropout: bool = False,
) -> dict:
    """One timed setting: ``bf16`` marks variants that use bf16 anywhere (skipped by --no-bf16),
    ``autocast`` runs the whole step under CPU bf16 autocast, ``torch_dropout`` swaps seqenc's CPU
    dropout for ``nn.Dropout`` (``bernoulli_`` masks), the baseline of that change."""
    return {
        "loss": loss,
        "attn": attn,
        "autocast": autocast,
        "bf16": bf16 or autocast,
        "torch_dropout": torch_dropout,
    }


VARIANTS = {
    "SDPA fp32, fused CE": variant(),
    "SDPA fp32, fused CE, bf16 output-layer matmuls (`loss_options: {matmul_dtype: bfloat16}`)": (
        variant(loss=functools.partial(full_softmax_ce, matmul_dtype="bfloat16"), bf16=True)
    ),
    "SDPA bf16 autocast, fused CE": variant(autocast=True),
    "SDPA fp32, fused CE, torch's nn.Dropout (bernoulli_ masks)": variant(torch_dropout=True),
    "naive attention fp32, fused CE": variant(attn=naive_sdpa),
    "SDPA fp32, naive CE (materialised logits)": variant(loss=naive_ce),
}


def time_variant(variant: dict, n_items: int, sample: list[tuple[Batch, torch.Tensor]]) -> float:
    """Seconds to train on ``sample`` with a fresh model, after one untimed step on its widest batch."""
    torch.manual_seed(0)
    config = EncoderConfig(
        n_items=n_items,
        d_model=64,
        n_layers=2,
        n_heads=2,
        n_positions=MAX_LEN + 1,
        time=False,
        causal=True,
    )
    model = SequenceEncoder(config).train()
    if variant["torch_dropout"]:
        for module in [model, *model.blocks]:
            module.drop = nn.Dropout(module.drop.p)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)

    def step(batch: Batch, labels: torch.Tensor) -> None:
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=variant["autocast"]):
            hidden = model(batch).flatten(0, 1)
            loss = variant["loss"](hidden, model.item_embedding.weight, labels)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    with attention(variant["attn"]):
        step(*max(sample, key=lambda pair: pair[0].items.shape[1]))
        start = time.perf_counter()
        for batch, labels in sample:
            step(batch, labels)
        return time.perf_counter() - start


PEER = "RePlay SASRec (peer), its [128, 200] batches, materialised CE"


def replay_lines(runs: list[dict], epoch_s: float, seqenc_epoch_s: float) -> list[str]:
    """The report's lines about the RePlay row: its setup and the seqenc/RePlay ratio."""
    first = runs[0]
    trainer = [run["trainer_epoch_s"] for run in runs if run["trainer_epoch_s"] is not None]
    return [
        f"- peer: {first['library']} (torch {first['torch']}, lightning {first['lightning']}, "
        f"{first['threads']} threads) in its own venv via `benchmarks/peer_replay.py`: "
        "`SasRec.from_params` (2 blocks, d=64, 2 heads, FFN 256, max_len 200, dropout 0.2), its full "
        "CE loss (logits for all 3,706 items at every one of the 128 × 200 positions, then "
        "`CrossEntropyLoss` with the padding ignored), Adam lr 1e-3 from its `OptimizerFactory`, "
        f"batches from its `ParquetModule` + default SASRec transforms, each padded to "
        f"{first['batch_shape']}; {first['timed_batches']} batches per repeat (same count as seqenc's), "
        "one fresh process per repeat, run right after seqenc's variants in each round; s/epoch "
        f"extrapolated by rows ({first['epoch_batches']} batches per epoch)",
        f"- **seqenc (SDPA fp32, fused CE) vs RePlay: {seqenc_epoch_s:.1f} vs {epoch_s:.1f} s/epoch, "
        f"ratio seqenc/RePlay = {seqenc_epoch_s / epoch_s:.2f} "
        f"(seqenc {epoch_s / seqenc_epoch_s:.2f}× faster)**",
        *(
            f"- RePlay, one whole `lightning.Trainer.fit` epoch (its Parquet reading, padding and "
            f"transforms, the Lightning loop and logging included; no validation): {t:.1f} s"
            for t in trainer
        ),
        "",
    ]


def time_replay(python: str, data: Path, batches: int, full_epoch: bool) -> dict:
    """One repeat of RePlay's SASRec in its own interpreter (``peer_replay.py``), as its JSON."""
    command = [python, str(ROOT / "benchmarks" / "peer_replay.py"), "--data", str(data)]
    command += [
        "--batches",
        str(batches),
        "--repeats",
        "1",
        "--threads",
        str(torch.get_num_threads()),
    ]
    done = subprocess.run(
        command + (["--full-epoch"] if full_epoch else []), capture_output=True, text=True
    )
    if done.returncode != 0:
        tail = done.stderr.strip().splitlines()[-1:] or ["no output"]
        raise SystemExit(f"peer_replay.py failed under {python}: {tail[0]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=3, help="timed batches per repeat")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--no-bf16",
        action="store_true",
        help="skip the bf16 variants (slow without AMX / AVX-512 BF16)",
    )
    parser.add_argument("--replay-python", help="RePlay venv's python: time its SASRec too")
    parser.add_argument(
        "--replay-full-epoch", action="store_true", help="also one whole RePlay Trainer epoch"
    )
    parser.add_argument(
        "--out", type=Path, default=ROOT / "benchmarks" / "results" / "train_speed.md"
    )
    args = parser.parse_args()
    path = shared_data() / "ml-1m" / "ml-1m_sequences.parquet"
    if not path.exists():
        print(f"skipped: {path} not found (set SEQENC_SHARED_DATA)")
        return 0
    epoch, n_items = epoch_batches(path)
    n_users = sum(len(b) for b, _ in epoch)
    by_width = sorted(epoch, key=lambda pair: pair[0].items.shape[1])
    picks = ((np.arange(args.batches) + 0.5) / args.batches * len(by_width)).astype(int)  # strata
    sample = [by_width[i] for i in picks]

    def slots(batches: list[tuple[Batch, torch.Tensor]]) -> int:
        return sum(b.items.numel() for b, _ in batches)

    def real(batches: list[tuple[Batch, torch.Tensor]]) -> int:
        return sum(int((labels >= N_SPECIAL).sum()) for _, labels in batches)

    scale = slots(epoch) / slots(sample)  # epoch time ≈ sample time × padded-token ratio
    load_before = os.getloadavg()[0]
    variants = {k: v for k, v in VARIANTS.items() if not (args.no_bf16 and v["bf16"])}
    times: dict[str, list[float]] = {name: [] for name in variants}
    replay: list[dict] = []
    for repeat in range(args.repeats):
        for name, variant in variants.items():
            times[name].append(time_variant(variant, n_items, sample))
            print(f"{name}: {times[name][-1]:.2f} s for {len(sample)} batches", file=sys.stderr)
        if args.replay_python:
            last = repeat == args.repeats - 1
            replay.append(
                time_replay(args.replay_python, path, args.batches, args.replay_full_epoch and last)
            )
            print(f"RePlay: {replay[-1]['repeats_s'][0]:.2f} s", file=sys.stderr)

    load_after = os.getloadavg()[0]
    baseline = statistics.median(times["SDPA fp32, fused CE"]) * scale

    def row(name: str, measured: list[float], epoch_s: float, n_batches: int) -> str:
        return (
            f"| {name} | {epoch_s:.1f} | {n_users / epoch_s:,.0f} | "
            f"{real(epoch) / epoch_s:,.0f} | {statistics.median(measured) / n_batches * 1000:.0f} | "
            f"{baseline / epoch_s:.2f}× | {', '.join(f'{t:.2f}' for t in measured)} |"
        )

    rows = [
        row(name, measured, statistics.median(measured) * scale, len(sample))
        for name, measured in times.items()
    ]
    peer = []
    if replay:
        measured = [run["repeats_s"][0] for run in replay]
        replay_epoch = statistics.median(measured) / replay[0]["timed_rows"] * n_users  # by rows
        rows.append(row(PEER, measured, replay_epoch, replay[0]["timed_batches"]))
        peer = replay_lines(replay, replay_epoch, baseline)
    command = "python benchmarks/bench_train_speed.py " + " ".join(sys.argv[1:])
    flags = open("/proc/cpuinfo").read() if Path("/proc/cpuinfo").exists() else ""
    isa = [f for f in ("avx2", "avx512f", "avx512_bf16", "amx_bf16") if f" {f}" in flags]
    report = "\n".join(
        [
            "# Training speed on ml-1m (CPU)",
            "",
            f"- command: `{command.strip()}`",
            f"- date: {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC",
            f"- machine: {platform.machine()}, {os.cpu_count()} logical cores, torch {torch.__version__}, "
            f"{torch.get_num_threads()} threads, CPU flags: {', '.join(isa) or 'none of avx2/avx512/amx'}",
            f"- data: ml-1m, {n_users:,} users, {n_items - N_SPECIAL:,} items, last 2 items per user "
            f"left out; one epoch = {len(epoch)} batches of {BATCH}, {real(epoch):,} real tokens "
            f"({slots(epoch):,} padded slots)",
            "- model: causal, 2 layers, d=64, 2 heads, max_len 200, dropout 0.2, learned positions, no time "
            "features (the file has no timestamps); loss: full softmax CE over all items; AdamW",
            f"- timing: {len(sample)} fixed batches (widths {sample[0][0].items.shape[1]}…"
            f"{sample[-1][0].items.shape[1]}) per repeat, median of {args.repeats} interleaved repeats, "
            "forward + loss + backward + AdamW step; s/epoch extrapolated by padded tokens",
            "- the 2 cores are shared with other people working on the machine at the same time, so "
            "absolute numbers are noisy (see the per-repeat times); ratios within one run are more reliable; "
            f"1-min load average {load_before:.1f} before, {load_after:.1f} after the timing",
            "- bf16 autocast is slow here: without avx512_bf16 / AMX the CPU emulates bf16 matmuls; "
            "it pays off on CPUs that have them and on GPUs"
            if not {"avx512_bf16", "amx_bf16"} & set(isa)
            else "- the CPU has native bf16 instructions",
            "",
            *peer,
            "| variant | s/epoch | sequences/s | real tokens/s | ms/batch | speed vs SDPA fp32 | repeats (s) |",
            "|---|---|---|---|---|---|---|",
            *rows,
            "",
        ]
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    write_text(args.out, report)
    print(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
