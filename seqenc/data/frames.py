"""A pandas DataFrame → an Arrow table of the schema's columns, and the one check of an input's
column names (every input form: a missing column, or one given twice, is refused naming it)."""

from __future__ import annotations

import datetime as dt
import numbers
from collections.abc import Sequence

import numpy as np
import pandas as pd
import pyarrow as pa

from seqenc.data.schema import EventSchema
from seqenc.errors import SeqencError


def check_column_names(available: Sequence[object], wanted: Sequence[str], where: str) -> None:
    """Each of ``wanted`` must be among ``available`` exactly once: a missing column, or one
    given twice (which of the two would be read?), is refused naming it."""
    names = list(available)
    missing = [c for c in wanted if c not in names]
    if missing:
        raise SeqencError(f"column(s) {missing} not found in {where}; available columns: {names}")
    twice = [c for c in wanted if names.count(c) > 1]
    if twice:
        raise SeqencError(
            f"column(s) {twice} appear more than once in {where}: rename or drop the extra one(s)"
        )


def from_pandas(df: pd.DataFrame, schema: EventSchema) -> pa.Table:
    """The schema's columns of a DataFrame as Arrow arrays; an object column must hold one kind
    of value (numbers of any type are one kind)."""
    check_column_names(list(df.columns), schema.columns, "the DataFrame")
    arrays = {}
    for name in schema.columns:
        column = df[name]
        if column.dtype == object and "mixed" in pd.api.types.infer_dtype(column, skipna=True):
            if _one_kind(column, name) == "number":  # ints, floats, Decimals: one numeric type
                column = pd.to_numeric(column)
        try:
            arrays[name] = pa.Array.from_pandas(column)
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError) as e:
            raise SeqencError(f"column {name!r} cannot be converted (mixed types?): {e}") from e
    return pa.table(arrays)


def _value_kind(value: object) -> str:
    """What a Python value in an object column stands for: numbers of any type are one kind."""
    if isinstance(value, (bool, np.bool_)):
        return "boolean"
    if isinstance(value, numbers.Number):  # int, float, Decimal, numpy scalars
        return "number"
    if isinstance(value, (dt.date, np.datetime64)):  # date, datetime, pd.Timestamp
        return "time"
    return "text" if isinstance(value, str) else type(value).__name__


def _one_kind(column: pd.Series, name: str) -> str:
    """The one kind of value of an object column, else a SeqencError naming the first row whose
    kind differs from the most common: a number among times would be read as a time in 1970 (Arrow
    takes it as microseconds), text among numbers as something else again."""
    values = column.to_numpy()
    rows = np.flatnonzero(column.notna().to_numpy())
    kinds = pd.Series([_value_kind(v) for v in values[rows]], dtype=object)
    counts = kinds.value_counts()
    if len(counts) < 2:
        return str(counts.index[0]) if len(counts) else "empty"
    odd = int(np.flatnonzero(kinds.to_numpy() != counts.index[0])[0])
    row = int(rows[odd])
    summary = ", ".join(f"{n} {kind}" for kind, n in counts.items())
    raise SeqencError(
        f"column {name!r} holds mixed kinds of values ({summary}); first {kinds[odd]} at row {row} "
        f"(0-based): {name}={values[row]!r}"
    )
