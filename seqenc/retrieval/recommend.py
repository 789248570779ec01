"""Top-k items per account by the model's scores, on three paths that share one rule
(:class:`~seqenc.model.ranking.NextItemScorer`: the logits, the repeat head's mixture, the seen
and banned items ``-inf``):

- exact: the whole catalogue, a chunk of items at a time (memory bounded by the chunk);
- candidates: each account's own list, its pairs scored one by one;
- indexed: an item index retrieves each account's best items by the generation part (the query
  vector; seen items are over-fetched, banned ones filtered inside the search), then those and
  the account's history items are re-scored exactly, the repeat part mixed in. With an exact
  index this is the exact top-k; with an approximate one, what its recall keeps.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import torch

from seqenc.bundle import BundleMeta
from seqenc.data.sequences import SequenceStore
from seqenc.data.vocab import N_SPECIAL, Vocabulary
from seqenc.encoding import EncodeOptions, LoadedBundle
from seqenc.model.ranking import NextItemScorer
from seqenc.retrieval.filters import Candidates, known_items
from seqenc.retrieval.index import VectorIndex
from seqenc.retrieval.items import item_space
from seqenc.retrieval.queries import batch_queries
from seqenc.retrieval.topk import top_per_row


@dataclass
class ItemIndex:
    """An item index checked against a bundle: ``rows`` maps its rows to the model's item ids."""

    index: VectorIndex
    rows: np.ndarray

    @classmethod
    def of(cls, index: VectorIndex, meta: BundleMeta, vocab: Vocabulary) -> ItemIndex:
        """Refused in one line: an index of another model or space, or of accounts."""
        index.space.admits(item_space(meta, "queries"))
        return cls(index, known_items(vocab, index.ids, "the index"))


@dataclass
class Request:
    """What to recommend: ``k`` items, ``filter_seen``, ``banned`` (``[n_items]`` bool: never
    offered), and the path: each account's ``candidates``, an item ``index``, else exact."""

    k: int
    filter_seen: bool
    banned: np.ndarray
    candidates: Candidates | None = None
    index: ItemIndex | None = None


@torch.inference_mode()
def recommend_store(
    bundle: LoadedBundle, store: SequenceStore, request: Request, options: EncodeOptions
) -> pa.Table:
    """``entity_id``, ``rank`` (1 = best), ``item_id``, ``score`` of every account of ``store``,
    sorted by account then rank; an account may get fewer than ``k`` rows (filters)."""
    banned = torch.from_numpy(request.banned).to(bundle.device)
    found = []
    for rows, scorer in batch_queries(bundle, store, options, request.filter_seen):
        scorer.banned = banned
        local, items, scores, rank = _best(scorer, rows, request, bundle.vocabs.item.bucket_start)
        found.append((rows[local], items, scores, rank))
    empty = (
        np.zeros(0, np.int64),
        np.zeros(0, np.int64),
        np.zeros(0, np.float32),
        np.zeros(0, np.int32),
    )
    rows, items, scores, rank = (np.concatenate(x) for x in zip(*(found or [empty]), strict=True))
    table = pa.table(
        {
            "entity_id": store.entity_ids.take(pa.array(rows.astype(np.int64))),
            "rank": pa.array(rank.astype(np.int32)),
            "item_id": bundle.vocabs.item.values.take(pa.array(items.astype(np.int64) - N_SPECIAL)),
            "score": pa.array(scores.astype(np.float32)),
        }
    )
    return table.sort_by([("entity_id", "ascending"), ("rank", "ascending")])


def _best(
    scorer: NextItemScorer, rows: np.ndarray, request: Request, stop: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(local rows, items, scores, rank)`` of the top ``k`` of a batch (its store ``rows``), by
    the request's path."""
    k = request.k
    if request.candidates is None and request.index is None:
        scores, items = scorer.top_k(k, stop=stop)  # a chunk of the catalogue at a time
        local = np.arange(len(items)).repeat(items.shape[1])
        return top_per_row(
            local, items.cpu().numpy().ravel(), scores.float().cpu().numpy().ravel(), k
        )
    if request.candidates is not None:
        local, items = request.candidates.pairs(rows)
    else:
        local, items = _retrieved(scorer, request, stop)
    device = scorer.state.device
    scores = scorer.pair_scores(
        torch.from_numpy(local).to(device), torch.from_numpy(items).to(device)
    )
    return top_per_row(local, items, scores.float().cpu().numpy(), k)


def _retrieved(
    scorer: NextItemScorer, request: Request, stop: int
) -> tuple[np.ndarray, np.ndarray]:
    """``(local rows, items)`` to re-score: each row's best ``k`` by the generation part among the
    index's allowed rows (its seen items over-fetched), and the items of its history that the
    repeat part may lift, without repeats."""
    index, n_items = request.index, len(request.banned)
    allowed = ~request.banned[index.rows]
    extra = 0
    if scorer.seen is not None and scorer.seen.shape[1]:
        extra = int(torch.bincount(scorer.seen[0], minlength=len(scorer.state)).max())
    fetch = min(len(index.index), request.k + extra)
    state = scorer.state.float().cpu().numpy()
    _, found = index.index.search(state, fetch, None if allowed.all() else allowed)
    local = np.arange(len(state)).repeat(found.shape[1])[found.ravel() >= 0]
    items = index.rows[found.ravel()[found.ravel() >= 0]]
    if scorer.copy_mass is not None:
        copy_rows, copy_items, _ = scorer.copied()
        keep = (copy_items < stop).cpu().numpy()
        local = np.concatenate([local, copy_rows.cpu().numpy()[keep]])
        items = np.concatenate([items, copy_items.cpu().numpy()[keep]])
    keys = np.unique(local.astype(np.int64) * n_items + items)
    return keys // n_items, keys % n_items
