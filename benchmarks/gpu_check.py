"""One-shot GPU check of the encoder: FlashAttention dispatch, fit and encode throughput, peak memory.

    python benchmarks/gpu_check.py                  # on the GPU machine (about 1-2 minutes)
    python benchmarks/gpu_check.py --device cpu     # reduced-size smoke test anywhere

Builds the encoder with d=128, 2 layers, max_len 512 under bf16 autocast and checks:
1. with torch.profiler, that attention runs the FlashAttention kernel (CUDA kernel names containing
   "flash"; on CPU the fused ``_scaled_dot_product_flash_attention_for_cpu`` op) for a causal batch of
   mixed lengths and for a bidirectional exact-length batch (forward and backward);
2. fit steps (forward + full CE + backward + AdamW) tokens/s;
3. encode (``entity_embedding`` under ``torch.inference_mode``) tokens/s;
4. peak memory (``torch.cuda.max_memory_allocated``).
Every section runs even when an earlier one fails; the exit status is 1 if any check failed. The
last thing printed is a markdown block ready to paste.
"""

from __future__ import annotations

import argparse
import datetime
import platform
import sys
import time
import traceback
import types
from collections.abc import Callable
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a plain checkout
try:
    import seqenc.data.vocab  # noqa: F401  (pulls in pandas / pyarrow)
except ImportError as error:  # a bare GPU image may lack pandas: the model only needs the constants
    print(f"note: seqenc.data.vocab not importable ({error}); using PAD=0 MASK=1 UNK=2 N_SPECIAL=3")
    stub = types.ModuleType("seqenc.data.vocab")
    stub.PAD, stub.MASK, stub.UNK, stub.N_SPECIAL = 0, 1, 2, 3
    sys.modules["seqenc.data.vocab"] = stub

from seqenc.data.batches import Batch  # noqa: E402
from seqenc.model.encoder import EncoderConfig, SequenceEncoder  # noqa: E402
from seqenc.model.losses import full_softmax_ce  # noqa: E402
from seqenc.model.masking import next_item_targets  # noqa: E402

FULL = {
    "batch": 128,
    "max_len": 512,
    "n_items": 50_000,
    "steps": 50,
    "encode_batch": 512,
    "encode_iters": 20,
}
SMOKE = {
    "batch": 8,
    "max_len": 64,
    "n_items": 2_000,
    "steps": 3,
    "encode_batch": 16,
    "encode_iters": 2,
}


def make_batch(
    lengths: torch.Tensor, width: int, n_items: int, device: torch.device, seed: int = 0
) -> Batch:
    """Random right-padded batch with realistic time gaps (seconds)."""
    generator = torch.Generator().manual_seed(seed)
    rows = len(lengths)
    real = torch.arange(width)[None, :] < lengths[:, None]
    items = torch.randint(3, n_items, (rows, width), generator=generator) * real
    dt_prev = torch.rand(rows, width, generator=generator).mul(15).exp() * real
    dt_ref = dt_prev.flip(1).cumsum(1).flip(1) * real
    return Batch(
        items=items,
        lengths=lengths.long(),
        dt_prev=dt_prev,
        dt_ref=dt_ref,
        categorical=torch.zeros(rows, width, 0, dtype=torch.int64),
        numeric=torch.zeros(rows, width, 0),
        index=torch.arange(rows),
    ).to(device)


def build(causal: bool, size: dict, device: torch.device) -> SequenceEncoder:
    torch.manual_seed(0)
    config = EncoderConfig(
        n_items=size["n_items"],
        d_model=128,
        n_layers=2,
        n_heads=2,
        n_positions=size["max_len"] + 1,
        causal=causal,
    )
    return SequenceEncoder(config).to(device)


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def attention_names(fn: Callable[[], None], device: torch.device) -> tuple[set[str], set[str]]:
    """(SDPA aten ops, device kernel names) seen while running ``fn``."""
    activities = [torch.profiler.ProfilerActivity.CPU]
    if device.type == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    with torch.profiler.profile(activities=activities) as prof:
        fn()
        sync(device)
    events = list(prof.events())
    ops = {e.name for e in events if "scaled_dot_product" in e.name}
    kernels = {e.name for e in events if e.device_type == torch.autograd.DeviceType.CUDA}
    return ops, kernels


