"""How many processes a run's data can feed: checked before the trainer starts, since a process
without a batch waits on the others for ever, or fails with a collective's traceback."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import pyarrow.compute as pc

from seqenc.data.events import read_events
from seqenc.data.hashing import entity_shard
from seqenc.data.schema import EventSchema
from seqenc.data.sequences import MIN_EVENTS
from seqenc.errors import SeqencError

LOADERS = {"fit": ("train", "val"), "validate": ("val",), "test": ("test",)}


def check_processes(datamodule: Any, world_size: int, stage: str) -> None:
    """Build the loaders the run's ``stage`` (``fit``, ``validate``, ``test``) reads from
    ``datamodule`` (a :class:`~seqenc.data.datamodule.SequenceDataModule`), so bad data fails
    before the trainer starts, and refuse more processes than batches to share; with
    ``shard_entities``, a process whose entities cannot train (:func:`check_shards`)."""
    if world_size > 1 and datamodule.shard_entities:
        events, schema = datamodule.events
        check_shards(events, schema, datamodule.min_len, world_size)
        return
    trainer, datamodule.trainer = datamodule.trainer, None  # one process's batches: all of them
    try:
        counts = {n: len(getattr(datamodule, f"{n}_dataloader")()) for n in LOADERS[stage]}
    finally:
        datamodule.trainer = trainer
    for name, n in counts.items():
        if n < world_size:
            option = "batch_size" if name == "train" else "eval_batch_size"
            raise SeqencError(
                f"{world_size} processes (trainer.devices x num_nodes) share {n} {name} batch(es) "
                f"of data.{option} {getattr(datamodule, option)}: each needs one; use at most "
                f"{max(n, 1)} device(s), or a smaller data.{option}"
            )


def check_shards(events: Any, schema: EventSchema, min_len: int, world_size: int) -> None:
    """``shard_entities``: refuse a process whose share of the entities (by
    :func:`~seqenc.data.hashing.entity_shard`) holds none with enough events to train on; read
    from the log's entity and item columns, so every process decides alike."""
    columns = replace(schema, timestamp=None, categorical=(), numeric=(), tie_breakers=())
    ids = read_events(events, columns)[schema.entity].combine_chunks()
    counts = pc.value_counts(ids).flatten()
    enough = counts[1].to_numpy() >= max(min_len, MIN_EVENTS)
    shards = np.bincount(entity_shard(counts[0], world_size)[enough], minlength=world_size)
    if shards.min() == 0:
        raise SeqencError(
            f"data.shard_entities: process {int(shards.argmin())} of {world_size} would hold no "
            f"entity with enough events ({int(enough.sum())} such entities in the log); use "
            "fewer devices, or turn shard_entities off"
        )
