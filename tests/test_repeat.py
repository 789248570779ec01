"""The repeat head against naive references: copy weights, mixture likelihood, scores, gradients."""

from __future__ import annotations

import math

import pytest
import torch

import seqenc.model.normaliser as normaliser
from seqenc.model.batch import Batch
from seqenc.model.normaliser import exact_logsumexp
from seqenc.model.ranking import NextItemScorer
from seqenc.model.repeat import RepeatHead, mixture_nll, newest_copy, step_bucket

N_ITEMS = 12


def batch() -> Batch:
    items = torch.tensor([[3, 4, 3, 5, 3, 0], [6, 7, 2, 6, 0, 0]])  # 2 = UNK, never copied
    lengths = torch.tensor([5, 4])
    gen = torch.Generator().manual_seed(0)
    dt_prev = torch.rand(2, 6, generator=gen) * 1e4
    dt_ref = dt_prev.flip(1).cumsum(1).flip(1)
    return Batch(
        items=items,
        lengths=lengths,
        dt_prev=dt_prev,
        dt_ref=dt_ref,
        categorical=torch.zeros(2, 6, 0, dtype=torch.long),
        numeric=torch.zeros(2, 6, 0),
        index=torch.arange(2),
        dt_query=torch.tensor([100.0, 5000.0]),
    )


def naive_log_p(head, hidden, b, weight, row, i, v) -> float:
    """log P(v | row, position i) by the definition, one loop per event."""
    catalogue = torch.log_softmax(hidden[row, i] @ weight[3:].T, dim=0)
    log_cat = catalogue[v - 3]
    a = head.attention(hidden, b)[row, i]
    allowed = [j for j in range(i + 1) if j < b.lengths[row] and b.items[row, j] >= 3]
    assert math.isclose(float(a[allowed].sum()), 1.0, rel_tol=1e-5)
    assert float(a.sum() - a[allowed].sum()) == 0.0
    copied = sum(float(a[j]) for j in allowed if b.items[row, j] == v)
    g = torch.sigmoid(head.gate(hidden[row, i])).item()
    return math.log((1 - g) * math.exp(float(log_cat)) + g * copied)


@pytest.mark.parametrize("time", [True, False])
def test_mixture_nll_matches_the_definition(time):
    torch.manual_seed(0)
    head = RepeatHead(8, 16, time=time, query_time=True)
    hidden = torch.randn(2, 6, 8)
    weight = torch.randn(N_ITEMS, 8)
    b = batch()
    labels = torch.full((2, 6), -100)
    labels[0, :4] = torch.tensor([4, 3, 5, 3])  # repeats and a first occurrence
    labels[1, :3] = torch.tensor([7, 9, 6])  # 9 never seen: copy part is 0
    expected = [
        naive_log_p(head, hidden, b, weight, r, i, int(labels[r, i]))
        for r in range(2)
        for i in range(6)
        if labels[r, i] >= 3
    ]
    got = mixture_nll(head, hidden, b, weight, labels)
    assert math.isclose(float(got), -sum(expected) / len(expected), rel_tol=1e-5)


def test_scores_are_the_mixture_at_the_newest_position():
    torch.manual_seed(1)
    head = RepeatHead(8, 16, time=True, query_time=True)
    hidden, weight, b = torch.randn(2, 6, 8), torch.randn(N_ITEMS, 8), batch()
    state = hidden[torch.arange(2), b.lengths - 1]
    scores = NextItemScorer(state, weight, b.items, *newest_copy(head, hidden, b)).scores(
        0, N_ITEMS
    )
    for r in range(2):
        i = int(b.lengths[r]) - 1
        for v in range(3, N_ITEMS):
            assert math.isclose(
                float(scores[r, v]), naive_log_p(head, hidden, b, weight, r, i, v), rel_tol=1e-5
            )
    assert torch.allclose(scores.exp()[:, 3:].sum(1), torch.ones(2), atol=1e-5)


