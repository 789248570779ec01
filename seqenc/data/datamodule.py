"""The LightningDataModule: an event log → leave-one-out train / val / test loaders and its DataSpec."""

from __future__ import annotations

import os
from dataclasses import replace
from functools import cached_property
from typing import Any, Literal

import lightning.pytorch as pl
import numpy as np
import torch
from lightning.pytorch.utilities import rank_zero_info
from torch.utils.data import DataLoader, Dataset

from seqenc.data.baskets import leave_one_basket_out, resolve_baskets
from seqenc.data.bounds import PerColumn, VocabBounds, check_batching
from seqenc.data.datasets import LabelledDataset, ViewDataset
from seqenc.data.events import Events, read_events
from seqenc.data.hashing import Shard
from seqenc.data.label_aggregates import label_aggregates
from seqenc.data.labels import (
    LabelledRows,
    LabelledView,
    Labels,
    LabelTask,
    hold_out,
    labelled_view,
    read_labels,
)
from seqenc.data.lengths import auto_history_len, check_history_len
from seqenc.data.loaders import load_dataset
from seqenc.data.numeric import require_recorded
from seqenc.data.sampling import BucketBatchSampler
from seqenc.data.schema import EventSchema
from seqenc.data.sequences import (
    SequenceStore,
    build_sequences,
    fit_catalogue,
    repeat_share,
    require_known_items,
    require_trainable,
)
from seqenc.data.spec import DataSpec
from seqenc.data.split import (
    FitSplits,
    SequenceView,
    entity_subset,
    leave_one_out,
    training_windows,
)
from seqenc.data.vocab import Vocabularies, read_vocabs
from seqenc.errors import SeqencError


