"""How large a fitted vocabulary may grow: the options, checked in one line each."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from seqenc.errors import SeqencError

MAX_DEFAULT_BUCKETS = 1024
# A given ``oov_buckets`` may reach this many per distinct value of the fitted column (or
# MAX_DEFAULT_BUCKETS): more buckets than values only grows the table (10,000,000 of them is
# gigabytes of embeddings that no value trains).
BUCKETS_PER_VALUE = 4
PerColumn = int | dict[str, int]


def default_buckets(n_kept: int, n_left: int) -> int:
    """Buckets when ``oov_buckets`` is not set: one per value left out, at most
    :data:`MAX_DEFAULT_BUCKETS` and at most one per value kept (at least one), so a bound at most
    doubles the table it shrinks and a fit that leaves nothing out has none."""
    return min(MAX_DEFAULT_BUCKETS, n_left, max(n_kept, 1))


def check_count(value: Any, name: str, low: int = 1, optional: bool = False) -> None:
    """One line unless ``value`` is an integer >= ``low`` (or, where ``optional``, None)."""
    if optional and value is None:
        return
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
        none = " or None" if optional else ""
        raise SeqencError(f"{name} must be an integer >= {low}{none}, got {value!r}")


def check_buckets(oov_buckets: int, n_values: int) -> None:
    """Refuse more buckets than :data:`BUCKETS_PER_VALUE` per distinct value fitted (at least
    :data:`MAX_DEFAULT_BUCKETS` are allowed)."""
    most = max(BUCKETS_PER_VALUE * n_values, MAX_DEFAULT_BUCKETS)
    if oov_buckets > most:
        raise SeqencError(
            f"oov_buckets={oov_buckets:,} is more than {BUCKETS_PER_VALUE} per distinct value of "
            f"a {n_values:,}-value column (at most {most:,}): the extra buckets would only grow "
            "the table"
        )


def check_batching(
    batch_size: Any,
    eval_batch_size: Any,
    bucket_factor: Any,
    num_workers: Any,
    eval_entities: Any,
    seed: Any,
) -> None:
    """The data module's batching options, each a whole number in its range, else one line
    naming it (before a sampler or a worker pool fails on it)."""
    for name, value in [
        ("batch_size", batch_size),
        ("eval_batch_size", eval_batch_size),
        ("bucket_factor", bucket_factor),
    ]:
        check_count(value, f"data.{name}")
    check_count(num_workers, "data.num_workers", low=0)
    check_count(eval_entities, "data.eval_entities", optional=True)
    check_count(seed, "data.seed", low=0, optional=True)
    if seed is not None and seed >= 2**32:
        raise SeqencError(f"data.seed must lie in [0, 2**32), got {seed}")


@dataclass(frozen=True)
class VocabBounds:
    """How large the vocabularies fitted on a log may grow (``SequenceDataModule``'s options of the
    same names). The values a bound leaves out share ``oov_buckets`` hashed buckets.

    Attributes:
        min_item_count: items seen fewer times are left out.
        max_items: keep at most this many items, the most frequent (None: no maximum).
        min_category_count, max_categories: the same for the categorical columns: one number for
            every column, or a mapping column → number (a column it does not name is unbounded),
            since a log's columns range from a few event kinds to millions of merchants.
        oov_buckets: buckets per bounded vocabulary (an unbounded one has none: no fit-time value
            would train them); None: :func:`default_buckets`; 0: values left out encode as UNK.
    """

    min_item_count: int = 1
    max_items: int | None = None
    min_category_count: PerColumn = 1
    max_categories: PerColumn | None = None
    oov_buckets: int | None = None

    def __post_init__(self) -> None:
        check_count(self.min_item_count, "min_item_count")
        check_count(self.max_items, "max_items", optional=True)
        check_count(self.oov_buckets, "oov_buckets", low=0, optional=True)
        for name in ("min_category_count", "max_categories"):
            value = getattr(self, name)
            for column, n in value.items() if isinstance(value, dict) else [("", value)]:
                where = f"{name}[{column!r}]" if column else name
                check_count(n, where, optional=name == "max_categories")

    def item(self) -> tuple[int, int | None, int | None]:
        """``(min_count, max_size, oov_buckets)`` of the item vocabulary (:meth:`Vocabulary.fit`'s
        arguments)."""
        return self._with_buckets(self.min_item_count, self.max_items)

    def category(self, column: str) -> tuple[int, int | None, int | None]:
        """``(min_count, max_size, oov_buckets)`` of the categorical ``column``."""
        low, high = self.min_category_count, self.max_categories
        low = low.get(column, 1) if isinstance(low, dict) else low
        return self._with_buckets(low, high.get(column) if isinstance(high, dict) else high)

    def _with_buckets(self, low: int, high: int | None) -> tuple[int, int | None, int | None]:
        bounded = low > 1 or high is not None
        return low, high, self.oov_buckets if bounded else 0

    def check_columns(self, categorical: tuple[str, ...]) -> None:
        """A per-column bound must name a categorical column (a typo would bound nothing)."""
        for name in ("min_category_count", "max_categories"):
            value = getattr(self, name)
            unknown = sorted(set(value) - set(categorical)) if isinstance(value, dict) else []
            if unknown:
                raise SeqencError(
                    f"{name} names {unknown}, not categorical column(s) {list(categorical)}"
                )
