"""What the sampled-term benchmarks (``sampled_cost.py``, ``sampled_error.py``) share: the arguments
naming the log, the variants, the report and the fit overrides; the module and data module built as
``seqenc fit`` builds them, the sampled term's proposal as at fit, the training batches every
variant sees, and the report's command line and where it ran."""

from __future__ import annotations

import argparse
import datetime
import shlex
import sys
from pathlib import Path

import torch
from bench_train import build, cpu_name

from seqenc.atomic import write_text
from seqenc.model.sampled import Proposal

ROOT = Path(__file__).resolve().parents[1]


def add_arguments(parser: argparse.ArgumentParser, variants: list[str], report: str) -> None:
    """``--data`` (the log, required), ``--variants`` (default ``variants``), ``--output`` (default
    ``benchmarks/results/REPORT``) and ``--args`` (the fit overrides: the rest of the line)."""
    parser.add_argument("--data", type=Path, required=True)
    parser.add_argument("--variants", nargs="+", default=variants)
    parser.add_argument("--output", type=Path, default=ROOT / "benchmarks/results" / report)
    parser.add_argument("--args", nargs=argparse.REMAINDER, default=[], help="fit overrides")


def build_fit(config: Path, data: Path, extra: list[str]):
    """The module and the data module (set up for fit) of ``seqenc fit --config CONFIG
    --data.path DATA EXTRA``."""
    cli = build(["--config", str(config), "--data.path", str(data), *extra])
    cli.datamodule.setup("fit")
    return cli.model, cli.datamodule


def fit_proposal(model, datamodule) -> Proposal:
    """The sampled term's proposal as at fit: the training split's item frequency."""
    return Proposal.from_counts(torch.from_numpy(datamodule.item_counts(model.config.n_items)))


def training_batches(datamodule, n: int, seed: int) -> list:
    """The first ``n`` batches of the training loader, drawn once with ``seed``."""
    torch.manual_seed(seed)
    loader = iter(datamodule.train_dataloader())
    return [next(loader) for _ in range(n)]


def run_line() -> str:
    """The report's first words: the command as run, when (UTC) and on which CPU."""
    script = Path(sys.argv[0]).name
    now = datetime.datetime.now(datetime.UTC)
    command = f"python benchmarks/{script} {shlex.join(sys.argv[1:])}"
    return f"`{command}`, {now:%Y-%m-%d %H:%M} UTC, {cpu_name()}"


def report(output: Path, lines: list[str]) -> None:
    """Write the markdown ``lines`` to ``output`` (atomically) and print them."""
    write_text(output, "\n".join(lines) + "\n")
    print("\n".join(lines))
