"""The CPU dropout mask (16 random bits per element) against what nn.Dropout promises."""

from __future__ import annotations

import torch

from seqenc.model.dropout import LEVELS, Dropout, fast_dropout


def test_keep_rate_scale_and_independence() -> None:
    """Each element is kept with probability 1 - p (all four lanes of a draw alike, neighbours
    uncorrelated) and kept values are scaled so the expectation is the input."""
    torch.manual_seed(0)
    x = torch.ones(1000, 1000)
    p = 0.3
    out = fast_dropout(x, p)
    kept = out != 0
    p_rounded = round(p * LEVELS) / LEVELS
    torch.testing.assert_close(out[kept], torch.full_like(out[kept], 1 / (1 - p_rounded)))
    sigma = (p * (1 - p) / x.numel() * 4) ** 0.5  # per lane: a quarter of the elements
    lanes = kept.flatten().view(-1, 4).float()
    assert ((lanes.mean(0) - (1 - p)).abs() < 4 * sigma).all()
    assert abs(out.mean().item() - 1.0) < 4 * sigma * 4
    a, b = lanes[:, :-1].flatten() - 0.7, lanes[:, 1:].flatten() - 0.7
    assert abs((a * b).mean().item()) < 4 * p * (1 - p) / len(a) ** 0.5


def test_gradient_is_the_mask() -> None:
    torch.manual_seed(1)
    x = torch.randn(64, 33, requires_grad=True)
    out = fast_dropout(x, 0.5)
    out.sum().backward()
    expected = (out != 0).float() * 2.0
    torch.testing.assert_close(x.grad, expected)
    torch.testing.assert_close(out, x.detach() * expected)


def test_module_modes() -> None:
    """Eval mode and p=0 are the identity; training is reproducible under a seed."""
    x = torch.randn(8, 16)
    drop = Dropout(0.2)
    assert torch.equal(drop.eval()(x), x)
    assert torch.equal(Dropout(0.0).train()(x), x)
    drop.train()
    torch.manual_seed(3)
    first = drop(x)
    torch.manual_seed(3)
    assert torch.equal(drop(x), first)
    assert not torch.equal(first, x)
