"""A nearest-neighbour index over item or account vectors: its kind by size (exact below
:data:`EXACT_BELOW` vectors, faiss's inverted file above, its recall@k against the exact top-k
measured at build), its search (with an allow mask), and its files: a folder of ``index.json``
(ids, model, space, kind, recall), ``vectors.npy`` and, when approximate, ``ivf.faiss`` (faiss's
own format). Nothing is pickled."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from seqenc.errors import SeqencError
from seqenc.retrieval.approximate import build_ivf, faiss_module, search_ivf, tune_nprobe
from seqenc.retrieval.space import Space, read_vectors
from seqenc.retrieval.topk import exact_search

log = logging.getLogger(__name__)
EXACT_BELOW = 100_000  # vectors: an exact scan below, an approximate index from here on
KINDS = ("auto", "exact", "approximate")
METRICS = {"items": "ip", "accounts": "cosine"}  # items: the model's scores; accounts: alike


@dataclass
class VectorIndex:
    """Vectors with their ``ids`` and :class:`Space`; ``info`` holds ``kind`` (``exact`` or
    ``ivf``), ``metric`` (``ip``, or ``cosine``: rows stored unit length) and, for ``ivf``,
    ``nlist``, ``nprobe`` and the ``recall`` measured at build; ``ivf`` the faiss index."""

    ids: pa.Array
    vectors: np.ndarray
    space: Space
    info: dict[str, Any] = field(default_factory=dict)
    ivf: object | None = None

    def __len__(self) -> int:
        return len(self.vectors)

    def summary(self) -> str:
        """One line: what the index holds and, approximate, the recall it kept."""
        head = f"index of {len(self):,} {self.space.vectors} ({self.info['metric']})"
        if self.ivf is None:
            return f"{head}: exact"
        info = self.info
        return (
            f"{head}: approximate (faiss IVF, {info['nlist']} cells, nprobe {info['nprobe']}), "
            f"recall@{info['recall_k']} {info['recall']:.3f} against the exact top-"
            f"{info['recall_k']} of {info['recall_queries']} sampled queries"
        )

    def prepare(self, queries: np.ndarray) -> np.ndarray:
        """``queries`` as this index compares them (unit length for ``cosine``)."""
        queries = np.ascontiguousarray(queries, dtype=np.float32)
        return unit(queries) if self.info["metric"] == "cosine" else queries

    def search(
        self, queries: np.ndarray, k: int, allowed: np.ndarray | None = None, exact: bool = False
    ) -> tuple[np.ndarray, np.ndarray]:
        """``(scores, positions)`` ``[n, k]``: each query's ``k`` best rows among ``allowed``
        (bool mask over the rows), best first (``-inf`` / ``-1`` where fewer); ``exact``: a full
        scan even for an approximate index."""
        queries, k = self.prepare(queries), int(min(k, len(self)))
        if self.ivf is None or exact:
            return exact_search(queries, self.vectors, k, allowed)
        return search_ivf(self.ivf, queries, k, self.info["nprobe"], allowed)

    def positions(self, ids: Any) -> np.ndarray:
        """The rows of ``ids``; an id the index does not hold is refused in one line."""
        asked = pa.array(ids) if not isinstance(ids, (pa.Array, pa.ChunkedArray)) else ids
        if len(asked) == 0:
            raise SeqencError("no id given: the list of ids to look up is empty")
        kind = self.ids.type
        found = pc.index_in(asked.cast(kind) if asked.type != kind else asked, self.ids)
        if found.null_count:
            missing = asked.filter(found.is_null()).to_pylist()[:3]
            raise SeqencError(f"{found.null_count} id(s) not in the index, e.g. {missing}")
        return found.to_numpy().astype(np.int64)

    def neighbours(self, ids: Any, k: int = 10) -> pd.DataFrame:
        """The ``k`` rows nearest each of ``ids`` (rows of the index: items like an item,
        accounts like an account), itself left out: ``query_id``, ``rank``, ``id``, ``score``."""
        rows = self.positions(ids)
        scores, found = self.search(self.vectors[rows], k + 1)
        query = np.repeat(rows, found.shape[1])
        keep = (found.ravel() >= 0) & (found.ravel() != query)
        return self._long(query, found.ravel(), scores.ravel(), keep, k)

    def query(self, table: pa.Table | pd.DataFrame, k: int = 10) -> pd.DataFrame:
        """The ``k`` rows nearest each vector of ``table`` (a table seqenc wrote, of this index's
        model and space: account query vectors or items for an item index, embeddings for an
        account index; refused in one line otherwise): ``query_id``, ``rank``, ``id``,
        ``score``."""
        roles = ("queries", "items") if self.space.vectors == "items" else ("accounts",)
        ids, vectors, space = read_vectors(table, roles, "the query table")
        self.space.admits(space)
        scores, found = self.search(vectors, k)
        query = np.repeat(np.arange(len(vectors)), found.shape[1])
        keep = found.ravel() >= 0
        return self._long(query, found.ravel(), scores.ravel(), keep, k, ids)

    def _long(
        self,
        query: np.ndarray,
        found: np.ndarray,
        scores: np.ndarray,
        keep: np.ndarray,
        k: int,
        query_ids: pa.Array | None = None,
    ) -> pd.DataFrame:
        """The long table of search results: each query's first ``k`` kept rows."""
        query, found, scores = query[keep], found[keep], scores[keep]
        starts = np.flatnonzero(np.r_[True, query[1:] != query[:-1]]) if len(query) else query
        rank = np.arange(len(query)) - np.repeat(starts, np.diff(np.r_[starts, len(query)])) + 1
        first = rank <= k
        names = self.ids if query_ids is None else query_ids
        table = pa.table(
            {
                "query_id": names.take(pa.array(query[first])),
                "rank": pa.array(rank[first].astype(np.int32)),
                "id": self.ids.take(pa.array(found[first])),
                "score": pa.array(scores[first].astype(np.float32)),
            }
        )
        return table.to_pandas()


