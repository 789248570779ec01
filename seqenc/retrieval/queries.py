"""Each account's query vector and repeat part: what, with the item vectors
(:mod:`seqenc.retrieval.items`), gives ``recommend``'s scores outside seqenc.

An item ``v`` scores ``q · w_v`` (the catalogue logit). With the repeat head it scores
``q · w_v + shift`` outside the account's history (``shift = log(1 - g) - log Z``: the gate and the
catalogue's normaliser, one number per account) and ``logaddexp(q · w_v + shift, repeat_v)`` for
the items of its history, ``repeat_v = log g + log(copy mass of v)``."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import torch

from seqenc.data.sequences import SequenceStore
from seqenc.data.vocab import N_SPECIAL
from seqenc.encoding import EncodeOptions, LoadedBundle, iter_batches
from seqenc.encoding.backends import autocast
from seqenc.model.ranking import NextItemScorer


@dataclass
class RepeatPart:
    """The repeat head's part of a batch: ``shift`` ``[B]``, and flat (``rows``, ``items``,
    ``scores``) of each history's items below ``stop`` with ``log g + log mass``."""

    shift: np.ndarray
    rows: np.ndarray
    items: np.ndarray
    scores: np.ndarray


def repeat_part(scorer: NextItemScorer, stop: int) -> RepeatPart | None:
    """The repeat part of ``scorer``'s rows (``None`` without the repeat head); items from
    ``stop`` on (out-of-vocabulary buckets) are left out, as ``recommend`` leaves them out."""
    if scorer.copy_mass is None:
        return None
    rows, items, log_mass = scorer.copied()
    keep = items < stop
    scores = scorer.log_gate[rows[keep]] + log_mass[keep]
    numpy = [
        t.float().cpu().numpy() if t.is_floating_point() else t.cpu().numpy()
        for t in (scorer.shift(), rows[keep], items[keep], scores)
    ]
    return RepeatPart(*numpy)


@torch.inference_mode()
def batch_queries(
    bundle: LoadedBundle, store: SequenceStore, options: EncodeOptions, with_seen: bool = False
) -> Iterator[tuple[np.ndarray, NextItemScorer]]:
    """``(store rows, scorer)`` for each batch of ``store``: the torch model's next-item scorer
    (query vectors, repeat part, seen items with ``with_seen``) on ``bundle``'s device."""
    sizes = {"batch_size": options.batch_size, "max_tokens": options.max_tokens}
    for batch in iter_batches(store, bundle.meta.history_len, with_seen=with_seen, **sizes):
        batch = batch.to(bundle.device)
        with autocast(bundle.device):
            scorer = bundle.model.next_item_scorer(batch)
        scorer.seen = batch.seen if with_seen else None
        yield batch.index.cpu().numpy(), scorer


@torch.inference_mode()
def query_columns(bundle: LoadedBundle, store: SequenceStore, options: EncodeOptions) -> pa.Table:
    """``query`` (float32 ``[dim]``) of every account of ``store``, in its row order, and with
    the repeat head ``query_shift``, ``repeat_items`` and ``repeat_scores`` (lists, by item id)."""
    vocab, dim = bundle.vocabs.item, bundle.meta.dim
    state = np.zeros((len(store), dim), dtype=np.float32)
    parts: list[tuple[np.ndarray, RepeatPart]] = []
    for rows, scorer in batch_queries(bundle, store, options):
        state[rows] = scorer.state.float().cpu().numpy()
        part = repeat_part(scorer, vocab.bucket_start)
        if part is not None:
            parts.append((rows, part))
    flat = pa.array(state.reshape(-1), type=pa.float32())
    columns = {"query": pa.FixedSizeListArray.from_arrays(flat, dim)}
    if bundle.model.repeat is None:
        return pa.table(columns)
    shift = np.zeros(len(store), dtype=np.float32)
    for rows, part in parts:
        shift[rows] = part.shift
    owners = np.concatenate([rows[p.rows] for rows, p in parts] or [np.zeros(0, np.int64)])
    items = np.concatenate([p.items for _, p in parts] or [np.zeros(0, np.int64)])
    scores = np.concatenate([p.scores for _, p in parts] or [np.zeros(0, np.float32)])
    order = np.lexsort((items, owners))
    offsets = pa.array(np.searchsorted(owners[order], np.arange(len(store) + 1)).astype(np.int32))
    values = vocab.values.take(pa.array(items[order] - N_SPECIAL))
    columns["query_shift"] = pa.array(shift)
    columns["repeat_items"] = pa.ListArray.from_arrays(offsets, values)
    columns["repeat_scores"] = pa.ListArray.from_arrays(offsets, pa.array(scores[order]))
    return pa.table(columns)