class SequenceDataModule(pl.LightningDataModule):
    """Event log → per-entity sequences → leave-one-out splits → length-bucketed padded batches.

    Three lengths, each named once: ``history_len`` (events fed to the model, a setting),
    :attr:`window_len` (events of a training sample, ``history_len + 1``) and the encoder's
    ``n_positions`` (position capacity, ``history_len + 1``, set by the model from the spec).

    Args:
        path: the event log: a Parquet/CSV file, a list or glob of them, or a directory; in Python
            also a pandas DataFrame or pyarrow Table.
        format: ``"events"`` (a generic log read with ``schema``) or a loader format of
            :func:`seqenc.data.loaders.load_dataset` (``"movielens"``, ``"movielens-latest"``,
            ``"sasrec"``, ``"ml1m-sequences"``, ``"auto"``).
        schema: column names for ``format="events"`` (another format names its own columns, so a
            schema given with it is refused).
        history_len: events per history fed to the model (the newest ones). A training sample
            holds :attr:`window_len` events: a history and the event that follows it, which the
            objective turns into inputs and labels (:mod:`seqenc.model.objectives`). ``"auto"``:
            from the log's lengths (:func:`~seqenc.data.lengths.auto_history_len`: whole
            histories up to 512 events; printed), for entity tasks (labels, account embeddings).
        min_len: entities with fewer events are left out of the splits.
        min_item_count: items seen fewer times are left out of the vocabulary (into buckets).
        max_items: keep at most this many items, the most frequent (ties by value); the item table
            is most of a model, so a log of millions of items sets this (``None``: no maximum).
        min_category_count, max_categories: the same for the categorical columns: one number for
            all, or a mapping column → number (a column it does not name is unbounded).
        oov_buckets: the values a bound leaves out, and values first seen at encode time, share
            this many hashed buckets per bounded vocabulary (an unbounded one has none): ids after the kept values, with their own
            embeddings, predicted and evaluated as items are. ``None``: one per value left out, at
            most 1,024 and at most one per value kept (none without a bound); 0: they encode as
            UNK, as before bounds existed.
        windows: train on every :attr:`window_len`-event window of a long history
            (:func:`~seqenc.data.split.training_windows`), so each event is a target once; ``False``
            trains on the newest window only, as the original SASRec does. Only histories longer
            than a window change.
        batch_size, eval_batch_size: samples per training / evaluation batch.
        bucket_factor: batches per length-sorted mega-batch (see
            :class:`~seqenc.data.sampling.BucketBatchSampler`).
        num_workers: DataLoader worker processes.
        eval_entities: validate and test on this many entities (a fixed random draw, the same in
            every run on the log) instead of all; ``None`` (the default): every entity.
        baskets: the basket protocol (:mod:`seqenc.data.baskets`): an entity's events that share a
            time are a set, the test target the newest basket, the validation target the one
            before, and the model trains without the order inside a basket. ``None`` (the
            default) decides from the data (tied test targets, printed at fit time).
        labels: a label table (Parquet / CSV; a DataFrame) to fine-tune on (:mod:`seqenc.finetune`),
            each sample an entity's history up to its row's ``as_of_column`` (all of it without
            one). ``None``: the self-supervised fit (leave-one-out next-event splits).
        label_column, as_of_column, label_task: the label, the per-row cut-off (``None``: the
            column ``as_of`` if there; a named one must exist), and ``classification`` /
            ``regression`` (``auto``: see :func:`~seqenc.data.labels.infer_task`).
        val_share: with labels, the share of entities held out to pick the checkpoint (a fixed
            draw; the test after ``fit`` scores them).
        vocabs_from: a bundle directory whose vocabularies encode the events (so its weights fit:
            ``model.init_from`` sets it), instead of vocabularies fitted on them.
        seed: the batch order depends only on this and the epoch. ``None`` (the default) takes
            the seed of ``seed_everything`` (``PL_GLOBAL_SEED``, the same on every DDP rank), so
            a seed sweep varies the batch order as well as the initialisation; 0 without one.
        shard_entities: in a run of several processes (DDP), each reads the events of its own
            entities only, those whose stable hash modulo the number of processes is its rank
            (:class:`~seqenc.data.hashing.Shard`), so it holds its share of the log; it trains,
            validates and tests on them, and the metrics are summed over the processes. The
            vocabularies and the repeat share stay those of the whole log: every process first
            reads the log's id columns (:func:`~seqenc.data.sequences.fit_catalogue`). With
            ``eval_entities`` each process draws its share of them from its own. ``False`` (the
            default): every process reads the whole log and takes its share of the batches.
    """

    def __init__(
        self,
        path: str | list[str],
        format: str = "events",
        schema: EventSchema | None = None,
        history_len: int | Literal["auto"] = 200,
        min_len: int = 3,
        min_item_count: int = 1,
        max_items: int | None = None,
        min_category_count: PerColumn = 1,
        max_categories: PerColumn | None = None,
        oov_buckets: int | None = None,
        windows: bool = True,
        batch_size: int = 128,
        eval_batch_size: int = 256,
        bucket_factor: int = 50,
        num_workers: int = 0,
        eval_entities: int | None = None,
        baskets: bool | None = None,
        seed: int | None = None,
        labels: str | None = None,
        label_column: str | None = None,
        as_of_column: str | None = None,
        label_task: LabelTask = "auto",
        val_share: float = 0.1,
        vocabs_from: str | None = None,
        shard_entities: bool = False,
    ) -> None:
        super().__init__()
        if schema is not None and format != "events":
            raise SeqencError(
                f"data.schema applies to format 'events' only; format {format!r} names its own "
                "columns (drop the schema, or set format: events)"
            )
        self.path, self.format, self.schema = path, format, schema or EventSchema()
        check_history_len(history_len, shard_entities)
        self._history_len, self.min_len = history_len, min_len
        self.bounds = VocabBounds(
            min_item_count, max_items, min_category_count, max_categories, oov_buckets
        )
        self.windows, self.baskets, self.shard_entities = windows, baskets, shard_entities
        self.batch_size, self.eval_batch_size = batch_size, eval_batch_size
        self.bucket_factor, self.num_workers, self.seed = bucket_factor, num_workers, seed
        check_batching(batch_size, eval_batch_size, bucket_factor, num_workers, eval_entities, seed)
        self.eval_entities = eval_entities
        if labels is not None and (label_column is None or not 0 < val_share < 1):
            raise SeqencError(
                f"data.labels needs data.label_column and data.val_share in (0, 1), got "
                f"{label_column!r} and {val_share}"
            )
        self.labels, self.label_column, self.as_of_column = labels, label_column, as_of_column
        self.label_task, self.val_share = label_task, val_share
        self.vocabs_from = vocabs_from
        self._restored_vocabs = None if vocabs_from is None else read_vocabs(vocabs_from)
        self._vocabs_source = None  # whose vocabularies encode the log, when not its own
        if vocabs_from is not None:
            self._vocabs_source = f"data.vocabs_from {vocabs_from!r} (model.init_from sets it)"
        self._built_shard: Shard | None = None  # the shard the cached store was read for

    @cached_property
    def events(self) -> tuple[Any, EventSchema]:
        """``(log, schema)``: the event log this module reads (as given, or as loaded for a named
        format) and its schema."""
        if self.format == "events":
            return self.path, self.schema
        events = load_dataset(self.path, self.format)
        return events, EventSchema(timestamp="timestamp" if "timestamp" in events.columns else None)

    @property
    def shard(self) -> Shard | None:
        """The entities this process reads with ``shard_entities`` (by its rank), else ``None``."""
        if not self.shard_entities:
            return None
        trainer = self.trainer
        return Shard(trainer.global_rank, trainer.world_size) if trainer else Shard(0, 1)

    @cached_property
    def _catalogue(self) -> tuple[Vocabularies, float]:
        """The whole log's vocabularies and repeat share, from its id columns (``shard_entities``)."""
        events, schema = self.events
        return fit_catalogue(events, schema, self.bounds, self._restored_vocabs)

    @cached_property
    def _built(self) -> tuple[SequenceStore, Vocabularies]:
        events, schema = self.events
        vocabs, shard = self._restored_vocabs, self.shard
        events = Events(read_events(events, schema, shard, exact=True), schema)  # ticks: order, cut
        vocabs = vocabs if shard is None else self.vocabs
        built = build_sequences(events, schema, keep_newest=None, vocabs=vocabs, bounds=self.bounds)
        require_known_items(built[0], self._vocabs_source)
        self._built_shard = shard
        if shard is not None:
            rank_zero_info(
                f"data.shard_entities: each of {shard.world_size} processes reads its entities "
                f"(process 0: {len(built[0]):,} entities, {built[0].n_events:,} events)"
            )
        return built

    @property
    def store(self) -> SequenceStore:
        """This process's histories: every entity's, or with ``shard_entities`` its shard's (read
        again if the process's rank changed since, e.g. read before the trainer was attached)."""
        if "_built" in self.__dict__ and self._built_shard != self.shard:
            self._forget(("_built", "splits"))
        return self._built[0]

    def _forget(self, names: tuple[str, ...]) -> None:
        """Drop these cached properties: the next access computes them again."""
        for name in names:
            self.__dict__.pop(name, None)

    @property
    def vocabs(self) -> Vocabularies:
        return self._catalogue[0] if self.shard_entities else self._built[1]

    @cached_property
    def basket_protocol(self) -> bool:
        """Whether the basket protocol applies (``baskets``, or the data's choice; printed)."""
        on, why = resolve_baskets(self.baskets, self.store, self.min_len)
        rank_zero_info(why)
        return on

    @cached_property
    def splits(self) -> tuple[SequenceView, SequenceView, SequenceView]:
        """(train, val, test) leave-one-out views: of events, or of baskets (basket protocol)."""
        require_recorded(self.store)
        require_trainable(self.store, self.min_len)
        split = leave_one_basket_out if self.basket_protocol else leave_one_out
        train, val, test = split(self.store, min_len=self.min_len)
        wanted = self.eval_entities
        if wanted is not None and self.shard is not None:  # this process's share
            wanted = -(-wanted // self.shard.world_size)
        if wanted is None or wanted >= len(test):
            return train, val, test
        rows = np.random.default_rng(0).choice(test.rows, wanted, replace=False)
        rank_zero_info(f"evaluating {len(rows):,} of {len(test):,} entities (data.eval_entities)")
        return train, entity_subset(val, rows), entity_subset(test, rows)

    @cached_property
    def spec(self) -> DataSpec:
        """What the model must agree on with this data (the CLI links it into the model)."""
        labels = None
        if self.labels is not None:
            labels = self.label_table.spec | {"aggregates": self._labelled[2]}
        share = self._catalogue[1] if self.shard_entities else repeat_share(self.store)
        return DataSpec(
            self.events[1],
            self.vocabs,
            self.history_len,
            share,
            baskets=self.basket_protocol,
            labels=labels,
        )

    @cached_property
    def label_table(self) -> Labels:
        """The checked label table (``data.labels``)."""
        entity, labels = self.events[1].entity, self.labels
        table = read_labels(labels, entity, self.label_column, self.as_of_column, self.label_task)
        rank_zero_info(f"label task: {table.task}")
        return table

    @cached_property
    def _labelled(self) -> tuple[LabelledView, LabelledView, dict[str, Any]]:
        """(train, validation) labelled samples by entity (a fixed ``val_share`` draw), each with
        its aggregates, and their layout fitted on the training rows (:func:`label_aggregates`)."""
        table, (events, schema) = self.label_table, self.events
        train, val, why = hold_out(labelled_view(self.store, table), self.val_share, table.spec)
        rank_zero_info(why)
        layout, values = label_aggregates(events, schema, table, train.rows)
        return *(replace(s, aggregates=values[s.rows]) for s in (train, val)), layout

    @property
    def labelled(self) -> LabelledRows | None:
        """The labelled samples with their aggregates, handed to a fine-tuning module (the CLI
        links it); ``None`` without labels."""
        if self.labels is None:
            return None
        return LabelledRows(*self._labelled[:2], as_of=self.label_table.as_of is not None)

    @property
    def fit_splits(self) -> FitSplits:
        """What a next-event module is handed (the CLI links it): :attr:`splits`, when read."""
        return FitSplits(lambda: self.splits, sharded=self.shard_entities)

    def state_dict(self) -> dict[str, Any]:
        """Saved in every checkpoint: the spec, plain data only."""
        return {"spec": self.spec.to_dict()}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Encode the data with the checkpoint's vocabularies from now on (resume, test)."""
        vocabs = DataSpec.from_dict(state_dict["spec"]).vocabs
        if vocabs != self.vocabs:
            self._restored_vocabs, self._vocabs_source = vocabs, "the checkpoint"
            self._forget(("_built", "_catalogue", "basket_protocol", "splits", "spec"))

    @cached_property
    def history_len(self) -> int:
        """Events per history fed to the model: the setting, or ``"auto"`` resolved from the
        log's lengths (printed)."""
        if self._history_len != "auto":
            return self._history_len
        length, why = auto_history_len(self.store.lengths)
        rank_zero_info(f"history_len: {length} ({why}; data.history_len sets another)")
        return length

    @property
    def window_len(self) -> int:
        """Events of a training sample: a history of ``history_len`` and the event after it."""
        return self.history_len + 1

    @property
    def batch_seed(self) -> int:
        """The seed of the training batch order (see ``seed``)."""
        return self.seed if self.seed is not None else int(os.environ.get("PL_GLOBAL_SEED", 0))

    def _loader(self, view: SequenceView, train: bool, with_seen: bool = False) -> DataLoader:
        dataset = ViewDataset(view, self.window_len if train else self.history_len, with_seen)
        return self._batches(dataset, view.lengths, train)

    def _batches(self, dataset: Dataset, lengths: np.ndarray, train: bool) -> DataLoader:
        """Length-bucketed batches of ``dataset`` (shuffled for training)."""
        trainer = self.trainer
        # each process batches its own entities when they are sharded, else its share of all
        split = trainer is not None and self.shard is None
        sampler = BucketBatchSampler(
            lengths,
            self.batch_size if train else self.eval_batch_size,
            shuffle=train,
            seed=self.batch_seed,
            bucket_factor=self.bucket_factor,
            rank=trainer.global_rank if split else 0,
            world_size=trainer.world_size if split else 1,
            even_shards=train,
        )
        if train and self.shard is not None:
            sampler.epoch_batches = self._most(len(sampler))
        return DataLoader(
            dataset,
            sampler=sampler,
            batch_size=None,
            num_workers=self.num_workers,
            persistent_workers=self.num_workers > 0,
        )

    def _labelled_loader(self, samples: LabelledView, train: bool) -> DataLoader:
        dataset = LabelledDataset(samples, self.history_len)
        return self._batches(dataset, samples.view.lengths, train)

    def _most(self, n: int) -> int:
        """The largest ``n`` of all processes (sharded ones hold different numbers of samples)."""
        if not torch.distributed.is_available() or not torch.distributed.is_initialized():
            return n
        value = torch.tensor(n, device=self.trainer.strategy.root_device)
        torch.distributed.all_reduce(value, op=torch.distributed.ReduceOp.MAX)
        return int(value)

    def train_dataloader(self) -> DataLoader:
        if self.labels is not None:
            return self._labelled_loader(self.labelled.train, train=True)
        train = self.splits[0]
        if self.windows:
            train = training_windows(train, self.window_len)
        keep = train.lengths >= 2  # a one-event window holds no next-item target
        train = SequenceView(train.store, train.rows[keep], train.starts[keep], train.ends[keep])
        return self._loader(train, train=True)

    def val_dataloader(self) -> DataLoader:
        if self.labels is not None:
            return self._labelled_loader(self.labelled.held, train=False)
        return self._loader(self.splits[1], train=False, with_seen=True)

    def test_dataloader(self) -> DataLoader:
        if self.labels is not None:  # the held-out labelled entities (no separate test split)
            return self._labelled_loader(self.labelled.held, train=False)
        return self._loader(self.splits[2], train=False, with_seen=True)
