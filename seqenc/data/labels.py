"""A label table for fine-tuning: one label per entity (or per entity and ``as_of``) → the samples
a supervised head trains on, each the entity's history up to its own cut-off.

:func:`read_labels` checks the table (one-line errors naming the column: a missing entity or label
column, duplicated rows; rows without a label are counted, logged and dropped) and codes the
target: class codes for classification, the standardised number for regression.
:func:`labelled_view` turns it into a :class:`~seqenc.data.split.SequenceView` over a store, every
sample ending at the entity's last event at or before its ``as_of`` (its whole history without
one), and the query time the readout is for (``as_of``, as ``seqenc embed --as-of`` reads it).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pandas as pd

from seqenc.data.columns import epoch_column
from seqenc.data.sequences import SequenceStore
from seqenc.data.split import SequenceView
from seqenc.errors import SeqencError

log = logging.getLogger(__name__)
LabelTask = Literal["auto", "classification", "regression"]
AS_OF = "as_of"  # the cut-off column used when the table has it and no other is named


@dataclass
class Labels:
    """A checked label table.

    Attributes:
        entity: ``[n]`` entity id of each row (the table's values).
        as_of: ``[n]`` float64 epoch seconds of each row's cut-off, or ``None`` (whole histories).
        target: ``[n]`` int64 class codes, or float32 standardised numbers.
        spec: the head's description (:class:`~seqenc.model.head.SupervisedHead`'s arguments:
            task, classes, center, scale), plain JSON data.
    """

    entity: np.ndarray
    as_of: np.ndarray | None
    target: np.ndarray
    spec: dict[str, Any]

    def __len__(self) -> int:
        return len(self.entity)


def infer_task(values: np.ndarray) -> str:
    """``"regression"`` for floats that are not all whole numbers, else ``"classification"``."""
    if pd.api.types.is_float_dtype(values) and not np.all(np.equal(np.mod(values, 1), 0)):
        return "regression"
    return "classification"


def _frame(source: str | Path | pd.DataFrame) -> pd.DataFrame:
    if isinstance(source, pd.DataFrame):
        return source
    path = str(source)
    try:
        return pd.read_csv(path) if path.endswith((".csv", ".csv.gz")) else pd.read_parquet(path)
    except (OSError, ValueError) as e:
        raise SeqencError(f"cannot read labels {path!r}: {e}") from e


def read_labels(
    source: str | Path | pd.DataFrame,
    entity: str,
    label_column: str,
    as_of_column: str | None = None,
    task: LabelTask = "auto",
) -> Labels:
    """The label table at ``source`` (Parquet, CSV or a DataFrame), checked and coded.

    ``as_of_column`` (``None``: :data:`AS_OF` when the table has it) is where each row's history
    stops; a named column the table lacks is refused, as is a label that is a key column. A row
    per entity (and ``as_of``) at most. ``task`` ``"auto"``: :func:`infer_task`.
    """
    frame = _frame(source)
    where = f"labels {source!r}" if not isinstance(source, pd.DataFrame) else "labels"
    for column in (entity, label_column, *([as_of_column] if as_of_column else [])):
        if column not in frame.columns:
            raise SeqencError(f"{where} have no column {column!r} (columns: {list(frame.columns)})")
    as_of_column = as_of_column or AS_OF
    keys = [entity] + ([as_of_column] if as_of_column in frame.columns else [])
    if label_column in keys:
        raise SeqencError(
            f"{where}: label column {label_column!r} is a key column ({keys}): name the column "
            "to predict"
        )
    missing = frame[label_column].isna().to_numpy()
    if missing.any():
        log.warning(
            "%s: %d of %d rows have no %r, left out", where, missing.sum(), len(frame), label_column
        )
        frame = frame[~missing]
    repeated = frame.duplicated(keys).to_numpy()
    if repeated.any():
        first = frame[keys].iloc[int(np.flatnonzero(repeated)[0])].to_dict()
        raise SeqencError(f"{where}: {repeated.sum()} duplicated row(s) of {keys}, first {first}")
    if frame.empty:
        raise SeqencError(f"{where}: no row has a {label_column!r}")
    values = frame[label_column].to_numpy()
    task = infer_task(values) if task == "auto" else task
    target, spec = _code(values, task, f"{where} column {label_column!r}")
    as_of = epoch_column(frame[as_of_column], as_of_column) if len(keys) == 2 else None
    return Labels(frame[entity].to_numpy(), as_of, target, spec)


def _code(values: np.ndarray, task: str, where: str) -> tuple[np.ndarray, dict[str, Any]]:
    """Class codes (classes sorted) or standardised numbers, and the head's description."""
    if task == "regression":
        try:
            numbers = values.astype(np.float64)
        except (TypeError, ValueError) as e:
            raise SeqencError(f"{where}: regression needs numbers: {e}") from e
        center, scale = standardise(numbers, where)
        spec = {"task": task, "classes": [], "center": center, "scale": scale}
        return ((numbers - center) / scale).astype(np.float32), spec
    if task != "classification":
        raise SeqencError(f"label task must be auto, classification or regression, got {task!r}")
    codes, classes = pd.factorize(values, sort=True)
    if len(classes) < 2:
        raise SeqencError(f"{where}: a single class {list(classes)!r}: nothing to learn")
    spec = {"task": task, "classes": np.asarray(classes).tolist(), "center": 0.0, "scale": 1.0}
    return codes.astype(np.int64), spec


