"""``seqenc probe --labels L.parquet --label-column C [--embeddings E.parquet] [--events ...]``:
cross-validated linear probe of per-entity labels from embeddings and/or aggregate features of the
same events (aggregates alone, embeddings alone, both)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from seqenc.atomic import atomic_file, is_json
from seqenc.data.aggregates import check_id_kinds
from seqenc.data.cut import parse, parse_column, same_cut, same_instants
from seqenc.data.frames import check_column_names
from seqenc.data.labels import AS_OF, check_label_columns, describe
from seqenc.data.paths import expand_paths, output_file
from seqenc.data.schema import EventSchema
from seqenc.errors import SeqencError
from seqenc.evaluate import aggregate_features, compare


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--labels", required=True, help="Parquet/CSV: entity column + label(s)")
    parser.add_argument("--label-column", required=True, help="the label to predict")
    parser.add_argument("--embeddings", help="Parquet from `seqenc embed` (entity_id, embedding)")
    parser.add_argument("--events", nargs="+", help="event log(s): adds aggregate features")
    parser.add_argument("--entity", default="entity_id", help="entity column of labels and events")
    parser.add_argument("--item", default="item_id", help="item column of the events")
    parser.add_argument("--timestamp", default="timestamp", help="time column of the events")
    parser.add_argument("--categorical", nargs="*", default=[], help="categorical event columns")
    parser.add_argument("--numeric", nargs="*", default=[], help="numeric event columns")
    parser.add_argument(
        "--as-of-column",
        default=None,
        help="per-label cut-off column of labels (default: as_of when present; a named one must be)",
    )
    parser.add_argument(
        "--as-of", default=None, help="one cut-off for the aggregates (without --as-of-column)"
    )
    parser.add_argument(
        "--task", default="auto", choices=("auto", "binary", "multiclass", "regression")
    )
    parser.add_argument(
        "--model",
        nargs="+",
        default=["linear", "trees"],
        choices=("linear", "trees"),
        help="probe(s): logistic/ridge regression, gradient-boosted trees, or both (default)",
    )
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", help="also write the results here (JSON records)")


def run(args: argparse.Namespace) -> None:
    inputs = [args.labels, *([args.embeddings] if args.embeddings else [])]
    inputs += expand_paths(args.events) if args.events else []
    if args.json:  # before the probes run
        sources = [args.labels, *(args.events or [])]
        output_file(args.json, inputs, sources, "--json", "probe.json", is_json, "JSON")
    table = _run(args)
    print(f"task: {table.attrs['task_reason']}")
    print(format_table(table, args.folds, args.seed))
    if args.json:
        with atomic_file(args.json, inputs) as tmp:
            Path(tmp).write_text(json.dumps(table.to_dict(orient="records"), indent=1))


def _read_table(path: str, what: str) -> pd.DataFrame:
    """A Parquet or CSV table as read (a column named twice stays twice, to be refused by the
    column check, where pandas would rename or pick one)."""
    try:
        table = pacsv.read_csv(path) if path.endswith(".csv") else pq.ParquetFile(path).read()
        return table.to_pandas()
    except (OSError, ValueError, pa.ArrowException) as e:
        raise SeqencError(f"cannot read {what} {path!r}: {' '.join(str(e).split())}") from e


def _run(args: argparse.Namespace) -> pd.DataFrame:
    if not args.embeddings and not args.events:
        raise SeqencError("give --embeddings, --events or both")
    labels = _read_table(args.labels, "labels")
    if args.as_of_column is not None and args.as_of_column not in labels.columns:
        raise SeqencError(
            f"labels {args.labels!r} have no column {args.as_of_column!r} (--as-of-column; "
            f"columns: {list(labels.columns)})"
        )
    args.as_of_column = args.as_of_column or AS_OF
    per_row = args.as_of_column in labels.columns
    on = [args.entity, args.as_of_column] if per_row else [args.entity]
    try:
        check_label_columns(labels, args.label_column, on)
    except SeqencError as e:
        raise SeqencError(f"labels {args.labels!r}: {e}") from None
    sets: dict[str, pd.DataFrame] = {}
    if args.events:
        schema = EventSchema(
            entity=args.entity,
            item=args.item,
            timestamp=args.timestamp or None,
            categorical=args.categorical,
            numeric=args.numeric,
        )
        cut = labels[on].drop_duplicates() if per_row else args.as_of
        sets["aggregates"] = aggregate_features(
            args.events, schema, cut, as_of_column=args.as_of_column
        )
        check_id_kinds(labels, sets["aggregates"], args.entity, "events'")
    if args.embeddings:
        emb = _read_table(args.embeddings, "embeddings").rename(columns={"entity_id": args.entity})
        check_column_names(emb.columns, [args.entity, "embedding"], f"{args.embeddings!r}")
        check_id_kinds(labels, emb, args.entity, f"embeddings' ({args.embeddings})")
        _check_taken_at(args, labels, per_row and args.as_of_column not in emb.columns)
        if per_row and args.as_of_column not in emb.columns:
            # One embedding per entity (one cut-off): it serves every label row of the entity.
            emb = (
                labels[on].drop_duplicates().merge(emb[[args.entity, "embedding"]], on=args.entity)
            )
        sets["embeddings"] = emb[[*on, "embedding"]]
    return compare(
        labels,
        args.label_column,
        sets,
        on,
        task=args.task,
        models=args.model,
        n_splits=args.folds,
        seed=args.seed,
        reference="aggregates" if "aggregates" in sets else None,
    )


def _taken_at(path: str) -> tuple[bool, object]:
    """``(known, as_of)``: the cut-off an exported embedding file was taken at, from its
    ``seqenc.as_of`` metadata (``None``: whole histories); unknown for CSV or other Parquet."""
    if path.endswith(".csv"):
        return False, None
    metadata = pq.read_schema(path).metadata or {}
    if b"seqenc.as_of" not in metadata:
        return False, None
    return True, metadata[b"seqenc.as_of"].decode() or None


def _check_taken_at(args: argparse.Namespace, labels: pd.DataFrame, shared: bool) -> None:
    """Refuse embeddings taken at another cut-off than the labels' rows (``shared``: one
    embedding per entity serves the rows' per-row cut-offs) or the aggregates' ``--as-of``:
    their paired differences would compare features of different instants. Embeddings with
    the cut-off column are joined on it, row by row."""
    known, at = _taken_at(args.embeddings)
    where = f"the embeddings {args.embeddings!r}"
    taken = f"were taken at as_of={at}" if at is not None else "were taken from whole histories"
    if shared:
        rows = parse_column(labels[args.as_of_column], args.as_of_column)
        off = ~same_instants(parse(at), rows) if known else np.ones(len(labels), bool)
        if off.any():
            row = int(np.flatnonzero(off)[0])
            raise SeqencError(
                f"{where} {taken if known else 'carry no cut-off (no seqenc.as_of metadata)'}, "
                f"but {int(off.sum())} of {len(labels)} label rows have another cut-off in "
                f"{args.as_of_column!r} (first: row {row}, "
                f"{labels[args.as_of_column].iloc[row]!r}): embed each row at its own cut-off "
                "(seqenc.evaluate.embed_at writes that column), or drop --embeddings"
            )
    elif known and not same_cut(parse(at), parse(args.as_of)):
        raise SeqencError(
            f"{where} {taken}, but the aggregates are taken at "
            f"{'as_of=' + str(args.as_of) if args.as_of else 'whole histories'} (--as-of): "
            "give the same cut-off to both"
        )


def format_table(table: pd.DataFrame, folds: int, seed: int) -> str:
    """Feature sets × metrics as ``mean ± std`` over folds, each beside its paired difference
    from the aggregates on the same folds (when there are aggregates)."""
    metrics = [c[: -len("_mean")] for c in table.columns if c.endswith("_mean")]
    paired = "aggregates" in set(table["features"])
    lines = [
        f"{folds} folds (stratified for classes, shuffled with seed {seed}), the same for every "
        "row: "
        + (
            "(vs aggregates) is each fold's score minus the aggregates' on that fold"
            if paired
            else "no aggregates to compare with (give --events for the hand-made features)"
        )
    ]
    for row in table.itertuples(index=False):
        d = row._asdict()
        cells = []
        for m in metrics:
            cell = f"{m} {d[m + '_mean']:.4f} ± {d[m + '_std']:.4f}"
            if not pd.isna(d.get(f"paired_{m}", np.nan)):
                cell += f" (vs aggregates {d[f'paired_{m}']:+.4f} ± {d[f'paired_{m}_std']:.4f})"
            cells.append(cell)
        lines.append(
            f"{d['model']:<7} {d['features']:<22} n={d['n_rows']:<6} d={d['n_features']:<5} "
            + "  ".join(cells)
        )
    constant = [f"{m} {table[m + '_constant'].iloc[0]:.4f}" for m in metrics]
    lines.append(f"{'':<7} {'constant predictor':<22} " + "  ".join(constant))
    if paired and "aggregates+embeddings" in set(table["features"]):
        lines.append(
            "aggregates+embeddings: the embeddings stacked beside the aggregates (a linear probe "
            "of the embeddings, fitted inside each training fold, gives the probe one score per "
            "class)"
        )
    if "label_rows" in table.attrs:
        lines.append(describe(table.attrs["label_rows"]))
    return "\n".join(lines)
