"""Chunked full ranking against the dense scores it replaces: ranks of the target and top k, the
normaliser, and the threshold an item outside the history is counted by."""

from __future__ import annotations

import pytest
import torch

import seqenc.model.ranking as ranking
from seqenc.model.ranking import NextItemScorer, least_clearing
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
    monkeypatch.setattr(ranking, "PASS_ELEMENTS", 64 * B)  # the rank's pass too
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


def crowded_scorer(gate: float | None) -> NextItemScorer:
    """Many items, their logits packed around every target (so many fall on the tie floor's edge),
    histories with repeats, a seen item that is the target, and ``gate`` (``None``: no head).
    Each state is a power of two on one axis, so every logit is one exact product: the whole
    catalogue's matmul and the scorer's spans give the same bits on any CPU."""
    gen = torch.Generator().manual_seed(1)
    b, n = 16, 3000
    rows = torch.arange(b)
    state = torch.zeros(b, D)
    state[rows, rows % D] = 2.0 ** (rows // D).float()
    weight = torch.randn(n, D, generator=gen) * 0.05
    if gate is None:
        return NextItemScorer(state, weight, seen=torch.tensor([[0, 1], [5, 20]]))
    items = torch.randint(3, 60, (b, 2 * L), generator=gen)
    mass = torch.softmax(torch.randn(b, 2 * L, generator=gen), dim=1)
    mass[:, -1] = 0.0  # padding: never copied
    g = torch.full((b,), gate)
    g[0], g[3] = 0.0, 1.0  # the catalogue alone; the copy alone (row 3's target is a repeat)
    return NextItemScorer(
        state, weight, items, mass, g.log(), (1 - g).log(), seen=torch.tensor([[0, 1], [5, 20]])
    )


@pytest.mark.parametrize("gate", [None, 0.3])
def test_ranks_count_the_items_the_dense_scores_count(monkeypatch, gate):
    """Every score written out with the scorer's own normaliser and compared with the tie floor:
    the same count, to the item, where thousands of logits crowd each target."""
    monkeypatch.setattr(ranking, "PASS_ELEMENTS", 256 * 16)  # twelve spans
    s = crowded_scorer(gate)
    gen = torch.Generator().manual_seed(3)
    target = torch.cat([torch.tensor([3, 20, 2999]), torch.randint(3, 3000, (13,), generator=gen)])
    if gate is not None:
        target[3:8] = s.copy_items[3:8, 0]  # repeats
    scores = s.scores(0, s.n_items)
    own = s.target_scores(target)
    floor = own - ranking.TIE_TOLERANCE * (1.0 + own.abs())
    ahead = scores >= floor[:, None]
    ahead[torch.arange(len(target)), target] = False
    want = ahead.sum(1).double().masked_fill(own == -torch.inf, torch.inf)
    assert s.target_ranks(target).tolist() == want.tolist()
    assert want[1] == torch.inf  # the seen target
    assert (want[2:].isfinite()).all() and want[2:].max() > 100
    if gate is not None:
        assert want[3] < 2 * L  # the copy alone: only the history's items can be ahead


def test_an_item_outside_the_history_counts_by_its_shifted_score_to_the_float(monkeypatch):
    """Logits on every float32 just below the target's (exact in any matmul: the state is a unit
    vector): wherever a row's tie floor falls, items sit on both sides of it to the last bit, and
    the rank counts those whose shifted score, rounded as :meth:`scores` rounds it, clears it."""
    monkeypatch.setattr(ranking, "PASS_ELEMENTS", 256 * 16)
    b, n = 16, 3000
    state = torch.zeros(b, D)
    state[:, 0] = 1.0
    bits = torch.tensor(1.0).view(torch.int32) - torch.arange(n - 3, dtype=torch.int32)
    weight = torch.zeros(n, D)
    weight[3:, 0] = bits.view(torch.float32)  # item 3 scores 1.0, item 4 the float below, ...
    gate = torch.linspace(0.05, 0.95, b)
    items = torch.full((b, 2), 2999)  # the history: the lowest logit, far from every floor
    mass = torch.tensor([[1.0, 0.0]]).expand(b, -1)
    s = NextItemScorer(state, weight, items, mass, gate.log(), (1 - gate).log())
    target = torch.full((b,), 3)
    scores = s.scores(0, n)
    own = s.target_scores(target)
    floor = own - ranking.TIE_TOLERANCE * (1.0 + own.abs())
    want = (scores >= floor[:, None]).sum(1) - 1  # the target clears its own floor
    assert s.target_ranks(target).tolist() == want.double().tolist()
    assert want.min() > 10 and want.max() < n - 10  # every floor inside the packed logits


def test_the_normaliser_is_the_logsumexp_of_every_logit(monkeypatch):
    monkeypatch.setattr(ranking, "PASS_ELEMENTS", 256 * 16)
    s = crowded_scorer(0.3)
    s.state[2] *= 100.0  # a row of logits spread far apart: each span's own peak must hold
    logits = (s.state.double() @ s.weight.double().T)[:, 3:]
    torch.testing.assert_close(
        s.log_normaliser().double(), torch.logsumexp(logits, 1), rtol=1e-6, atol=1e-6
    )


def test_the_normaliser_keeps_its_gradient(monkeypatch):
    monkeypatch.setattr(ranking, "PASS_ELEMENTS", 256 * 16)
    s = crowded_scorer(0.3)
    s.state.requires_grad_(True)
    (got,) = torch.autograd.grad(s.log_normaliser().sum(), s.state)
    (want,) = torch.autograd.grad(torch.logsumexp(s.state @ s.weight[3:].T, 1).sum(), s.state)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)


def test_the_least_clearing_logit_clears_and_the_float_below_it_does_not():
    gen = torch.Generator().manual_seed(2)
    floor = torch.randn(2000, generator=gen) * 20
    shift = torch.randn(2000, generator=gen) * torch.tensor([1e-3, 1.0, 30.0]).repeat(667)[:2000]
    shift[:10] = 0.0
    t = least_clearing(floor, shift)
    below = torch.nextafter(t, torch.tensor(-torch.inf))
    assert (t + shift >= floor).all()
    assert not (below + shift >= floor).any()
    assert torch.equal(t[:10], floor[:10])
    edge = least_clearing(torch.tensor([-torch.inf, 1.0]), torch.tensor([0.0, -torch.inf]))
    assert edge.tolist() == [-torch.inf, torch.inf]  # everything clears; nothing does
