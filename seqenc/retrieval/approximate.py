"""The approximate index: faiss's inverted file (``IndexIVFFlat``, inner product), from the
optional ``search`` extra (``pip install 'seqenc[search]'``). The vectors are split into ``nlist``
k-means cells; a query scans its ``nprobe`` nearest cells only. ``nprobe`` is chosen at build, the
least power of two whose recall@k against the exact top-k of sampled queries reaches the target."""

from __future__ import annotations

import math
from types import ModuleType

import numpy as np

from seqenc.errors import SeqencError

TRAIN_PER_CELL = 64  # k-means training vectors per cell (faiss warns under 39)


def faiss_module() -> ModuleType | None:
    """faiss, or ``None`` where the ``search`` extra is not installed."""
    try:
        import faiss
    except ImportError:
        return None
    return faiss


def require_faiss(why: str) -> ModuleType:
    """faiss, or one line saying how to install it."""
    faiss = faiss_module()
    if faiss is None:
        raise SeqencError(f"{why} needs faiss: pip install 'seqenc[search]' (faiss-cpu)")
    return faiss


def n_cells(n: int) -> int:
    """The cells of an index of ``n`` vectors: about ``4 sqrt(n)`` (4,000 for a million)."""
    return max(1, min(n // TRAIN_PER_CELL, int(4 * math.sqrt(n))))


def build_ivf(vectors: np.ndarray, seed: int = 0) -> object:
    """A trained ``IndexIVFFlat`` (inner product) holding ``vectors`` (row i has id i); k-means
    trained on a seeded sample of at most :data:`TRAIN_PER_CELL` vectors per cell."""
    faiss = require_faiss("an approximate index")
    n, dim = vectors.shape
    nlist = n_cells(n)
    index = faiss.IndexIVFFlat(faiss.IndexFlatIP(dim), dim, nlist, faiss.METRIC_INNER_PRODUCT)
    index.cp.seed = seed
    sample = np.random.default_rng(seed).permutation(n)[: nlist * TRAIN_PER_CELL]
    index.train(np.ascontiguousarray(vectors[np.sort(sample)]))
    index.add(np.ascontiguousarray(vectors))
    return index


def search_ivf(
    index: object, queries: np.ndarray, k: int, nprobe: int, allowed: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """``(scores, positions)`` ``[n, k]`` from the cells ``nprobe`` nearest each query, among the
    ``allowed`` rows (a bool mask, passed to faiss as a bitmap: filtered inside the scan);
    ``-inf`` and ``-1`` where fewer are found."""
    faiss = require_faiss("an approximate index")
    selector = bits = None
    if allowed is not None:
        bits = np.packbits(np.asarray(allowed, dtype=bool), bitorder="little")
        selector = faiss.IDSelectorBitmap(len(allowed), faiss.swig_ptr(bits))
    params = faiss.SearchParametersIVF(nprobe=int(nprobe), sel=selector)
    queries = np.ascontiguousarray(queries, dtype=np.float32)
    scores, positions = index.search(queries, int(k), params=params)
    del bits  # the bitmap lives until the search is done
    scores = np.where(positions < 0, -np.inf, scores).astype(np.float32)
    return scores, positions


def recall(found: np.ndarray, truth: np.ndarray) -> float:
    """Share of the exact top-k positions (``truth``, ``-1`` for none) that ``found`` holds in
    the same row."""
    real = truth >= 0
    hits = (found[:, :, None] == truth[:, None, :]).any(1) & real
    return float(hits.sum() / max(1, real.sum()))


def tune_nprobe(
    index: object, queries: np.ndarray, truth: np.ndarray, target: float
) -> tuple[int, float]:
    """``(nprobe, recall)``: the least power of two (or ``nlist``) whose recall@k of ``queries``
    against ``truth`` (their exact top-k) reaches ``target``."""
    nlist, k = index.nlist, truth.shape[1]
    nprobe = 1
    while True:
        got = recall(search_ivf(index, queries, k, nprobe)[1], truth)
        if got >= target or nprobe >= nlist:
            return nprobe, got
        nprobe = min(nlist, nprobe * 2)
