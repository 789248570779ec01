"""The entity model of a label head: bidirectional attention, attention pooling, continuous time,
item-conditioned values and event dropout, each against an independent reference."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from seqenc.errors import SeqencError
from seqenc.model.batch import drop_events
from seqenc.model.cache import check_incremental
from seqenc.model.encoder import EncoderConfig, SequenceEncoder
from seqenc.model.item_readout import ItemSummaries
from seqenc.model.objectives import Masked
from seqenc.model.readout import attention_pool
from tests.test_encoder import HISTORIES, N_ITEMS, make_batch

ENTITY = dict(causal=False, pooling="attention", time_values=True, numeric_scaling="per_item")


def entity_model(seed: int = 0, **overrides: object) -> SequenceEncoder:
    torch.manual_seed(seed)
    options = dict(ENTITY, item_values=True) | overrides
    config = EncoderConfig(
        n_items=N_ITEMS, d_model=16, n_layers=2, n_heads=2, n_positions=13, n_numeric=1, **options
    )
    return SequenceEncoder(config).eval()


def test_attention_pool_is_a_softmax_weighted_sum_of_real_positions() -> None:
    g = torch.Generator().manual_seed(0)
    hidden, scores = torch.randn(3, 5, 4, generator=g), torch.randn(3, 5, generator=g)
    lengths = torch.tensor([5, 2, 0])
    out = attention_pool(hidden, lengths, scores)
    for row, n in enumerate([5, 2, 1]):  # an empty row reads position 0
        w = torch.exp(scores[row, :n]) / torch.exp(scores[row, :n]).sum()
        torch.testing.assert_close(out[row], (w[:, None] * hidden[row, :n]).sum(0))


def test_every_event_sees_every_other_one() -> None:
    """No causal or basket mask: changing the newest event changes the oldest one's state, and
    the readout does not depend on the padding."""
    model = entity_model()
    batch, changed = make_batch(HISTORIES, n_num=1), make_batch(HISTORIES, n_num=1)
    changed.items[2, 7] = 33
    assert not torch.allclose(model(batch)[2, 0], model(changed)[2, 0])
    wide = make_batch(HISTORIES, width=12, n_num=1)
    torch.testing.assert_close(model.entity_embedding(batch), model.entity_embedding(wide))


def test_values_are_read_per_item() -> None:
    """With item_values the same standardised value moves two items' token vectors differently
    (its MLP reads the item); without it, by the same vector."""
    for item_values, differ in ((True, True), (False, False)):
        embed = entity_model(item_values=item_values).embed
        batch = make_batch([[5, 9]], n_num=1)
        batch.numeric.zero_()
        base = embed(batch)
        batch.numeric.fill_(3.0)
        moved = embed(batch) - base
        assert differ != torch.allclose(moved[0, 0], moved[0, 1], atol=1e-6)


def test_values_read_in_their_items_units_alone() -> None:
    """The lean token has no shared raw map: a value's token part depends on its standardised
    value only: two items each at their own centre (z = 0) get the same value vector although
    their raw values differ by orders of magnitude; with the map (the full token) they do not."""
    for raw_values in (False, True):
        embed = entity_model(token="full" if raw_values else "lean", item_values=False).embed
        assert (embed.numeric is not None) == raw_values
        embed.set_numeric_stats(torch.zeros(N_ITEMS, 1), torch.ones(N_ITEMS, 1))
        embed.numeric_center[9] = 5.0  # item 9's values sit 5 signed-log units higher
        batch = make_batch([[5, 9]], n_num=1)
        batch.numeric[0, 0, 0], batch.numeric[0, 1, 0] = 0.0, float(torch.tensor(5.0).expm1())
        parts = embed.content(batch) - embed.item(batch.items)
        same = torch.allclose(parts[0, 0], parts[0, 1], atol=1e-5)
        assert same != raw_values


def test_in_a_lean_token_time_enters_as_values_only() -> None:
    """The lean token has no bucket tables, and gaps that leave every time value unchanged
    (dt_prev, which only the buckets read) leave the output unchanged."""
    model = entity_model(token="lean", positional="none")
    assert model.embed.dt_prev is None and model.embed.dt_query is None
    batch, other = make_batch(HISTORIES, n_num=1), make_batch(HISTORIES, n_num=1)
    other.dt_prev = other.dt_prev * 7.0 + 100.0
    torch.testing.assert_close(model.entity_embedding(batch), model.entity_embedding(other))
    bucketed = entity_model(positional="none")
    assert not torch.allclose(bucketed.entity_embedding(batch), bucketed.entity_embedding(other))


def test_a_lean_tokens_start_is_pytorchs() -> None:
    """The lean token keeps PyTorch's own start (a linear layer within 1/sqrt(fan-in), tables
    N(0, 1)), PAD rows zero; the full token draws N(0, 0.02) (nanoGPT's)."""
    fan_in, gpt = entity_model(token="lean"), entity_model(token="full")
    up = fan_in.blocks[0].ffn["up"].weight
    bound = 1 / up.shape[1] ** 0.5
    assert up.abs().max() <= bound and up.std() > 0.5 * bound / 3**0.5
    assert 0.8 < fan_in.embed.item.weight[1:].std() < 1.2
    assert fan_in.embed.item.weight[0].abs().max() == 0
    assert gpt.blocks[0].ffn["up"].weight.std() < 0.03
    with pytest.raises(SeqencError, match="token"):
        EncoderConfig(n_items=N_ITEMS, token="fan_in")


def test_time_values_by_hand() -> None:
    """Hours since the first event, hours to the query time and the place in that span, against
    a hand-computed history: events at 0 h, 1 h and 3 h, as_of at 4 h."""
    model = entity_model()
    hour = 3600.0
    batch = make_batch([[5, 9, 7]])
    batch.dt_ref = torch.tensor([[3 * hour, 2 * hour, 0.0]], dtype=torch.float64)  # ref: newest
    batch.dt_query = torch.tensor([hour])
    values = model.embed.time_values(Masked().query(batch)).double()
    since = torch.tensor(
        [0.0, 1.0, 3.0, 4.0], dtype=torch.float64
    )  # the appended [MASK] stands at the query time
    expected = torch.stack([since.log1p(), (4 - since).log1p(), since / 4], dim=-1)
    torch.testing.assert_close(values[0, :4], expected, rtol=1e-5, atol=1e-6)
    causal = entity_model(causal=True, pooling="last").embed.time_values(batch)
    assert causal[..., 1:].abs().max() == 0  # the window's end never reaches a causal position


def test_time_values_do_not_depend_on_the_reference() -> None:
    """The same history read against its newest event (training) or against as_of (encode)
    gives the same inputs: only differences and the query gap enter."""
    model = entity_model()
    batch = make_batch(HISTORIES)
    batch.dt_query = torch.full((4,), 7200.0)
    shifted = make_batch(HISTORIES)
    shifted.dt_ref = (
        shifted.dt_ref + 7200.0 - shifted.dt_ref[torch.arange(4), shifted.lengths - 1][:, None]
    )
    shifted.dt_ref = shifted.dt_ref * shifted.padding_mask
    a = model.embed.time_values(Masked().query(batch))
    b = model.embed.time_values(Masked().query(replace_query(shifted)))
    torch.testing.assert_close(a, b)


def replace_query(batch):
    """``batch`` whose reference is its query time (as ``encode(as_of=...)`` builds it)."""
    batch.dt_query = None
    return batch


@settings(max_examples=40, deadline=None)
@given(
    lengths=st.lists(st.integers(0, 8), min_size=1, max_size=5),
    share=st.floats(0.0, 0.95),
    seed=st.integers(0, 1000),
)
def test_drop_events_keeps_a_subsequence(lengths: list[int], share: float, seed: int) -> None:
    histories = [list(range(10, 10 + n)) for n in lengths]
    batch = make_batch(histories, width=9)
    torch.manual_seed(seed)
    dropped = drop_events(batch, share)
    for row, history in enumerate(histories):
        n = int(dropped.lengths[row])
        kept = dropped.items[row, :n].tolist()
        assert (n >= 1) == bool(history) and n <= len(history)
        assert kept == sorted(kept) and set(kept) <= set(history)  # a subsequence, in order
        assert (dropped.items[row, n:] == 0).all()
        # each kept event keeps its time; gaps are re-measured between kept events
        original = {item: batch.dt_ref[row, j] for j, item in enumerate(history)}
        for j, item in enumerate(kept):
            assert dropped.dt_ref[row, j] == original[item]
            if j:
                gap = dropped.dt_ref[row, j - 1] - dropped.dt_ref[row, j]
                assert torch.isclose(dropped.dt_prev[row, j], gap.float())


def test_event_dropout_only_in_training() -> None:
    model = entity_model(event_dropout=0.5)
    batch = make_batch(HISTORIES, n_num=1)
    torch.testing.assert_close(model.entity_embedding(batch), model.entity_embedding(batch))
    model.train()
    torch.manual_seed(1)
    a = model.entity_embedding(batch)
    torch.manual_seed(2)
    assert not torch.allclose(a, model.entity_embedding(batch))


def test_incremental_encoding_refuses_attention_pooling() -> None:
    for pooling in ("attention", "items"):
        with pytest.raises(SeqencError, match=f"{pooling} pooling"):
            check_incremental(entity_model(causal=True, pooling=pooling))


def naive_item_summaries(
    m: ItemSummaries, hidden: torch.Tensor, lengths: list[int], scores, items
) -> torch.Tensor:
    """Row by row and slot by slot: the softmax-weighted states of each slot's real events."""
    rows = []
    for b, n in enumerate(lengths):
        reads = []
        for k in range(m.n_slots):
            at = [
                i
                for i in range(n)
                if items[b, i] >= 3 and min(int(items[b, i]) - 3, m.n_slots - 1) == k
            ]
            if not at:
                reads.append(m.absent[k])
                continue
            w = torch.softmax(scores[b, at], 0)
            reads.append(m.read((w[:, None] * hidden[b, at]).sum(0)))
        rows.append(m.out(torch.cat(reads)))
    return torch.stack(rows)


def test_item_summaries_pool_each_items_events_on_their_own() -> None:
    """Against a loop: rarer items share the last slot, specials (MASK) and padding none, an
    absent item reads its own vector, far-apart scores within a slot do not underflow."""
    torch.manual_seed(0)
    m = ItemSummaries(8, n_items=3 + 5)
    hidden, scores = torch.randn(3, 7, 8), torch.randn(3, 7)
    scores[0, 0] = 80.0  # the row's maximum, far above its other slots' scores
    items = torch.randint(0, 10, (3, 7))
    lengths = [7, 4, 0]
    got = m(hidden, torch.tensor(lengths), scores, items)
    torch.testing.assert_close(got, naive_item_summaries(m, hidden, lengths, scores, items))


def test_items_pooling_reads_each_item_apart() -> None:
    """With ``pooling="items"`` a row's embedding moves with its own events' values alone."""
    model = entity_model(pooling="items")
    batch = make_batch(HISTORIES, n_num=1)
    assert model.item_summaries is not None and model.entity_embedding(batch).isfinite().all()
    changed = make_batch(HISTORIES, n_num=1)
    changed.numeric[1, 0] += 2.0
    differs = (model.entity_embedding(batch) - model.entity_embedding(changed)).abs().sum(1) > 0
    assert differs.tolist() == [False, True, False, False]


def test_item_values_need_values_per_item() -> None:
    with pytest.raises(SeqencError, match="item_values"):
        EncoderConfig(n_items=N_ITEMS, item_values=True, numeric_scaling="global")


def test_the_tokens_parts_of_an_old_configuration_read_as_the_token_they_build() -> None:
    """A part the model does not read (the gap tables without time, the shared map without
    values per item) does not decide; parts that disagree on what the model reads are refused."""
    upgrade = EncoderConfig.upgrade
    lean = {"gap_buckets": False, "raw_values": False, "init": "fan_in"}
    assert upgrade(lean)["token"] == "lean" and not set(lean) & set(upgrade(lean))
    assert upgrade({"gap_buckets": True, "raw_values": True, "init": "fan_in"})["token"] == "full"
    assert upgrade({"gap_buckets": False, "n_numeric": 0})["token"] == "lean"
    assert upgrade({"raw_values": False, "time": False, "n_numeric": 1})["token"] == "lean"
    mixed = {
        "gap_buckets": False,
        "raw_values": True,
        "numeric_scaling": "per_item",
        "n_numeric": 1,
    }
    with pytest.raises(SeqencError, match="a token seqenc no longer builds"):
        upgrade(mixed)
