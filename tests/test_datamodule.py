"""The DataModule: leave-one-out loaders, bucketed padded batches, determinism, workers."""

import numpy as np
import pytest
import torch
from lightning.pytorch import seed_everything

from seqenc.data.datamodule import SequenceDataModule
from seqenc.data.schema import EventSchema
from seqenc.data.synthetic import generate_events
from seqenc.errors import SeqencError

SCHEMA = EventSchema(categorical=("event_type", "channel"), numeric=("amount",))


@pytest.fixture(scope="module")
def events():
    return generate_events(300, n_items=60, seed=3, max_events=400)


def _datamodule(events, **kw):
    return SequenceDataModule(events, schema=SCHEMA, history_len=50, batch_size=16, **kw)


def test_eval_batches_hold_history_and_target(events):
    dm = _datamodule(events)
    store = dm.store
    seen_entities = 0
    for batch in dm.test_dataloader():
        assert batch.items.shape[1] <= 50
        assert batch.categorical.shape[2] == 2 and batch.numeric.shape[2] == 1
        # padding only after the real events, and the mask says so
        assert torch.equal(batch.padding_mask, batch.items != 0)
        for b, row in enumerate(batch.index.tolist()):
            entity = dm.splits[2].rows[row]
            events_of = store.items[store.offsets[entity] : store.offsets[entity + 1]]
            n = int(batch.lengths[b])
            assert batch.target[b] == events_of[-1]  # test target = the newest event
            np.testing.assert_array_equal(batch.items[b, :n], events_of[-1 - n : -1])
            seen_entities += 1
    assert seen_entities == len(dm.splits[2])


def test_train_windows_are_bucketed_and_deterministic(events):
    first = [b.items for b in _datamodule(events, seed=1).train_dataloader()]
    again = [b.items for b in _datamodule(events, seed=1).train_dataloader()]
    other = [b.items for b in _datamodule(events, seed=2).train_dataloader()]
    assert all(torch.equal(x, y) for x, y in zip(first, again, strict=True))
    assert not all(
        x.shape == y.shape and torch.equal(x, y) for x, y in zip(first, other, strict=False)
    )
    widths = [x.shape[1] for x in first]
    assert max(widths) == 51  # window_len = history_len + 1: the causal objective's shifted target
    assert min(widths) < 51  # short histories are not padded to the window
    padded = sum(x.numel() for x in first)
    real = sum(int((x != 0).sum()) for x in first)
    assert real / padded > 0.8


def test_batch_order_follows_seed_everything(events, monkeypatch):
    """Without an explicit ``seed`` the order follows ``seed_everything``, so a seed sweep varies
    it; an explicit seed wins."""

    def order(**kw):
        return [b.index.tolist() for b in _datamodule(events, **kw).train_dataloader()]

    monkeypatch.delenv("PL_GLOBAL_SEED", raising=False)
    assert order() == order(seed=0)
    monkeypatch.setenv("PL_GLOBAL_SEED", "0")  # restored after the test
    seed_everything(2, verbose=False)
    assert order() == order(seed=2) != order(seed=0)
    assert order(seed=1) == order(seed=1) != order()


@pytest.mark.parametrize("windows", [True, False])
def test_train_targets_cover_long_histories(events, windows):
    """With windows every training event but an entity's first is a target once; without, only
    the newest ``window_len`` events of each history are seen."""
    dm = _datamodule(events, windows=windows)
    train = dm.splits[0]
    targets = sum(int((b.items[:, 1:] != 0).sum()) for b in dm.train_dataloader())
    lengths = train.lengths if windows else np.minimum(train.lengths, 51)
    assert targets == int((lengths - 1).sum())
    assert (train.lengths > 51).any()  # the fixture has histories longer than one window


def test_workers_give_the_same_batches(events):
    plain = [b.items for b in _datamodule(events).val_dataloader()]
    workers = [b.items for b in _datamodule(events, num_workers=2).val_dataloader()]
    assert all(torch.equal(x, y) for x, y in zip(plain, workers, strict=True))


def test_model_inputs_describe_the_data(events):
    dm = _datamodule(events)
    spec = dm.spec
    assert spec.n_items == events["item_id"].nunique() + 3
    assert list(spec.categorical_sizes) == [
        events[c].nunique() + 3 for c in ("event_type", "channel")
    ]
    assert spec.n_numeric == 1 and spec.has_time is True


def test_loader_formats_without_time(tmp_path):
    path = tmp_path / "seqs.txt"
    path.write_text("".join(f"{u} {i}\n" for u in range(1, 6) for i in range(1, 8)))
    dm = SequenceDataModule(str(path), format="sasrec", history_len=10)
    assert dm.spec.schema.timestamp is None
    assert dm.spec.has_time is False
    assert len(dm.splits[0]) == 5


def test_eval_entities_draws_the_same_entities_for_validation_and_test_in_every_run(events):
    full = _datamodule(events).splits
    a = _datamodule(events, eval_entities=7, seed=1).splits
    b = _datamodule(events, eval_entities=7, seed=2).splits
    assert len(a[2]) == 7 and set(a[1].rows) == set(a[2].rows) <= set(full[2].rows)
    assert a[2].rows.tolist() == b[2].rows.tolist()  # a fixed draw, not the run's seed
    assert len(a[0]) == len(full[0])  # training is untouched
    position = {row: i for i, row in enumerate(full[2].rows)}
    picked = [position[row] for row in a[2].rows]
    assert a[2].targets.tolist() == full[2].targets[picked].tolist()
    with pytest.raises(SeqencError, match="data.eval_entities must be an integer >= 1"):
        _datamodule(events, eval_entities=0)