def check_flash(size: dict, device: torch.device, report: list[str]) -> bool:
    width = size["max_len"]
    mixed = torch.randint(
        1, width + 1, (size["batch"],), generator=torch.Generator().manual_seed(1)
    )
    mixed[0] = width
    cases = [
        ("causal, mixed lengths", True, mixed),
        ("bidirectional, exact length", False, torch.full((size["batch"],), width)),
    ]
    ok = True
    for name, causal, lengths in cases:
        model = build(causal, size, device)
        batch = make_batch(lengths, width, size["n_items"], device)

        def step(model: SequenceEncoder = model, batch: Batch = batch) -> None:
            with torch.autocast(device.type, dtype=torch.bfloat16):
                model(batch).float().square().mean().backward()

        step()  # warm-up outside the profiler
        ops, kernels = attention_names(step, device)
        if device.type == "cuda":
            flash = sorted(k for k in kernels if "flash" in k.lower())
            passed = bool(flash) and not any("math" in op for op in ops)
            evidence = (
                f"{len(flash)} flash kernels, e.g. `{flash[0][:70]}`"
                if flash
                else f"kernels: {sorted(kernels)[:6]}"
            )
        else:
            passed = "aten::_scaled_dot_product_flash_attention_for_cpu" in ops and not any(
                "math" in op for op in ops
            )
            evidence = ""
        ok &= passed
        report.append(
            f"| {name} | {'PASS' if passed else 'FAIL'} | {', '.join(sorted(ops))} {evidence} |"
        )
    return ok


def fit_speed(size: dict, device: torch.device, report: list[str]) -> None:
    model = build(True, size, device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=device.type == "cuda")
    batch = make_batch(
        torch.full((size["batch"],), size["max_len"]), size["max_len"], size["n_items"], device
    )
    labels = next_item_targets(batch.items, batch.lengths).flatten()
    tokens = int((labels >= 0).sum())

    def step() -> float:
        with torch.autocast(device.type, dtype=torch.bfloat16):
            hidden = model(batch).flatten(0, 1)
            loss = full_softmax_ce(hidden, model.item_embedding.weight, labels)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        return loss.detach()

    for _ in range(3):
        first = step()
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    sync(device)
    start = time.perf_counter()
    for _ in range(size["steps"]):
        last = step()
    sync(device)
    seconds = time.perf_counter() - start
    if not torch.isfinite(last):
        raise RuntimeError(f"fit loss is not finite: {last}")
    per_step = seconds / size["steps"]
    report.append(
        f"| fit (fwd + full CE over {size['n_items'] - 3} items + bwd + AdamW), batch "
        f"{size['batch']}×{size['max_len']} | {tokens / per_step:,.0f} tokens/s | "
        f"{per_step * 1000:.1f} ms/step, loss {float(first):.3f} → {float(last):.3f} |"
    )
    if device.type == "cuda":
        peak = torch.cuda.max_memory_allocated() / 2**30
        report.append(
            f"| peak memory during fit | {peak:.2f} GiB | torch.cuda.max_memory_allocated |"
        )


def encode_speed(size: dict, device: torch.device, report: list[str]) -> None:
    width = size["max_len"]
    for causal in (True, False):
        model = build(causal, size, device).eval()
        lengths = torch.randint(
            1, width + 1, (size["encode_batch"],), generator=torch.Generator().manual_seed(2)
        )
        if not causal:
            lengths = torch.full_like(lengths, width - 1)  # + appended MASK = exact length: flash
        batch = make_batch(lengths, width, size["n_items"], device)
        with torch.inference_mode(), torch.autocast(device.type, dtype=torch.bfloat16):
            embedding = model.entity_embedding(batch)
            sync(device)
            start = time.perf_counter()
            for _ in range(size["encode_iters"]):
                embedding = model.entity_embedding(batch)
            sync(device)
        seconds = (time.perf_counter() - start) / size["encode_iters"]
        if not torch.isfinite(embedding.float()).all():
            raise RuntimeError("entity embeddings are not finite")
        kind = "causal, mixed lengths" if causal else "bidirectional, exact length"
        report.append(
            f"| encode ({kind}), batch {size['encode_batch']}×≤{width} | "
            f"{int(lengths.sum()) / seconds:,.0f} real tokens/s | {len(lengths) / seconds:,.0f} entities/s |"
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--device", default="cuda", help="cuda (full size) or cpu (reduced smoke test)"
    )
    args = parser.parse_args()
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print("CUDA is not available; run with --device cpu for the smoke test")
        return 1
    size = FULL if device.type == "cuda" else SMOKE
    name = (
        torch.cuda.get_device_name(device)
        if device.type == "cuda"
        else platform.processor() or "cpu"
    )
    report = ["| check | result | details |", "|---|---|---|"]
    failures = []
    sections = [
        ("flash attention", check_flash),
        ("fit speed", fit_speed),
        ("encode speed", encode_speed),
    ]
    for title, section in sections:
        try:
            if section(size, device, report) is False:
                failures.append(title)
        except Exception:  # keep going: every section reports
            traceback.print_exc()
            failures.append(title)
            report.append(f"| {title} | ERROR | see traceback above |")
    print(
        f"\n### GPU check ({device.type}): {name}\n\n"
        f"torch {torch.__version__}, CUDA {torch.version.cuda}, "
        f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, "
        f"model d=128, 2 layers, 2 heads, max_len {size['max_len']}, bf16 autocast\n"
        f"command: `python benchmarks/gpu_check.py --device {args.device}`\n\n" + "\n".join(report)
    )
    print(f"\nfailed: {failures}" if failures else "\nall checks passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
