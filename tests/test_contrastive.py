"""The contrastive objective: slices stay inside each history, InfoNCE against a naive reference,
and the module's default (off) trains exactly as without it."""

import math

import pytest
import torch

from seqenc.commands.model import fit_model
from seqenc.data.schema import EventSchema
from seqenc.data.spec import DataSpec
from seqenc.data.vocab import Vocabularies, Vocabulary
from seqenc.errors import SeqencError
from seqenc.model.batch import Batch
from seqenc.model.contrastive import embed_by_length, info_nce, slice_views
from seqenc.model.encoder import EncoderConfig
from seqenc.model.losses import compute_loss
from seqenc.training.module import SeqencModule

SPEC = DataSpec(
    EventSchema(categorical=("position",), numeric=("offset",)),
    Vocabularies(Vocabulary(list(range(40))), {"position": Vocabulary(list(range(20)))}),
    history_len=12,
)


def _batch(lengths: list[int], width: int, seed: int = 0) -> Batch:
    """Item id 3 + position (distinct within a row), random increasing times, a categorical
    (position + 1) and a numeric (position) feature, so a slice shows where it came from."""
    g = torch.Generator().manual_seed(seed)
    b = len(lengths)
    lengths_t = torch.tensor(lengths)
    real = torch.arange(width)[None, :] < lengths_t[:, None]
    items = (3 + torch.arange(width)[None, :].expand(b, width)) * real
    times = torch.cumsum(torch.rand(b, width, generator=g) * 100, dim=1)
    newest = times.gather(1, (lengths_t - 1).clamp(min=0)[:, None])
    dt_prev = torch.cat([torch.zeros(b, 1), times.diff(dim=1)], dim=1) * real
    position = torch.arange(width)[None, :].expand(b, width) * real
    return Batch(
        items=items,
        lengths=lengths_t,
        dt_prev=dt_prev,
        dt_ref=(newest - times) * real,
        categorical=(position + 1)[..., None] * real[..., None],
        numeric=position[..., None].float(),
        index=torch.arange(b),
        dt_query=torch.zeros(b),
    )


def naive_info_nce(z: torch.Tensor, temperature: float) -> float:
    """Pair by pair: row i's positive is i ± B, every other row j != i is in the denominator."""
    rows, half = z.shape[0], z.shape[0] // 2
    total = 0.0
    for i in range(rows):
        cos = [float(z[i] @ z[j] / (z[i].norm() * z[j].norm())) / temperature for j in range(rows)]
        positive = (i + half) % rows
        denominator = sum(math.exp(cos[j]) for j in range(rows) if j != i)
        total += -(cos[positive] - math.log(denominator))
    return total / rows


