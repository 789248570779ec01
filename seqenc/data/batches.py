"""The batch format every model entry point consumes.

Histories are **right-padded**: position 0 is the oldest kept event, ``lengths[b] - 1`` the newest, and
positions from ``lengths[b]`` on hold PAD (item id 0). With right padding a causal model needs no mask
at all (``is_causal=True`` never lets a real event see a later slot), so the FlashAttention kernel
can run on mixed-length batches; bidirectional attention uses :attr:`Batch.padding_mask`.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import TYPE_CHECKING

import numpy as np
import torch

if TYPE_CHECKING:
    from seqenc.data.split import SequenceView


@dataclass
class Batch:
    """A padded batch of event histories.

    Attributes:
        items: ``[B, L]`` int64 item vocabulary ids, PAD (0) after ``lengths``.
        lengths: ``[B]`` int64 number of real events per row (0 for an empty history).
        dt_prev: ``[B, L]`` float32 seconds since the previous event (0 for the first and for PAD).
        dt_ref: ``[B, L]`` float32 seconds from the event to the reference time (recency).
        categorical: ``[B, L, C]`` int64 categorical feature ids (C may be 0).
        numeric: ``[B, L, N]`` float32 numeric features (N may be 0).
        index: ``[B]`` int64 row of each history in its source :class:`~seqenc.data.sequences.SequenceStore`.
        target: ``[B]`` int64 held-out next item (validation / test), or ``None``.
        seen: ``[2, S]`` int64 (batch row, item id) pairs of every item in each row's full history,
            for filtering already-seen items at evaluation, or ``None``.
    """

    items: torch.Tensor
    lengths: torch.Tensor
    dt_prev: torch.Tensor
    dt_ref: torch.Tensor
    categorical: torch.Tensor
    numeric: torch.Tensor
    index: torch.Tensor
    target: torch.Tensor | None = None
    seen: torch.Tensor | None = None

    @property
    def padding_mask(self) -> torch.Tensor:
        """``[B, L]`` bool, True on real events."""
        positions = torch.arange(self.items.shape[1], device=self.items.device)
        return positions[None, :] < self.lengths[:, None]

    def __len__(self) -> int:
        return self.items.shape[0]

    def to(self, device: torch.device | str, non_blocking: bool = False) -> Batch:
        """Move every tensor to ``device`` (Lightning calls this through ``transfer_batch_to_device``)."""
        moved = {
            f.name: None if v is None else v.to(device, non_blocking=non_blocking)
            for f in fields(self)
            for v in [getattr(self, f.name)]
        }
        return Batch(**moved)

    def pin_memory(self) -> Batch:
        """Pinned copy for fast host→GPU transfer (called by the DataLoader when ``pin_memory=True``)."""
        return replace(
            self,
            **{
                f.name: getattr(self, f.name).pin_memory()
                for f in fields(self)
                if getattr(self, f.name) is not None
            },
        )


def collate(
    view: SequenceView,
    idx: np.ndarray,
    max_len: int,
    with_seen: bool = False,
) -> Batch:
    """Gather samples ``idx`` of ``view`` into one right-padded :class:`Batch`, vectorized.

    Each sample keeps its last ``max_len`` events. Recency (``dt_ref``) is measured from the sample's
    reference time: the store's reference (last event or ``as_of``) when the sample ends at the
    entity's last event, otherwise the sample's own last event, so that a held-out target's time never
    leaks into its input. ``with_seen`` adds every item of the sample's full history (before any
    truncation) for filtering already-seen items at evaluation.
    """
    store = view.store
    idx = np.asarray(idx, dtype=np.int64)
    rows, full_starts, ends = view.rows[idx], view.starts[idx], view.ends[idx]
    starts = np.maximum(full_starts, ends - max_len)
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
    dt_ref = np.where(valid, reference[:, None] - store.timestamps[gather], 0.0).astype(np.float32)

    n_rows = len(idx)
    categorical = [take(store.categorical[name]) for name in store.categorical]
    numeric = [take(store.numeric[name]) for name in store.numeric]
    target = None if view.targets is None else torch.from_numpy(store.items[view.targets[idx]])
    seen = None
    if with_seen:
        counts = ends - full_starts
        batch_row = np.repeat(np.arange(n_rows), counts)
        event = np.arange(counts.sum()) - np.repeat(np.cumsum(counts) - counts, counts)
        seen_items = store.items[np.repeat(full_starts, counts) + event]
        seen = torch.from_numpy(np.stack([batch_row, seen_items]))
    return Batch(
        items=take(store.items),
        lengths=torch.from_numpy(lengths),
        dt_prev=take(store.dt_prev),
        dt_ref=torch.from_numpy(dt_ref),
        categorical=torch.stack(categorical, -1)
        if categorical
        else torch.zeros(n_rows, width, 0, dtype=torch.int64),
        numeric=torch.stack(numeric, -1)
        if numeric
        else torch.zeros(n_rows, width, 0, dtype=torch.float32),
        index=torch.from_numpy(idx),
        target=target,
        seen=seen,
    )
