"""A label table: one label per entity (or per entity and ``as_of``) → the samples a supervised
head trains on, each the entity's history up to its own cut-off; the one reader and the one task
rule of a fine-tuning fit and of the probe.

:func:`label_rows` checks the table (one-line errors naming the column, value or key: a missing
column, an infinite label, two labels for one key; rows without a label and repeated rows are
counted and dropped); :func:`read_labels` reads it for a fit and codes the target: class codes for
classification, the standardised number for regression, the task by :func:`infer_task` (printed
with its reason). :func:`hold_out` splits the labelled entities so that the validation score is
defined.
:func:`labelled_view` turns it into a :class:`~seqenc.data.split.SequenceView` over a store, every
sample ending at the entity's last event at or before its ``as_of`` (its whole history without
one), and the query time the readout is for (``as_of``, as ``seqenc embed --as-of`` reads it).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pandas as pd

from seqenc.data.cut import NS, RowCuts, ends_at_or_before, parse_column
from seqenc.data.frames import check_column_names
from seqenc.data.sequences import SequenceStore
from seqenc.data.split import SequenceView
from seqenc.errors import SeqencError

log = logging.getLogger(__name__)
LabelTask = Literal["auto", "classification", "regression"]
AS_OF = "as_of"  # the cut-off column used when the table has it and no other is named
MAX_AUTO_CLASSES = 20  # whole-number labels with more distinct values are numbers (task auto)


@dataclass
class Labels:
    """A checked label table.

    Attributes:
        entity: ``[n]`` entity id of each row (the table's values).
        target: ``[n]`` int64 class codes, or float32 standardised numbers.
        spec: the head's description (:class:`~seqenc.model.head.SupervisedHead`'s arguments:
            task, classes, center, scale), plain JSON data.
        task: the task and why it was chosen (:func:`infer_task`), e.g. ``"classification (2
            distinct whole numbers, at most 20)"``.
        cut: the cut-offs parsed once (:class:`~seqenc.data.cut.RowCuts`), or ``None`` (whole
            histories).
    """

    entity: np.ndarray
    target: np.ndarray
    spec: dict[str, Any]
    task: str = ""
    cut: RowCuts | None = None

    @property
    def as_of(self) -> np.ndarray | None:
        """``[n]`` float64 epoch seconds of each row's cut-off (the query times), or ``None``:
        read from :attr:`cut`, the one copy of the cut-offs."""
        return None if self.cut is None else self.cut.seconds

    def __len__(self) -> int:
        return len(self.entity)


def infer_task(values: np.ndarray) -> tuple[str, str]:
    """``(task, why)`` of labels ``values``, the one rule of a fit and a probe: text and
    true/false are classes; numbers with a fractional part are regression; whole numbers (integers
    or whole floats) are classes when they take at most :data:`MAX_AUTO_CLASSES` distinct values,
    else regression (a count or an amount in whole units is a number, not a 97-class head)."""
    series = pd.Series(values)
    distinct = int(series.nunique())
    if pd.api.types.is_bool_dtype(series) or not pd.api.types.is_numeric_dtype(series):
        kind = "true/false" if pd.api.types.is_bool_dtype(series) else "non-numeric"
        return "classification", f"{distinct} distinct {kind} values"
    numbers = series.to_numpy(dtype=np.float64)
    if not np.all(np.mod(numbers, 1) == 0):
        return "regression", "numbers with a fractional part"
    if distinct <= MAX_AUTO_CLASSES:
        return "classification", f"{distinct} distinct whole numbers, at most {MAX_AUTO_CLASSES}"
    return "regression", (
        f"{distinct} distinct whole numbers, more than {MAX_AUTO_CLASSES}; a classification task "
        "set explicitly makes them classes"
    )


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
    per entity (and ``as_of``): repeats of a row are dropped and counted, two labels for one key
    refused (:func:`label_rows`). ``task`` ``"auto"``: :func:`infer_task`.
    """
    frame = _frame(source)
    where = f"labels {source!r}" if not isinstance(source, pd.DataFrame) else "labels"
    for column in (entity, label_column, *([as_of_column] if as_of_column else [])):
        if column not in frame.columns:
            raise SeqencError(f"{where} have no column {column!r} (columns: {list(frame.columns)})")
    as_of_column = as_of_column or AS_OF
    keys = [entity] + ([as_of_column] if as_of_column in frame.columns else [])
    cut = None
    try:
        if len(keys) == 2:  # every row's cut-off read before any row is dropped; keys by instant
            cut = parse_column(frame[as_of_column], as_of_column)
            frame = frame.reset_index(drop=True).assign(**{as_of_column: cut.as_column()})
        frame, counts = label_rows(frame, label_column, keys)
    except SeqencError as e:
        raise SeqencError(f"{where}: {e}") from None
    for n, what in (
        (counts["null_label"], f"have no {label_column!r}"),
        (counts["duplicate"], f"repeat a row of {label_column!r}"),
    ):
        if n:
            log.warning("%s: %d of %d rows %s, left out", where, n, counts["given"], what)
    values = frame[label_column].to_numpy()
    task, why = infer_task(values) if task == "auto" else (task, "data.label_task")
    target, spec = _code(values, task, f"{where} column {label_column!r}")
    cut = None if cut is None else cut.take(frame.index.to_numpy())  # the rows kept
    return Labels(frame[entity].to_numpy(), target, spec, f"{task} ({why})", cut)


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


