"""Training / evaluation samples as index ranges over a :class:`SequenceStore` (no copies)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from seqenc.data.sequences import SequenceStore
from seqenc.errors import SeqencError

log = logging.getLogger(__name__)


@dataclass
class SequenceView:
    """Samples over a store: sample j = events [starts[j], ends[j]) of entity rows[j].

    Attributes:
        store: the store the indices point into.
        rows: ``[n]`` int64 entity row of each sample.
        starts: ``[n]`` int64 absolute event index (into the store's arrays), inclusive.
        ends: ``[n]`` int64 absolute event index, exclusive.
        targets: ``[n]`` int64 absolute event index of the held-out target event, or ``None``
            (training on the whole window, or inference).
        target_ends: ``[n]`` int64 end (exclusive) of a held-out target basket that starts at
            ``targets`` (the basket protocol, :mod:`seqenc.data.baskets`), or ``None``: one event.
    """

    store: SequenceStore
    rows: np.ndarray
    starts: np.ndarray
    ends: np.ndarray
    targets: np.ndarray | None = None
    target_ends: np.ndarray | None = None

    @property
    def lengths(self) -> np.ndarray:
        """``[n]`` int64 input events per sample."""
        return self.ends - self.starts

    def __len__(self) -> int:
        return len(self.rows)


@dataclass(frozen=True)
class FitSplits:
    """A datamodule's (train, validation, test) views, read when first asked: a module is handed
    this when it is built (the CLI links it from the datamodule) and reads it when its fit
    starts, so each process of a sharded run reads its own entities (``sharded``), never through
    the trainer."""

    read: Callable[[], tuple[SequenceView, SequenceView, SequenceView]]
    sharded: bool = False

    @property
    def train(self) -> SequenceView:
        return self.read()[0]

    @property
    def test(self) -> SequenceView:
        return self.read()[2]


def ragged_positions(counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(group, position)`` of each of ``counts.sum()`` flat slots: the group ``i`` it belongs to
    (``counts[i]`` slots each, in order) and its index within that group, vectorized."""
    group = np.repeat(np.arange(len(counts)), counts)
    return group, np.arange(len(group)) - np.repeat(np.cumsum(counts) - counts, counts)


def flat_events(view: SequenceView, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(sample, event)``: for samples ``idx`` of ``view``, every input event's position in
    ``idx`` and its absolute index in the store, oldest first within each sample."""
    starts = view.starts[idx]
    counts = view.ends[idx] - starts
    sample, position = ragged_positions(counts)
    return sample, np.repeat(starts, counts) + position


def full_view(store: SequenceStore) -> SequenceView:
    """Every entity's whole history, no target (inference / embedding export)."""
    offsets = store.offsets.astype(np.int64)
    return SequenceView(store, np.arange(len(store), dtype=np.int64), offsets[:-1], offsets[1:])


def leave_one_out(
    store: SequenceStore, min_len: int = 3
) -> tuple[SequenceView, SequenceView, SequenceView]:
    """The standard next-item split (SASRec / BERT4Rec): ``(train, val, test)``.

    Per entity with events ``e_0 … e_{n-1}``:

    - train: input ``e_0 … e_{n-3}``, no separate target (each event is the next one's target);
    - val: the same input, target ``e_{n-2}``;
    - test: input ``e_0 … e_{n-2}``, target ``e_{n-1}``.

    Entities with fewer than ``min_len`` events (at least 3, so training keeps one event) are
    dropped; their number is logged at INFO level.
    """
    if not isinstance(min_len, (int, np.integer)) or min_len < 3:
        raise SeqencError(f"leave_one_out needs min_len >= 3 (train, val, test), got {min_len!r}")
    offsets = store.offsets.astype(np.int64)
    rows = np.flatnonzero(store.lengths >= min_len).astype(np.int64)
    if len(rows) < len(store):
        log.info(
            "leave_one_out: dropped %d of %d entities with fewer than %d events",
            len(store) - len(rows),
            len(store),
            min_len,
        )
    starts, ends = offsets[rows], offsets[rows + 1]
    train = SequenceView(store, rows, starts, ends - 2)
    val = SequenceView(store, rows, starts, ends - 2, targets=ends - 2)
    test = SequenceView(store, rows, starts, ends - 1, targets=ends - 1)
    return train, val, test


def training_windows(view: SequenceView, size: int) -> SequenceView:
    """Cut each sample into windows of ``size`` events so that a long history trains on all of it.

    Windows end at ``end``, ``end - (size - 1)``, ``end - 2 (size - 1)``, …: consecutive windows
    share one event, the input-only first event of the newer one and the last target of the older
    one, so every event but a history's first is a next-event target exactly once. Without this a
    model fed the newest ``size`` events never learns from the rest (a third of MovieLens-1M's
    events at ``size`` 201). A sample that fits is returned as one window, unchanged.
    """
    if size < 2:
        raise SeqencError(f"training windows need at least 2 events, got {size!r}")
    counts = np.maximum(-(-(view.lengths - 1) // (size - 1)), 1)  # ceil((n - 1) / (size - 1))
    sample, k = ragged_positions(counts)
    ends = view.ends[sample] - k * (size - 1)
    starts = np.maximum(view.starts[sample], ends - size)
    return SequenceView(view.store, view.rows[sample], starts, ends)


def entity_subset(view: SequenceView, rows: np.ndarray) -> SequenceView:
    """The samples of ``view`` whose entity row is in ``rows``, in their order."""
    keep = np.isin(view.rows, rows)
    targets, target_ends = (
        None if a is None else a[keep] for a in (view.targets, view.target_ends)
    )
    return SequenceView(
        view.store, view.rows[keep], view.starts[keep], view.ends[keep], targets, target_ends
    )
