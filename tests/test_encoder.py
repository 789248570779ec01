"""SequenceEncoder: shapes, causality, padding invariance, empty rows, the appended MASK, learning."""

from __future__ import annotations

import itertools
import math

import pytest
import torch
import torch.nn.functional as F

from seqenc.data.batches import Batch
from seqenc.errors import SeqencError
from seqenc.model.embeddings import signed_log, time_bucket
from seqenc.model.encoder import EncoderConfig, SequenceEncoder
from seqenc.model.losses import full_softmax_ce
from seqenc.model.masking import next_item_targets
from seqenc.model.objectives import Masked

MASK, N_SPECIAL = (
    1,
    3,
)  # vocabulary constants (seqenc.data.vocab), hardcoded as an independent check
N_ITEMS = 40


def make_batch(
    histories: list[list[int]], width: int | None = None, n_cat: int = 0, n_num: int = 0
) -> Batch:
    """Right-padded batch of ``histories`` with deterministic times and features, padded to ``width``."""
    width = width or max(1, max(len(h) for h in histories))
    n = len(histories)
    items = torch.zeros(n, width, dtype=torch.int64)
    dt_prev = torch.zeros(n, width)
    dt_ref = torch.zeros(n, width)
    categorical = torch.zeros(n, width, n_cat, dtype=torch.int64)
    numeric = torch.zeros(n, width, n_num)
    for row, history in enumerate(histories):
        k = len(history)
        items[row, :k] = torch.tensor(history, dtype=torch.int64)
        gaps = torch.tensor([60.0 * 3 ** (j % 5) if j else 0.0 for j in range(k)])
        dt_prev[row, :k] = gaps
        dt_ref[row, :k] = gaps.flip(0).cumsum(0).flip(0) - gaps + 5.0  # time left to the reference
        categorical[row, :k] = torch.tensor(history, dtype=torch.int64)[:, None] % 3
        numeric[row, :k] = torch.tensor(history, dtype=torch.float32)[:, None] * -7.5
    return Batch(
        items=items,
        lengths=torch.tensor([len(h) for h in histories], dtype=torch.int64),
        dt_prev=dt_prev,
        dt_ref=dt_ref,
        categorical=categorical,
        numeric=numeric,
        index=torch.arange(n),
    )


def make_model(seed: int = 0, **overrides: object) -> SequenceEncoder:
    torch.manual_seed(seed)
    config = EncoderConfig(
        n_items=N_ITEMS, d_model=16, n_layers=2, n_heads=2, n_positions=13, **overrides
    )
    return SequenceEncoder(config).eval()


HISTORIES = [[5, 9, 7, 30, 12], [3, 4], [22, 23, 24, 25, 26, 27, 28, 29], [11]]
OPTIONS = list(
    itertools.product([True, False], ["learned", "rope", "none"], [True, False], ["last", "mean"])
)


def test_shapes_and_logits() -> None:
    model = make_model()
    batch = make_batch(HISTORIES)
    hidden = model(batch)
    assert hidden.shape == (4, 8, 16)
    assert model.entity_embedding(batch).shape == (4, 16)
    logits = model.item_logits(hidden)
    assert logits.shape == (4, 8, N_ITEMS)
    assert torch.isinf(logits[..., :N_SPECIAL]).all()
    torch.testing.assert_close(
        logits[..., N_SPECIAL:], hidden @ model.item_embedding.weight[N_SPECIAL:].T
    )
    assert model.item_embedding.padding_idx == 0
    assert model.item_embedding.weight.shape == (N_ITEMS, 16)


@pytest.mark.parametrize("positional", ["learned", "rope", "none"])
def test_causal_outputs_ignore_the_future(positional: str) -> None:
    # the query-time term is the one intended exception (tests/test_causality.py)
    model = make_model(positional=positional, query_time=False)
    batch = make_batch(HISTORIES)
    changed = make_batch(HISTORIES)
    changed.items[2, 5] = 33
    changed.dt_prev[2, 5] = 1e6
    a, b = model(batch), model(changed)
    torch.testing.assert_close(a[:, :5], b[:, :5], rtol=0, atol=1e-6)
    assert not torch.allclose(a[2, 5:], b[2, 5:])


