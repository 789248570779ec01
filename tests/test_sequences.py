"""build_sequences against a naive per-entity pandas reference, plus hand-made cases."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from seqenc.data.bounds import VocabBounds
from seqenc.data.cut import epoch_seconds
from seqenc.data.loaders import load_dataset
from seqenc.data.schema import EventSchema
from seqenc.data.sequences import (
    _stable_order,
    build_sequences,
    log_unknown_values,
    require_trainable,
)
from seqenc.data.vocab import UNK, Vocabularies, Vocabulary
from seqenc.errors import SeqencError

SCHEMA = EventSchema(categorical=("kind",), numeric=("amount",))


def naive(df: pd.DataFrame, max_len: int | None, as_of: float | None) -> dict[str, list]:
    """Per-entity Python reference: sort, cut, truncate, deltas, vocabulary — one entity at a time."""
    df = df.assign(row=np.arange(len(df)))
    if as_of is not None:
        df = df[df["timestamp"] <= as_of]
    ids = {c: vocabulary_ids(df[c]) for c in ["item_id", "kind"]}
    keys = ["entity", "items", "kind", "amount", "ts", "dt_prev", "dt_ref", "lengths"]
    out: dict[str, list] = {k: [] for k in keys}
    for entity in sorted(df["entity_id"].unique()):
        # Equal times: by item, then the categorical and numeric columns (the schema's tie order).
        group = df[df["entity_id"] == entity].sort_values(
            ["timestamp", "item_id", "kind", "amount"]
        )
        ts = group["timestamp"].astype(float).tolist()
        dt_prev = [0.0] + [b - a for a, b in zip(ts[:-1], ts[1:], strict=True)]
        ref = ts[-1] if as_of is None else as_of
        keep = slice(None) if max_len is None else slice(-max_len, None)
        out["entity"].append(entity)
        out["items"] += [ids["item_id"][v] for v in group["item_id"]][keep]
        out["kind"] += [ids["kind"][v] for v in group["kind"]][keep]
        out["amount"] += group["amount"].tolist()[keep]
        out["ts"] += ts[keep]
        out["dt_prev"] += dt_prev[keep]
        out["dt_ref"] += [ref - t for t in ts][keep]
        out["lengths"].append(len(ts[keep]))
    return out


def vocabulary_ids(values: pd.Series) -> dict:
    """Value -> id: by descending count, ties by value, from 3 on."""
    counts = values.value_counts()
    return {v: 3 + k for k, v in enumerate(sorted(counts.index, key=lambda v: (-counts[v], v)))}


def id_column(kind: str):
    if kind == "int":
        return st.integers(-3, 3)
    return st.text("ab", min_size=1, max_size=2)


@st.composite
def event_logs(draw):
    n = draw(st.integers(1, 40))
    kind = draw(st.sampled_from(["int", "object", "string"]))
    df = pd.DataFrame(
        {
            "entity_id": draw(st.lists(id_column(kind), min_size=n, max_size=n)),
            "item_id": draw(st.lists(st.integers(0, 6), min_size=n, max_size=n)),
            "timestamp": draw(st.lists(st.integers(0, 8), min_size=n, max_size=n)),  # many ties
            "kind": draw(st.lists(st.sampled_from(["x", "y", "z"]), min_size=n, max_size=n)),
            "amount": np.arange(n, dtype=np.float64) / 4,  # distinct: shows where rows went
        }
    )
    if kind == "string":
        df["entity_id"] = df["entity_id"].astype("string")
    elif kind == "object":
        df["entity_id"] = df["entity_id"].astype(object)
    return df


@settings(max_examples=150, deadline=None)
@given(event_logs(), st.none() | st.integers(1, 5), st.none() | st.integers(0, 8))
def test_matches_naive_reference(df, max_len, as_of):
    ref = naive(df, max_len, as_of)
    if not ref["entity"]:  # as_of before every event
        store, _ = build_sequences(df, SCHEMA, keep_newest=max_len, as_of=as_of)
        assert len(store) == 0 and store.n_events == 0
        return
    store, vocabs = build_sequences(df, SCHEMA, keep_newest=max_len, as_of=as_of)
    assert store.entity_ids.to_pylist() == [
        str(e) if isinstance(e, str) else e for e in ref["entity"]
    ]
    np.testing.assert_array_equal(store.offsets, np.concatenate([[0], np.cumsum(ref["lengths"])]))
    np.testing.assert_array_equal(store.items, ref["items"])
    np.testing.assert_array_equal(store.categorical["kind"], ref["kind"])
    np.testing.assert_array_equal(store.numeric["amount"], np.float32(ref["amount"]))
    np.testing.assert_array_equal(store.timestamps, ref["ts"])
    np.testing.assert_array_equal(store.dt_prev, np.float32(ref["dt_prev"]))
    np.testing.assert_array_equal(store.dt_ref, np.float32(ref["dt_ref"]))
    assert store.items.dtype == np.int64 and store.dt_prev.dtype == np.float32
    assert store.has_time and store.n_unknown_items == 0
    # Re-encoding with the fitted vocabularies gives the same store.
    again, same = build_sequences(df, SCHEMA, keep_newest=max_len, as_of=as_of, vocabs=vocabs)
    assert same is vocabs
    np.testing.assert_array_equal(again.items, store.items)


def test_hand_case_with_string_ids_ties_and_truncation():
    df = pd.DataFrame(
        {
            "entity_id": pd.Series(["u2", "u1", "u2", "u2", "u1", "u2"], dtype="string"),
            "item_id": ["c", "a", "a", "b", "b", "d"],
            "timestamp": [30, 10, 10, 30, 5, 40],
        }
    )
    store, vocabs = build_sequences(df, keep_newest=3)
    assert store.entity_ids.to_pylist() == ["u1", "u2"]
    assert store.offsets.tolist() == [0, 2, 5]
    # u1: b@5, a@10. u2: a@10, b@30, c@30 (tie broken by item), d@40 -> keep the last 3.
    assert vocabs.item.decode(store.items).tolist() == ["b", "a", "b", "c", "d"]
    assert store.timestamps.tolist() == [5, 10, 30, 30, 40]
    assert store.dt_prev.tolist() == [0, 5, 20, 0, 10]  # u2's first kept event still has its gap
    assert store.dt_ref.tolist() == [5, 0, 10, 10, 0]


def test_as_of_cut_and_reference_time():
    df = pd.DataFrame(
        {
            "entity_id": [1, 1, 1, 2],
            "item_id": [5, 6, 7, 8],
            "timestamp": pd.to_datetime(
                ["2024-01-01", "2024-01-02", "2024-01-05", "2024-01-04"], utc=True
            ),
        }
    )
    store, vocabs = build_sequences(df, as_of="2024-01-03")
    assert store.entity_ids.to_pylist() == [1]  # entity 2 has nothing before the cut
    assert vocabs.item.values.to_pylist() == [5, 6]  # fitted on visible events only
    assert store.dt_ref.tolist() == [2 * 86400, 86400]
    for as_of in [pd.Timestamp("2024-01-03"), 1704240000, 1704240000.0]:
        assert build_sequences(df, as_of=as_of)[0].dt_ref.tolist() == [2 * 86400, 86400]


def test_without_timestamps_keeps_input_order():
    df = pd.DataFrame({"entity_id": [2, 1, 2, 1], "item_id": [9, 8, 7, 8]})
    store, vocabs = build_sequences(df, EventSchema(timestamp=None), keep_newest=None)
    assert vocabs.item.decode(store.items).tolist() == [8, 8, 9, 7]
    assert not store.has_time
    assert store.timestamps.tolist() == store.dt_prev.tolist() == store.dt_ref.tolist() == [0] * 4
    with pytest.raises(SeqencError, match="as_of needs a timestamp"):
        build_sequences(df, EventSchema(timestamp=None), as_of=0)


def test_inference_with_given_vocabularies_counts_unknowns():
    schema = EventSchema(categorical=("kind",), numeric=("amount",))
    train = pd.DataFrame(
        {"entity_id": [1, 1], "item_id": [10, 11], "timestamp": [0, 1], "kind": ["a", "b"]}
    ).assign(amount=[1.0, 2.0])
    _, vocabs = build_sequences(train, schema)
    new = pd.DataFrame(
        {"entity_id": [3, 3, 3], "item_id": [10, 99, 98], "timestamp": [5, 6, 7]}
    ).assign(kind=["b", "zzz", None], amount=[0.5, 1.5, 2.5])
    store, same = build_sequences(new, schema, vocabs=vocabs)
    assert same is vocabs
    assert store.items.tolist() == [vocabs.item.encode([10])[0][0], UNK, UNK]
    assert store.n_unknown_items == 2
    assert store.categorical["kind"].tolist() == [4, UNK, UNK]  # a=3, b=4 (tie: by value)
    assert store.numeric["amount"].dtype == np.float32
    assert store.numeric["amount"].tolist() == [0.5, 1.5, 2.5]


def test_min_item_count_sends_rare_items_to_a_bucket_or_unk():
    df = pd.DataFrame({"entity_id": [1, 1, 1], "item_id": [4, 4, 5], "timestamp": [0, 1, 2]})
    store, vocabs = build_sequences(df, bounds=VocabBounds(min_item_count=2))
    assert store.items.tolist() == [3, 3, 4] and store.n_unknown_items == 1  # 4: the one bucket
    assert vocabs.item.oov_buckets == 1 and vocabs.item.unknown(store.items).tolist() == [0, 0, 1]
    store, _ = build_sequences(df, bounds=VocabBounds(min_item_count=2, oov_buckets=0))
    assert store.items.tolist() == [3, 3, UNK] and store.n_unknown_items == 1


def test_bad_arguments():
    df = pd.DataFrame({"entity_id": [1], "item_id": [1], "timestamp": [0]})
    with pytest.raises(SeqencError, match="keep_newest"):
        build_sequences(df, keep_newest=0)
    vocabs = Vocabularies(item=Vocabulary.fit([1]))
    with pytest.raises(SeqencError, match=r"no vocabulary for categorical column\(s\) \['kind'\]"):
        build_sequences(df.assign(kind="x"), EventSchema(categorical=("kind",)), vocabs=vocabs)


def test_stable_order_with_two_radix_passes_matches_lexsort():
    rng = np.random.default_rng(0)
    n, n_entities = 200_000, 70_000  # > 2**16 entities: the high 16-bit pass runs too
    codes = rng.integers(0, n_entities, n)
    whole = rng.integers(0, 50, n).astype(np.float64)  # one int64 key
    fractional = whole + rng.integers(0, 2, n) / 2  # sort by time, then radix by entity
    for times in [whole, fractional, whole * 1e15]:  # the last: key too large, no int64 key
        np.testing.assert_array_equal(
            _stable_order(codes, times, n_entities), np.lexsort((np.arange(n), times, codes))
        )
    np.testing.assert_array_equal(
        _stable_order(codes, None, n_entities), np.argsort(codes, kind="stable")
    )
    sorted_codes = np.sort(codes)
    np.testing.assert_array_equal(_stable_order(sorted_codes, None, n_entities), np.arange(n))


@pytest.mark.shared_data
def test_real_ml100k_matches_pandas(shared_data):
    df = load_dataset(shared_data / "ml-100k" / "u.data")
    store, vocabs = build_sequences(df, keep_newest=50)
    order = ["entity_id", "timestamp", "item_id"]  # equal times: by item (the schema default)
    ref = df.sort_values(order).groupby("entity_id").tail(50)
    assert len(store) == 943 and store.n_events == len(ref)
    np.testing.assert_array_equal(vocabs.item.decode(store.items).astype(np.int64), ref["item_id"])
    np.testing.assert_array_equal(store.timestamps, ref["timestamp"])


def test_row_order_never_changes_histories():
    """Shuffled rows (e.g. Parquet from a distributed job) give the same store, ties included."""
    rng = np.random.default_rng(0)
    n = 400
    df = pd.DataFrame(
        {
            "entity_id": rng.integers(0, 20, n),
            "item_id": rng.integers(0, 5, n),
            "timestamp": rng.integers(0, 4, n),  # many equal times
            "kind": rng.choice(["x", "y"], n),
            "amount": rng.integers(0, 2, n).astype(float),
        }
    )
    want, _ = build_sequences(df, SCHEMA, keep_newest=None)
    for seed in range(3):
        shuffled = df.sample(frac=1, random_state=seed)
        got, _ = build_sequences(shuffled, SCHEMA, keep_newest=None)
        for name in ("items", "timestamps"):
            np.testing.assert_array_equal(getattr(got, name), getattr(want, name))
        np.testing.assert_array_equal(got.categorical["kind"], want.categorical["kind"])
        np.testing.assert_array_equal(got.numeric["amount"], want.numeric["amount"])


def test_tie_breakers_come_before_the_item():
    df = pd.DataFrame(
        {"entity_id": [1, 1, 1], "item_id": [7, 8, 9], "timestamp": [5, 5, 5], "seq": [2, 0, 1]}
    )
    store, vocabs = build_sequences(df, EventSchema(tie_breakers=("seq",)))
    assert vocabs.item.decode(store.items).tolist() == [8, 9, 7]
    store, vocabs = build_sequences(df.iloc[::-1])  # default: by item
    assert vocabs.item.decode(store.items).tolist() == [7, 8, 9]


def test_unknown_categorical_values_are_counted_per_column(caplog):
    train = pd.DataFrame(
        {"entity_id": [1, 1], "item_id": [1, 2], "timestamp": [0, 1], "kind": ["a", "b"]}
    )
    schema = EventSchema(categorical=("kind",))
    _, vocabs = build_sequences(train, schema)
    new = train.assign(kind=["a", "zzz"]).pipe(lambda d: pd.concat([d, d.assign(kind=None)]))
    store, _ = build_sequences(new, schema, vocabs=vocabs)
    assert store.n_unknown_categorical == {"kind": 1}  # nulls are not "unknown"
    ints = train.assign(kind=[1, 2])  # the wrong type: compared as text, all unknown
    store, _ = build_sequences(ints, schema, vocabs=vocabs)
    assert store.n_unknown_categorical == {"kind": 2}
    with caplog.at_level("WARNING"):
        log_unknown_values(store.n_events, 0, store.n_unknown_categorical)
    assert "2 of 2 events have a 'kind' value unknown" in caplog.text


def test_require_trainable_names_min_len():
    df = pd.DataFrame({"entity_id": [1, 1, 1, 1, 2], "item_id": [1, 2, 3, 4, 5], "timestamp": 0})
    store, _ = build_sequences(df)
    require_trainable(store, 3)
    with pytest.raises(SeqencError, match=r"all 2 entities have fewer than 5 events \(min_len=5"):
        require_trainable(store, 5)
    store, _ = build_sequences(df.iloc[1:])  # three events: nothing left to train on
    with pytest.raises(SeqencError, match=r"fewer than 4 events \(min_len=3.*longest has 3"):
        require_trainable(store, 3)


@pytest.mark.parametrize("unit", ["ns", "us"])
@pytest.mark.parametrize("form", ["frame", "parquet", "iso text"])
def test_as_of_cuts_at_integer_ticks(tmp_path, unit, form):
    """An event a nanosecond (or microsecond) after ``as_of`` is out, though its float seconds
    equal ``as_of``'s; one at ``as_of`` is in (float seconds alone keep both)."""
    as_of = pd.Timestamp("2024-03-01 12:00:00.123456789")
    step = pd.Timedelta(1, unit)
    times = [as_of - 5 * step, as_of.floor(unit), as_of.floor(unit) + step]
    events = pd.DataFrame({"entity_id": [1, 1, 1], "item_id": [10, 11, 12]})
    events["timestamp"] = pd.Series(times).astype(f"datetime64[{unit}]")
    source: object = events
    if form == "parquet":
        events.to_parquet(tmp_path / "e.parquet")
        source = str(tmp_path / "e.parquet")
    elif form == "iso text":
        source = events.assign(timestamp=events["timestamp"].map(lambda t: t.isoformat()))
    seconds = epoch_seconds(as_of)
    assert epoch_seconds(times[2]) - seconds < 1e-6  # the floats cannot tell them apart
    store, vocabs = build_sequences(source, EventSchema(), as_of=as_of)
    kept = vocabs.item.decode(store.items)
    assert list(kept) == [10, 11]
