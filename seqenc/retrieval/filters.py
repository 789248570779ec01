"""``recommend``'s filters in the model's item ids: allow / deny lists (one mask over the
catalogue) and candidate lists (each account's own items, jagged by store row). An id the model
does not know, an empty list and a candidate row for an account not encoded are refused in one
line: a list that names nothing the model scores is a mistake, not an empty answer."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from seqenc.data.vocab import N_SPECIAL, Vocabulary
from seqenc.errors import SeqencError


def known_items(vocab: Vocabulary, values: Any, what: str) -> np.ndarray:
    """The ids of the item ``values`` (a list, array or column); refused in one line when empty
    or when one is not in the model's vocabulary (never seen, or in an out-of-vocabulary bucket:
    the model scores no such item)."""
    values = pa.array(values) if not isinstance(values, (pa.Array, pa.ChunkedArray)) else values
    if len(values) == 0:
        raise SeqencError(f"{what} is empty: give at least one item id")
    ids, _ = vocab.encode(values)
    unknown = vocab.unknown(ids) | (ids < N_SPECIAL)
    if unknown.any():
        first = values.filter(pa.array(unknown)).to_pylist()[:3]
        raise SeqencError(
            f"{what}: {int(unknown.sum())} item id(s) the model does not know, e.g. {first}"
        )
    return ids


def banned_items(vocab: Vocabulary, allow: Any = None, deny: Any = None) -> np.ndarray:
    """``[len(vocab)]`` bool: the ids never recommended: the special ids and out-of-vocabulary
    buckets, every item outside ``allow`` (when given) and every item of ``deny``."""
    banned = np.ones(len(vocab), dtype=bool)
    banned[N_SPECIAL : vocab.bucket_start] = False
    if allow is not None:
        allowed = np.zeros(len(vocab), dtype=bool)
        allowed[known_items(vocab, allow, "the allow list")] = True
        banned |= ~allowed
    if deny is not None:
        banned[known_items(vocab, deny, "the deny list")] = True
    return banned


@dataclass
class Candidates:
    """Each store row's candidate item ids: ``items[offsets[r]:offsets[r + 1]]`` (distinct)."""

    offsets: np.ndarray
    items: np.ndarray

    def pairs(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(local, items)``: the candidates of store rows ``rows``, ``local`` the position of
        each pair's row in ``rows``."""
        starts, stops = self.offsets[rows], self.offsets[rows + 1]
        lengths = stops - starts
        local = np.repeat(np.arange(len(rows)), lengths)
        within = np.arange(lengths.sum()) - np.repeat(np.cumsum(lengths) - lengths, lengths)
        return local, self.items[np.repeat(starts, lengths) + within]


def candidate_lists(
    vocab: Vocabulary, entity_ids: pa.Array, table: pd.DataFrame | pa.Table
) -> Candidates:
    """:class:`Candidates` of a long table (``entity_id``, ``item_id``) for the accounts
    ``entity_ids`` (the store's, in its row order); refused in one line: no row, a missing
    column, an unknown item, an account that is not among those encoded."""
    if isinstance(table, pd.DataFrame):
        table = pa.Table.from_pandas(table, preserve_index=False)
    if not isinstance(table, pa.Table) or not {"entity_id", "item_id"} <= set(table.column_names):
        raise SeqencError("candidates must be a table with columns entity_id and item_id")
    if table.num_rows == 0:
        raise SeqencError("the candidate list is empty: give at least one (entity_id, item_id)")
    items = known_items(vocab, table["item_id"], "the candidate list")
    accounts = table["entity_id"]
    try:
        accounts = accounts.cast(entity_ids.type)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
        raise SeqencError(
            f"the candidate list's entity_id ({accounts.type}) does not read as the events' "
            f"({entity_ids.type}): {e}"
        ) from e
    rows = pc.index_in(accounts, value_set=entity_ids)
    if rows.null_count:
        first = accounts.filter(rows.is_null()).to_pylist()[:3]
        raise SeqencError(
            f"the candidate list names {rows.null_count} row(s) of accounts not encoded (no "
            f"event at or before as_of, or not in the events), e.g. {first}"
        )
    keys = np.unique(rows.to_numpy().astype(np.int64) * len(vocab) + items)
    store_rows, items = keys // len(vocab), keys % len(vocab)
    offsets = np.searchsorted(store_rows, np.arange(len(entity_ids) + 1))
    return Candidates(offsets, items)