@pytest.mark.parametrize("kept", [normaliser.KEPT_ELEMENTS, 0])  # exponentials kept, or chunks
@pytest.mark.parametrize("scale", [1.0, 10.0])  # logits up to about 100: the max subtracted
def test_exact_logsumexp_values_and_gradients(monkeypatch, kept, scale):
    monkeypatch.setattr(normaliser, "KEPT_ELEMENTS", kept)
    torch.manual_seed(2)
    h = (scale * torch.randn(300, 16, dtype=torch.float64)).requires_grad_()
    w = torch.randn(50, 16, dtype=torch.float64, requires_grad=True)
    upstream = torch.randn(300, dtype=torch.float64)
    (exact_logsumexp(h.float(), w.float()).double() * upstream).sum().backward()
    gh, gw = h.grad.clone(), w.grad.clone()
    h.grad = w.grad = None
    expected = torch.logsumexp(h @ w.T, dim=1)
    (expected * upstream).sum().backward()
    assert torch.allclose(
        exact_logsumexp(h.float(), w.float()).double(), expected, atol=1e-4 * scale
    )
    for ours, reference in ((gh, h.grad), (gw, w.grad)):  # float32 sums: to their magnitude
        assert torch.allclose(ours, reference, atol=1e-5 * float(reference.abs().max()))


def test_step_buckets():
    steps = torch.tensor([0, 1, 2, 3, 4, 5, 8, 9, 10**6])
    assert step_bucket(steps).tolist() == [0, 1, 2, 3, 3, 4, 4, 5, 15]


def loop_nll(head, hidden, b, weight, labels) -> torch.Tensor:
    """The mixture NLL written out event by event from the definition (scalar autograd), as an
    independent reference for the dense training path's values and gradients."""
    log_ps = []
    for r in range(len(b)):
        n = int(b.lengths[r])
        for i in range(n):
            v = int(labels[r, i])
            if v < 3:
                continue
            q, scores, hits = head.query(hidden[r, i]), [], []
            for j in range(i + 1):
                if int(b.items[r, j]) < 3:
                    continue
                s = q @ head.key(hidden[r, j]) / math.sqrt(head.d_key)
                s = s + head.steps.weight[min(math.ceil(math.log2(max(i - j, 1))) + (i > j), 15), 0]
                if head.ago is not None:
                    gap = float(b.dt_prev[r, i + 1]) if i + 1 < n else float(b.dt_query[r])
                    ago = float(b.dt_ref[r, j]) - float(b.dt_ref[r, i]) + gap
                    bucket = min(max(math.floor(math.log(max(ago, 1.0)) / 0.301), 0), 15)
                    s = s + head.ago.weight[bucket, 0]
                scores.append(s)
                hits.append(int(b.items[r, j]) == v)
            copy = torch.softmax(torch.stack(scores), 0) if scores else torch.zeros(0)
            copied = sum((c for c, hit in zip(copy, hits, strict=True) if hit), torch.tensor(0.0))
            g = torch.sigmoid(head.gate(hidden[r, i]))[0]
            catalogue = torch.softmax(hidden[r, i] @ weight[3:].T, 0)[v - 3]
            log_ps.append(torch.log((1 - g) * catalogue + g * copied))
    return -torch.stack(log_ps).mean()


@pytest.mark.parametrize("time", [True, False])
def test_mixture_nll_values_and_gradients_match_a_loop(time):
    """The dense path (shared step buckets, indexed bias tables, [B, L, L] target mass) against
    the event-by-event definition: loss and every gradient to float noise."""
    torch.manual_seed(3)
    head = RepeatHead(8, 16, time=time, query_time=True)
    with torch.no_grad():  # non-zero biases, so their gradients and lookups are exercised
        head.steps.weight.normal_()
        if head.ago is not None:
            head.ago.weight.normal_()
    hidden = torch.randn(2, 6, 8, requires_grad=True)
    weight = torch.randn(N_ITEMS, 8, requires_grad=True)
    b = batch()
    labels = torch.full((2, 6), -100)
    labels[0, :5] = torch.tensor([4, 3, 5, 3, 4])
    labels[1, :4] = torch.tensor([7, 9, 6, 7])
    params = [hidden, weight, *head.parameters()]
    got = mixture_nll(head, hidden, b, weight, labels)
    got_grads = torch.autograd.grad(got, params)
    expected = loop_nll(head, hidden, b, weight, labels)
    expected_grads = torch.autograd.grad(expected, params)
    assert math.isclose(float(got), float(expected), rel_tol=1e-5)
    for g, e in zip(got_grads, expected_grads, strict=True):
        assert torch.allclose(g, e, rtol=1e-5, atol=1e-6)
