"""Map raw item / category values to dense integer ids, and back.

Ids 0-2 are reserved (PAD, MASK, UNK); real values get ids from 3 on, most frequent first, so a
vocabulary fitted twice on the same data is identical and small ids mean popular values.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from seqenc.data.schema import EventSchema
from seqenc.errors import SeqencError
from seqenc.model.batch import MASK, N_SPECIAL, PAD, UNK

_ARROW_TYPE = {"int64": pa.int64(), "string": pa.large_string()}


def _to_arrow(values: Any) -> pa.Array | pa.ChunkedArray:
    """Any 1-d array-like of ints or strings → an int64 or large_string Arrow array."""
    if isinstance(values, pd.Series):
        values = pa.Array.from_pandas(values)
    elif not isinstance(values, (pa.Array, pa.ChunkedArray)):
        try:
            values = pa.array(values.ravel() if isinstance(values, np.ndarray) else values)
        except (pa.ArrowInvalid, pa.ArrowTypeError) as e:
            raise SeqencError(f"vocabulary values must be all integers or all strings: {e}") from e
    if pa.types.is_dictionary(values.type):
        values = values.cast(values.type.value_type)
    if pa.types.is_integer(values.type):
        return values.cast(pa.int64())
    if pa.types.is_string(values.type) or pa.types.is_large_string(values.type):
        return values.cast(pa.large_string())
    if pa.types.is_null(values.type):  # all-null input
        return values.cast(pa.large_string())
    raise SeqencError(f"vocabulary values must be integers or strings, got type {values.type}")


def _dtype_of(arr: pa.Array | pa.ChunkedArray) -> str:
    return "int64" if pa.types.is_integer(arr.type) else "string"


class Vocabulary:
    """Values ↔ ids. ``values[k]`` has id ``N_SPECIAL + k``.

    Build one with :meth:`fit`; the constructor takes already unique values in id order.
    """

    PAD, MASK, UNK, N_SPECIAL = PAD, MASK, UNK, N_SPECIAL

    def __init__(self, values: Any, min_count: int = 1) -> None:
        self._values = _to_arrow(values)
        if isinstance(self._values, pa.ChunkedArray):
            self._values = self._values.combine_chunks()
        self.min_count = min_count

    @classmethod
    def fit(cls, values: Any, min_count: int = 1) -> Vocabulary:
        """Vocabulary of ``values`` by descending count, ties by ascending value.

        Values seen fewer than ``min_count`` times are left out (they encode as UNK); nulls are
        ignored.
        """
        if not isinstance(min_count, (int, np.integer)) or min_count < 1:
            raise SeqencError(f"min_count must be an integer >= 1, got {min_count!r}")
        arr = _to_arrow(values)
        counts = pc.value_counts(arr).flatten()
        table = pa.table({"value": counts[0], "count": counts[1]})
        table = table.filter(
            pc.and_(pc.is_valid(table["value"]), pc.greater_equal(table["count"], min_count))
        )
        table = table.sort_by([("count", "descending"), ("value", "ascending")])
        return cls(table["value"].cast(arr.type), int(min_count))

    @property
    def values(self) -> pa.Array:
        """The known values in id order (id of ``values[k]`` is ``N_SPECIAL + k``)."""
        return self._values

    @property
    def dtype(self) -> str:
        """``"int64"`` or ``"string"``."""
        return _dtype_of(self._values)

    def __len__(self) -> int:
        return N_SPECIAL + len(self._values)

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, Vocabulary)
            and self.min_count == other.min_count
            and self._values.equals(other._values)
        )

    def __repr__(self) -> str:
        return f"Vocabulary(dtype={self.dtype!r}, size={len(self)}, min_count={self.min_count})"

    def encode(self, values: Any) -> tuple[np.ndarray, int]:
        """``(ids, n_unknown)``: int64 ids of ``values``; unknown values and nulls become UNK.

        Values of the other type (ints for a string vocabulary or the reverse) are compared as
        text, so ``5`` matches ``"5"``; nothing raises for an unknown value.
        """
        arr = _to_arrow(values)
        vocab = self._values
        if _dtype_of(arr) != self.dtype:
            arr, vocab = arr.cast(pa.large_string()), vocab.cast(pa.large_string())
        pos = pc.index_in(arr, value_set=vocab)
        unknown = int(pos.null_count)
        ids = pc.fill_null(pos, UNK - N_SPECIAL).to_numpy().astype(np.int64) + N_SPECIAL
        if isinstance(values, np.ndarray):
            ids = ids.reshape(values.shape)
        return ids, unknown

    def decode(self, ids: np.ndarray) -> np.ndarray:
        """Original values of ``ids`` (same shape, object dtype); PAD / MASK / UNK give None."""
        ids = np.asarray(ids)
        if ids.size and (ids.min() < 0 or ids.max() >= len(self)):
            raise SeqencError(f"ids must lie in [0, {len(self)}), got {ids.min()}..{ids.max()}")
        table = pa.concat_arrays([pa.nulls(N_SPECIAL, self._values.type), self._values])
        taken = table.take(pa.array(ids.ravel().astype(np.int64))).to_pylist()
        out = np.empty(len(taken), dtype=object)
        out[:] = taken
        return out.reshape(ids.shape)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able form: ``{"dtype", "values", "min_count"}``."""
        return {
            "dtype": self.dtype,
            "values": self._values.to_pylist(),
            "min_count": self.min_count,
        }

    @classmethod
    def from_dict(cls, d: Any) -> Vocabulary:
        """Inverse of :meth:`to_dict`, validating every field."""
        if not isinstance(d, dict) or set(d) != {"dtype", "values", "min_count"}:
            keys = sorted(d) if isinstance(d, dict) else type(d).__name__
            raise SeqencError(f"a vocabulary needs keys dtype, values, min_count; got {keys}")
        dtype, values, min_count = d["dtype"], d["values"], d["min_count"]
        if dtype not in _ARROW_TYPE:
            raise SeqencError(f"vocabulary dtype must be 'int64' or 'string', got {dtype!r}")
        expected = int if dtype == "int64" else str
        bad = [v for v in values if type(v) is not expected] if isinstance(values, list) else None
        if bad is None or bad:
            example = bad[0] if bad else values
            raise SeqencError(f"vocabulary values must be a list of {dtype}, found {example!r}")
        if not isinstance(min_count, int) or min_count < 1:
            raise SeqencError(f"vocabulary min_count must be an integer >= 1, got {min_count!r}")
        arr = pa.array(values, type=_ARROW_TYPE[dtype])
        if len(pc.unique(arr)) != len(arr):
            dup = pd.Series(values)[pd.Series(values).duplicated()].iloc[0]
            raise SeqencError(f"vocabulary values contain duplicates, e.g. {dup!r}")
        return cls(arr, min_count)


