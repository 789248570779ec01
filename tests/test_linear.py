"""The fused linear (bias + GELU / residual in one oneDNN call at CPU inference) against eager torch."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from test_encoder import HISTORIES, make_batch, make_model
from torch import nn
from torch.profiler import profile

from seqenc.model import linear as fused
from seqenc.model.linear import fusable, linear

needs_onednn = pytest.mark.skipif(fused.ONEDNN_LINEAR is None, reason="no oneDNN linear kernel")


def inputs() -> tuple[torch.Tensor, ...]:
    torch.manual_seed(0)
    rows = fused.MIN_FUSED_ROWS  # 3 × rows: enough to take the fused kernel
    return (
        torch.randn(3, rows, 16),
        torch.randn(24, 16) * 0.3,
        torch.randn(24),
        torch.randn(3, rows, 24),
    )


@needs_onednn
def test_fused_equals_eager() -> None:
    x, weight, bias, residual = inputs()
    with torch.inference_mode():
        assert fusable(x)
        with profile() as prof:
            plain = linear(x, weight, bias)
            gelu = linear(x, weight, bias, gelu=True)
            added = linear(x, weight, bias, residual=residual)
    assert any("mkldnn::_linear_pointwise" in e.key for e in prof.key_averages())
    expected = F.linear(x, weight, bias)
    torch.testing.assert_close(plain, expected, rtol=0, atol=1e-5)
    torch.testing.assert_close(gelu, F.gelu(expected), rtol=0, atol=1e-5)
    torch.testing.assert_close(added, residual + expected, rtol=0, atol=1e-5)


def test_few_rows_stay_eager() -> None:
    """Below ``MIN_FUSED_ROWS`` rows (a newest-position-only layer) the plain sequence runs."""
    x = torch.randn(2, fused.MIN_FUSED_ROWS // 2 - 1, 16)
    with torch.inference_mode():
        assert not fusable(x)
        assert fusable(torch.randn(2, fused.MIN_FUSED_ROWS // 2, 16)) == (
            fused.ONEDNN_LINEAR is not None
        )


def test_training_never_fuses() -> None:
    """With autograd on, or a dropout in training mode, the eager path runs (and drops)."""
    x, weight, bias, residual = inputs()
    assert not fusable(x)
    drop = nn.Dropout(0.5).train()
    with torch.inference_mode():
        assert not fusable(x, drop)
        torch.manual_seed(1)
        dropped = linear(x, weight, bias, residual=residual, dropout=drop)
        torch.manual_seed(1)
        expected = residual + drop(F.linear(x, weight, bias))
    torch.testing.assert_close(dropped, expected, rtol=0, atol=0)
    assert (dropped - residual == 0).any()  # some outputs were dropped


@needs_onednn
@pytest.mark.parametrize("causal", [True, False])
def test_encoder_inference_equals_training_path(
    causal: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The whole encoder: entity embeddings at inference (fused) equal the eager pass."""
    monkeypatch.setattr(fused, "MIN_FUSED_ROWS", 1)  # fuse even this small batch
    model = make_model(causal=causal, positional="rope", time=True).eval()
    batch = make_batch(HISTORIES, width=10)
    with torch.no_grad():
        inference = model.entity_embedding(batch)
    eager = model.entity_embedding(batch)  # autograd on: never fused
    torch.testing.assert_close(inference, eager, rtol=0, atol=1e-5)