def standardise(numbers: np.ndarray, where: str) -> tuple[float, float]:
    """``(center, scale)`` of float64 regression labels; refused when a label is not finite, the
    labels are constant (nothing to learn; R² undefined) or spread too wide for float64 (their
    sum of squares overflows)."""
    bad = ~np.isfinite(numbers)
    if bad.any():
        raise SeqencError(f"{where}: {bad.sum()} label(s) are not finite, e.g. {numbers[bad][0]}")
    with np.errstate(over="ignore", invalid="ignore"):
        center, scale = float(numbers.mean()), float(numbers.std())
        squares = scale * scale * len(numbers)
    if not (np.isfinite(center) and np.isfinite(squares)):
        raise SeqencError(f"{where}: labels up to {np.abs(numbers).max():g} overflow float64 when "
                          "standardised; rescale them")  # fmt: skip
    if scale == 0:
        raise SeqencError(f"{where}: every label is {numbers[0]}: a constant has nothing to learn")
    return center, scale


@dataclass
class LabelledView:
    """The labelled samples over a store: ``view`` (sample j = the history of ``rows[j]`` of the
    label table), their ``targets`` and ``query`` times (``as_of``; NaN: the store's reference),
    and a fused head's ``aggregates`` of each (``[n, n_wide]``, or ``None``)."""

    view: SequenceView
    rows: np.ndarray
    targets: np.ndarray
    query: np.ndarray
    aggregates: np.ndarray | None = None


def labelled_view(store: SequenceStore, labels: Labels) -> LabelledView:
    """Each label row's history in ``store``: the entity's events at or before its ``as_of`` (all
    of them without one). Rows whose entity has no such event are counted, logged and left out."""
    ids = pd.Index(store.entity_ids.to_pandas())
    entity_row = ids.get_indexer(pd.Index(labels.entity))
    starts = store.offsets[:-1].astype(np.int64)
    found = entity_row >= 0
    entity_row = np.where(found, entity_row, 0)
    ends = store.offsets[1:].astype(np.int64)[entity_row]
    if labels.as_of is not None:
        ends = _cut_ends(store, entity_row, labels.as_of)
    keep = found & (ends > starts[entity_row])
    if found.any() and not keep.any():
        raise SeqencError(
            "every label row's cut-off (as_of) lies before its entity's first event: no history "
            f"to read (the first row's is {labels.as_of[0]} epoch seconds)"
        )
    if not keep.any():
        raise SeqencError(
            f"no label row has an event in the log (labels' ids are {labels.entity.dtype}, e.g. "
            f"{labels.entity[0]!r}; the log's e.g. {ids[0] if len(ids) else None!r})"
        )
    if not keep.all():
        log.warning(
            "%d of %d label rows have no event at or before their cut-off, left out",
            (~keep).sum(),
            len(keep),
        )
    rows = np.flatnonzero(keep)
    query = np.full(len(rows), np.nan) if labels.as_of is None else labels.as_of[rows]
    view = SequenceView(store, entity_row[rows], starts[entity_row[rows]], ends[rows])
    return LabelledView(view, rows, labels.target[rows], query)


def _cut_ends(store: SequenceStore, entity_row: np.ndarray, as_of: np.ndarray) -> np.ndarray:
    """``[n]`` absolute end (exclusive) of each entity's events at or before ``as_of``: cut-offs
    and events sorted together by (entity, time), an event before a cut-off at the same time; the
    events counted before each cut-off are its end."""
    event_row = np.repeat(np.arange(len(store)), np.diff(store.offsets))
    row = np.concatenate([event_row, entity_row])
    time = np.concatenate([store.timestamps, as_of])
    is_cut = np.concatenate([np.zeros(store.n_events, bool), np.ones(len(as_of), bool)])
    order = np.lexsort((is_cut, time, row))
    events_before = np.cumsum(~is_cut[order])
    ends = np.empty(len(as_of), dtype=np.int64)
    cut_positions = np.flatnonzero(is_cut[order])
    ends[order[cut_positions] - store.n_events] = events_before[cut_positions]
    return ends


def subset(samples: LabelledView, keep: np.ndarray) -> LabelledView:
    """The samples at positions ``keep``."""
    view = samples.view
    return LabelledView(
        SequenceView(view.store, view.rows[keep], view.starts[keep], view.ends[keep]),
        samples.rows[keep],
        samples.targets[keep],
        samples.query[keep],
        None if samples.aggregates is None else samples.aggregates[keep],
    )


def hold_out(samples: LabelledView, share: float) -> tuple[LabelledView, LabelledView, str]:
    """``(train, validation, what was held)``: a fixed draw (seed 0) of ``share`` of the labelled
    entities, at least one, holds out all of their rows."""
    entities = np.unique(samples.view.rows)
    rng = np.random.default_rng(0)
    held = rng.choice(entities, max(1, round(share * len(entities))), replace=False)
    val = np.isin(samples.view.rows, held)
    why = (
        f"labels: {int((~val).sum()):,} training and {int(val.sum()):,} validation rows "
        f"({len(held):,} of {len(entities):,} entities held out)"
    )
    return subset(samples, np.flatnonzero(~val)), subset(samples, np.flatnonzero(val)), why
