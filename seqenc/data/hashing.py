"""A hash of ids that is the same in every process, machine and version (Python's ``hash`` of a
string is salted per process): out-of-vocabulary buckets must agree at fit and at encode time."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from seqenc.errors import SeqencError

_FNV_OFFSET, _FNV_PRIME = np.uint64(0xCBF29CE484222325), np.uint64(0x100000001B3)
_MIX = (np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB))


def stable_hash(values: Any) -> np.ndarray:
    """``[n]`` uint64 hash of each (non-null) value's text (ints or strings, any array-like): 64-bit FNV-1a over its UTF-8 bytes, then
    splitmix64's finaliser so the low bits a bucket index takes are well mixed.

    Unlike Python's ``hash`` it is the same in every process, machine and version, so values hash
    alike at fit and at encode time. An integer hashes as its decimal text: ``5`` and ``"5"``
    share a bucket as they share an id (:meth:`Vocabulary.encode` compares across types as text).
    """
    arr = values if isinstance(values, (pa.Array, pa.ChunkedArray)) else pa.array(values)
    arr = arr.combine_chunks() if isinstance(arr, pa.ChunkedArray) else arr
    if arr.null_count:
        raise SeqencError("stable_hash: values must not be null")
    return _mix(_fnv1a(arr.cast(pa.large_string())))


def _fnv1a(arr: pa.LargeStringArray) -> np.ndarray:
    """64-bit FNV-1a of each string's bytes, one vectorised pass per byte position: the strings
    sorted longest first, pass ``j`` updates the prefix of those longer than ``j`` bytes."""
    _, offset_buf, data_buf = arr.buffers()
    offsets = np.frombuffer(offset_buf, dtype=np.int64)[arr.offset : arr.offset + len(arr) + 1]
    data = np.frombuffer(data_buf, dtype=np.uint8) if data_buf else np.zeros(0, np.uint8)
    lengths = np.diff(offsets)
    order = np.argsort(-lengths, kind="stable")
    starts, longest_first = offsets[:-1][order], -lengths[order]  # ascending
    h = np.full(len(arr), _FNV_OFFSET, dtype=np.uint64)
    for j in range(int(-longest_first[0]) if len(arr) else 0):
        n = int(np.searchsorted(longest_first, -j))  # strings longer than j bytes
        h[:n] = (h[:n] ^ data[starts[:n] + j]) * _FNV_PRIME
    out = np.empty_like(h)
    out[order] = h
    return out


def _mix(h: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser (a bijection of uint64 that spreads every input bit)."""
    h = (h ^ (h >> np.uint64(30))) * _MIX[0]
    h = (h ^ (h >> np.uint64(27))) * _MIX[1]
    return h ^ (h >> np.uint64(31))


def entity_shard(ids: pa.Array | pa.ChunkedArray, world_size: int) -> np.ndarray:
    """``[n]`` int64 shard (``0 .. world_size - 1``) of each id: its :func:`stable_hash` modulo
    ``world_size``, so every process (and a run with as many processes) splits the entities alike,
    whatever file or block an event is read from. Each distinct id is hashed once."""
    arr = ids.combine_chunks() if isinstance(ids, pa.ChunkedArray) else ids
    encoded = pc.dictionary_encode(arr)
    shards = stable_hash(encoded.dictionary) % np.uint64(world_size)
    return shards.astype(np.int64)[encoded.indices.to_numpy(zero_copy_only=False)]


@dataclass(frozen=True)
class Shard:
    """One process's part of a log split by entity: rank ``rank`` of ``world_size`` keeps the
    entities whose :func:`entity_shard` is ``rank``, every event of them and nothing else."""

    rank: int
    world_size: int

    def __post_init__(self) -> None:
        if not 0 <= self.rank < self.world_size:
            raise SeqencError(f"shard rank must be in [0, {self.world_size}), got {self.rank}")

    def keeps(self, ids: pa.Array | pa.ChunkedArray) -> np.ndarray:
        """``[n]`` bool: which of the entity ids ``ids`` belong to this shard."""
        return entity_shard(ids, self.world_size) == self.rank
