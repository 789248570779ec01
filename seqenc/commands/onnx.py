"""``seqenc onnx --model BUNDLE [--output FILE.onnx]``: export a bundle's entity embedding as an
ONNX graph for ONNX Runtime."""

from __future__ import annotations

import argparse

from seqenc.encoding.backends import ONNX_FILE
from seqenc.encoding.onnx import export_onnx


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", required=True, help="bundle directory")
    parser.add_argument(
        "--output", default=None, help=f"graph to write (default: <bundle>/{ONNX_FILE})"
    )


def run(args: argparse.Namespace) -> None:
    print(f"onnx: {export_onnx(args.model, args.output, option='--output')}")
