"""The item table's gradient as Adam sees it, under the exact softmax and sampled catalogue terms.

    python benchmarks/sampled_table_signal.py --ckpt RUN/checkpoints/last.ckpt \\
        --data runs/r2/data/tafeng_events.parquet \\
        --args --data.schema.entity customer_id --data.schema.item product_id --data.baskets false

On ``--batches`` training batches of the checkpoint's model (built as ``sampled_error.py`` builds
it; the model fixed, no step taken), each variant's gradient of the catalogue term
``-mean(log p(target))`` on the item table is taken once per batch (a fresh draw each). Adam moves
a row by about ``mean(g) / sqrt(mean(g^2))`` per step (its second moment changes slowly), so per
row: ``|mean over batches| / root-mean-square`` of each coordinate's gradient, averaged over the
coordinates, then over the rows of each decile of training frequency (rarest first); and the
cosine of each decile's mean gradient with the exact term's. Writes ``--output`` (markdown).
"""

from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path

import torch
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
import sampled_common as common  # noqa: E402
from sampled_error import load  # noqa: E402

from seqenc.model.batch import N_SPECIAL  # noqa: E402
from seqenc.model.losses import target_log_softmax  # noqa: E402
from seqenc.model.sampled import window_groups  # noqa: E402

VARIANTS = ["ce", "{}", "{item_gradient: exact_rows}", "{exact_share: 0}"]


def table_gradient(model, rows: tuple, proposal, variant: str, seed: int) -> torch.Tensor:
    """``[n_items, d]``: the catalogue term's gradient on the item table for one batch's rows."""
    h, t, groups = rows
    w = model.encoder.item_embedding.weight.detach().clone().requires_grad_()
    if variant == "ce":
        out = target_log_softmax(h, w, t, "ce")
    else:
        gen = torch.Generator().manual_seed(seed)
        options = yaml.safe_load(variant) or {}
        out = target_log_softmax(
            h, w, t, "sampled_softmax", generator=gen, proposal=proposal, groups=groups, **options
        )
    (-out.mean()).backward()
    return w.grad.to_dense()


def batch_rows(model, batch) -> tuple:
    """The kept rows' hidden states, targets and windows of one training batch."""
    inputs, labels = model.objective.training_pair(batch, model.config.n_items)
    with torch.no_grad():
        hidden = model.encoder(inputs)
    keep = labels >= N_SPECIAL
    return hidden[keep], labels[keep], window_groups(inputs.items, labels)


def deciles(counts: torch.Tensor) -> list[torch.Tensor]:
    """The real item ids in ten groups of training frequency, rarest first."""
    order = torch.argsort(counts[N_SPECIAL:], stable=True) + N_SPECIAL
    return list(torch.tensor_split(order, 10))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ckpt", type=Path, required=True)
    common.add_arguments(parser, VARIANTS, "sampled_table_signal.md")
    parser.add_argument("--batches", type=int, default=30)
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    model, datamodule = load(args.ckpt, args.data, args.args)
    proposal = common.fit_proposal(model, datamodule)
    counts = torch.from_numpy(datamodule.item_counts(model.config.n_items))
    sums = {v: [0.0, 0.0] for v in args.variants}  # per variant: sum of g, sum of g^2
    for i, batch in enumerate(common.training_batches(datamodule, args.batches, 0)):
        rows = batch_rows(model, batch)
        for variant in args.variants:
            g = table_gradient(model, rows, proposal, variant, i)
            sums[variant] = [sums[variant][0] + g, sums[variant][1] + g * g]
        print(f"batch {i + 1}/{args.batches}", flush=True)
    groups = deciles(counts)
    mean = {v: s / args.batches for v, (s, _) in sums.items()}
    step = {
        v: (s.abs() / args.batches) / (q / args.batches).sqrt().clamp(min=1e-30)
        for v, (s, q) in sums.items()
    }
    lines = [
        "# The item table's gradient as Adam sees it",
        "",
        f"{common.run_line()}; {args.batches} training batches, one draw each. Per decile of "
        "training frequency (rarest first): the mean over rows of |mean g| / rms g per "
        "coordinate (about Adam's step on the row, in units of the learning rate), then the "
        "cosine of the decile's mean gradient with the exact term's.",
        "",
        "| variant | Adam step, deciles 1 → 10 | cosine with exact, deciles 1 → 10 |",
        "|---|---|---|",
    ]
    for variant in args.variants:
        size = " ".join(f"{float(step[variant][g].mean()):.2f}" for g in groups)
        cos = " ".join(
            f"{float(torch.cosine_similarity(mean[variant][g].flatten(), mean['ce'][g].flatten(), 0)):.2f}"
            if "ce" in mean
            else "—"
            for g in groups
        )
        lines.append(f"| `{variant}` | {size} | {cos} |")
    common.report(args.output, lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
