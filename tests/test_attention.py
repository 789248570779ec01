"""Attention: masks against a hand-written reference, fused SDPA kernel on CPU, RoPE properties."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest
import torch
from torch.profiler import ProfilerActivity, profile

from seqenc.data.batches import Batch
from seqenc.errors import SeqencError
from seqenc.model.attention import SelfAttention, key_padding_mask
from seqenc.model.embeddings import RotaryEmbedding
from seqenc.model.encoder import EncoderConfig, SequenceEncoder

FUSED = "aten::_scaled_dot_product_flash_attention_for_cpu"
MATH = "aten::_scaled_dot_product_attention_math"


def naive_attention(attn: SelfAttention, x: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
    """softmax(QK^T / sqrt(d) masked) V written out, ``allowed``: ``[B, L, L]`` bool (query, key)."""
    batch, length, d = x.shape
    heads = attn.n_heads
    q, k, v = (
        t.view(batch, length, heads, d // heads).transpose(1, 2) for t in attn.qkv(x).split(d, -1)
    )
    scores = q @ k.transpose(-1, -2) / math.sqrt(d // heads)
    scores = scores.masked_fill(~allowed[:, None], float("-inf"))
    y = torch.softmax(scores, -1) @ v
    return attn.out(y.transpose(1, 2).reshape(batch, length, d))


def test_key_padding_mask() -> None:
    assert key_padding_mask(torch.tensor([3, 3]), 3) is None
    mask = key_padding_mask(torch.tensor([2, 0, 3]), 3)
    assert mask.shape == (3, 1, 1, 3)
    assert mask[:, 0, 0].tolist() == [[True, True, False], [True, False, False], [True, True, True]]


def test_attention_matches_naive_reference() -> None:
    torch.manual_seed(0)
    attn = SelfAttention(16, 4)
    x = torch.randn(3, 5, 16)
    lengths = torch.tensor([5, 2, 4])
    causal_allowed = torch.ones(5, 5, dtype=torch.bool).tril().expand(3, 5, 5)
    torch.testing.assert_close(attn(x, causal=True), naive_attention(attn, x, causal_allowed))
    key_ok = torch.arange(5)[None, :] < lengths[:, None]
    got = attn(x, causal=False, mask=key_padding_mask(lengths, 5))
    torch.testing.assert_close(got, naive_attention(attn, x, key_ok[:, None, :].expand(3, 5, 5)))


def _kernels(fn: Callable[[], None]) -> set[str]:
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        fn()
    return {event.key for event in prof.key_averages()}


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("lengths", [[7, 3, 1, 0], [7, 7, 7, 7]])
def test_fused_sdpa_kernel_is_used(causal: bool, dtype: torch.dtype, lengths: list[int]) -> None:
    torch.manual_seed(0)
    model = SequenceEncoder(
        EncoderConfig(n_items=20, d_model=16, n_heads=2, n_positions=9, causal=causal)
    )
    width = 7
    batch = Batch(
        items=torch.where(torch.arange(width)[None] < torch.tensor(lengths)[:, None], 5, 0),
        lengths=torch.tensor(lengths),
        dt_prev=torch.zeros(4, width),
        dt_ref=torch.zeros(4, width),
        categorical=torch.zeros(4, width, 0, dtype=torch.int64),
        numeric=torch.zeros(4, width, 0),
        index=torch.arange(4),
    )

    def step() -> None:
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=dtype == torch.bfloat16):
            model(batch).float().sum().backward()

    kernels = _kernels(step)
    assert FUSED in kernels and FUSED + "_backward" in kernels
    assert MATH not in kernels


def test_rope_matches_complex_rotation() -> None:
    rope = RotaryEmbedding(head_dim=8, n_positions=21)
    x = torch.randn(2, 3, 20, 8, dtype=torch.float64).float()
    as_complex = torch.complex(x[..., :4].double(), x[..., 4:].double())
    theta = 10000.0 ** (-torch.arange(0, 8, 2, dtype=torch.float64) / 8)
    angle = torch.arange(20, dtype=torch.float64)[:, None] * theta
    rotated = as_complex * torch.polar(torch.ones_like(angle), angle)
    expected = torch.cat([rotated.real, rotated.imag], dim=-1).float()
    torch.testing.assert_close(rope(x), expected, rtol=1e-5, atol=1e-5)


def test_rope_scores_depend_only_on_the_offset() -> None:
    torch.manual_seed(0)
    rope = RotaryEmbedding(head_dim=16, n_positions=65)
    q, k = torch.randn(16), torch.randn(16)
    rq = rope(q.expand(1, 1, 64, 16))[0, 0]
    rk = rope(k.expand(1, 1, 64, 16))[0, 0]
    scores = rq @ rk.T  # scores[m, n] = q at position m · k at position n
    for offset in (-5, 0, 3, 17):
        diagonal = torch.diagonal(scores, offset=offset)
        torch.testing.assert_close(diagonal, diagonal[:1].expand_as(diagonal), rtol=0, atol=1e-4)
    assert not torch.allclose(torch.diagonal(scores, 0)[:1], torch.diagonal(scores, 3)[:1])
    torch.testing.assert_close(rq.norm(dim=-1), q.norm().expand(64))


def test_attention_dropout_trains_unbiased_and_never_runs_at_inference() -> None:
    """Dropped attention probabilities are rescaled, so the output's expectation is the output without
    dropout (it is linear in the probabilities); eval mode is exactly the model without it."""
    torch.manual_seed(0)
    attn = SelfAttention(16, 2, dropout_p=0.5)
    plain = SelfAttention(16, 2)
    plain.load_state_dict(attn.state_dict())
    x = torch.randn(1, 6, 16)
    expected = plain(x, causal=True)
    torch.testing.assert_close(attn.eval()(x, causal=True), expected, rtol=0, atol=0)
    attn.train()
    draws = attn(x.expand(4000, 6, 16), causal=True)
    assert not torch.allclose(draws[0], draws[1])
    torch.testing.assert_close(draws.mean(0, keepdim=True), expected, rtol=0, atol=0.03)


def test_attention_dropout_keeps_training_causal() -> None:
    """With the same random stream, changing a later event changes no earlier position in training."""
    torch.manual_seed(0)
    attn = SelfAttention(16, 2, dropout_p=0.3).train()
    x = torch.randn(3, 7, 16)
    future = x.clone()
    future[:, 5:] = torch.randn(3, 2, 16)
    torch.manual_seed(1)
    a = attn(x, causal=True)
    torch.manual_seed(1)
    b = attn(future, causal=True)
    torch.testing.assert_close(a[:, :5], b[:, :5], rtol=0, atol=1e-6)
    assert not torch.allclose(a[:, 5:], b[:, 5:])


def test_attention_dropout_must_be_a_probability() -> None:
    with pytest.raises(SeqencError, match="attention_dropout"):
        EncoderConfig(n_items=10, attention_dropout=1.0)
    model = SequenceEncoder(EncoderConfig(n_items=10, d_model=16, attention_dropout=0.25))
    assert {block.attn.dropout_p for block in model.blocks} == {0.25}
