"""Per-item statistics of numeric event features: what a value means for its item.

A heart rate of 80 and a lactate of 2 live on different scales; a value standardised by its item's
centre and scale says how unusual it is for that item. Both are taken on the signed log of the
values (the model's :func:`~seqenc.model.embeddings.signed_log`) and shrunk towards the whole log's
statistics by :data:`PRIOR_EVENTS` pseudo-events, so a rare item reads as an average one rather
than as its few values. A value not recorded (NaN) is left out. Numpy only; the model stores the
result with its weights.
"""

from __future__ import annotations

import numpy as np
import torch

from seqenc.data.sequences import SequenceStore
from seqenc.data.split import SequenceView, flat_events
from seqenc.errors import SeqencError
from seqenc.model.embeddings import signed_log

PRIOR_EVENTS = 20.0  # pseudo-events of the whole log's statistics added to every item's
MIN_SCALE_SHARE = 0.01  # an item's scale is at least this share of the whole log's (constant items)
# and at least this many signed-log units: d log1p|x| = dx / (1 + |x|), so a change of this share of
# a value's magnitude (1 + |x|) is at most one scale. A constant item (a constant column) then
# reads a value that differs in its fifth digit as ordinary, not as extreme.
MIN_RELATIVE_SCALE = 1e-3


def item_statistics(
    items: np.ndarray, values: np.ndarray, n_items: int
) -> tuple[np.ndarray, np.ndarray]:
    """``(center, scale)``, each ``[n_items, n_features]`` float32: the shrunk mean and standard
    deviation of each item's signed-log values. ``items``: ``[n]`` item ids; ``values``:
    ``[n, n_features]`` raw values of the same events, NaN where not recorded (left out). An item
    without a recorded value gets the whole log's; a column without one, centre 0 and scale 1."""
    values = torch.from_numpy(np.asarray(values, dtype=np.float64))
    logs = signed_log(values).numpy().reshape(len(items), -1)  # the model's own transform
    n_features = logs.shape[1]
    center = np.zeros((n_items, n_features), dtype=np.float32)
    scale = np.ones((n_items, n_features), dtype=np.float32)
    for j in range(n_features):
        recorded = ~np.isnan(logs[:, j])
        if recorded.any():
            center[:, j], scale[:, j] = _shrunk(items[recorded], logs[recorded, j], n_items)
    return center, scale


def _shrunk(items: np.ndarray, logs: np.ndarray, n_items: int) -> tuple[np.ndarray, np.ndarray]:
    """Each item's mean and standard deviation of ``logs`` (one column, every value recorded),
    shrunk towards the whole column's by :data:`PRIOR_EVENTS` pseudo-events."""
    count = np.bincount(items, minlength=n_items)[:n_items].astype(np.float64)
    mean, var = logs.mean(), logs.var()
    total = np.bincount(items, logs, minlength=n_items)[:n_items]
    squares = np.bincount(items, logs**2, minlength=n_items)[:n_items]
    c = (total + PRIOR_EVENTS * mean) / (count + PRIOR_EVENTS)
    second = (squares + PRIOR_EVENTS * (var + mean**2)) / (count + PRIOR_EVENTS)
    floor = max(MIN_SCALE_SHARE * np.sqrt(var), MIN_RELATIVE_SCALE)
    return c, np.sqrt(np.maximum(second - c**2, floor**2))


def unrecorded_shares(store: SequenceStore) -> dict[str, float]:
    """Each numeric column's share of the store's events whose value was not recorded (NaN)."""
    return {c: float(np.isnan(v).mean()) if len(v) else 0.0 for c, v in store.numeric.items()}


def require_recorded(store: SequenceStore) -> None:
    """Refuse a numeric column with no recorded value (all null or NaN) in the log a model is
    fitted on: its statistics and its embedding would be learnt from nothing."""
    for name, values in store.numeric.items():
        if len(values) and np.isnan(values).all():
            raise SeqencError(
                f"numeric column {name!r}: no value recorded (all null/NaN) in the "
                "log a model is fitted on; drop it from data.schema.numeric"
            )


def view_statistics(
    store: SequenceStore, view: SequenceView, n_items: int
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`item_statistics` of the input events of ``view`` (a training split: no label and
    no held-out event is read)."""
    _, event = flat_events(view, np.arange(len(view)))
    values = np.stack([v[event] for v in store.numeric.values()], axis=-1)
    return item_statistics(store.items[event], values, n_items)
