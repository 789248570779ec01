"""The one check of a probe's label table: its columns, its values and one row per key, every
dropped row counted (a label row repeated for one entity would put that entity in a training fold
and a test fold at once, and score the probe too high)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from seqenc.data.frames import check_column_names
from seqenc.data.labels import standardise
from seqenc.errors import SeqencError


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
    float64 (:func:`~seqenc.data.labels.standardise`), else one line."""
    numbers = y.astype(np.float64)
    standardise(numbers, "labels")
    return numbers


def describe(counts: dict[str, int]) -> str:
    """The label rows' fate in one line: given, each kind dropped, used."""
    dropped = {k: v for k, v in counts.items() if k not in ("given", "used") and v}
    what = ", ".join(f"{v} {k.replace('_', ' ')}" for k, v in dropped.items()) or "none"
    return f"label rows: {counts['given']} given, dropped: {what}; {counts['used']} used"
