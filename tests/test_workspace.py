"""The logits' workspace (seqenc/model/workspace.py) under shared_logsumexp: the same values and
gradients as fresh memory, and a buffer never lent while a pending backward pass can read it
(several calls before one backward, a retained graph, no graph, a dropped graph, any order)."""

from __future__ import annotations

import gc

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from seqenc.model import workspace
from seqenc.model.sampled import shared_logsumexp


@pytest.fixture
def pool(monkeypatch) -> workspace._Pool:
    """A fresh pool that lends every matrix, however small."""
    monkeypatch.setattr(workspace, "MIN_ELEMENTS", 1)
    monkeypatch.setattr(workspace, "POOL", workspace._Pool())
    return workspace.POOL


def leaves(seed: int, rows: int = 5, cols: int = 7, d: int = 4):
    gen = torch.Generator().manual_seed(seed)
    hidden = torch.randn(rows, d, generator=gen).requires_grad_()
    vectors = torch.randn(cols, d, generator=gen).requires_grad_()
    return hidden, vectors, torch.randn(cols, generator=gen), torch.rand(rows, generator=gen)


def reference(hidden, vectors, log_count, upstream):
    """Float64: the value and the gradients of ``upstream · logsumexp(hidden @ vectors.T - c)``."""
    h, v = (t.detach().double().requires_grad_() for t in (hidden, vectors))
    value = torch.logsumexp(h @ v.T - log_count.double(), 1)
    (value * upstream.double()).sum().backward()
    return value.detach(), h.grad, v.grad


def check(hidden, vectors, log_count, upstream, value) -> None:
    want, grad_h, grad_v = reference(hidden, vectors, log_count, upstream)
    torch.testing.assert_close(value.detach().double(), want, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(hidden.grad.double(), grad_h, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(vectors.grad.double(), grad_v, rtol=1e-4, atol=1e-5)


def lent_pointers(pool) -> set[int]:
    return {b.data_ptr() for b in pool.free}


def test_steps_reuse_one_buffer_with_the_values_and_gradients_of_fresh_memory(pool, monkeypatch):
    pointers = []
    for seed in range(3):
        hidden, vectors, log_count, upstream = leaves(seed)
        value = shared_logsumexp(hidden, vectors, log_count)
        assert pool.free == []  # lent to this call until its backward pass
        (value * upstream).sum().backward()
        check(hidden, vectors, log_count, upstream, value)
        pointers.append(lent_pointers(pool))
    assert pointers[0] == pointers[1] == pointers[2] and len(pointers[0]) == 1
    fresh = leaves(0)
    monkeypatch.setattr(workspace, "MIN_ELEMENTS", 10**9)  # the allocator's memory
    (shared_logsumexp(*fresh[:3]) * fresh[3]).sum().backward()
    hidden, vectors, log_count, upstream = leaves(0)
    monkeypatch.setattr(workspace, "MIN_ELEMENTS", 1)
    (shared_logsumexp(hidden, vectors, log_count) * upstream).sum().backward()
    torch.testing.assert_close(hidden.grad, fresh[0].grad)
    torch.testing.assert_close(vectors.grad, fresh[1].grad)


def test_calls_before_one_backward_each_hold_their_own_buffer(pool):
    hidden, vectors, log_count, upstream = leaves(9)
    shared_logsumexp(hidden.detach(), vectors.detach(), log_count)  # no graph: back at once
    spare = lent_pointers(pool)
    assert len(spare) == 1
    with torch.inference_mode():
        shared_logsumexp(hidden, vectors, log_count)
    assert lent_pointers(pool) == spare
    cases = [leaves(seed) for seed in range(3)]
    values = [shared_logsumexp(h, v, c) for h, v, c, _ in cases]
    assert pool.free == []
    sum((value * case[3]).sum() for value, case in zip(values, cases, strict=True)).backward()
    for (h, v, c, u), value in zip(cases, values, strict=True):
        check(h, v, c, u, value)
    assert len(lent_pointers(pool)) == 3 and spare < lent_pointers(pool)


def test_a_retained_graph_keeps_its_buffer_until_it_is_dropped(pool):
    hidden, vectors, log_count, upstream = leaves(1)
    value = shared_logsumexp(hidden, vectors, log_count)
    (value * upstream).sum().backward(retain_graph=True)
    first = hidden.grad.clone(), vectors.grad.clone()
    other = leaves(2)
    (shared_logsumexp(*other[:3]) * other[3]).sum().backward()  # must not overwrite the first's
    hidden.grad = vectors.grad = None
    (value * upstream).sum().backward()
    torch.testing.assert_close((hidden.grad, vectors.grad), first)
    assert len(pool.free) == 2  # the second call's, and the first's once released


def test_a_larger_matrix_replaces_the_buffer_it_outgrows(pool):
    for rows in (3, 5, 2):
        hidden, vectors, log_count, upstream = leaves(rows, rows=rows)
        value = shared_logsumexp(hidden, vectors, log_count)
        (value * upstream).sum().backward()
        check(hidden, vectors, log_count, upstream, value)
    assert [b.numel() for b in pool.free] == [5 * 7]


def test_a_graph_dropped_without_backward_gives_its_buffer_back(pool):
    hidden, vectors, log_count, _ = leaves(4)
    value = shared_logsumexp(hidden, vectors, log_count)
    assert pool.free == []
    del value
    gc.collect()
    assert len(pool.free) == 1


@given(
    st.lists(
        st.tuples(st.integers(1, 6), st.integers(2, 9), st.booleans(), st.integers(0, 3)),
        min_size=1,
        max_size=8,
    )
)
def test_any_order_of_calls_and_backward_passes_matches_float64(steps):
    """Calls of any shape, with or without a graph, each followed by the backward passes of any
    number of the pending ones (oldest first): every value and gradient is the float64 one."""
    saved = workspace.MIN_ELEMENTS, workspace.POOL
    workspace.MIN_ELEMENTS, workspace.POOL = 1, workspace._Pool()
    try:
        pending = []
        for seed, (rows, cols, graph, backward) in enumerate(steps):
            hidden, vectors, log_count, upstream = leaves(seed, rows, cols)
            if graph:
                value = shared_logsumexp(hidden, vectors, log_count)
                pending.append((hidden, vectors, log_count, upstream, value))
            else:
                with torch.no_grad():
                    value = shared_logsumexp(hidden, vectors, log_count)
                want = reference(hidden, vectors, log_count, upstream)[0]
                torch.testing.assert_close(value.double(), want, rtol=1e-5, atol=1e-5)
            done, pending = pending[:backward], pending[backward:]
            for hidden, vectors, log_count, upstream, value in done:
                (value * upstream).sum().backward()
                check(hidden, vectors, log_count, upstream, value)
        for hidden, vectors, log_count, upstream, value in pending:
            (value * upstream).sum().backward()
            check(hidden, vectors, log_count, upstream, value)
    finally:
        workspace.MIN_ELEMENTS, workspace.POOL = saved
