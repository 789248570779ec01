"""Samples of a :class:`~seqenc.data.split.SequenceView` → one right-padded :class:`Batch`."""

from __future__ import annotations

import numpy as np
import torch

from seqenc.data.split import SequenceView, flat_events, ragged_positions
from seqenc.model.batch import Batch


def collate(
    view: SequenceView,
    idx: np.ndarray,
    max_events: int,
    with_seen: bool = False,
) -> Batch:
    """Gather samples ``idx`` of ``view`` into one right-padded :class:`Batch`, vectorized.

    Each sample keeps its last ``max_events`` events (``history_len`` to encode, the training
    window's ``history_len + 1`` to train). Recency (``dt_ref``) is measured from the sample's
    reference time: the store's reference (last event or ``as_of``) when the sample ends at the
    entity's last event, otherwise the sample's own last event, so that a held-out target's time never
    leaks into its input. The query gap (``dt_query``) runs from the newest input event to the
    held-out target's time when the view has targets (the time the prediction is for), else to the
    reference time. ``with_seen`` adds every item of the sample's full history (before any
    truncation) for filtering already-seen items at evaluation. A view with ``target_ends`` (the
    basket protocol) adds each sample's target basket as ``target_sets``.
    """
    store = view.store
    idx = np.asarray(idx, dtype=np.int64)
    rows, full_starts, ends = view.rows[idx], view.starts[idx], view.ends[idx]
    starts = np.maximum(full_starts, ends - max_events)
    lengths = ends - starts
    width = max(int(lengths.max(initial=0)), 1)
    positions = np.arange(width)
    valid = positions[None, :] < lengths[:, None]
    gather = np.where(valid, starts[:, None] + positions[None, :], 0)

    def take(values: np.ndarray, fill: float | int = 0) -> torch.Tensor:
        return torch.from_numpy(np.where(valid, values[gather], fill))

    last = np.maximum(ends - 1, 0)
    at_entity_end = ends == store.offsets[rows + 1]
    reference = store.timestamps[last] + np.where(at_entity_end, store.dt_ref[last], 0.0)
    # float64: the time values take differences of these, exact only before rounding to float32
    dt_ref = np.where(valid, reference[:, None] - store.timestamps[gather], 0.0)
    # The query time: a held-out target's own time, else the reference time.
    query = reference if view.targets is None else store.timestamps[view.targets[idx]]
    dt_query = np.where(lengths > 0, query - store.timestamps[last], 0.0).astype(np.float32)

    target = None if view.targets is None else torch.from_numpy(store.items[view.targets[idx]])
    seen = None
    if with_seen:
        batch_row, event = flat_events(view, idx)
        seen = torch.from_numpy(np.stack([batch_row, store.items[event]]))
    return Batch(
        items=take(store.items),
        lengths=torch.from_numpy(lengths),
        dt_prev=take(store.dt_prev),
        dt_ref=torch.from_numpy(dt_ref),
        categorical=_features(
            [take(c) for c in store.categorical.values()], valid.shape, torch.int64
        ),
        numeric=_features([take(c) for c in store.numeric.values()], valid.shape, torch.float32),
        index=torch.from_numpy(idx),
        target=target,
        seen=seen,
        dt_query=torch.from_numpy(dt_query),
        target_sets=target_sets(view, idx),
    )


def target_sets(view: SequenceView, idx: np.ndarray) -> torch.Tensor | None:
    """``[2, T]`` (batch row, item id) of every event of each sample's target basket, or ``None``
    without target baskets."""
    if view.target_ends is None or view.targets is None:
        return None
    starts = view.targets[idx]
    row, position = ragged_positions(view.target_ends[idx] - starts)
    return torch.from_numpy(np.stack([row, view.store.items[starts[row] + position]]))


def _features(
    columns: list[torch.Tensor], shape: tuple[int, int], dtype: torch.dtype
) -> torch.Tensor:
    """``[B, L, n_columns]``: the gathered feature columns side by side (``n_columns`` may be 0)."""
    if columns:
        return torch.stack(columns, -1)
    return torch.zeros(*shape, 0, dtype=dtype)
