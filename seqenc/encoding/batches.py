"""Where an encode's batch is built: whole histories, length-sorted, within a token budget."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from seqenc.data.batches import Batch, collate
from seqenc.data.sampling import token_batches
from seqenc.data.sequences import SequenceStore
from seqenc.data.split import full_view
from seqenc.encoding.options import MAX_TOKENS


def iter_batches(
    store: SequenceStore,
    history_len: int,
    batch_size: int,
    rank: int = 0,
    world_size: int = 1,
    with_seen: bool = False,
    max_tokens: int = MAX_TOKENS,
) -> Iterator[Batch]:
    """Length-sorted batches of whole histories (newest ``history_len`` events), each at most
    ``batch_size`` histories and ``max_tokens`` padded positions (:func:`token_batches`), so
    mixed lengths are not padded to the longest of a large batch; ``Batch.index`` is the store
    row. Rank ``r`` of ``world_size`` gets every ``world_size``-th batch: the ranks together
    cover every entity exactly once. The sizes are :class:`EncodeOptions`', checked there."""
    view = full_view(store)
    lengths = np.minimum(view.lengths, history_len)
    batches = token_batches(np.argsort(lengths, kind="stable"), lengths, max_tokens, batch_size)
    for idx in batches[rank::world_size]:
        yield collate(view, idx, history_len, with_seen=with_seen)
