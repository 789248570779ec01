"""Baskets: an entity's events that share a timestamp form a set (one order, one statement day).

Logs stamped by day or by order list a basket's lines in an artificial order (the store breaks
equal times by ``schema.tie_order``, e.g. by product id). Leave-one-out then holds out whichever
line sorts last, and a causal model learns the tie order. Under the basket protocol the held-out
target is the entity's newest basket (every event at its newest time), validation the basket before
it, and training never sees the order inside a basket (:mod:`seqenc.model.baskets`).

The protocol is chosen from the data (:func:`resolve_baskets`): on when at least
:data:`BASKET_SHARE` of the would-be leave-one-out test targets share their time with the event
before them.
"""

from __future__ import annotations

import logging

import numpy as np

from seqenc.data.sequences import SequenceStore
from seqenc.data.split import SequenceView
from seqenc.errors import SeqencError

log = logging.getLogger(__name__)

# A clock that stamps baskets (a day's lines, an order's lines) ties most newest events with the
# one before; an event clock ties them only in bursts (ratings entered in the same second). The
# threshold sits between the two kinds, clear of a coin flip; a log near it sets data.baskets.
BASKET_SHARE = 0.6


def basket_starts(store: SequenceStore) -> np.ndarray:
    """``[n_events]`` bool: the event opens a basket (its entity's first event, or a later time
    than the event before it)."""
    first = np.zeros(store.n_events, dtype=bool)
    first[store.offsets[:-1][store.lengths > 0]] = True
    first[1:] |= store.timestamps[1:] != store.timestamps[:-1]
    return first


def tied_target_share(store: SequenceStore, min_len: int = 3) -> float:
    """Share of the would-be leave-one-out test targets (the newest event of each entity with at
    least ``min_len`` events) that share their time with the event before them; 0 without time."""
    if not store.has_time:
        return 0.0
    rows = np.flatnonzero(store.lengths >= max(min_len, 2))
    if not len(rows):
        return 0.0
    last = store.offsets[rows + 1] - 1
    return float(np.mean(store.timestamps[last] == store.timestamps[last - 1]))


def resolve_baskets(
    option: bool | None, store: SequenceStore, min_len: int = 3
) -> tuple[bool, str]:
    """``(on, why)``: whether the basket protocol applies (``option`` when set, else whether at
    least :data:`BASKET_SHARE` of the test targets are tied, :func:`tied_target_share`) and a
    one-line account of the choice to print."""
    if option is not None and not isinstance(option, bool):
        raise SeqencError(f"data.baskets must be true, false or null (auto), got {option!r}")
    if option and not store.has_time:
        raise SeqencError("data.baskets: true needs timestamps (a basket is one entity and time)")
    share = tied_target_share(store, min_len)
    on = share >= BASKET_SHARE if option is None else option
    setting = "null: chosen by the data" if option is None else str(option).lower()
    return on, (
        f"baskets: {share:.1%} of test targets share their time with the event before "
        f"(threshold {BASKET_SHARE:.0%}): basket protocol {'on' if on else 'off'} "
        f"(data.baskets {setting})"
    )


def leave_one_basket_out(
    store: SequenceStore, min_len: int = 3
) -> tuple[SequenceView, SequenceView, SequenceView]:
    """The next-basket split: ``(train, val, test)``, as :func:`~seqenc.data.split.leave_one_out`
    with baskets for events.

    Per entity with baskets ``b_0 … b_{m-1}``: train is ``b_0 … b_{m-3}``; val the same input
    with target ``b_{m-2}``; test input ``b_0 … b_{m-2}``, target ``b_{m-1}``. A view's
    ``targets`` is the first event of the target basket, ``target_ends`` its end. Entities with
    fewer than 3 baskets or ``min_len`` events are dropped (logged).
    """
    if not isinstance(min_len, (int, np.integer)) or min_len < 3:
        raise SeqencError(f"leave_one_basket_out needs min_len >= 3, got {min_len!r}")
    opens = np.flatnonzero(basket_starts(store))
    entity = np.repeat(np.arange(len(store)), store.lengths)[opens]
    n_baskets = np.bincount(entity, minlength=len(store))
    rows = np.flatnonzero((n_baskets >= 3) & (store.lengths >= min_len)).astype(np.int64)
    if not len(rows):
        raise SeqencError(
            f"no entity has 3 baskets (times) and {min_len} events to split into train, "
            "validation and test baskets; set data.baskets false, or give a longer log"
        )
    if len(rows) < len(store):
        log.info(
            "leave_one_basket_out: dropped %d of %d entities with fewer than 3 baskets or %d "
            "events",
            len(store) - len(rows),
            len(store),
            min_len,
        )
    first_basket = np.cumsum(n_baskets) - n_baskets
    last_open = opens[first_basket[rows] + n_baskets[rows] - 1]
    val_open = opens[first_basket[rows] + n_baskets[rows] - 2]
    starts, ends = store.offsets[rows].astype(np.int64), store.offsets[rows + 1].astype(np.int64)
    train = SequenceView(store, rows, starts, val_open)
    val = SequenceView(store, rows, starts, val_open, targets=val_open, target_ends=last_open)
    test = SequenceView(store, rows, starts, last_open, targets=last_open, target_ends=ends)
    return train, val, test
