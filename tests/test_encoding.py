"""The encoding core (seqenc.encoding) and the one readout rule (seqenc.model.readout), each
against a naive reference."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from tiny import SCHEMA, tiny_events

from seqenc.data.sequences import build_sequences
from seqenc.encoding import Counts, EncodeOptions, embed_batches, iter_batches
from seqenc.encoding.options import check_choice, positive_int
from seqenc.errors import SeqencError
from seqenc.model.readout import entity_readout, pool


def test_counts_add_up_over_stores_and_carry_three_to_outputs():
    a = Counts(2, 1, {"channel": 3}, n_events=10, n_entities=4)
    b = Counts(5, 0, {"channel": 1, "event_type": 2}, n_events=7, n_entities=3)
    total = a + b
    assert (total.n_unknown_items, total.n_skipped, total.n_events, total.n_entities) == (
        7,
        1,
        17,
        7,
    )
    assert total.n_unknown_categorical == {"channel": 4, "event_type": 2}
    assert a.n_unknown_categorical == {"channel": 3}  # the operands stay as they were
    assert total.output() == {
        "n_unknown_items": 7,
        "n_skipped": 1,
        "n_unknown_categorical": {"channel": 4, "event_type": 2},
    }


def test_option_checks_are_one_line_naming_the_option():
    with pytest.raises(
        SeqencError, match=r"^on_empty must be one of \('raise', 'skip'\), got 'x'$"
    ):
        check_choice("on_empty", "x", ("raise", "skip"))
    for bad in (0, -1, True, 1.5, "3"):
        with pytest.raises(SeqencError, match="^batch_size must be a positive integer"):
            positive_int("batch_size", bad)
    assert positive_int("batch_size", 3) == 3


@pytest.mark.parametrize("pooling", ["last", "mean"])
@pytest.mark.parametrize("normalize", [False, True])
def test_entity_readout_equals_a_row_by_row_reference(pooling, normalize):
    g = torch.Generator().manual_seed(0)
    hidden = torch.randn(4, 5, 3, generator=g)
    lengths = torch.tensor([5, 2, 1, 0])
    expected = []
    for row, n in zip(hidden, lengths.tolist(), strict=True):
        if pooling == "last":
            vector = row[max(n - 1, 0)]
        else:
            vector = row[:n].sum(0) / max(n, 1)
        expected.append(F.normalize(vector, dim=0) if normalize else vector)
    got = entity_readout(hidden, lengths, pooling, normalize)
    torch.testing.assert_close(got, torch.stack(expected), rtol=1e-6, atol=1e-6)


def test_pool_from_running_sums_equals_the_readout_of_all_states():
    """The cache path's summaries (newest state, sum, count) give the same embedding."""
    hidden = torch.randn(2, 4, 3, generator=torch.Generator().manual_seed(1))
    lengths = torch.tensor([4, 3])
    newest = hidden[torch.arange(2), lengths - 1]
    total = torch.stack([hidden[0, :4].sum(0), hidden[1, :3].sum(0)])
    for pooling in ("last", "mean"):
        torch.testing.assert_close(
            pool(newest, total, lengths, pooling, True),
            entity_readout(hidden, lengths, pooling, True),
        )


class RowIndex:
    """A backend whose 'embedding' is the store row and the history length of each batch row."""

    def embed(self, batch):
        return np.stack([batch.index.numpy(), batch.lengths.numpy()], axis=1).astype(np.float32)


def test_batches_cover_every_history_once_and_results_land_on_their_rows():
    store, _ = build_sequences(tiny_events(40), SCHEMA, keep_newest=None)
    history_len = 7
    out = np.zeros((len(store), 2), dtype=np.float32)
    options = EncodeOptions(batch_size=5, max_tokens=20)
    for rows, embeddings in embed_batches(store, RowIndex(), history_len, options):
        out[rows] = embeddings
    np.testing.assert_array_equal(out[:, 0], np.arange(len(store)))
    np.testing.assert_array_equal(out[:, 1], np.minimum(store.lengths, history_len))
    seen = []
    for rank in range(3):
        for batch in iter_batches(store, history_len, 5, rank, 3, max_tokens=20):
            assert len(batch) <= 5 and batch.items.numel() <= max(20, batch.items.shape[1])
            seen.extend(batch.index.tolist())
    assert sorted(seen) == list(range(len(store)))
