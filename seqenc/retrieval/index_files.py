"""An index's files: a folder of ``index.json`` (format, ids, model, space, kind, recall),
``vectors.npy`` (read without pickles) and, approximate, ``ivf.faiss`` (faiss's own
``write_index``). Written under a temporary name then renamed; a folder that is not an index is
refused in one line when read."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import pyarrow as pa

from seqenc.atomic import atomic_directory
from seqenc.errors import SeqencError
from seqenc.reading import read_bounded, regular_file
from seqenc.retrieval.approximate import require_faiss
from seqenc.retrieval.index import METRICS, VectorIndex
from seqenc.retrieval.space import Space

FORMAT = "seqenc.index"
VERSION = 1
INDEX_FILE, VECTORS_FILE, IVF_FILE = "index.json", "vectors.npy", "ivf.faiss"
MAX_INDEX_JSON = 1 << 31  # ids of tens of millions of vectors


def is_index(path: Path) -> bool:
    """Whether the folder ``path`` holds an index (what ``seqenc index`` may replace), or is
    empty."""
    return (path / INDEX_FILE).is_file() or not any(path.iterdir())


def save_index(index: VectorIndex, path: str | Path, inputs: Iterable[str | Path] = ()) -> Path:
    """Write ``index`` as the folder ``path`` (replacing only an index), never over ``inputs``."""
    ids = index.ids
    header = {
        "format": FORMAT,
        "version": VERSION,
        **index.space.to_dict(),
        **index.info,
        "n": len(index),
        "dim": int(index.vectors.shape[1]),
        "id_type": "int64" if pa.types.is_integer(ids.type) else "string",
        "ids": ids.to_pylist(),
    }
    with atomic_directory(path, is_index, "a seqenc index", inputs) as tmp:
        np.save(tmp / VECTORS_FILE, index.vectors, allow_pickle=False)
        if index.ivf is not None:
            require_faiss("saving an approximate index").write_index(index.ivf, str(tmp / IVF_FILE))
        (tmp / INDEX_FILE).write_text(json.dumps(header) + "\n")
    return Path(path)


def load_index(path: str | Path) -> VectorIndex:
    """The index in the folder ``path``; anything that is not one is refused in one line."""
    path = Path(path)
    where = f"{str(path)!r} is not a seqenc index"
    if not path.is_dir():
        raise SeqencError(f"{where}: not a folder")
    header = _header(path / INDEX_FILE, where)
    vectors = _vectors(path / VECTORS_FILE, header, where)
    id_type = pa.int64() if header["id_type"] == "int64" else pa.large_string()
    try:
        ids = pa.array(header["ids"], type=id_type)
    except (pa.ArrowInvalid, pa.ArrowTypeError) as e:
        raise SeqencError(f"{where}: its ids are not {header['id_type']}: {e}") from e
    if len(ids) != len(vectors):
        raise SeqencError(f"{where}: {len(ids)} ids for {len(vectors)} vectors")
    space = Space(header["model"], header["space_id"], header["vectors"])
    keys = ("kind", "metric", "nlist", "nprobe", "recall", "recall_k", "recall_queries")
    info = {k: header[k] for k in keys if k in header}
    ivf = (
        _ivf(path / IVF_FILE, len(vectors), vectors.shape[1], where)
        if info["kind"] == "ivf"
        else None
    )
    return VectorIndex(ids, vectors, space, info, ivf)


def _header(file: Path, where: str) -> dict:
    """``index.json``, checked: its format and the fields an index needs."""
    if not file.is_file():
        raise SeqencError(f"{where}: no {INDEX_FILE}")
    try:
        header = json.loads(read_bounded(file, MAX_INDEX_JSON))
    except (ValueError, RecursionError) as e:
        raise SeqencError(f"{where}: {INDEX_FILE} is not JSON ({e})") from e
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise SeqencError(f"{where}: {INDEX_FILE} has no format {FORMAT!r}")
    if header.get("version") != VERSION:
        raise SeqencError(f"{where}: index version {header.get('version')!r}, this reads {VERSION}")
    needed = {
        "model": str,
        "space_id": str,
        "vectors": str,
        "kind": str,
        "metric": str,
        "ids": list,
    }
    for key, kind in needed.items():
        if not isinstance(header.get(key), kind):
            raise SeqencError(f"{where}: {INDEX_FILE} field {key!r} missing or not {kind.__name__}")
    if header["vectors"] not in METRICS or header["kind"] not in ("exact", "ivf"):
        raise SeqencError(
            f"{where}: unknown vectors {header['vectors']!r} or kind {header['kind']!r}"
        )
    if header.get("id_type") not in ("int64", "string"):
        raise SeqencError(f"{where}: id_type must be int64 or string")
    if header["kind"] == "ivf" and not isinstance(header.get("nprobe"), int):
        raise SeqencError(f"{where}: an approximate index needs its nprobe")
    return header


def _vectors(file: Path, header: dict, where: str) -> np.ndarray:
    """``vectors.npy``: float32 ``[n, dim]`` as the header says, read without pickles."""
    if not file.is_file():
        raise SeqencError(f"{where}: no {VECTORS_FILE}")
    regular_file(file)
    try:
        vectors = np.load(file, allow_pickle=False)
    except (ValueError, OSError, EOFError) as e:
        raise SeqencError(f"{where}: {VECTORS_FILE} is not a NumPy array ({e})") from e
    shape = (header.get("n"), header.get("dim"))
    if vectors.dtype != np.float32 or vectors.shape != shape:
        raise SeqencError(
            f"{where}: {VECTORS_FILE} is {vectors.dtype} {vectors.shape}, not {shape}"
        )
    if not np.isfinite(vectors).all():
        raise SeqencError(f"{where}: {VECTORS_FILE} holds NaN or infinite values")
    return vectors


def _ivf(file: Path, n: int, dim: int, where: str) -> object:
    """``ivf.faiss``, checked to hold the ``n`` vectors of ``dim``."""
    faiss = require_faiss("reading an approximate index")
    if not file.is_file():
        raise SeqencError(f"{where}: no {IVF_FILE}")
    regular_file(file)
    try:
        ivf = faiss.read_index(str(file))
    except RuntimeError as e:
        raise SeqencError(f"{where}: {IVF_FILE} is not a faiss index") from e
    if not hasattr(ivf, "nlist") or ivf.ntotal != n or ivf.d != dim:
        raise SeqencError(f"{where}: {IVF_FILE} does not hold its {n} vectors of {dim}")
    return ivf
