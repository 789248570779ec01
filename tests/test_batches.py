"""Collation against a naive per-row reference, on a hand-made store."""

import numpy as np
import pyarrow as pa
import torch

from seqenc.data.batches import collate
from seqenc.data.sequences import SequenceStore
from seqenc.data.split import SequenceView


def _store(lengths, seed=0, as_of_gap=0.0):
    rng = np.random.default_rng(seed)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    n = int(offsets[-1])
    ts = np.concatenate([np.sort(rng.uniform(0, 1e6, k)) for k in lengths])
    first = np.isin(np.arange(n), offsets[:-1])
    dt_prev = np.where(first, 0.0, ts - np.roll(ts, 1)).astype(np.float32)
    last_ts = np.repeat(ts[offsets[1:] - 1], lengths)
    return SequenceStore(
        entity_ids=pa.array(np.arange(len(lengths))),
        offsets=offsets,
        items=rng.integers(3, 50, n),
        timestamps=ts,
        dt_prev=dt_prev,
        dt_ref=(last_ts + as_of_gap - ts).astype(np.float32),
        categorical={"kind": rng.integers(3, 6, n)},
        numeric={"amount": rng.normal(size=n).astype(np.float32)},
    )


def _naive_row(store, start, end, max_len, reference):
    start = max(start, end - max_len)
    return (
        store.items[start:end],
        store.dt_prev[start:end],
        (reference - store.timestamps[start:end]).astype(np.float32),
        store.categorical["kind"][start:end],
        store.numeric["amount"][start:end],
    )


def test_collate_matches_naive_rows():
    lengths = np.array([5, 1, 12, 3, 8])
    store = _store(lengths, as_of_gap=100.0)
    off = store.offsets
    # samples: whole histories (reference = as_of) and prefixes ending before the last event
    # (reference = the prefix's own last event: a target's time never leaks into its input)
    rows = np.array([0, 1, 2, 2, 4])
    ends = np.array([off[1], off[2], off[3], off[3] - 2, off[5] - 1])
    view = SequenceView(store, rows, off[rows], ends, targets=None)
    batch = collate(view, np.array([4, 0, 2, 3, 1]), max_events=6, with_seen=True)
    assert batch.items.shape == (5, 6)
    for b, j in enumerate([4, 0, 2, 3, 1]):
        at_end = ends[j] == off[rows[j] + 1]
        reference = store.timestamps[ends[j] - 1] + (100.0 if at_end else 0.0)
        expected = _naive_row(store, off[rows[j]], ends[j], 6, reference)
        n = len(expected[0])
        assert batch.lengths[b] == n
        got = (
            batch.items,
            batch.dt_prev,
            batch.dt_ref,
            batch.categorical[..., 0],
            batch.numeric[..., 0],
        )
        for tensor, want in zip(got, expected, strict=True):
            np.testing.assert_allclose(tensor[b, :n].numpy(), want, rtol=1e-6)
            assert (tensor[b, n:] == 0).all()
        seen = batch.seen[1][batch.seen[0] == b].numpy()
        np.testing.assert_array_equal(seen, store.items[off[rows[j]] : ends[j]])
    assert batch.padding_mask.sum().item() == batch.lengths.sum().item()


def test_targets_and_empty_rows():
    store = _store(np.array([4, 2]))
    view = SequenceView(
        store, np.array([0, 1]), np.array([0, 4]), np.array([3, 4]), targets=np.array([3, 5])
    )
    batch = collate(view, np.array([0, 1]), max_events=10)
    assert batch.target.tolist() == [store.items[3], store.items[5]]
    assert batch.lengths.tolist() == [3, 0]
    assert not torch.isnan(batch.dt_ref).any()
