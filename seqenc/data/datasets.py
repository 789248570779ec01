"""The torch Datasets the DataModule's loaders index: each takes a whole index array (the
batch sampler's) and collates it into one padded :class:`~seqenc.model.batch.Batch`."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import torch
from torch.utils.data import Dataset

from seqenc.data.batches import Batch, collate
from seqenc.data.labels import LabelledView
from seqenc.data.split import SequenceView


class ViewDataset(Dataset):
    """Indexed by a whole index array: ``dataset[idx]`` is one collated :class:`Batch`."""

    def __init__(self, view: SequenceView, max_events: int, with_seen: bool) -> None:
        self.view, self.max_events, self.with_seen = view, max_events, with_seen

    def __len__(self) -> int:
        return len(self.view)

    def __getitem__(self, idx: np.ndarray) -> Batch:
        return collate(self.view, idx, self.max_events, with_seen=self.with_seen)


class LabelledDataset(Dataset):
    """Labelled samples indexed by a whole index array: ``dataset[idx]`` is ``(Batch, targets)``,
    each history read out at its label's cut-off (the query time ``seqenc embed --as-of`` gives)."""

    def __init__(self, samples: LabelledView, history_len: int) -> None:
        self.samples, self.history_len = samples, history_len

    def __len__(self) -> int:
        return len(self.samples.view)

    def __getitem__(self, idx: np.ndarray) -> tuple[Batch, torch.Tensor]:
        view, query = self.samples.view, self.samples.query[idx]
        batch = collate(view, idx, self.history_len)
        newest = view.store.timestamps[np.maximum(view.ends[idx] - 1, 0)]
        gap = np.where(np.isnan(query), batch.dt_query.numpy(), query - newest)
        wide = self.samples.aggregates
        batch = replace(
            batch,
            dt_query=torch.from_numpy(gap.astype(np.float32)),
            aggregates=None if wide is None else torch.from_numpy(wide[idx]),
        )
        return batch, torch.from_numpy(self.samples.targets[idx])
