"""How far the sampled catalogue term's estimate is from the exact log-softmax, on a trained model.

    python benchmarks/sampled_error.py --ckpt RUN/checkpoints/last.ckpt \\
        --data runs/r2/data/tafeng_events.parquet \\
        --args --data.schema.entity customer_id --data.schema.item product_id --data.baskets false

On ``--batches`` training batches of the checkpoint's model (built as ``seqenc fit --config
configs/clicks.yaml`` with ``--args``), each kept row's catalogue log-probability of its target is
computed exactly and estimated ``--draws`` times by every ``--variants`` option set of the sampled
term (the proposal: the training item frequency, as at fit). Per variant: the mean error over rows
and draws (the estimate's bias: log of an unbiased normaliser estimate is low), the spread of a
batch's mean error from draw to draw (the part common to the batch, which moves the repeat head's
gate) and the rows' root-mean-square error. Writes ``--output`` (markdown).
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

from seqenc.model.batch import N_SPECIAL  # noqa: E402
from seqenc.model.losses import target_log_softmax  # noqa: E402
from seqenc.model.sampled import Proposal, window_groups  # noqa: E402

VARIANTS = [
    "{n_negatives: 1024, own_items: false}",
    "{n_negatives: 1024}",
    "{n_negatives: 4096, own_items: false}",
    "{n_negatives: 4096}",
    "{n_negatives: 8192}",
]


def load(ckpt: Path, data: Path, extra: list[str]):
    """The checkpoint's module (built as the fit built it) and its data module, set up."""
    config = ROOT / "configs/clicks.yaml"
    model, datamodule = common.build_fit(config, data, [*extra, "--model.loss", "ce"])
    state = torch.load(ckpt, map_location="cpu", weights_only=False)["state_dict"]
    model.load_state_dict(state)
    model.eval()
    return model, datamodule


def errors(model, batch, proposal: Proposal, options: dict, draws: int) -> torch.Tensor:
    """``[draws, N]``: estimate minus exact catalogue log-probability of each kept row's target."""
    inputs, labels = model.objective.training_pair(batch, model.config.n_items)
    hidden = model.encoder(inputs)
    keep = labels >= N_SPECIAL
    h, t = hidden[keep], labels[keep]
    weight = model.encoder.item_embedding.weight
    exact = target_log_softmax(h, weight, t, "ce")
    groups = window_groups(inputs.items, labels)
    options = {"exact_share": 0.0} | options  # the estimator alone, unless a variant sets it
    out = []
    for draw in range(draws):
        gen = torch.Generator().manual_seed(draw)
        estimate = target_log_softmax(
            h, weight, t, "sampled_softmax", generator=gen, proposal=proposal, groups=groups,
            **options,
        )  # fmt: skip
        out.append(estimate - exact)
    return torch.stack(out)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ckpt", type=Path, required=True)
    common.add_arguments(parser, VARIANTS, "sampled_error.md")
    parser.add_argument("--batches", type=int, default=3)
    parser.add_argument("--draws", type=int, default=8)
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    model, datamodule = load(args.ckpt, args.data, args.args)
    proposal = common.fit_proposal(model, datamodule)
    batches = common.training_batches(datamodule, args.batches, 0)
    lines = [
        "# The sampled term's estimate against the exact log-softmax",
        "",
        f"{common.run_line()}; {args.batches} training batches, {args.draws} draws each.",
        "",
        "| loss_options | mean error | batch-mean error's spread over draws | row RMS error |",
        "|---|---:|---:|---:|",
    ]
    with torch.no_grad():
        for variant in args.variants:
            found = [
                errors(model, b, proposal, yaml.safe_load(variant), args.draws) for b in batches
            ]
            mean = torch.cat([e.flatten() for e in found]).mean()
            spread = torch.stack([e.mean(1).std() for e in found]).mean()
            rms = torch.cat([e.flatten() for e in found]).pow(2).mean().sqrt()
            lines.append(f"| `{variant}` | {mean:+.4f} | {spread:.4f} | {rms:.4f} |")
            print(lines[-1], flush=True)
    common.report(args.output, lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
