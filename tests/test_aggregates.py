"""seqenc.data.aggregates: the fitted spec is plain data, transforms other logs into the very same
columns, pools what it did not keep, and cuts each row at its own cut-off (against a naive
per-row reference)."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from tiny import SCHEMA, tiny_events

from seqenc import EventSchema, SeqencError
from seqenc.data.aggregates import OTHER, AggregateSpec, aggregate_features


def test_spec_round_trips_through_json_and_gives_the_same_columns_on_another_log():
    train, other = tiny_events(40, seed=0), tiny_events(30, seed=1)
    spec = AggregateSpec.fit(train, SCHEMA, max_categories=5, value_stats=("mean", "last"))
    again = AggregateSpec.from_dict(json.loads(json.dumps(spec.to_dict())))
    assert again == spec
    a, b = spec.transform(train, SCHEMA), again.transform(other, SCHEMA)
    assert a.names == b.names and a.values.dtype == np.float32
    assert b.values.shape == (other["entity_id"].nunique(), len(b.names))
    items = [n for n in b.names if n.startswith("count[item_id=")]
    assert len(items) == 6 and f"count[item_id={OTHER}]" in items  # 5 kept and the pool
    # every event of the other log is counted once among the item columns, pool included
    counts = b.values[:, [b.names.index(n) for n in items]].sum(axis=1)
    assert np.array_equal(counts, b.values[:, b.names.index("n_events")])


def test_transform_is_aggregate_features_on_the_spec_fitted_at_the_same_cutoffs():
    events = tiny_events(20)
    cut = events.groupby("entity_id", as_index=False)["timestamp"].median()
    cut = cut.rename(columns={"timestamp": "as_of"})
    frame = aggregate_features(events, SCHEMA, cut, max_categories=4, value_stats=("max",))
    spec = AggregateSpec.fit(events, SCHEMA, cut, max_categories=4, value_stats=("max",))
    table = spec.transform(events, SCHEMA, cut)
    assert list(frame.columns[2:]) == table.names
    assert frame[["entity_id", "as_of"]].equals(table.keys.reset_index(drop=True))
    np.testing.assert_allclose(frame[table.names].to_numpy(), table.values, rtol=1e-6)


def test_a_value_never_recorded_is_zero_with_its_count_saying_absent():
    log = pd.DataFrame(
        {
            "user": ["u1", "u1", "u2"],
            "kind": ["a", "b", "b"],
            "amount": [5.0, 7.0, -3.0],
            "timestamp": pd.to_datetime(["2024-01-01", "2024-01-02", "2024-01-03"], utc=True),
        }
    )
    schema = EventSchema(entity="user", item="kind", numeric=["amount"])
    agg = aggregate_features(log, schema, value_stats=("mean", "min", "max", "last"))
    u2 = agg.set_index("user").loc["u2"]
    assert u2["count[kind=a]"] == 0 and u2["share[kind=a]"] == 0
    assert all(u2[f"amount_{s}[kind=a]"] == 0 for s in ("mean", "min", "max", "last"))
    assert u2["amount_min[kind=b]"] == -3.0


def test_a_spec_fitted_on_other_columns_is_refused():
    spec = AggregateSpec.fit(tiny_events(10), SCHEMA)
    with pytest.raises(SeqencError, match="fitted on columns"):
        spec.transform(tiny_events(10), EventSchema(categorical=("channel",)))
    with pytest.raises(SeqencError, match="malformed"):
        AggregateSpec.from_dict({"values": 3})


@settings(max_examples=25, deadline=None)
@given(
    offsets=st.lists(st.integers(-2, 90), min_size=1, max_size=6),
    seed=st.integers(0, 5),
)
@example(offsets=[-1], seed=0)  # every row before its entity's first event
def test_each_row_reads_exactly_its_events_at_or_before_its_cutoff(offsets, seed):
    """Against a naive reference: per row, the events of its entity with time <= its cut-off; no
    event at or before any cut-off is refused in one line."""
    events = tiny_events(6, seed=seed)
    first = events["timestamp"].min()
    ids = events["entity_id"].unique()
    cut = pd.DataFrame(
        {
            "entity_id": ids[np.arange(len(offsets)) % len(ids)],
            "as_of": first + pd.to_timedelta(offsets, unit="D"),
        }
    )
    spec = AggregateSpec.fit(events, SCHEMA, max_categories=3)
    expected = [
        int(((events["entity_id"] == e) & (events["timestamp"] <= t)).sum())
        for e, t in zip(cut["entity_id"], cut["as_of"], strict=True)
    ]
    if not any(expected):
        with pytest.raises(SeqencError, match="no event at or before any row's 'as_of'") as e:
            spec.transform(events, SCHEMA, cut)
        assert "\n" not in str(e.value)
        return
    table = spec.transform(events, SCHEMA, cut)
    n_events = table.values[:, table.names.index("n_events")]
    assert [expected[i] for i in table.keys.index] == n_events.astype(int).tolist()
    assert all(expected[i] == 0 for i in set(range(len(cut))) - set(table.keys.index))
