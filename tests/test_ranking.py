"""Chunked full ranking against the dense scores it replaces: ranks of the target and top k."""

from __future__ import annotations

import pytest
import torch

import seqenc.model.ranking as ranking
from seqenc.model.ranking import NextItemScorer
from seqenc.training.metrics import target_ranks

N_ITEMS, B, L, D = 1000, 6, 5, 8


def scorer(mixture: bool, seen: bool) -> NextItemScorer:
    gen = torch.Generator().manual_seed(0)
    state = torch.randn(B, D, generator=gen)
    weight = torch.randn(N_ITEMS, D, generator=gen)
    weight[500] = weight[400]  # an exact tie with another item
    parts = {}
    if mixture:
        items = torch.randint(3, N_ITEMS, (B, L), generator=gen)
        items[:, 1] = items[:, 0]  # an item occurring twice in a history
        mass = torch.softmax(torch.randn(B, L, generator=gen), dim=1)
        gate = torch.rand(B, generator=gen)
        parts = dict(
            copy_items=items, copy_mass=mass, log_gate=gate.log(), log_not_gate=(1 - gate).log()
        )
    pairs = torch.tensor([[0, 0, 3, 5], [7, 400, 11, 999]]) if seen else None
    return NextItemScorer(state, weight, seen=pairs, **parts)


def dense(s: NextItemScorer) -> torch.Tensor:
    """Every item's score written out: the catalogue log-softmax mixed with the copy mass."""
    logits = s.state @ s.weight.T
    logits[:, :3] = -torch.inf
    if s.copy_mass is not None:
        copied = torch.zeros(B, N_ITEMS).scatter_add_(1, s.copy_items, s.copy_mass)
        mix = (1 - s.log_gate.exp())[:, None] * torch.softmax(logits, 1) + s.log_gate.exp()[
            :, None
        ] * copied
        logits = mix.log()
    if s.seen is not None:
        logits[s.seen[0], s.seen[1]] = -torch.inf
    return logits


@pytest.mark.parametrize("mixture", [False, True])
@pytest.mark.parametrize("seen", [False, True])
def test_chunked_scores_ranks_and_top_k_equal_the_dense_ones(monkeypatch, mixture, seen):
    monkeypatch.setattr(ranking, "CHUNK_ELEMENTS", 64 * B)  # 256-item chunks: four of them
    s = scorer(mixture, seen)
    assert s.chunk_size() == 256
    expected = dense(s)
    torch.testing.assert_close(
        torch.cat([c for _, c in s.chunks()], 1), expected, rtol=1e-5, atol=1e-5
    )
    target = torch.tensor([7, 400, 500, 5, 999, 3])  # filtered ones, a tie, the first real id
    want = target_ranks(expected, target).double()
    want[expected.gather(1, target[:, None])[:, 0] == -torch.inf] = torch.inf
    assert s.target_ranks(target).tolist() == want.tolist()
    values, items = s.top_k(7)
    top = expected.topk(7, dim=1)
    torch.testing.assert_close(values, top.values, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(expected.gather(1, items), values)


def test_a_constant_scorer_ranks_every_target_last():
    s = NextItemScorer(torch.zeros(2, 4), torch.randn(50, 4))
    assert s.target_ranks(torch.tensor([3, 49])).tolist() == [46.0, 46.0]  # 47 real items