@pytest.mark.parametrize(("causal", "positional", "time", "pooling"), OPTIONS)
def test_padding_invariance(causal: bool, positional: str, time: bool, pooling: str) -> None:
    model = make_model(
        causal=causal,
        positional=positional,
        time=time,
        pooling=pooling,
        categorical_sizes=(3, 4),
        n_numeric=2,
    )
    for histories in (HISTORIES, [h[:1] for h in HISTORIES], [h[:2] for h in HISTORIES[:2]]):
        tight = make_batch(
            histories, n_cat=2, n_num=2
        )  # the last two: every row full (no mask path)
        wide = make_batch(histories, width=tight.items.shape[1] + 4, n_cat=2, n_num=2)
        expected = torch.stack(
            [model.entity_embedding(make_batch([h], n_cat=2, n_num=2))[0] for h in histories]
        )
        torch.testing.assert_close(model.entity_embedding(tight), expected, rtol=0, atol=1e-5)
        torch.testing.assert_close(model.entity_embedding(wide), expected, rtol=0, atol=1e-5)


@pytest.mark.parametrize(
    ("causal", "positional"), list(itertools.product([True, False], ["learned", "rope", "none"]))
)
def test_newest_only_equals_the_full_forward(causal: bool, positional: str) -> None:
    """The readout shortcut (last block at the newest position only) is the full pass's row there."""
    model = make_model(
        causal=causal,
        positional=positional,
        time=True,
        query_time=True,
        categorical_sizes=(3, 4),
        n_numeric=2,
    )
    for histories in (HISTORIES, [[], [4, 5, 6]], [h[:2] for h in HISTORIES[:2]]):
        batch = make_batch(histories, width=10, n_cat=2, n_num=2)
        full = model(batch)
        newest = model(batch, newest_only=True)
        assert newest.shape == (len(histories), 1, 16)
        rows = torch.arange(len(histories))
        expected = full[rows, (batch.lengths - 1).clamp(min=0)]
        torch.testing.assert_close(newest[:, 0], expected, rtol=0, atol=1e-5)
        scores = model.item_scores(batch)
        query = Masked().query(batch) if not causal else batch
        hidden = model(query)
        last = hidden[rows, (query.lengths - 1).clamp(min=0)]
        torch.testing.assert_close(scores, model.item_logits(last), rtol=0, atol=1e-4)


@pytest.mark.parametrize(("causal", "positional", "time", "pooling"), OPTIONS)
def test_empty_histories_are_finite(
    causal: bool, positional: str, time: bool, pooling: str
) -> None:
    model = make_model(
        causal=causal, positional=positional, time=time, pooling=pooling, normalize=True
    )
    for histories in ([[], [4, 5, 6]], [[], []]):
        batch = make_batch(histories, width=3)
        assert torch.isfinite(model(batch)).all()
        embedding = model.entity_embedding(batch)
        assert torch.isfinite(embedding).all()
    # the real row is unaffected by sharing a batch with an empty one
    alone = model.entity_embedding(make_batch([[4, 5, 6]]))
    torch.testing.assert_close(
        model.entity_embedding(make_batch([[], [4, 5, 6]]))[1], alone[0], rtol=0, atol=1e-5
    )


def test_append_mask() -> None:
    batch = make_batch([[5, 6, 7], [8], []], width=4)
    out = Masked().query(batch)
    assert out.items.shape == (3, 4)  # no row was full: width unchanged
    assert out.lengths.tolist() == [4, 2, 1]
    assert out.items.tolist() == [[5, 6, 7, MASK], [8, MASK, 0, 0], [MASK, 0, 0, 0]]
    assert out.dt_prev[0, 3] == batch.dt_ref[0, 2] and out.dt_prev[1, 1] == batch.dt_ref[1, 0]
    assert out.dt_prev[2, 0] == 0 and (out.dt_ref[[0, 1, 2], [3, 1, 0]] == 0).all()
    assert out.index is batch.index and batch.lengths.tolist() == [3, 1, 0]  # input untouched
    full = Masked().query(make_batch([[5, 6, 7], [8]]))
    assert (
        full.items.shape == (2, 4) and full.items[0, 3] == MASK and full.lengths.tolist() == [4, 2]
    )


def test_bidirectional_embedding_sees_the_whole_history() -> None:
    model = make_model(causal=False, time=False)
    a = model.entity_embedding(make_batch([[5, 6, 7, 8]]))
    b = model.entity_embedding(make_batch([[9, 6, 7, 8]]))
    assert not torch.allclose(a, b)
    # equals the hidden state at the appended MASK
    hidden = model(make_batch([[5, 6, 7, 8, MASK]]))
    torch.testing.assert_close(a[0], hidden[0, 4], rtol=0, atol=1e-6)


def test_mean_pooling_and_normalize() -> None:
    model = make_model(pooling="mean", normalize=True)
    batch = make_batch([[5, 6, 7], [8, 9]])
    hidden = model(batch)
    expected = torch.stack([hidden[0, :3].mean(0), hidden[1, :2].mean(0)])
    torch.testing.assert_close(model.entity_embedding(batch), F.normalize(expected, dim=-1))
    torch.testing.assert_close(model.entity_embedding(batch).norm(dim=-1), torch.ones(2))


