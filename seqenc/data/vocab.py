"""Map raw item / category values to dense integer ids, and back.

Ids 0-2 are reserved (PAD, MASK, UNK); real values get ids from 3 on, most frequent first, so a
vocabulary fitted twice on the same data is identical and small ids mean popular values.

A bounded vocabulary (:class:`VocabBounds`: a minimum count, a maximum size) keeps the most frequent
values; the values it leaves out, and values never seen at fit time, share ``oov_buckets`` hashed
out-of-vocabulary ids after the kept ones (:func:`stable_hash`, the same in every process), so
an item first seen at encode time lands in the bucket a rare item of its hash trained.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from seqenc.data.bounds import VocabBounds, check_buckets, check_count, default_buckets
from seqenc.data.hashing import stable_hash
from seqenc.data.schema import EventSchema
from seqenc.errors import SeqencError
from seqenc.model.batch import MASK, N_SPECIAL, PAD, UNK
from seqenc.reading import read_bounded

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
    """Values ↔ ids. ``values[k]`` has id ``N_SPECIAL + k``; the ``oov_buckets`` ids from
    :attr:`bucket_start` on are out-of-vocabulary buckets: a non-null value not in ``values`` has
    id ``bucket_start + stable_hash(value) % oov_buckets`` (UNK without buckets).

    Build one with :meth:`fit`; the constructor takes already unique values in id order.

    Attributes:
        min_count, max_size: the bounds it was fitted with (``max_size`` None: no maximum).
        oov_buckets: the number of out-of-vocabulary buckets (0: unknown values are UNK).
        fit_events, oov_events: the non-null values seen by :meth:`fit`, and how many of them were
            left out of ``values`` (so went to a bucket, or to UNK without buckets).
    """

    PAD, MASK, UNK, N_SPECIAL = PAD, MASK, UNK, N_SPECIAL

    def __init__(
        self,
        values: Any,
        min_count: int = 1,
        *,
        max_size: int | None = None,
        oov_buckets: int = 0,
        fit_events: int = 0,
        oov_events: int = 0,
    ) -> None:
        self._values = _to_arrow(values)
        if isinstance(self._values, pa.ChunkedArray):
            self._values = self._values.combine_chunks()
        self.min_count, self.max_size, self.oov_buckets = min_count, max_size, oov_buckets
        self.fit_events, self.oov_events = fit_events, oov_events

    @classmethod
    def fit(
        cls,
        values: Any,
        min_count: int = 1,
        max_size: int | None = None,
        oov_buckets: int | None = None,
    ) -> Vocabulary:
        """Vocabulary of ``values`` by descending count, ties by ascending value; nulls ignored.

        Keeps the values seen at least ``min_count`` times, and of those the ``max_size`` most
        frequent. The values left out share ``oov_buckets`` buckets (``None``:
        :func:`~seqenc.data.bounds.default_buckets`, none when nothing is left out; 0: they encode
        as UNK).
        """
        check_count(min_count, "min_count")
        check_count(max_size, "max_size", optional=True)
        check_count(oov_buckets, "oov_buckets", low=0, optional=True)
        arr = _to_arrow(values)
        counts = pc.value_counts(arr).flatten()
        table = pa.table({"value": counts[0], "count": counts[1]})
        table = table.filter(pc.is_valid(table["value"]))
        table = table.sort_by([("count", "descending"), ("value", "ascending")])
        count = table["count"].to_numpy()
        n_kept = int(np.count_nonzero(count >= min_count))  # a prefix: counts descend
        n_kept = n_kept if max_size is None else min(n_kept, int(max_size))
        if oov_buckets is None:
            oov_buckets = default_buckets(n_kept, len(table) - n_kept)
        check_buckets(oov_buckets, len(table))
        return cls(
            table["value"].slice(0, n_kept).cast(arr.type),
            int(min_count),
            max_size=None if max_size is None else int(max_size),
            oov_buckets=int(oov_buckets),
            fit_events=int(count.sum()),
            oov_events=int(count[n_kept:].sum()),
        )

    @property
    def values(self) -> pa.Array:
        """The known values in id order (id of ``values[k]`` is ``N_SPECIAL + k``)."""
        return self._values

    @property
    def dtype(self) -> str:
        """``"int64"`` or ``"string"``."""
        return _dtype_of(self._values)

    @property
    def bucket_start(self) -> int:
        """The first out-of-vocabulary bucket id (one past the last value's id)."""
        return N_SPECIAL + len(self._values)

    @property
    def oov_share(self) -> float:
        """Share of the fit-time events whose value was left out (0 for a fit that saw none)."""
        return self.oov_events / self.fit_events if self.fit_events else 0.0

    def __len__(self) -> int:
        return self.bucket_start + self.oov_buckets

    def __eq__(self, other: object) -> bool:
        """Equal when they encode alike and were fitted with the same bounds (the fit-time counts
        are not compared)."""
        return (
            isinstance(other, Vocabulary)
            and (self.min_count, self.max_size, self.oov_buckets)
            == (other.min_count, other.max_size, other.oov_buckets)
            and self._values.equals(other._values)
        )

    def __repr__(self) -> str:
        return (
            f"Vocabulary(dtype={self.dtype!r}, size={len(self)}, min_count={self.min_count}, "
            f"max_size={self.max_size}, oov_buckets={self.oov_buckets})"
        )

    def encode(self, values: Any) -> tuple[np.ndarray, int]:
        """``(ids, n_unknown)``: int64 ids of ``values``, and how many are not in :attr:`values`
        (nulls included). An unknown value takes its bucket (UNK without buckets); a null is UNK.

        Values of the other type (ints for a string vocabulary or the reverse) are compared as
        text, so ``5`` matches ``"5"``; nothing raises for an unknown value.
        """
        arr = _to_arrow(values)
        vocab = self._values
        if _dtype_of(arr) != self.dtype:
            arr, vocab = arr.cast(pa.large_string()), vocab.cast(pa.large_string())
        pos = pc.index_in(arr, value_set=vocab)
        ids = pc.fill_null(pos, UNK - N_SPECIAL).to_numpy().astype(np.int64) + N_SPECIAL
        if self.oov_buckets:
            self._fill_buckets(ids, arr, pc.and_(pc.is_null(pos), pc.is_valid(arr)))
        if isinstance(values, np.ndarray):
            ids = ids.reshape(values.shape)
        return ids, int(pos.null_count)

    def _fill_buckets(
        self, ids: np.ndarray, arr: pa.Array | pa.ChunkedArray, missing: pa.Array
    ) -> None:
        """Give the values of ``arr`` where ``missing`` is true their bucket ids, in place (each
        distinct value hashed once)."""
        where = np.flatnonzero(missing.to_numpy(zero_copy_only=False))
        if not len(where):
            return
        found = arr.filter(missing)
        found = found.combine_chunks() if isinstance(found, pa.ChunkedArray) else found
        codes = pc.dictionary_encode(found)
        buckets = stable_hash(codes.dictionary) % np.uint64(self.oov_buckets)
        ids[where] = self.bucket_start + buckets.astype(np.int64)[codes.indices.to_numpy()]

    def unknown(self, ids: np.ndarray) -> np.ndarray:
        """Mask of the ``ids`` that name no value of the vocabulary: UNK and the buckets."""
        return (ids == UNK) | (ids >= self.bucket_start)

    def decode(self, ids: np.ndarray) -> np.ndarray:
        """Original values of ``ids`` (same shape, object dtype); PAD / MASK / UNK and the buckets
        give None."""
        ids = np.asarray(ids)
        if ids.size and (ids.min() < 0 or ids.max() >= len(self)):
            raise SeqencError(f"ids must lie in [0, {len(self)}), got {ids.min()}..{ids.max()}")
        table = pa.concat_arrays(
            [
                pa.nulls(N_SPECIAL, self._values.type),
                self._values,
                pa.nulls(self.oov_buckets, self._values.type),
            ]
        )
        taken = table.take(pa.array(ids.ravel().astype(np.int64))).to_pylist()
        out = np.empty(len(taken), dtype=object)
        out[:] = taken
        return out.reshape(ids.shape)

    def describe(self) -> str:
        """What the bound did, in words: values kept, buckets, share of fit-time events left out."""
        where = "in buckets" if self.oov_buckets else "to UNK"
        plural = "" if self.oov_buckets == 1 else "s"
        return (
            f"{len(self._values):,} kept, {self.oov_buckets:,} bucket{plural}, "
            f"{self.oov_share:.2%} of events {where}"
        )

    def figures(self) -> dict[str, Any]:
        """:meth:`describe` as plain data: ``kept``, ``oov_buckets``, ``oov_share``."""
        return {
            "kept": len(self._values),
            "oov_buckets": self.oov_buckets,
            "oov_share": self.oov_share,
        }

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able form: ``dtype``, ``values``, the bounds and the fit-time counts."""
        return {
            "dtype": self.dtype,
            "values": self._values.to_pylist(),
            "min_count": self.min_count,
            "max_size": self.max_size,
            "oov_buckets": self.oov_buckets,
            "fit_events": self.fit_events,
            "oov_events": self.oov_events,
        }

    @classmethod
    def from_dict(cls, d: Any) -> Vocabulary:
        """Inverse of :meth:`to_dict`, validating every field. A vocabulary saved before bounds
        existed (``dtype``, ``values``, ``min_count`` only) has no buckets and encodes as it did."""
        if not isinstance(d, dict) or not _REQUIRED_KEYS <= set(d) <= _REQUIRED_KEYS | _BOUND_KEYS:
            keys = sorted(d) if isinstance(d, dict) else type(d).__name__
            raise SeqencError(
                f"a vocabulary needs keys dtype, values, min_count (and may have "
                f"{', '.join(sorted(_BOUND_KEYS))}); got {keys}"
            )
        dtype, values = d["dtype"], d["values"]
        if dtype not in _ARROW_TYPE:
            raise SeqencError(f"vocabulary dtype must be 'int64' or 'string', got {dtype!r}")
        expected = int if dtype == "int64" else str
        bad = [v for v in values if type(v) is not expected] if isinstance(values, list) else None
        if bad is None or bad:
            example = bad[0] if bad else values
            raise SeqencError(f"vocabulary values must be a list of {dtype}, found {example!r}")
        arr = pa.array(values, type=_ARROW_TYPE[dtype])
        if len(pc.unique(arr)) != len(arr):
            dup = pd.Series(values)[pd.Series(values).duplicated()].iloc[0]
            raise SeqencError(f"vocabulary values contain duplicates, e.g. {dup!r}")
        return cls(arr, d["min_count"], **_checked_bounds(d))


_REQUIRED_KEYS = {"dtype", "values", "min_count"}
_BOUND_KEYS = {"max_size", "oov_buckets", "fit_events", "oov_events"}


def _checked_bounds(d: dict[str, Any]) -> dict[str, Any]:
    """The bounds and fit-time counts of a saved vocabulary (defaults for one saved before them),
    each checked in one line."""
    check_count(d["min_count"], "vocabulary min_count")
    bounds = {"max_size": None, "oov_buckets": 0, "fit_events": 0, "oov_events": 0}
    bounds |= {k: d[k] for k in _BOUND_KEYS if k in d}
    check_count(bounds["max_size"], "vocabulary max_size", optional=True)
    for key in ("oov_buckets", "fit_events", "oov_events"):
        check_count(bounds[key], f"vocabulary {key}", low=0)
    if bounds["oov_events"] > bounds["fit_events"]:
        raise SeqencError("vocabulary oov_events must not exceed fit_events")
    return bounds


@dataclass
class Vocabularies:
    """The item vocabulary plus one vocabulary per categorical column."""

    item: Vocabulary
    categorical: dict[str, Vocabulary] = field(default_factory=dict)

    @classmethod
    def fit(
        cls, table: pa.Table, schema: EventSchema, bounds: VocabBounds | None = None
    ) -> Vocabularies:
        """Fit on a table from :func:`~seqenc.data.events.read_events`, within ``bounds`` (none:
        every value kept)."""
        bounds = bounds or VocabBounds()
        bounds.check_columns(schema.categorical)
        item = Vocabulary.fit(table[schema.item], *bounds.item())
        if item.fit_events and not len(item.values):
            raise SeqencError(
                f"min_item_count={bounds.min_item_count} leaves no item in the vocabulary (none is "
                "seen that often); lower it"
            )
        return cls(
            item=item,
            categorical={
                c: Vocabulary.fit(table[c], *bounds.category(c)) for c in schema.categorical
            },
        )

    def describe(self) -> str:
        """One line: each vocabulary's :meth:`Vocabulary.describe` (printed when ``seqenc fit``
        starts)."""
        columns = "".join(f"; {c}: {v.describe()}" for c, v in self.categorical.items())
        return f"vocabulary: items: {self.item.describe()}{columns}"

    def figures(self) -> dict[str, Any]:
        """Each vocabulary's :meth:`Vocabulary.figures` (stored in a bundle's ``config.json``)."""
        return {
            "item": self.item.figures(),
            "categorical": {c: v.figures() for c, v in self.categorical.items()},
        }

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


VOCAB_FILE = "vocab.json"  # a bundle's vocabularies (:meth:`Vocabularies.to_dict`)
MAX_VOCAB_BYTES = 1 << 31  # the most a vocab.json may hold: it grows with the catalogue


def read_vocabs(bundle: str | Path) -> Vocabularies:
    """The vocabularies of the bundle directory ``bundle`` (its ``vocab.json``), to encode new
    events exactly as the bundle's weights were trained (fine-tuning from a bundle)."""
    path = Path(bundle) / VOCAB_FILE
    try:  # bounded: a link to /dev/zero or a FIFO is refused, not read for ever
        return Vocabularies.from_dict(json.loads(read_bounded(path, MAX_VOCAB_BYTES)))
    except (OSError, ValueError, RecursionError) as e:
        raise SeqencError(f"cannot read the vocabularies {str(path)!r}: {e}") from e
