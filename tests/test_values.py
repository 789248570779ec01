"""Masked values: which values are withheld, what a withheld value reads as, the loss against a
naive reference, that the prediction cannot see the value it predicts, and the option's checks."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from seqenc.commands.model import fit_model
from seqenc.errors import SeqencError
from seqenc.model.embeddings import signed_log
from seqenc.model.encoder import EncoderConfig
from seqenc.model.values import hide_values, value_loss
from seqenc.training.module import SeqencModule
from tests.test_contrastive import SPEC, _batch

CENTER = torch.linspace(-2.0, 3.0, SPEC.n_items)[:, None]  # signed-log centre of each item


@settings(max_examples=40)
@given(
    lengths=st.lists(st.integers(0, 9), min_size=1, max_size=5),
    prob=st.floats(0.05, 1.0),
    seed=st.integers(0, 2**16),
)
def test_hidden_values_are_real_events_and_read_as_their_items_centre(lengths, prob, seed):
    batch = _batch(lengths, 10, seed)
    generator = torch.Generator().manual_seed(seed)
    inputs, hidden = hide_values(batch, prob, CENTER, generator)
    real = batch.padding_mask
    assert not (hidden & ~real).any()
    assert (hidden.any(dim=1) == (batch.lengths > 0)).all()  # every history withholds one
    assert torch.equal(inputs.numeric[~hidden], batch.numeric[~hidden])
    assert torch.equal(inputs.items, batch.items) and torch.equal(inputs.dt_ref, batch.dt_ref)
    expected = CENTER[batch.items][hidden]  # back in signed-log units, the centre itself
    torch.testing.assert_close(signed_log(inputs.numeric[hidden]), expected)


def test_share_withheld_follows_prob():
    batch = _batch([30] * 400, 30)
    _, hidden = hide_values(batch, 0.3, CENTER, torch.Generator().manual_seed(1))
    assert float(hidden.float().mean()) == pytest.approx(0.3, abs=0.01)


def test_value_loss_against_a_naive_mean():
    g = torch.Generator().manual_seed(0)
    predicted, target = torch.randn(2, 4, 2, generator=g), torch.randn(2, 4, 2, generator=g)
    hidden = torch.tensor([[True, False, False, True], [False, True, False, False]])
    cells = [
        (float(predicted[b, i, j]) - float(target[b, i, j])) ** 2
        for b in range(2)
        for i in range(4)
        for j in range(2)
        if hidden[b, i]
    ]
    assert float(value_loss(predicted, target, hidden)) == pytest.approx(sum(cells) / len(cells))
    assert float(value_loss(predicted, target, torch.zeros_like(hidden))) == 0.0


def _module(**options: object) -> SeqencModule:
    torch.manual_seed(0)
    encoder = EncoderConfig(d_model=8, n_heads=2, dropout=0.0, numeric_scaling="per_item")
    return fit_model(SPEC, **{"objective": "masked", "encoder": encoder, **options})


def test_a_withheld_value_cannot_be_seen_by_its_prediction():
    """Changing a withheld value changes the loss only through its target: the prediction at
    every event is the same, and the step trains the encoder."""
    module = _module(value_weight=1.0, next_item_weight=0.0)
    module.encoder.embed.set_numeric_stats(CENTER, torch.ones_like(CENTER))
    batch = _batch([9, 6, 4], 10)
    inputs, hidden = hide_values(batch, 0.5, CENTER, torch.Generator().manual_seed(2))
    changed = _batch([9, 6, 4], 10)
    changed.numeric[hidden] += 50.0
    again, same = hide_values(changed, 0.5, CENTER, torch.Generator().manual_seed(2))
    assert torch.equal(hidden, same)
    module.eval()
    torch.testing.assert_close(module.encoder(inputs), module.encoder(again))
    module.train()
    loss = module.training_step(batch, 0)
    loss.backward()
    assert torch.isfinite(loss) and loss > 0
    assert module.value_head.out.weight.grad.abs().sum() > 0
    assert module.encoder.blocks[0].attn.qkv.weight.grad.abs().sum() > 0


def test_options_are_checked():
    with pytest.raises(SeqencError, match="value_weight needs numeric features"):
        _module(
            value_weight=1.0, encoder=EncoderConfig(d_model=8, n_heads=2, numeric_scaling="global")
        )
    with pytest.raises(SeqencError, match="not all 0"):
        _module(next_item_weight=0.0)
    with pytest.raises(SeqencError, match="model.mask_prob would be ignored"):
        _module(objective="causal", mask_prob=0.5)
    causal = _module(objective="causal", mask_prob=0.5, value_weight=1.0)  # withholds a half
    assert causal.value_head is not None


def test_auto_weight_is_on_where_numbers_are_read_per_item():
    assert _module(value_weight=None).hparams.value_weight == 1.0
    glob = EncoderConfig(d_model=8, n_heads=2, numeric_scaling="global")
    off = _module(value_weight=None, encoder=glob)
    assert off.hparams.value_weight == 0.0 and off.value_head is None
