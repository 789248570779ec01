"""Training split by entity over processes (``data.shard_entities``): each process reads its own
entities of a partitioned Parquet log, and all agree on the spec of the run of one process."""

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pyarrow as pa
import pytest
from tiny import SCHEMA, tiny_events

from seqenc.data.datamodule import SequenceDataModule
from seqenc.data.events import read_events
from seqenc.data.hashing import Shard
from seqenc.data.sampling import BucketBatchSampler
from seqenc.data.sequences import build_sequences, fit_catalogue, repeat_share
from seqenc.data.vocab import Vocabularies
from seqenc.errors import SeqencError

ROOT = Path(__file__).resolve().parents[1]
DATA = {"schema": SCHEMA, "history_len": 16, "batch_size": 16, "eval_batch_size": 64}


@pytest.fixture
def parts(tmp_path) -> Path:
    """A log of 80 entities written as three Parquet files, each holding events of every entity."""
    events = tiny_events(80)
    folder = tmp_path / "log"
    folder.mkdir()
    for i in range(3):
        events.iloc[i::3].to_parquet(folder / f"part-{i}.parquet")
    return folder


def test_shards_are_disjoint_and_cover_the_log(parts):
    whole = read_events(parts, SCHEMA)
    shards = [read_events(parts, SCHEMA, Shard(r, 3)) for r in range(3)]
    entities = [set(s[SCHEMA.entity].to_pylist()) for s in shards]
    assert sum(map(len, entities)) == len(set().union(*entities))
    assert set().union(*entities) == set(whole[SCHEMA.entity].to_pylist())
    assert sum(s.num_rows for s in shards) == whole.num_rows
    assert all(s.schema == whole.schema for s in shards)  # typed by the whole input
    with pytest.raises(SeqencError, match="rank must be in"):
        Shard(3, 3)


def test_catalogue_is_the_whole_logs(parts):
    """The id-column read gives the vocabularies and repeat share a full build finds."""
    data = SequenceDataModule(str(parts), max_items=20, **DATA)
    store, vocabs = build_sequences(parts, SCHEMA, bounds=data.bounds)
    catalogue, share = fit_catalogue(parts, SCHEMA, data.bounds)
    assert catalogue == vocabs and len(vocabs.item.values) == 20
    assert share == repeat_share(store)
    assert isinstance(catalogue, Vocabularies)


def test_datamodule_reads_its_shard_once_it_knows_its_rank(parts):
    data = SequenceDataModule(str(parts), shard_entities=True, **DATA)
    everyone = set(data.store.entity_ids.to_pylist())  # no trainer yet: every entity
    data.trainer = SimpleNamespace(global_rank=1, world_size=2)
    mine = set(data.store.entity_ids.to_pylist())
    keeps = Shard(1, 2).keeps(pa.array(sorted(everyone)))
    assert mine == {e for e, kept in zip(sorted(everyone), keeps, strict=True) if kept}
    assert data.spec == SequenceDataModule(str(parts), **DATA).spec


def test_epoch_batches_cycles_a_short_shard():
    sampler = BucketBatchSampler(np.full(100, 5), 10, shuffle=True, epoch_batches=13)
    batches = list(sampler)
    assert len(sampler) == len(batches) == 13
    assert sorted(np.concatenate(batches[:10]).tolist()) == list(range(100))  # all, then again
    assert [b.tolist() for b in batches[10:]] == [b.tolist() for b in batches[:3]]


def test_fit_on_two_processes(parts, tmp_path):
    """``seqenc fit`` with DDP on 2 CPU processes (gloo) against 1 on the same log: each process
    read its own entities (disjoint, covering the log), all agree on the spec of the run of one
    process, validation and test count every entity (the baselines too), training ran, the
    weights are the same on both (the item table's sparse gradients of sampled softmax are
    reduced too) and one bundle is written."""
    one = SequenceDataModule(str(parts), **DATA)
    args = [
        "--data.path", str(parts),
        "--data.shard_entities", "true",
        "--data.schema.categorical", "[event_type, channel]",
        "--data.schema.numeric", "[amount]",
        "--data.history_len", "16",
        "--data.batch_size", "16",
        "--model.loss", "sampled_softmax",
        "--model.loss_options", "{exact_share: 0}",  # no exact rows: the row-sparse gradients
        "--model.encoder.d_model", "16",
        "--model.encoder.n_layers", "1",
        "--trainer.max_epochs", "1",
        "--trainer.strategy", "ddp",
        "--trainer.devices", "2",
        "--trainer.accelerator", "cpu",
        "--trainer.enable_progress_bar", "false",
        "--trainer.enable_model_summary", "false",
        "--trainer.callbacks+=ddp_record.Record",
        "--trainer.callbacks.folder", "record",
    ]  # fmt: skip
    done = subprocess.run(
        [sys.executable, "-m", "seqenc.cli", "fit", *args],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env=os.environ | {"PYTHONPATH": f"{ROOT}:{ROOT / 'tests'}", "OMP_NUM_THREADS": "1"},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    ranks = [json.loads((tmp_path / "record" / f"rank{r}.json").read_text()) for r in range(2)]
    shards = [set(r["entities"]) for r in ranks]
    assert not shards[0] & shards[1]
    assert shards[0] | shards[1] == set(one.store.entity_ids.to_pylist())
    assert all(r["spec"] == one.spec.to_dict() for r in ranks)
    assert [r["val_targets"] for r in ranks] == [len(one.splits[1])] * 2
    assert all(np.isfinite(r["loss"]) for r in ranks)
    assert ranks[0]["weights"] == ranks[1]["weights"]
    out = done.stdout.splitlines()
    assert f"test split: {len(one.splits[2])} targets" in " ".join(out)
    assert sum(line.startswith("bundle: ") for line in out) == 1
    assert len(list(tmp_path.glob("runs/*/*/bundle/config.json"))) == 1
