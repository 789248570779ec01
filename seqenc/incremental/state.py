"""The state of an incremental encode (:mod:`seqenc.incremental.update`) and its file: one safetensors
file (arrays and a string header only, so loading runs no code), written under a temporary name
and renamed.

The header names the bundle (``config_hash``, ``weights_sha256``) and holds a SHA-256 over every
array; loading refuses another bundle's state, a changed file, and arrays whose shapes disagree.
Entity ids are int64 arrays, or UTF-8 bytes plus offsets for string ids.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
from safetensors import SafetensorError, safe_open
from safetensors.numpy import save_file

from seqenc.atomic import atomic_file
from seqenc.bundle import BundleMeta
from seqenc.data.sequences import Jagged
from seqenc.errors import SeqencError

EVENT_FIELDS = ("items", "timestamps", "dt_prev", "categorical", "numeric")
POSITION_FIELDS = (*EVENT_FIELDS, "keys", "values")
ENTITY_FIELDS = ("query_gap", "prefix_sum", "embeddings")


@dataclass
class EncoderState(Jagged):
    """Per-entity caches of an incremental encode; :class:`~seqenc.data.sequences.Jagged` like a
    :class:`~seqenc.data.sequences.SequenceStore` (entity ``i`` owns positions
    ``offsets[i]:offsets[i + 1]``, oldest first, at most ``history_len``).

    Attributes:
        entity_ids: ascending.
        offsets: ``[n + 1]`` int64.
        items, timestamps, dt_prev: ``[P]`` the window's events (int64, float64 s, float32 s).
        categorical, numeric: ``[P, C]`` int64 and ``[P, N]`` float32 event features.
        keys, values: ``[n_layers, P, d]`` float32 per-layer keys (rotated) and values.
        tail: the raw ``schema.tie_order`` values of each entity's events at its newest time
            (window order, entity after entity): a new event at that time is ordered among them
            as ``encode`` would. No column before the first events, no row without timestamps.
        query_gap: ``[n]`` float32 gap from the newest event to the query time it was encoded for.
        prefix_sum: ``[n, d]`` float32 sum of the final hidden states of all positions but the newest.
        embeddings: ``[n, d]`` float32 current embeddings.
        config_hash, weights_sha256: the bundle the caches belong to.
        has_time: whether the log has timestamps.
        stats: what the call that made this state did (``n_new``, ``n_extended``,
            ``n_reencoded``, ``n_reordered``, ``n_requeried``, ``n_unchanged`` entities; ``n_positions`` run through
            the model; the unknown-value counts of ``encode``).
    """

    entity_ids: pa.Array
    offsets: np.ndarray
    items: np.ndarray
    timestamps: np.ndarray
    dt_prev: np.ndarray
    categorical: np.ndarray
    numeric: np.ndarray
    keys: np.ndarray
    values: np.ndarray
    tail: pa.Table
    query_gap: np.ndarray
    prefix_sum: np.ndarray
    embeddings: np.ndarray
    config_hash: str
    weights_sha256: str
    has_time: bool
    stats: dict[str, Any] = field(default_factory=dict)

    def save(self, path: str | Path) -> Path:
        """Write the state to a safetensors file (:func:`save_state`); returns the path."""
        return save_state(self, path)


def empty_state(meta: BundleMeta) -> EncoderState:
    """A state with no entity, to build a first one from."""
    config = meta.encoder
    width = (config.n_layers, 0, config.d_model)
    return EncoderState(
        entity_ids=pa.array([], type=pa.int64()),
        offsets=np.zeros(1, dtype=np.int64),
        items=np.zeros(0, dtype=np.int64),
        timestamps=np.zeros(0, dtype=np.float64),
        dt_prev=np.zeros(0, dtype=np.float32),
        categorical=np.zeros((0, len(config.categorical_sizes)), dtype=np.int64),
        numeric=np.zeros((0, config.n_numeric), dtype=np.float32),
        keys=np.zeros(width, dtype=np.float32),
        values=np.zeros(width, dtype=np.float32),
        tail=pa.table({}),
        query_gap=np.zeros(0, dtype=np.float32),
        prefix_sum=np.zeros((0, config.d_model), dtype=np.float32),
        embeddings=np.zeros((0, config.d_model), dtype=np.float32),
        config_hash=meta.config_hash,
        weights_sha256=meta.weights_sha256,
        has_time=meta.schema.timestamp is not None,
    )


def check_state(state: EncoderState, meta: BundleMeta) -> None:
    """Refuse a state made with another bundle (its caches hold another model's keys)."""
    for key in ("config_hash", "weights_sha256"):
        if getattr(state, key) != getattr(meta, key):
            raise SeqencError(
                f"the state was built with another model ({key} {getattr(state, key)[:12]!r}, "
                f"the bundle's is {getattr(meta, key)[:12]!r}); build it again with Encoder.state"
            )


FORMAT = "seqenc.state/2"  # /1 had no tail keys
ARRAYS = ("offsets", *POSITION_FIELDS, *ENTITY_FIELDS)


def _checksum(arrays: dict[str, np.ndarray]) -> str:
    digest = hashlib.sha256()
    for name in sorted(arrays):
        array = np.ascontiguousarray(arrays[name])
        digest.update(f"{name}:{array.dtype.str}:{array.shape};".encode())
        digest.update(array.tobytes())
    return digest.hexdigest()


def _id_arrays(ids: pa.Array) -> dict[str, np.ndarray]:
    if pa.types.is_integer(ids.type):
        return {"entity_ids": ids.cast(pa.int64()).to_numpy()}
    ids = ids.cast(pa.large_string())
    offsets = np.frombuffer(ids.buffers()[1], dtype=np.int64)[
        ids.offset : ids.offset + len(ids) + 1
    ]
    data = np.frombuffer(ids.buffers()[2], dtype=np.uint8)[offsets[0] : offsets[-1]]
    return {"entity_id_offsets": offsets - offsets[0], "entity_id_bytes": data.copy()}


def _ids(arrays: dict[str, np.ndarray], type_name: str) -> pa.Array:
    if "entity_ids" in arrays:
        ids = pa.array(arrays["entity_ids"])
    else:
        offsets, data = arrays["entity_id_offsets"], arrays["entity_id_bytes"]
        buffers = [None, pa.py_buffer(offsets.astype(np.int64)), pa.py_buffer(data)]
        ids = pa.LargeStringArray.from_buffers(len(offsets) - 1, *buffers[1:])
    return ids.cast(pa.type_for_alias(type_name))


def save_state(state: EncoderState, path: str | Path) -> Path:
    """Write ``state`` to ``path`` (a ``.safetensors`` file); returns the path."""
    arrays = {name: np.ascontiguousarray(getattr(state, name)) for name in ARRAYS}
    arrays |= _id_arrays(state.entity_ids)
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, state.tail.schema) as writer:
        writer.write_table(state.tail)
    arrays["tail"] = np.frombuffer(sink.getvalue(), dtype=np.uint8)
    header = {
        "format": FORMAT,
        "config_hash": state.config_hash,
        "weights_sha256": state.weights_sha256,
        "has_time": str(state.has_time),
        "entity_type": str(state.entity_ids.type),
        "sha256": _checksum(arrays),
    }
    with atomic_file(path) as tmp:
        save_file(arrays, str(tmp), metadata=header)
    return Path(path)


