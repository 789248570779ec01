"""The sampled term's ``item_gradient: exact_rows``: the item table trained by the exact rows'
normalisers alone (scaled to every row's), against a float64 reference built from the exact
log-softmax, and the mean over draws against the exact term's gradient on the table."""

from __future__ import annotations

import math

import pytest
import torch

from seqenc.errors import SeqencError
from seqenc.model.losses import target_log_softmax
from seqenc.training.run_options import check_loss_options

N_SPECIAL = 3
N_ITEMS = 23  # 20 real items


def make_case(seed: int = 0, n_rows: int = 11, d: int = 6):
    """Rows in three groups, each group's window with padding and a repeated item; a weight per
    row on the output (as the repeat head's mixture gives)."""
    gen = torch.Generator().manual_seed(seed)
    hidden = torch.randn(n_rows, d, generator=gen)
    weight = torch.randn(N_ITEMS, d, generator=gen)
    group = torch.tensor([0, 1, 0, 1, 2, 2, 0, 1, 2, 0, 1])[:n_rows]
    items = torch.tensor([[5, 7, 7, 9, 0, 0], [4, 8, 11, 15, 8, 0], [3, 20, 21, 22, 6, 6]])
    targets = torch.tensor([7, 8, 9, 12, 20, 6, 5, 15, 22, 7, 4])[:n_rows]
    upstream = torch.rand(n_rows, generator=gen) + 0.5
    return hidden, weight, targets, (group, items), upstream


def exact_parts(hidden, weight, targets):
    """Float64, per row: the target's score and the exact normaliser over the real items."""
    positive = (hidden * weight[targets]).sum(-1)
    return positive, torch.logsumexp(hidden @ weight[N_SPECIAL:].T, dim=1)


def run(case, seed: int, **options):
    """``(log-probabilities, hidden's gradient, the table's dense gradient)`` of
    ``sum(upstream * log p)`` under the sampled term with ``options``."""
    hidden, weight, targets, groups, upstream = case
    h, w = hidden.clone().requires_grad_(), weight.clone().requires_grad_()
    out = target_log_softmax(
        h, w, targets, "sampled_softmax", n_negatives=4, groups=groups,
        generator=torch.Generator().manual_seed(seed), **options,
    )  # fmt: skip
    (out * upstream).sum().backward()
    return out.detach(), h.grad, w.grad.to_dense()


@pytest.mark.parametrize("share", [0.25, 0.5, 1.0])
def test_the_table_trains_from_every_target_and_the_exact_rows_scaled(share):
    case = make_case()
    hidden, weight, targets, _, upstream = case
    out, grad_h, grad_w = run(case, 0, exact_share=share, item_gradient="exact_rows")
    h64 = hidden.double()
    w64 = weight.double().requires_grad_()
    positive, normaliser = exact_parts(h64, w64, targets)
    picked = (out.double() - (positive - normaliser)).abs() < 1e-5  # the exact rows
    n_exact = math.ceil(share * len(targets))
    assert int(picked.sum()) == n_exact
    u = upstream.double()
    reference = (u * positive).sum() - len(targets) / n_exact * (u * normaliser)[picked].sum()
    reference.backward()
    torch.testing.assert_close(grad_w.double(), w64.grad, rtol=1e-4, atol=1e-5)
    assert (grad_w[:N_SPECIAL] == 0).all()
    # hidden's gradient is that of every row's (the same draws), only the table's differs
    _, all_h, all_w = run(case, 0, exact_share=share, item_gradient="all_rows")
    torch.testing.assert_close(grad_h, all_h, rtol=1e-5, atol=1e-6)
    if share < 1.0:
        assert not torch.allclose(grad_w, all_w, rtol=1e-3, atol=1e-4)


def test_the_default_trains_the_table_from_the_exact_rows_and_without_them_from_every_row():
    """Unset, ``item_gradient`` is ``exact_rows`` (what ``loss: auto`` trains); with no exact rows
    (``exact_share: 0``) there are none to train from, and every row's normaliser does."""
    case = make_case(seed=2)
    _, _, default_w = run(case, 0, exact_share=0.25)
    _, _, exact_w = run(case, 0, exact_share=0.25, item_gradient="exact_rows")
    _, _, all_w = run(case, 0, exact_share=0.25, item_gradient="all_rows")
    torch.testing.assert_close(default_w, exact_w, rtol=0, atol=0)  # the same code path
    assert not torch.allclose(default_w, all_w, rtol=1e-3, atol=1e-4)
    _, _, sparse_w = run(case, 0, exact_share=0)
    _, _, sparse_all_w = run(case, 0, exact_share=0, item_gradient="all_rows")
    torch.testing.assert_close(sparse_w, sparse_all_w, rtol=0, atol=0)
    assert (sparse_w[3:].abs().sum(1) > 0).sum() < 20  # the rows the step read, not the table


def test_over_draws_the_table_gradient_is_the_exact_terms():
    """The exact rows are a uniform draw, so the scaled gradient's mean over draws is the exact
    term's gradient on the table (within 4 standard errors of the mean over 600 draws)."""
    case = make_case(seed=1)
    hidden, weight, targets, _, upstream = case
    w64 = weight.double().requires_grad_()
    positive, normaliser = exact_parts(hidden.double(), w64, targets)
    ((positive - normaliser) * upstream.double()).sum().backward()
    draws = torch.stack(
        [run(case, s, exact_share=0.2, item_gradient="exact_rows")[2] for s in range(600)]
    ).double()
    error = (draws.mean(0) - w64.grad).abs()
    assert (error <= 4 * draws.std(0) / math.sqrt(len(draws)) + 1e-6).all()
    assert draws.std(0)[N_SPECIAL:].max() > 1e-3  # a single draw is not the mean


def test_the_option_is_checked():
    check_loss_options("sampled_softmax", {"item_gradient": "exact_rows"}, 20)
    check_loss_options("sampled_softmax", {"item_gradient": "all_rows", "exact_share": 0}, 20)
    with pytest.raises(SeqencError, match="item_gradient must be one of"):
        check_loss_options("sampled_softmax", {"item_gradient": "some"}, 20)
    with pytest.raises(SeqencError, match="exact_share 0 leaves none"):
        check_loss_options("sampled_softmax", {"item_gradient": "exact_rows", "exact_share": 0}, 20)
    with pytest.raises(SeqencError, match="item_gradient='some'"):
        run(make_case(), 0, item_gradient="some")
