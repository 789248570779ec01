"""Causal objective: position i sees only events up to i, plus the time the prediction is for.

Through the real training path (events → store → collated window → ``Causal.training_pair`` →
encoder and repeat head), for every time option: changing the item of event j leaves every position
< j identical; changing its timestamp leaves every position < j - 1 identical, and position j - 1
changes only through the query-time term (identical when ``query_time`` is off).
"""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pytest
import torch

from seqenc.data.batches import collate
from seqenc.data.schema import EventSchema
from seqenc.data.sequences import build_sequences
from seqenc.data.split import full_view
from seqenc.model.encoder import EncoderConfig, SequenceEncoder
from seqenc.model.objectives import Causal

SCHEMA = EventSchema(categorical=("kind",), numeric=("amount",))
N_EVENTS = 12  # a training window: inputs are positions 0 .. 10, event 11 is the last target


def events(j: int, item_j: int = 7, shift_j: float = 0.0) -> pd.DataFrame:
    """One entity's log; event ``j`` gets ``item_j``, and it and the events after it happen
    ``shift_j`` seconds later (so only the gap before event j changes)."""
    rng = np.random.default_rng(0)
    times = np.cumsum(rng.exponential(3600.0, N_EVENTS)).round() + 1.7e9
    times[j:] += shift_j
    items = rng.integers(3, 9, N_EVENTS)  # small catalogue: repeats for the repeat head
    items[j] = item_j
    return pd.DataFrame(
        {
            "entity_id": 1,
            "item_id": items,
            "timestamp": pd.to_datetime(times, unit="s"),
            "kind": rng.choice(["a", "b"], N_EVENTS),
            "amount": rng.normal(size=N_EVENTS),
        }
    )


def small_config(vocabs, **options: object) -> EncoderConfig:
    """A small encoder for the test log's vocabularies, a window of ``N_EVENTS``, no dropout."""
    return EncoderConfig(
        n_items=len(vocabs.item),
        d_model=16,
        n_heads=2,
        n_positions=N_EVENTS + 1,
        dropout=0.0,
        categorical_sizes=(len(vocabs.categorical["kind"]),),
        n_numeric=1,
        **options,
    )


def outputs(config: EncoderConfig, log: pd.DataFrame, vocabs) -> tuple[torch.Tensor, ...]:
    store, _ = build_sequences(log, SCHEMA, keep_newest=None, vocabs=vocabs)
    window = collate(full_view(store), np.array([0]), N_EVENTS)
    inputs, _ = Causal(config.baskets).training_pair(window, config.n_items)
    torch.manual_seed(0)
    model = SequenceEncoder(config).eval()
    with torch.no_grad():
        hidden = model(inputs)
        if model.repeat is None:
            return (hidden[0],)
        copy = model.repeat.attention(hidden, inputs)[0]
        return hidden[0], copy, model.repeat.log_gates(hidden)[0][0][:, None]


OPTIONS = [
    dict(time=time, query_time=query, repeat_head=repeat, repeat_counts=counts)
    for time, query, repeat, counts in itertools.product([True, False], repeat=4)
    if (time or not query) and (repeat or not counts)
]


@pytest.mark.parametrize("j", [6, N_EVENTS - 2, N_EVENTS - 1])  # middle, newest input, target
@pytest.mark.parametrize("options", OPTIONS, ids=lambda o: "-".join(k for k, v in o.items() if v))
def test_position_i_sees_only_events_up_to_i(options, j):
    base = events(j)
    _, vocabs = build_sequences(
        pd.concat([base, events(j, item_j=8)]), SCHEMA, keep_newest=None
    )  # one vocabulary for every variant of the log
    config = small_config(vocabs, **options)
    before = outputs(config, base, vocabs)
    # the inputs are the first N_EVENTS - 1 events: positions 0 .. N_EVENTS - 2
    for a, b in zip(before, outputs(config, events(j, item_j=8), vocabs), strict=True):
        torch.testing.assert_close(a[:j], b[:j], rtol=0, atol=1e-6)
        if j < N_EVENTS - 1:
            assert not torch.allclose(a[j:], b[j:])
    later = outputs(config, events(j, shift_j=3 * 86400.0), vocabs)
    for a, b in zip(before, later, strict=True):
        torch.testing.assert_close(a[: j - 1], b[: j - 1], rtol=0, atol=1e-6)
        if not (options["time"] and options["query_time"]):
            torch.testing.assert_close(a[j - 1], b[j - 1], rtol=0, atol=1e-6)
    if options["time"] and options["query_time"]:
        assert not torch.allclose(before[0][j - 1], later[0][j - 1])  # the query term reaches it


# baskets of the basket rule: day d holds the events at these positions (3 lines on day 2)
DAYS = [0, 0, 1, 2, 2, 2, 3, 3, 4, 5, 5, 6]


@pytest.mark.parametrize("counts", [True, False])
@pytest.mark.parametrize("day", [2, 5])
def test_a_basket_sees_only_earlier_baskets_and_itself(counts, day):
    """The basket rule with the repeat head (and its purchase counts): changing an item bought on
    ``day`` leaves every position of an earlier basket identical (state, copy weights, gate)."""
    j = DAYS.index(day) + 1  # the basket's second line
    base = events(j).assign(timestamp=pd.to_datetime(np.array(DAYS) * 86400.0 + 1.7e9, unit="s"))
    changed = base.assign(item_id=np.where(np.arange(N_EVENTS) == j, 8, base["item_id"]))
    _, vocabs = build_sequences(pd.concat([base, changed]), SCHEMA, keep_newest=None)
    config = small_config(
        vocabs,
        repeat_head=True,
        repeat_counts=counts,
        baskets=True,
    )
    earlier = DAYS.index(day)  # positions of the baskets before ``day``
    before, after = outputs(config, base, vocabs), outputs(config, changed, vocabs)
    for a, b in zip(before, after, strict=True):
        torch.testing.assert_close(a[:earlier], b[:earlier], rtol=0, atol=1e-6)
    assert not torch.allclose(before[0][earlier:], after[0][earlier:])