def check_label_columns(labels: pd.DataFrame, label_column: str, keys: Sequence[str]) -> None:
    """The label table must have each key column and the label column once, and the label must
    not be a key (it would be predicted from itself)."""
    if label_column in keys:
        raise SeqencError(
            f"label column {label_column!r} is a key column ({list(keys)}): name the column to "
            "predict"
        )
    check_column_names(labels.columns, [*keys, label_column], "the labels")


def label_rows(
    labels: pd.DataFrame, label_column: str, keys: Sequence[str]
) -> tuple[pd.DataFrame, dict[str, int]]:
    """``(rows, counts)``: the key and label columns of ``labels`` with one row per key and a
    label in each, and what was dropped to get there (``given``, ``null_label``, ``duplicate``:
    repeats of a row with the same label). An infinite label, a label column with no value, or
    two different labels for one key are refused naming the value or key."""
    check_label_columns(labels, label_column, keys)
    rows = labels[[*keys, label_column]].reset_index(drop=True)
    values = rows[label_column]
    null = values.isna().to_numpy()
    if null.all():
        raise SeqencError(
            f"label column {label_column!r} has no value: its {len(rows)} rows are null"
        )
    _check_finite(values, label_column)
    rows = rows[~null]
    repeated = rows.duplicated(keep="first").to_numpy()  # the same row again: dropped
    rows = rows[~repeated]
    conflict = rows.duplicated(keys, keep=False).to_numpy()
    if conflict.any():
        key = rows[conflict].iloc[0]
        where = ", ".join(f"{k}={key[k]!r}" for k in keys)
        raise SeqencError(
            f"{where} has different labels in {label_column!r}: give one label row per "
            f"{' and '.join(keys)}"
        )
    counts = {"given": len(labels), "null_label": int(null.sum())}
    return rows, counts | {"duplicate": int(repeated.sum())}


def _check_finite(values: pd.Series, label_column: str) -> None:
    """A numeric label must be finite (NaN is a missing label, dropped and counted)."""
    if not pd.api.types.is_numeric_dtype(values) or pd.api.types.is_bool_dtype(values):
        return
    numbers = values.to_numpy(dtype=float, na_value=np.nan)
    infinite = np.isinf(numbers)
    if infinite.any():
        row = int(np.flatnonzero(infinite)[0])
        raise SeqencError(
            f"label column {label_column!r} holds {numbers[row]} at row {row} (0-based): a label "
            "must be finite"
        )


def regression_targets(y: np.ndarray) -> np.ndarray:
    """``y`` as float64 regression targets: finite, not constant (R² is then undefined) and within
    float64 (:func:`standardise`), else one line."""
    numbers = y.astype(np.float64)
    standardise(numbers, "labels")
    return numbers


