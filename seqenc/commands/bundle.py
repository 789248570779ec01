"""``seqenc bundle --ckpt CKPT --output DIR [--name NAME]``: turn a seqenc Lightning checkpoint
into a model bundle."""

from __future__ import annotations

import argparse

from seqenc.training.checkpoint import bundle_from_checkpoint


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--ckpt", required=True, help="a .ckpt written by `seqenc fit`")
    parser.add_argument("--output", required=True, help="bundle directory to write")
    parser.add_argument("--name", default=None, help="model name (default: the directory name)")


def run(args: argparse.Namespace) -> None:
    path = bundle_from_checkpoint(args.ckpt, args.output, name=args.name)
    print(f"bundle: {path}")
