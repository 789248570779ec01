"""Token vectors: the sum of the embedding parts, checked against a sum written out by hand, on both
paths (one gather per table while training; one ``embedding_bag`` over cached tables at inference)."""

from __future__ import annotations

import pytest
import torch

import seqenc.model.embeddings as embeddings
from seqenc.model.batch import Batch
from seqenc.model.embeddings import TokenEmbedding, time_bucket
from tests.test_encoder import HISTORIES, make_batch

BATCH = make_batch(HISTORIES, n_cat=1, n_num=1)

N_ITEMS, D, MAX_LEN, BUCKETS = 40, 8, 12, 16


def make_embedding(**overrides: object) -> TokenEmbedding:
    torch.manual_seed(0)
    options = dict(
        n_items=N_ITEMS,
        d_model=D,
        n_positions=MAX_LEN + 1,
        learned_positions=True,
        time=True,
        query_time=True,
        recency=False,
        n_time_buckets=BUCKETS,
        categorical_sizes=(3,),
        n_numeric=1,
    )
    return TokenEmbedding(**{**options, **overrides})


def naive_sum(
    embedding: TokenEmbedding, batch: Batch, positions: torch.Tensor | None = None
) -> torch.Tensor:
    """Each part indexed from its weight table and added, position by position."""
    items, mask, categorical, numeric = (
        batch.items,
        batch.padding_mask,
        batch.categorical,
        batch.numeric,
    )
    dt_prev, dt_ref, dt_query = batch.dt_prev, batch.dt_ref, batch.query_gaps
    rows, width = items.shape
    out = torch.zeros(rows, width, D)
    for b in range(rows):
        for i in range(width):
            pad = not bool(mask[b, i])

            def bucket(gaps: torch.Tensor, b: int = b, i: int = i, pad: bool = pad) -> int:
                return BUCKETS if pad else int(time_bucket(gaps[b, i : i + 1], BUCKETS))

            position = i if positions is None else int(positions[b, i])
            vector = embedding.item.weight[items[b, i]] + embedding.position.weight[position]
            vector = vector + embedding.dt_prev.weight[bucket(dt_prev)]
            vector = vector + embedding.dt_query.weight[bucket(dt_query)]
            if embedding.dt_ref is not None:
                vector = vector + embedding.dt_ref.weight[bucket(dt_ref)]
            vector = vector + embedding.categorical[0].weight[categorical[b, i, 0]]
            x = numeric[b, i]
            vector = vector + embedding.numeric(torch.sign(x) * torch.log1p(x.abs()))
            out[b, i] = vector
    return out


@pytest.mark.parametrize("recency", [False, True])
@pytest.mark.parametrize("given_positions", [False, True])
@pytest.mark.parametrize("grad", [True, False])
def test_token_vectors_equal_a_naive_sum(recency: bool, given_positions: bool, grad: bool) -> None:
    embedding = make_embedding(recency=recency)
    width = BATCH.items.shape[1]
    positions = (torch.arange(width)[None, :] + torch.tensor([[0], [2], [1], [3]])).clamp(
        max=MAX_LEN
    )
    positions = positions if given_positions else None
    with torch.set_grad_enabled(grad):
        out = embedding(BATCH, positions)
    assert (embedding._packed is not None) == (not grad)  # inference took the one-pass path
    with torch.no_grad():
        expected = naive_sum(embedding, BATCH, positions)
        torch.testing.assert_close(out, expected, rtol=0, atol=1e-6)


def test_inference_cache_follows_in_place_weight_changes() -> None:
    embedding = make_embedding()
    with torch.no_grad():
        embedding(BATCH)
        embedding.item.weight.mul_(3.0)  # as load_state_dict or an optimiser step would
        embedding.dt_prev.weight.add_(1.0)
        torch.testing.assert_close(embedding(BATCH), naive_sum(embedding, BATCH), rtol=0, atol=1e-6)


def test_training_gradients_reach_every_table() -> None:
    embedding = make_embedding()
    embedding(BATCH).sum().backward()
    for name, param in embedding.named_parameters():
        assert param.grad is not None and param.grad.abs().sum() > 0, name


@pytest.mark.parametrize("case", ["large tables", "built under inference_mode"])
def test_fallbacks_look_up_each_table(case: str, monkeypatch: pytest.MonkeyPatch) -> None:
    if case == "large tables":
        monkeypatch.setattr(embeddings, "MAX_PACKED_BYTES", 0)
        embedding = make_embedding()
    else:
        with torch.inference_mode():
            embedding = make_embedding()
    with torch.inference_mode():
        out = embedding(BATCH)
        expected = naive_sum(embedding, BATCH)
    assert embedding._packed is None
    torch.testing.assert_close(out, expected, rtol=0, atol=1e-6)
