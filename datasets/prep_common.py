"""What the prep scripts share: bad input as one line, atomic Parquet writes, their command line."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from seqenc.atomic import atomic_file


class PrepError(Exception):
    """Bad input: reported as one line, no traceback."""


def write_parquet(df: pd.DataFrame, path: Path) -> None:
    """Write under a unique temporary name, then rename: never a half-written file."""
    with atomic_file(path) as tmp:
        pq.write_table(pa.Table.from_pandas(df, preserve_index=False), tmp, compression="zstd")


def prep_main(
    doc: str,
    default_data: str,
    prepare: Callable[[Path], dict[str, pd.DataFrame]],
    summary: Callable[[dict[str, pd.DataFrame], Path], str],
    argv: list[str] | None = None,
) -> int:
    """``--data DIR --out DIR``: ``prepare(data)`` gives the tables by file name, each written into
    ``--out``, then ``summary(tables, out)`` is printed. Bad input (:class:`PrepError`) is one line
    on stderr and exit code 1, with nothing written."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=Path(default_data), help="raw data folder")
    parser.add_argument("--out", type=Path, required=True, help="output folder")
    args = parser.parse_args(argv)
    try:
        tables = prepare(args.data)
    except PrepError as e:
        print(f"{parser.prog}: error: {e}", file=sys.stderr)
        return 1
    args.out.mkdir(parents=True, exist_ok=True)
    for name, table in tables.items():
        write_parquet(table, args.out / name)
    print(summary(tables, args.out))
    return 0
