"""The ``seqenc`` command: one front for every subcommand.

:data:`COMMANDS` names each subcommand, what it does and the module that runs it
(:mod:`seqenc.commands`): the front imports only that one, builds its parser (``prog`` ``seqenc
<name>``, the module's ``add_arguments``), runs it within :func:`~seqenc.cli_support.one_line_errors`
and prints the overview for ``seqenc --help``. ``fit``, ``validate`` and ``test`` are LightningCLI
(:mod:`seqenc.commands.train`): their options come from the classes they build.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from typing import NamedTuple

from seqenc.cli_support import one_line_errors
from seqenc.version import __version__


class Command(NamedTuple):
    usage: str  # the arguments after ``seqenc <name>``
    summary: str
    module: str


LIGHTNING = "seqenc.commands.train"
COMMANDS = {
    "fit": Command("--config configs/X.yaml [--help | --help-all]", "train a model", LIGHTNING),
    "validate": Command("--config X.yaml --ckpt_path CKPT", "validation metrics", LIGHTNING),
    "test": Command("--config X.yaml --ckpt_path CKPT", "test metrics", LIGHTNING),
    "bundle": Command(
        "--ckpt CKPT --output DIR",
        "make a model bundle from a checkpoint",
        "seqenc.commands.bundle",
    ),
    "embed": Command(
        "--model BUNDLE --events PATH --output FILE.parquet [--as-of TIME]",
        "embed every entity of an event log, streaming to Parquet",
        "seqenc.commands.embed",
    ),
    "items": Command(
        "--model BUNDLE --output ITEMS.parquet",
        "every item's vector in the space the model scores in",
        "seqenc.commands.retrieval:items",
    ),
    "index": Command(
        "--vectors ITEMS_OR_EMBEDDINGS.parquet --output DIR [--kind auto|exact|approximate]",
        "a nearest-neighbour index of item or account vectors",
        "seqenc.commands.retrieval:index",
    ),
    "neighbours": Command(
        "--index DIR (--ids ID ... | --queries Q.parquet) --output FILE.parquet [--k K]",
        "the nearest rows of an index: items like an item, accounts like an account",
        "seqenc.commands.retrieval:neighbours",
    ),
    "onnx": Command(
        "--model BUNDLE [--output FILE.onnx]",
        "the embedding as an ONNX graph",
        "seqenc.commands.onnx",
    ),
    "probe": Command(
        "--labels L.parquet --label-column C [--embeddings E] [--events EV ...]",
        "cross-validated probe: embeddings vs aggregate features",
        "seqenc.commands.probe",
    ),
    "align": Command(
        "NEW OLD --events PATH [--kind ridge|mlp|blend|orthogonal]",
        "map NEW's embeddings into OLD's space (fit --compatible_with OLD does it after training)",
        "seqenc.commands.compat:align",
    ),
    "drift": Command(
        "OLD NEW --events PATH [--json FILE]",
        "compare two versions: cosine, neighbours, per-dimension shift, verdict",
        "seqenc.commands.compat:drift",
    ),
}


def usage() -> str:
    """``seqenc --help``: every subcommand, its arguments and what it does."""
    lines = ["seqenc: event streams to embeddings with a small Transformer.", ""]
    for name, command in COMMANDS.items():
        lines += [f"  seqenc {name} {command.usage}", f"      {command.summary}"]
    lines += ["  seqenc --version", "", "seqenc COMMAND --help: the command's options."]
    return "\n".join(lines)


def parser_of(name: str) -> tuple[argparse.ArgumentParser, object]:
    """The argparse parser of subcommand ``name`` and the module (or object) that runs it."""
    command = COMMANDS[name]
    module_name, _, prefix = command.module.partition(":")
    module = importlib.import_module(module_name)
    add, run = (
        (getattr(module, f"add_{prefix}_arguments"), getattr(module, f"run_{prefix}"))
        if prefix
        else (module.add_arguments, module.run)
    )
    parser = argparse.ArgumentParser(prog=f"seqenc {name}", description=command.summary)
    add(parser)
    return parser, run


def main(argv: list[str] | None = None) -> None:
    """Entry point of the ``seqenc`` console script."""
    given, argv = argv, sys.argv[1:] if argv is None else argv
    if argv[:1] in ([], ["-h"], ["--help"]):
        print(usage())
        return
    if argv[:1] == ["--version"]:
        print(f"seqenc {__version__}")
        return
    name = argv[0]
    if name not in COMMANDS:
        print(usage(), file=sys.stderr)
        print(f"seqenc: error: unknown command {name!r}", file=sys.stderr)
        raise SystemExit(2)
    if COMMANDS[name].module == LIGHTNING:
        from seqenc.commands.train import main as lightning_main

        return lightning_main(argv, given)
    parser, run = parser_of(name)
    args = parser.parse_args(argv[1:])
    with one_line_errors(f"seqenc {name}"):
        run(args)


if __name__ == "__main__":
    main()
