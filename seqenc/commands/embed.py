"""``seqenc embed --model BUNDLE --events PATH_OR_GLOB --output PATH [...]``: embed every entity of
an event log with a model bundle, streaming to Parquet."""

from __future__ import annotations

import argparse
import logging

from seqenc.compat.lineage import SPACES
from seqenc.encoding import MAX_TOKENS, ON_EMPTY, EncodeOptions
from seqenc.encoding.backends import BACKENDS, ONNX_FILE
from seqenc.errors import ignored


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", required=True, help="bundle directory")
    parser.add_argument("--events", required=True, nargs="+", help="Parquet/CSV file(s), glob, dir")
    parser.add_argument("--output", required=True, help="Parquet file (or shard dir with ddp)")
    parser.add_argument(
        "--as-of", default=None, help="use only events at or before this time (ISO or epoch s)"
    )
    parser.add_argument("--batch-size", type=int, default=256, help="histories per forward pass")
    parser.add_argument(
        "--max-tokens", type=int, default=MAX_TOKENS, help="padded positions per forward pass"
    )
    parser.add_argument("--chunk-events", type=int, default=1_000_000, help="events per partition")
    parser.add_argument(
        "--on-empty",
        choices=ON_EMPTY,
        default="skip",
        help="entities with no event at or before --as-of: skip (warn) or raise (fail)",
    )
    parser.add_argument("--row-group-size", type=int, default=65536)
    parser.add_argument("--accelerator", default="auto")
    parser.add_argument("--devices", default="1", help="number, list (0,1) or auto")
    parser.add_argument("--strategy", default="auto", help="e.g. ddp for several devices")
    parser.add_argument("--no-progress", action="store_true", help="hide progress bars")
    parser.add_argument(
        "--backend",
        choices=BACKENDS,
        default="torch",
        help="onnxruntime: run the graph of `seqenc onnx` on the CPU",
    )
    parser.add_argument(
        "--onnx",
        default=None,
        help=f"ONNX graph for --backend onnxruntime (default <model>/{ONNX_FILE})",
    )
    parser.add_argument(  # seqenc.compat.lineage
        "--space",
        choices=SPACES,
        default="native",
        help="parent: through the bundle's map into the space of the bundle it was aligned to",
    )
    parser.add_argument(
        "--parent",
        default=None,
        help="with --space parent: refuse unless the map leads to this space id",
    )


def encode_options(args: argparse.Namespace) -> EncodeOptions:
    """The :class:`EncodeOptions` of the command line (``--onnx`` without ``--backend
    onnxruntime`` refused in the command line's words)."""
    if args.onnx is not None and args.backend != "onnxruntime":
        why = f"the graph runs with --backend onnxruntime, and the backend is {args.backend}"
        raise ignored("--onnx", args.onnx, why)
    return EncodeOptions(
        as_of=args.as_of,
        on_empty=args.on_empty,
        batch_size=args.batch_size,
        max_tokens=args.max_tokens,
        space=args.space,
        parent=args.parent,
        backend=args.backend,
        onnx=args.onnx,
    )


def run(args: argparse.Namespace) -> None:
    from lightning.pytorch.utilities import rank_zero_only

    from seqenc.export import ExportOptions, export_embeddings

    options = encode_options(args)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    export = ExportOptions(
        chunk_events=args.chunk_events,
        row_group_size=args.row_group_size,
        accelerator=args.accelerator,
        devices=args.devices,
        strategy=args.strategy,
        progress=not args.no_progress,
    )
    path = export_embeddings(args.model, args.events, args.output, options, export)
    if rank_zero_only.rank == 0:
        print(f"embeddings: {path}")
