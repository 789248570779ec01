"""The row-sparse AdamW against torch's AdamW, and clipping that counts sparse gradients."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from seqenc.model.optim import RowSparseAdamW, clip_grad_norm


def step_both(rows: torch.Tensor, steps: int = 3):
    torch.manual_seed(0)
    sparse = torch.nn.Parameter(torch.randn(8, 3))
    dense = torch.nn.Parameter(sparse.detach().clone())
    bias_a, bias_b = torch.nn.Parameter(torch.ones(3)), torch.nn.Parameter(torch.ones(3))
    opt_a = RowSparseAdamW([sparse, bias_a], lr=0.1, weight_decay=0.1)
    opt_b = torch.optim.AdamW([dense, bias_b], lr=0.1, weight_decay=0.1)
    for _ in range(steps):
        grad = torch.randn(len(rows), 3)
        (F.embedding(rows, sparse, sparse=True) * grad + bias_a).sum().backward()
        (F.embedding(rows, dense) * grad + bias_b).sum().backward()
        assert sparse.grad.is_sparse and not dense.grad.is_sparse
        opt_a.step(), opt_b.step()
        opt_a.zero_grad(), opt_b.zero_grad()
    return sparse, dense, bias_a, bias_b, opt_a


def test_touching_every_row_is_exactly_adamw():
    sparse, dense, bias_a, bias_b, _ = step_both(torch.tensor([0, 1, 2, 3, 4, 5, 6, 7, 7]))
    torch.testing.assert_close(sparse.detach(), dense.detach())
    torch.testing.assert_close(bias_a.detach(), bias_b.detach())


def test_untouched_rows_keep_their_values_and_moments():
    torch.manual_seed(0)
    before = torch.randn(8, 3)
    sparse, dense, *_, opt = step_both(torch.tensor([1, 4, 4]))
    torch.testing.assert_close(sparse.detach()[[0, 2, 3, 5, 6, 7]], before[[0, 2, 3, 5, 6, 7]])
    assert opt.state[sparse]["exp_avg"][[0, 2, 3, 5, 6, 7]].abs().sum() == 0
    # touched rows moved as AdamW moves them (dense AdamW also decays the untouched ones)
    torch.testing.assert_close(sparse.detach()[[1, 4]], dense.detach()[[1, 4]])


def test_clipping_counts_sparse_gradients_as_torch_counts_dense_ones():
    torch.manual_seed(1)
    a, b = torch.nn.Parameter(torch.randn(6, 2)), torch.nn.Parameter(torch.randn(6, 2))
    rows, grad = torch.tensor([0, 2, 2, 5]), torch.randn(4, 2) * 10
    (F.embedding(rows, a, sparse=True) * grad).sum().backward()
    (F.embedding(rows, b) * grad).sum().backward()
    norm_a, norm_b = clip_grad_norm([a], 1.0), torch.nn.utils.clip_grad_norm_([b], 1.0)
    torch.testing.assert_close(norm_a, norm_b)
    torch.testing.assert_close(a.grad.to_dense(), b.grad)
