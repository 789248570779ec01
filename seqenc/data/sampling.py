"""Length-bucketed batch sampling, sharded across distributed ranks.

Short histories are batched with short ones so that a batch is padded only to its own longest row,
not to ``history_len``: samples are shuffled, cut into mega-batches of ``bucket_factor`` batches, sorted by
length inside each mega-batch, cut into batches, and the batches shuffled again. The sampler yields
whole index arrays, so the Dataset builds a batch in one vectorized call (no per-sample Python).
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np


class BucketBatchSampler:
    """Yields ``np.ndarray`` index batches of at most ``batch_size`` samples.

    Args:
        lengths: length of every sample (what a batch is padded to).
        batch_size: samples per batch.
        shuffle: shuffle samples and batches (training); otherwise batches follow sorted length.
        seed: base seed; the order depends only on ``seed`` and the epoch set by :meth:`set_epoch`.
        bucket_factor: batches per length-sorted mega-batch (1 = no bucketing when shuffling).
        rank, world_size: this process's shard; every rank gets the same number of batches when
            ``even_shards`` (training, so DDP never waits on a missing batch) and disjoint batches
            covering every sample exactly once otherwise (prediction).
        epoch_batches: yield exactly this many batches an epoch (``None``: this rank's own), the
            first ones, or all and then the first ones again. Processes that each hold their own
            entities set it to the most any of them has, so DDP steps in lockstep and no sample
            is left out.
    """

    def __init__(
        self,
        lengths: np.ndarray,
        batch_size: int,
        shuffle: bool,
        seed: int = 0,
        bucket_factor: int = 50,
        rank: int = 0,
        world_size: int = 1,
        even_shards: bool = True,
        epoch_batches: int | None = None,
    ) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.lengths = np.asarray(lengths)
        self.batch_size = batch_size
        self.shuffle = shuffle
        self.seed = seed
        self.bucket_factor = max(1, bucket_factor)
        self.rank = rank
        self.world_size = world_size
        self.even_shards = even_shards
        self.epoch_batches = epoch_batches
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        """Called by Lightning before every epoch so each epoch has its own order."""
        self.epoch = epoch

    def _batches(self) -> list[np.ndarray]:
        n = len(self.lengths)
        if not self.shuffle:
            order = np.argsort(self.lengths, kind="stable")
            return [order[i : i + self.batch_size] for i in range(0, n, self.batch_size)]
        rng = np.random.default_rng([self.seed, self.epoch])
        order = rng.permutation(n)
        mega = self.batch_size * self.bucket_factor
        batches = []
        for i in range(0, n, mega):
            chunk = order[i : i + mega]
            chunk = chunk[np.argsort(self.lengths[chunk], kind="stable")]
            batches += [
                chunk[j : j + self.batch_size] for j in range(0, len(chunk), self.batch_size)
            ]
        return [batches[i] for i in rng.permutation(len(batches))]

    def _shard(self, batches: list[np.ndarray]) -> list[np.ndarray]:
        if self.even_shards:
            per_rank = len(batches) // self.world_size
            return batches[self.rank : per_rank * self.world_size : self.world_size]
        return batches[self.rank :: self.world_size]

    def __iter__(self) -> Iterator[np.ndarray]:
        batches = self._shard(self._batches())
        if self.epoch_batches is None or not batches:
            return iter(batches)
        return iter(batches[i % len(batches)] for i in range(self.epoch_batches))

    def __len__(self) -> int:
        own = self._own_batches()
        return own if self.epoch_batches is None or not own else self.epoch_batches

    def _own_batches(self) -> int:
        """Batches of this rank an epoch, before ``epoch_batches``."""
        n = len(self.lengths)
        if self.shuffle:
            full, rest = divmod(n, self.batch_size * self.bucket_factor)
            n_batches = full * self.bucket_factor + -(-rest // self.batch_size)
        else:
            n_batches = -(-n // self.batch_size)
        if self.even_shards:
            return n_batches // self.world_size
        return len(range(self.rank, n_batches, self.world_size))


def token_batches(
    order: np.ndarray, width: np.ndarray, max_tokens: int, max_rows: int | None = None
) -> list[np.ndarray]:
    """Cut ``order`` (row indices, sorted by the caller, e.g. by length) into consecutive batches
    whose padded size ``len(batch) * max(width[batch])`` stays within ``max_tokens`` (a row wider
    than the budget gets a batch of its own) and that hold at most ``max_rows`` rows: batches are
    bounded by tokens, not rows, so short rows travel many to a batch and long ones few."""
    if max_tokens < 1 or (max_rows is not None and max_rows < 1):
        raise ValueError(f"max_tokens and max_rows must be >= 1, got {max_tokens}, {max_rows}")
    order = np.asarray(order, dtype=np.int64)
    widths = np.maximum(np.asarray(width, dtype=np.int64)[order], 1)
    most = max_tokens if max_rows is None else min(max_tokens, max_rows)
    batches, start = [], 0
    while start < len(order):
        ahead = widths[start : start + most]
        padded = np.arange(1, len(ahead) + 1) * np.maximum.accumulate(ahead)
        size = max(1, int(np.searchsorted(padded, max_tokens, side="right")))
        batches.append(order[start : start + size])
        start += size
    return batches
