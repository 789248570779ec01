"""Per-item numeric statistics and the per-item value encoding, against naive references."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from seqenc.data.lengths import MAX_AUTO_HISTORY, auto_history_len
from seqenc.data.numeric import (
    MIN_RELATIVE_SCALE,
    MIN_SCALE_SHARE,
    PRIOR_EVENTS,
    item_statistics,
)
from seqenc.model.batch import Batch
from seqenc.model.embeddings import Z_CLIP, TokenEmbedding


def naive_statistics(items, values, n_items):
    logs = np.sign(values) * np.log1p(np.abs(values))
    center = np.zeros((n_items, values.shape[1]))
    scale = np.ones((n_items, values.shape[1]))
    for j in range(values.shape[1]):
        mean, var = logs[:, j].mean(), logs[:, j].var()
        floor = max(MIN_SCALE_SHARE * np.sqrt(var), MIN_RELATIVE_SCALE)
        for i in range(n_items):
            own = logs[items == i, j]
            n = len(own)
            c = (own.sum() + PRIOR_EVENTS * mean) / (n + PRIOR_EVENTS)
            second = ((own**2).sum() + PRIOR_EVENTS * (var + mean**2)) / (n + PRIOR_EVENTS)
            center[i, j], scale[i, j] = c, max(np.sqrt(max(second - c**2, 0.0)), floor)
    return center, scale


def test_item_statistics_match_a_per_item_loop():
    rng = np.random.default_rng(0)
    items = rng.integers(3, 9, 500)
    values = np.stack([rng.normal(items * 10.0, 1.0 + items), rng.exponential(5.0, 500)], axis=1)
    values[items == 5, 1] = 7.0  # a constant item: its scale is the floor, not zero
    center, scale = item_statistics(items, values, 10)
    want_center, want_scale = naive_statistics(items, values, 10)
    np.testing.assert_allclose(center, want_center, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(scale, want_scale, rtol=1e-5, atol=1e-6)
    assert (scale > 0).all()


def test_an_item_without_events_reads_as_the_whole_log():
    items = np.array([3, 3, 4, 4])
    values = np.array([[1.0], [3.0], [100.0], [300.0]])
    center, scale = item_statistics(items, values, 6)
    logs = np.sign(values[:, 0]) * np.log1p(np.abs(values[:, 0]))
    assert center[5, 0] == pytest.approx(logs.mean(), rel=1e-6)
    assert scale[5, 0] == pytest.approx(logs.std(), rel=1e-5)
    # Shrinkage: item 3 is pulled towards the whole log's mean, not equal to its own.
    own = logs[:2].mean()
    assert own < center[3, 0] < logs.mean()


def test_auto_history_len_covers_most_entities_within_the_cap():
    assert auto_history_len(np.arange(1, 101))[0] == 96  # 95th percentile 95.05 -> 96
    assert auto_history_len(np.full(10, 3))[0] == 32
    assert auto_history_len(np.full(10, 5000))[0] == MAX_AUTO_HISTORY
    length, why = auto_history_len(np.array([10] * 96 + [1000] * 4))
    assert length == 32 and "96.0% of entities are read whole" in why


def test_per_item_value_encoding_standardises_by_the_item():
    torch.manual_seed(0)
    embed = TokenEmbedding(8, 16, 5, True, False, False, False, 4, (), 1, per_item_numeric=True)
    center = torch.zeros(8, 1)
    scale = torch.ones(8, 1)
    center[3], scale[3] = 4.0, 0.5
    embed.set_numeric_stats(center, scale)
    items = torch.tensor([[3, 4, 3]])
    values = torch.tensor([[[np.expm1(4.0)], [np.expm1(4.0)], [np.expm1(100.0)]]])
    z = embed.standardised(signed_log_t(values), items)
    assert z[0, 0, 0].item() == pytest.approx(0.0, abs=1e-5)  # item 3's centre
    assert z[0, 1, 0].item() == pytest.approx(4.0, abs=1e-5)  # item 4: centre 0, scale 1
    assert z[0, 2, 0].item() == Z_CLIP  # far out: clipped
    zeros = torch.zeros(1, 3)
    batch = Batch(
        items=items,
        lengths=torch.tensor([3]),
        dt_prev=zeros,
        dt_ref=zeros.double(),
        categorical=torch.zeros(1, 3, 0, dtype=torch.long),
        numeric=values.float(),
        index=torch.tensor([0]),
    )
    same = embed(batch)
    embed.set_numeric_stats(center, scale * 2)  # the item's statistics change what the value says
    assert not torch.allclose(same, embed(batch))


def signed_log_t(x: torch.Tensor) -> torch.Tensor:
    return torch.sign(x) * torch.log1p(x.abs())
