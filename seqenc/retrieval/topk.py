"""Exact top-k by inner product, a chunk of the vectors at a time, and the per-row top-k of scored
(row, item) pairs: the exact index, the build-time recall reference and every candidate path."""

from __future__ import annotations

import numpy as np
import torch

CHUNK_ELEMENTS = 2**22  # scores held at once: [queries, chunk] float32 (16 MiB)


@torch.inference_mode()
def exact_search(
    queries: np.ndarray,
    vectors: np.ndarray,
    k: int,
    allowed: np.ndarray | None = None,
    chunk_elements: int = CHUNK_ELEMENTS,
) -> tuple[np.ndarray, np.ndarray]:
    """``(scores, positions)``, each ``[n, k]``: each query's ``k`` rows of ``vectors`` with the
    highest inner product, best first, among the ``allowed`` rows (bool mask; default all);
    ``-inf`` and position ``-1`` where fewer are allowed. Memory: ``chunk_elements`` scores at a
    time, whatever the number of vectors."""
    q = torch.from_numpy(np.ascontiguousarray(queries, dtype=np.float32))
    v = torch.from_numpy(np.ascontiguousarray(vectors, dtype=np.float32))
    mask = None if allowed is None else torch.from_numpy(~np.asarray(allowed, dtype=bool))
    best = torch.full((len(q), k), -torch.inf)
    where = torch.full((len(q), k), -1, dtype=torch.int64)
    step = max(1, chunk_elements // max(1, len(q)))
    for start in range(0, len(v), step):
        scores = q @ v[start : start + step].T
        if mask is not None:
            scores[:, mask[start : start + step]] = -torch.inf
        merged = torch.cat([best, scores], dim=1)
        top = merged.topk(min(k, merged.shape[1]), dim=1)
        positions = torch.cat(
            [where, torch.arange(start, start + scores.shape[1]).expand(len(q), -1)], 1
        )
        best, where = top.values, positions.gather(1, top.indices)
    where = where.masked_fill(best == -torch.inf, -1)
    return best.numpy(), where.numpy()


def top_per_row(
    rows: np.ndarray, items: np.ndarray, scores: np.ndarray, k: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(rows, items, scores, rank)`` of each row's ``k`` best pairs (``rank`` 1 = best), sorted
    by row then rank; pairs scored ``-inf`` (filtered) are left out. Ties keep the order given."""
    keep = np.isfinite(scores)
    rows, items, scores = rows[keep], items[keep], scores[keep]
    order = np.lexsort((-scores, rows))
    rows, items, scores = rows[order], items[order], scores[order]
    starts = np.flatnonzero(np.r_[True, rows[1:] != rows[:-1]]) if len(rows) else rows[:0]
    rank = np.arange(len(rows)) - np.repeat(starts, np.diff(np.r_[starts, len(rows)])) + 1
    first = rank <= k
    return rows[first], items[first], scores[first], rank[first].astype(np.int32)