def unit(vectors: np.ndarray) -> np.ndarray:
    """Rows scaled to unit length (a zero row stays zero)."""
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return (vectors / np.where(norms > 0, norms, 1.0)).astype(np.float32)


def build_index(
    ids: pa.Array,
    vectors: np.ndarray,
    space: Space,
    kind: str = "auto",
    target: float = 0.95,
    queries: np.ndarray | None = None,
    k: int = 10,
) -> VectorIndex:
    """An index of ``vectors`` (row i has id ``ids[i]``). ``kind``: ``exact``, ``approximate``
    (needs faiss), or ``auto``: exact below :data:`EXACT_BELOW` vectors or without faiss. An
    approximate index takes the least ``nprobe`` whose recall@``k`` against the exact top-k of
    ``queries`` (default: 1,000 of its own vectors, sampled) reaches ``target``; logged."""
    if kind not in KINDS:
        raise SeqencError(f"kind must be one of {KINDS}, got {kind!r}")
    if len(vectors) == 0 or len(ids) != len(vectors):
        raise SeqencError(f"an index needs vectors, one per id: got {len(vectors)} for {len(ids)}")
    if not np.isfinite(vectors).all():
        raise SeqencError("the vectors hold NaN or infinite values: nothing to index")
    metric = METRICS.get(space.vectors, "ip")
    vectors = unit(vectors) if metric == "cosine" else np.ascontiguousarray(vectors, np.float32)
    index = VectorIndex(ids, vectors, space, {"kind": "exact", "metric": metric})
    if kind == "auto" and len(vectors) >= EXACT_BELOW and faiss_module() is None:
        log.warning("faiss is not installed: an exact index (pip install 'seqenc[search]')")
    if kind == "approximate" or (
        kind == "auto" and len(vectors) >= EXACT_BELOW and faiss_module() is not None
    ):
        index.ivf = build_ivf(vectors)
        sample = _sample(vectors, queries)
        truth = exact_search(index.prepare(sample), vectors, min(k, len(vectors)))[1]
        nprobe, kept = tune_nprobe(index.ivf, index.prepare(sample), truth, target)
        index.info |= {"kind": "ivf", "nlist": int(index.ivf.nlist), "nprobe": nprobe}
        index.info |= {"recall": kept, "recall_k": truth.shape[1], "recall_queries": len(sample)}
    log.info("%s", index.summary())
    return index


def _sample(vectors: np.ndarray, queries: np.ndarray | None, n: int = 1000) -> np.ndarray:
    """At most ``n`` of ``queries`` (default: of ``vectors``), seeded."""
    pool = vectors if queries is None else np.asarray(queries, dtype=np.float32)
    rows = np.random.default_rng(0).permutation(len(pool))[:n]
    return pool[np.sort(rows)]