def test_info_nce_matches_a_naive_pairwise_reference():
    z = torch.randn(6, 5, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    for temperature in (0.1, 1.0):
        got = float(info_nce(z, temperature))
        assert got == pytest.approx(naive_info_nce(z, temperature), rel=1e-5)


def test_info_nce_is_low_when_pairs_agree_and_high_when_swapped():
    base = torch.eye(4)
    aligned = info_nce(torch.cat([base, base]), 0.1)
    swapped = info_nce(torch.cat([base, base.flip(0)]), 0.1)
    assert aligned < 0.01 < 1.0 < swapped


def test_slices_are_contiguous_runs_of_real_events_of_their_own_row():
    lengths, width, share = [10, 1, 7, 2, 10, 4], 10, 0.5
    batch = _batch(lengths, width)
    for seed in range(20):
        views = slice_views(batch, share, torch.Generator().manual_seed(seed))
        assert views.items.shape[0] == 2 * len(lengths)
        assert views.index.tolist() == batch.index.repeat(2).tolist()
        for row in range(2 * len(lengths)):
            source, n, k = row % len(lengths), lengths[row % len(lengths)], int(views.lengths[row])
            assert max(1, math.ceil(share * n)) <= k <= n
            position = views.numeric[row, :k, 0].long()  # the source positions, in order
            start = int(position[0])
            assert position.tolist() == list(range(start, start + k)) and start + k <= n
            assert torch.equal(views.items[row, :k], batch.items[source, start : start + k])
            assert torch.equal(views.dt_prev[row, :k], batch.dt_prev[source, start : start + k])
            assert (views.categorical[row, :k, 0] == position + 1).all()
            # recency from the slice's own newest event; PAD after the slice
            expected = batch.dt_ref[source, start : start + k] - batch.dt_ref[source, start + k - 1]
            assert torch.allclose(views.dt_ref[row, :k], expected)
            assert (views.items[row, k:] == 0).all() and (views.categorical[row, k:] == 0).all()
            assert (views.dt_ref[row, k:] == 0).all() and (views.numeric[row, k:] == 0).all()
        assert (views.dt_query == 0).all()


def test_slices_cover_every_length_and_start_and_an_empty_row_stays_empty():
    batch = _batch([6, 0], 6)
    seen = set()
    for seed in range(300):
        views = slice_views(batch, 0.5, torch.Generator().manual_seed(seed))
        assert views.lengths[1] == 0 and views.lengths[3] == 0
        k = int(views.lengths[0])
        seen.add((int(views.numeric[0, 0, 0]), k))
    # lengths 3..6, every start where the slice fits
    assert seen == {(s, k) for k in range(3, 7) for s in range(0, 7 - k)}


def _module(**options) -> SeqencModule:
    torch.manual_seed(0)
    return fit_model(SPEC, **{"encoder": EncoderConfig(d_model=8, n_heads=2), **options})


def test_off_by_default_training_is_unchanged():
    """The default step is the objective's loss alone and draws nothing more from the RNG."""
    batch = _batch([12, 9, 5], 13)
    module = _module()
    reference = _module()
    torch.manual_seed(3)
    loss = module.training_step(batch, 0)
    after = torch.get_rng_state()
    torch.manual_seed(3)
    inputs, labels = reference.objective.training_pair(batch, SPEC.n_items)
    keep = labels >= 3
    hidden = reference.encoder(inputs)
    weight = reference.encoder.item_embedding.weight
    expected = compute_loss("ce", hidden[keep], weight, labels[keep])
    assert torch.equal(loss, expected)
    assert torch.equal(after, torch.get_rng_state())


@pytest.mark.parametrize("objective", ["causal", "masked"])
def test_contrastive_loss_adds_infonce_on_the_readout_of_two_slices(objective):
    batch = _batch([12, 9, 5, 7], 13)
    encoder = EncoderConfig(d_model=8, n_heads=2, dropout=0.0, pooling="mean")
    masking = {"mask_prob": 1.0} if objective == "masked" else {}
    kwargs = dict(objective=objective, encoder=encoder, **masking)
    plain = _module(**kwargs)
    mixed = _module(**kwargs, contrastive_weight=0.5, contrastive_temperature=0.2)
    alone = _module(**kwargs, contrastive_weight=1.0, next_item_weight=0.0)
    torch.manual_seed(5)
    base = plain.training_step(batch, 0)
    torch.manual_seed(5)
    total = mixed.training_step(batch, 0)
    torch.manual_seed(5)
    plain.objective.training_pair(batch, SPEC.n_items)  # the masking draws come first
    views = slice_views(batch, 0.5)
    expected = info_nce(plain.encoder.entity_embedding(views), 0.2)
    assert float((total - base).detach()) == pytest.approx(0.5 * float(expected.detach()), rel=1e-5)
    only = alone.training_step(batch, 0)
    only.backward()
    assert torch.isfinite(only) and only > 0
    assert alone.encoder.blocks[0].attn.qkv.weight.grad.abs().sum() > 0


def test_weights_are_checked():
    with pytest.raises(SeqencError, match="not all 0"):
        _module(next_item_weight=0.0)
    with pytest.raises(SeqencError, match="contrastive_temperature"):
        _module(contrastive_weight=1.0, contrastive_temperature=0.0)


@pytest.mark.parametrize("pooling", ["last", "mean", "attention", "items"])
@pytest.mark.parametrize("objective", ["causal", "masked"])
def test_views_embedded_by_length_are_embedded_alone(objective, pooling):
    """Sub-batches of similar lengths, each cut to its longest row, give each view the embedding
    the whole padded batch gives it (no dropout), whatever the number of groups."""
    encoder = EncoderConfig(d_model=8, n_heads=2, dropout=0.0, pooling=pooling)
    module = _module(objective=objective, encoder=encoder).eval()
    views = slice_views(_batch([12, 9, 5, 7, 1, 0, 3], 13), 0.5, torch.Generator().manual_seed(4))
    with torch.no_grad():
        whole = module.encoder.entity_embedding(views)
        for groups in (1, 2, 3, 14, 40):
            grouped = embed_by_length(module.encoder.entity_embedding, views, groups)
            assert torch.allclose(grouped, whole, atol=1e-6)
