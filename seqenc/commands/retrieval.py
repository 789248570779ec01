"""``seqenc items``, ``seqenc index`` and ``seqenc neighbours``: a bundle's item vectors to
Parquet, a nearest-neighbour index over item or account vectors, and its nearest rows
(:mod:`seqenc.retrieval`). Every output is checked before any work and written under a temporary
name then renamed; bad input is one line."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from seqenc.atomic import atomic_file, directory_target
from seqenc.bundle import bundle_inputs
from seqenc.data.paths import output_file
from seqenc.errors import SeqencError
from seqenc.reading import regular_file
from seqenc.retrieval.index_files import INDEX_FILE, is_index, load_index, save_index


def add_items_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", required=True, help="bundle directory")
    parser.add_argument("--output", required=True, help="Parquet file of item vectors to write")


def run_items(args: argparse.Namespace) -> None:
    from seqenc.inference import load_encoder

    inputs = bundle_inputs(args.model)
    output_file(args.output, inputs, [], "--output", "items.parquet")
    encoder = load_encoder(args.model, "cpu")
    table = encoder.items("arrow")
    with atomic_file(args.output, inputs) as tmp:
        pq.write_table(table, tmp)
    print(f"items: {args.output} ({table.num_rows:,} items of {encoder.meta.dim} dims)")
    print("frequency: " + table.schema.metadata[b"seqenc.frequency"].decode())


def add_index_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--vectors", required=True, help="Parquet of `seqenc items` or `seqenc embed` to index"
    )
    parser.add_argument("--output", required=True, help="index folder to write")
    parser.add_argument(
        "--kind",
        choices=("auto", "exact", "approximate"),
        default="auto",
        help="auto: exact below 100,000 vectors (or without faiss), else approximate",
    )
    parser.add_argument(
        "--recall", type=float, default=0.95, help="approximate: recall@10 to keep at build"
    )


def run_index(args: argparse.Namespace) -> None:
    from seqenc.retrieval.index import build_index
    from seqenc.retrieval.space import read_vectors

    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    if not 0 < args.recall <= 1:
        raise SeqencError(f"--recall must lie in (0, 1], got {args.recall}")
    directory_target(args.output, is_index, "a seqenc index", [args.vectors])
    ids, vectors, space = read_vectors(read_parquet(args.vectors, "--vectors"), where=args.vectors)
    index = build_index(ids, vectors, space, args.kind, args.recall)
    save_index(index, args.output, [args.vectors])
    print(f"index: {args.output}: {index.summary()}")


def add_neighbours_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--index", required=True, help="index folder of `seqenc index`")
    asked = parser.add_mutually_exclusive_group(required=True)
    asked.add_argument("--ids", nargs="+", help="ids in the index: their nearest other rows")
    asked.add_argument(
        "--queries", help="Parquet of the same model and space (e.g. encode(query=True))"
    )
    parser.add_argument("--k", type=int, default=10, help="neighbours per query")
    parser.add_argument("--output", required=True, help="Parquet file: query_id, rank, id, score")


def run_neighbours(args: argparse.Namespace) -> None:
    if args.k < 1:
        raise SeqencError(f"--k must be a positive integer, got {args.k}")
    inputs = [Path(args.index) / INDEX_FILE, *([args.queries] if args.queries else [])]
    output_file(args.output, inputs, [], "--output", "neighbours.parquet")
    index = load_index(args.index)
    if args.queries:
        found = index.query(read_parquet(args.queries, "--queries"), args.k)
    else:
        found = index.neighbours(args.ids, args.k)
    with atomic_file(args.output, inputs) as tmp:
        pq.write_table(pa.Table.from_pandas(found, preserve_index=False), tmp)
    print(f"neighbours: {args.output} ({len(found):,} rows)")


def read_parquet(path: str, option: str) -> pa.Table:
    """The Parquet file ``path`` of the command's ``option``; anything else is one line."""
    try:
        regular_file(Path(path))
        return pq.read_table(path)
    except (OSError, pa.ArrowInvalid) as e:
        raise SeqencError(f"{option} {path!r} is not a readable Parquet file: {e}") from e