def load_state(path: str | Path, meta: BundleMeta) -> EncoderState:
    """Read a state written by :func:`save_state` for the bundle of ``meta``; every problem is one
    :class:`SeqencError` line naming the file."""
    where = str(path)
    if not Path(path).is_file():
        raise SeqencError(f"state file not found: {where!r}")
    try:
        with safe_open(where, framework="np") as f:
            header = f.metadata() or {}
            arrays = {name: f.get_tensor(name) for name in f.keys()}  # noqa: SIM118
    except (SafetensorError, OSError, ValueError) as e:
        raise SeqencError(f"{where!r} is not a seqenc state file: {e}") from e
    if header.get("format") == "seqenc.state/1":
        raise SeqencError(
            f"{where!r} was written by an earlier seqenc (format seqenc.state/1, without the tie "
            "keys of the newest events); build it again with Encoder.state"
        )
    if header.get("format") != FORMAT:
        raise SeqencError(f"{where!r} is not a seqenc state file (format {header.get('format')!r})")
    if header.get("sha256") != _checksum(arrays):
        raise SeqencError(f"{where!r} is corrupt: its arrays do not match the stored SHA-256")
    missing = [name for name in (*ARRAYS, "tail") if name not in arrays]
    if missing:
        raise SeqencError(f"{where!r}: missing array(s) {missing}")
    state = EncoderState(
        entity_ids=_ids(arrays, header["entity_type"]),
        **{name: arrays[name] for name in ARRAYS},
        tail=_tail(arrays["tail"], where),
        config_hash=header.get("config_hash", ""),
        weights_sha256=header.get("weights_sha256", ""),
        has_time=header.get("has_time") == "True",
    )
    try:
        check_state(state, meta)
    except SeqencError as e:
        raise SeqencError(f"{where!r}: {e}") from e
    _check_shapes(state, meta, where)
    return state


def _tail(data: np.ndarray, where: str) -> pa.Table:
    """The tail keys from their Arrow IPC stream (plain columns: reading runs no code)."""
    try:
        return pa.ipc.open_stream(pa.py_buffer(data.tobytes())).read_all()
    except (pa.ArrowInvalid, OSError) as e:
        raise SeqencError(f"{where!r}: unreadable tail keys: {e}") from e


def _check_shapes(state: EncoderState, meta: BundleMeta, where: str) -> None:
    config = meta.encoder
    n, offsets = len(state.entity_ids), state.offsets
    positions = int(offsets[-1]) if len(offsets) else -1
    expected = {
        "offsets": (n + 1,),
        "items": (positions,),
        "timestamps": (positions,),
        "dt_prev": (positions,),
        "categorical": (positions, len(config.categorical_sizes)),
        "numeric": (positions, config.n_numeric),
        "keys": (config.n_layers, positions, config.d_model),
        "values": (config.n_layers, positions, config.d_model),
        "query_gap": (n,),
        "prefix_sum": (n, config.d_model),
        "embeddings": (n, config.d_model),
    }
    for name, shape in expected.items():
        if getattr(state, name).shape != shape:
            raise SeqencError(
                f"{where!r}: array {name!r} has shape {getattr(state, name).shape}, expected {shape}"
            )
    lengths = np.diff(offsets)
    if offsets[0] != 0 or (lengths < 1).any() or (lengths > meta.history_len).any():
        raise SeqencError(f"{where!r}: entity offsets are not increasing within history_len")
    newest = state.timestamps == np.repeat(state.newest_times(), lengths)
    if state.has_time and len(state.tail) != int(newest.sum()):
        raise SeqencError(
            f"{where!r}: {len(state.tail)} tail keys for {int(newest.sum())} newest events"
        )