def describe(counts: dict[str, int]) -> str:
    """The label rows' fate in one line: given, each kind dropped, used."""
    dropped = {k: v for k, v in counts.items() if k not in ("given", "used") and v}
    what = ", ".join(f"{v} {k.replace('_', ' ')}" for k, v in dropped.items()) or "none"
    return f"label rows: {counts['given']} given, dropped: {what}; {counts['used']} used"


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


@dataclass(frozen=True)
class LabelledRows:
    """What a fine-tuning fit is handed of its label table: the training and held-out labelled
    samples (each with its aggregates) and whether each row was read up to its own ``as_of``."""

    train: LabelledView
    held: LabelledView
    as_of: bool


def labelled_view(store: SequenceStore, labels: Labels) -> LabelledView:
    """Each label row's history in ``store``: the entity's events at or before its ``as_of`` (all
    of them without one). Rows whose entity has no such event are counted, logged and left out."""
    ids = pd.Index(store.entity_ids.to_pandas())
    entity_row = ids.get_indexer(pd.Index(labels.entity))
    starts = store.offsets[:-1].astype(np.int64)
    found = entity_row >= 0
    entity_row = np.where(found, entity_row, 0)
    ends = store.offsets[1:].astype(np.int64)[entity_row]
    if labels.cut is not None:
        times = (store.timestamps, None) if store.ticks is None else (store.ticks, NS)
        ends = ends_at_or_before(times, starts[entity_row], ends, labels.cut)
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


def hold_out(
    samples: LabelledView, share: float, spec: dict[str, Any]
) -> tuple[LabelledView, LabelledView, str]:
    """``(train, validation, what was held)``: a fixed draw (seed 0) of ``share`` of the labelled
    entities, at least one, holds out all of their rows; then, so that the validation score is
    defined and every class is learnt, entities are added in the same draw's order until the
    held-out rows hold every class or two different numbers (``spec``: :attr:`Labels.spec`). A
    table where that leaves a class (or any row) without training rows is refused in one line."""
    task = spec["task"]
    entities, entity = np.unique(samples.view.rows, return_inverse=True)
    order = np.random.default_rng(0).permutation(len(entities))
    held = np.zeros(len(entities), dtype=bool)
    held[order[: max(1, round(share * len(entities)))]] = True
    targets = samples.targets
    if task == "classification":
        for c in np.unique(targets):  # a class the draw left out of the held-out rows
            having = np.zeros(len(entities), dtype=bool)
            having[entity[targets == c]] = True
            if not held[having].any():
                held[order[having[order] & ~held[order]][0]] = True
    else:
        while len(np.unique(targets[held[entity]])) < 2 and not held.all():
            held[order[~held[order]][0]] = True
    val = held[entity]
    _check_both_sides(targets[~val], targets[val], spec, len(entities))
    why = (
        f"labels: {int((~val).sum()):,} training and {int(val.sum()):,} validation rows "
        f"({int(held.sum()):,} of {len(entities):,} entities held out"
        f"{', every class on both sides' if task == 'classification' else ''})"
    )
    return subset(samples, np.flatnonzero(~val)), subset(samples, np.flatnonzero(val)), why


def _check_both_sides(
    train: np.ndarray, val: np.ndarray, spec: dict[str, Any], n_entities: int
) -> None:
    """Refuse a hold-out that cannot train every class or score the held-out rows."""
    if spec["task"] == "classification":
        missing = np.setdiff1d(np.unique(val), np.unique(train))
        if len(missing):
            raise SeqencError(
                f"labels: class {spec['classes'][int(missing[0])]!r} is the label of too few "
                "entities to be both "
                f"trained on and held out for the validation score ({n_entities} labelled "
                "entities): give more rows of every class"
            )
    elif len(np.unique(train)) < 1 or len(np.unique(val)) < 2:
        raise SeqencError(
            f"labels: {n_entities} labelled entities cannot give both training rows and two "
            "held-out rows of different values (R² needs them): give more label rows"
        )