@dataclass
class Vocabularies:
    """The item vocabulary plus one vocabulary per categorical column."""

    item: Vocabulary
    categorical: dict[str, Vocabulary] = field(default_factory=dict)

    @classmethod
    def fit(cls, table: pa.Table, schema: EventSchema, min_count: int = 1) -> Vocabularies:
        """Fit on a table from :func:`~seqenc.data.events.read_events`.

        ``min_count`` applies to items only; categorical vocabularies keep every value seen.
        """
        return cls(
            item=Vocabulary.fit(table[schema.item], min_count),
            categorical={c: Vocabulary.fit(table[c]) for c in schema.categorical},
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "item": self.item.to_dict(),
            "categorical": {k: v.to_dict() for k, v in self.categorical.items()},
        }

    @classmethod
    def from_dict(cls, d: Any) -> Vocabularies:
        if not isinstance(d, dict) or set(d) != {"item", "categorical"}:
            keys = sorted(d) if isinstance(d, dict) else type(d).__name__
            raise SeqencError(f"vocabularies need keys item, categorical; got {keys}")
        if not isinstance(d["categorical"], dict):
            raise SeqencError("vocabularies: 'categorical' must map column names to vocabularies")
        return cls(
            item=Vocabulary.from_dict(d["item"]),
            categorical={k: Vocabulary.from_dict(v) for k, v in d["categorical"].items()},
        )


def vocab_id_types(schema: EventSchema, vocabs: Vocabularies, where: str) -> EventSchema:
    """``schema`` with the id type of the item and every categorical column set to its
    vocabulary's type; an explicit type that contradicts the vocabulary is refused."""
    found = {schema.item: vocabs.item, **{c: vocabs.categorical[c] for c in schema.categorical}}
    types = {c: "int" if v.dtype == "int64" else "string" for c, v in found.items()}
    for column, kind in types.items():
        if schema.id_type(column) not in ("auto", kind):
            raise SeqencError(
                f"{where}: schema.id_types[{column!r}] is {schema.id_type(column)!r} but its "
                f"vocabulary holds {'integers' if kind == 'int' else 'text'}"
            )
    return schema.with_id_types(types)
