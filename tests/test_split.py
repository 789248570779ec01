"""full_view, leave_one_out and training_windows on a hand-made store."""

from __future__ import annotations

import logging

import numpy as np
import pyarrow as pa
import pytest

from seqenc.data.sequences import SequenceStore
from seqenc.data.split import full_view, leave_one_out, training_windows
from seqenc.errors import SeqencError


def store_of(lengths: list[int]) -> SequenceStore:
    n = sum(lengths)
    return SequenceStore(
        entity_ids=pa.array(np.arange(len(lengths)) * 10),
        offsets=np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64),
        items=np.arange(100, 100 + n, dtype=np.int64),
        timestamps=np.zeros(n),
        dt_prev=np.zeros(n, np.float32),
        dt_ref=np.zeros(n, np.float32),
    )


def test_full_view():
    view = full_view(store_of([2, 0, 3]))
    assert view.rows.tolist() == [0, 1, 2]
    assert view.starts.tolist() == [0, 2, 2] and view.ends.tolist() == [2, 2, 5]
    assert view.lengths.tolist() == [2, 0, 3] and len(view) == 3 and view.targets is None


def test_leave_one_out(caplog):
    store = store_of([5, 2, 3, 4])  # events 0-4, 5-6, 7-9, 10-13; entity 1 is too short
    with caplog.at_level(logging.INFO, logger="seqenc.data.split"):
        train, val, test = leave_one_out(store)
    assert "dropped 1 of 4 entities" in caplog.text
    for view in (train, val, test):
        assert view.rows.tolist() == [0, 2, 3] and view.store is store
        assert view.starts.tolist() == [0, 7, 10]
    assert train.ends.tolist() == [3, 8, 12] and train.targets is None
    assert val.ends.tolist() == [3, 8, 12] and val.targets.tolist() == [3, 8, 12]
    assert test.ends.tolist() == [4, 9, 13] and test.targets.tolist() == [4, 9, 13]
    # Entity 0 (items 100..104): train sees 100-102, val predicts 103, test sees 100-103 -> 104.
    assert store.items[train.starts[0] : train.ends[0]].tolist() == [100, 101, 102]
    assert store.items[val.targets[0]] == 103 and store.items[test.targets[0]] == 104
    assert store.items[test.starts[0] : test.ends[0]].tolist() == [100, 101, 102, 103]
    assert train.lengths.tolist() == [3, 1, 2]


def test_leave_one_out_min_len():
    train, _, _ = leave_one_out(store_of([5, 2, 3, 4]), min_len=5)
    assert train.rows.tolist() == [0]
    with pytest.raises(SeqencError, match="min_len >= 3"):
        leave_one_out(store_of([5]), min_len=2)


def test_training_windows_hand_made():
    store = store_of([10, 4, 1])  # events 0-9, 10-13, 14
    view = full_view(store)
    windows = training_windows(view, 4)  # targets 7-9 | 4-6 | 1-3; 11-13; none
    assert windows.rows.tolist() == [0, 0, 0, 1, 2]
    assert windows.ends.tolist() == [10, 7, 4, 14, 15]
    assert windows.starts.tolist() == [6, 3, 0, 10, 14]
    assert windows.targets is None
    with pytest.raises(SeqencError, match="at least 2"):
        training_windows(view, 1)


@pytest.mark.parametrize("size", [2, 3, 5, 8, 50])
def test_training_windows_target_every_event_once(size):
    """Property: each event but a history's first is a next-event target in exactly one window,
    every window holds at most ``size`` events, and a history that fits is left as one window."""
    rng = np.random.default_rng(size)
    lengths = rng.integers(1, 40, size=30).tolist()
    store = store_of(lengths)
    view = full_view(store)
    windows = training_windows(view, size)
    assert (windows.lengths <= size).all() and (windows.lengths >= 1).all()
    targets = np.concatenate(
        [np.arange(s + 1, e) for s, e in zip(windows.starts, windows.ends, strict=True)]
    )
    firsts = store.offsets[:-1][np.asarray(lengths) > 0]
    expected = np.setdiff1d(np.arange(sum(lengths)), firsts)
    assert np.array_equal(np.sort(targets), expected)
    fits = view.lengths <= size
    assert np.array_equal(np.bincount(windows.rows, minlength=len(view))[fits], np.ones(fits.sum()))
    # The newest window of each history is the truncated history itself.
    newest = windows.ends == store.offsets[windows.rows + 1]
    assert np.array_equal(windows.rows[newest], np.arange(len(view)))
    assert np.array_equal(windows.starts[newest], np.maximum(view.starts, view.ends - size))