def test_dropout_only_in_training() -> None:
    model = make_model(dropout=0.5)
    batch = make_batch(HISTORIES)
    torch.testing.assert_close(model(batch), model(batch), rtol=0, atol=0)
    model.train()
    assert not torch.allclose(model(batch), model(batch))


def test_features_change_the_output() -> None:
    model = make_model(categorical_sizes=(3,), n_numeric=1)
    batch = make_batch(HISTORIES, n_cat=1, n_num=1)
    other = make_batch(HISTORIES, n_cat=1, n_num=1)
    other.numeric[0, 0, 0] = 1000.0
    assert not torch.allclose(model(batch)[0, 0], model(other)[0, 0])


def test_time_bucket_and_signed_log() -> None:
    dt = torch.tensor([0.0, 0.5, 1.0, 2.0, 10.0, 3600.0, 1e12])
    expected = [0, 0, 0, math.floor(math.log(2) / 0.301), 7, math.floor(math.log(3600) / 0.301), 63]
    assert time_bucket(dt, 64).tolist() == expected
    torch.testing.assert_close(
        signed_log(torch.tensor([-math.e + 1, 0.0, 99.0])), torch.tensor([-1.0, 0.0, math.log(100)])
    )


def test_bad_inputs_raise_seqenc_error() -> None:
    with pytest.raises(SeqencError, match="n_heads"):
        EncoderConfig(n_items=10, d_model=10, n_heads=3)
    with pytest.raises(SeqencError, match="positional"):
        EncoderConfig(n_items=10, positional="sinusoidal")
    with pytest.raises(SeqencError, match="rotary"):
        SequenceEncoder(EncoderConfig(n_items=10, d_model=6, n_heads=2, positional="rope"))
    model = make_model()
    with pytest.raises(SeqencError, match="n_positions"):
        model(make_batch([list(range(3, 17))]))
    with pytest.raises(SeqencError, match="categorical"):
        model(make_batch(HISTORIES, n_cat=1))
    with pytest.raises(SeqencError, match="numeric"):
        model(make_batch(HISTORIES, n_num=2))


def test_learns_a_deterministic_successor() -> None:
    """A causal model trained with the fused CE learns ``next = current + 1`` almost perfectly."""
    torch.manual_seed(0)
    model = SequenceEncoder(
        EncoderConfig(n_items=23, d_model=32, n_heads=2, n_positions=11, dropout=0.0)
    )
    generator = torch.Generator().manual_seed(0)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    for _ in range(60):
        starts = torch.randint(3, 13, (32,), generator=generator)
        lengths = torch.randint(2, 11, (32,), generator=generator)
        histories = [
            list(range(s, s + n)) for s, n in zip(starts.tolist(), lengths.tolist(), strict=True)
        ]
        batch = make_batch(histories)
        labels = next_item_targets(batch.items, batch.lengths)
        loss = full_softmax_ce(
            model(batch).flatten(0, 1), model.item_embedding.weight, labels.flatten()
        )
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.eval()
    test = make_batch([[4, 5, 6], [10, 11, 12, 13, 14, 15], [7]])
    predicted = model.item_logits(model.entity_embedding(test)).argmax(-1)
    assert predicted.tolist() == [7, 16, 8]


@pytest.mark.parametrize("causal", [True, False])
def test_next_item_head_reads_the_newest_state_whatever_the_entity_readout(causal: bool) -> None:
    # Trained on the raw state at each position, the next-item head must rank from the newest one
    # also when the entity embedding is a normalised mean (account_embeddings.yaml): one bundle,
    # both jobs. Before, a mean-pooled bundle ranked from the mean and lost most of its NDCG.
    torch.manual_seed(0)
    pooled = make_model(causal=causal, pooling="mean", normalize=True)
    last = make_model(causal=causal, pooling="last", normalize=False)
    last.load_state_dict(pooled.state_dict())
    batch = make_batch(HISTORIES)
    query = Masked().query(batch) if not causal else batch
    hidden = pooled(query)
    newest = hidden[torch.arange(len(HISTORIES)), query.lengths - 1]
    torch.testing.assert_close(pooled.item_scores(batch), pooled.item_logits(newest))
    torch.testing.assert_close(pooled.item_scores(batch), last.item_scores(batch))
    # ... while the entity embedding stays the normalised mean.
    mean = (hidden * query.padding_mask[..., None]).sum(1) / query.lengths[:, None]
    expected = torch.nn.functional.normalize(mean, dim=-1)
    torch.testing.assert_close(pooled.entity_embedding(batch), expected, rtol=1e-5, atol=1e-5)
