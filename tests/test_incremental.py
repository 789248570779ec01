"""Incremental encoding reproduces Encoder.encode of the whole history (within 1e-5)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from tiny import SCHEMA, ml100k, random_bundle, tiny_events

from seqenc.errors import SeqencError
from seqenc.incremental.update import update_state
from seqenc.inference import Encoder, load_encoder

MAX_LEN = 40
TOL = 1e-5
SHAPES = {
    "learned_time_query": {},
    "rope": {"positional": "rope"},
    "no_time": {"time": False},
    "no_query_time": {"query_time": False},
    "mean_normalize": {"pooling": "mean", "normalize": True},
    "repeat_head": {"repeat_head": True},
    "no_positions_mean": {"positional": "none", "pooling": "mean"},
}


@pytest.fixture(scope="module")
def events() -> pd.DataFrame:
    return tiny_events(40, seed=3)


def encoder(path: Path, events: pd.DataFrame, max_len: int = MAX_LEN, **options) -> Encoder:
    return load_encoder(random_bundle(path, events, SCHEMA, max_len, **options), "cpu")


def split(events: pd.DataFrame, *shares: float) -> list[pd.DataFrame]:
    """The log cut at time quantiles: every part holds the events after the previous cut."""
    times = events["timestamp"]
    cuts = list(times.quantile(list(shares)))
    after = [times > cut for cut in cuts] + [times != times]
    return [events[~after[0]]] + [events[a & ~b] for a, b in zip(after, after[1:], strict=False)]


def with_newcomers(old: pd.DataFrame, new: pd.DataFrame, n: int = 4) -> tuple:
    """``(old, new)`` with the whole history of ``n`` entities moved into ``new``."""
    late = old["entity_id"].isin(sorted(old["entity_id"].unique())[-n:])
    return old[~late], pd.concat([old[late], new])


def assert_matches(got, want) -> None:
    assert list(got.entity_ids) == list(want.entity_ids)
    assert np.array_equal(got.n_events_read, want.n_events_read)
    assert np.array_equal(got.last_event_time, want.last_event_time)
    assert np.abs(got.embeddings - want.embeddings).max() <= TOL


@pytest.mark.parametrize("shape", SHAPES)
def test_update_equals_encode_of_the_whole_history(tmp_path, events, shape):
    enc = encoder(tmp_path / "b", events, **SHAPES[shape])
    old, new = with_newcomers(*split(events, 0.7))
    state = enc.state(old)
    got, after = enc.update(state, new, output="numpy")
    assert_matches(got, enc.encode(events, output="numpy"))
    stats = after.stats
    # the split leaves every case: new entities, extended, overflowing and untouched histories
    assert min(stats["n_new"], stats["n_extended"], stats["n_reencoded"], stats["n_unchanged"]) > 0
    assert stats["n_positions"] < len(events)


def test_entities_without_new_events_keep_their_embedding(tmp_path, events):
    enc = encoder(tmp_path / "b", events)
    old, new = split(events, 0.7)
    state = enc.state(old)
    before = dict(zip(state.entity_ids.to_pylist(), state.embeddings, strict=True))
    got, _ = enc.update(state, new, output="numpy")
    untouched = set(old["entity_id"]) - set(new["entity_id"])
    assert untouched
    for entity, embedding in zip(got.entity_ids, got.embeddings, strict=True):
        if entity in untouched:
            assert np.array_equal(embedding, before[entity])


def test_overflow_reencodes_exactly_the_windows_that_slide(tmp_path, events):
    max_len = 12
    enc = encoder(tmp_path / "b", events, max_len=max_len)
    old, new = split(events, 0.6)
    _, after = enc.update(enc.state(old), new, output="numpy")
    n_old = old.groupby("entity_id").size()
    n_new = new.groupby("entity_id").size().reindex(n_old.index, fill_value=0)
    slides = int(((n_old + n_new > max_len) & (n_new > 0)).sum())
    assert slides > 0 and after.stats["n_reencoded"] == slides
    assert_matches(
        enc.update(enc.state(old), new, output="numpy")[0], enc.encode(events, output="numpy")
    )


def test_many_small_updates_with_as_of(tmp_path, events):
    enc = encoder(tmp_path / "b", events, max_len=24)
    parts = split(events, 0.5, 0.6, 0.8, 0.9)
    times = events["timestamp"]
    as_of = times.quantile(0.5) + pd.Timedelta(1, "h")
    state = enc.state(parts[0], as_of=as_of)
    seen = parts[0]
    for part in parts[1:]:
        seen = pd.concat([seen, part])
        as_of = max(as_of, part["timestamp"].max()) + pd.Timedelta(3, "h")
        got, state = enc.update(state, part, as_of=as_of, output="numpy")
        assert_matches(got, enc.encode(seen, as_of=as_of, output="numpy"))
    # no new event, a later query time: only the newest positions run again
    later = as_of + pd.Timedelta(30, "D")
    got, requeried = enc.update(state, None, as_of=later, output="numpy")
    assert requeried.stats["n_requeried"] == len(state)
    assert requeried.stats["n_positions"] == len(state)
    assert_matches(got, enc.encode(events, as_of=later, output="numpy"))


def test_batching_does_not_change_the_result(tmp_path, events):
    enc = encoder(tmp_path / "b", events)
    old, new = split(events, 0.5)
    state = enc.state(old)
    one = update_state(enc, state, new, enc.options(max_tokens=1))  # one entity per batch
    many = update_state(enc, state, new, enc.options())
    assert np.abs(one.embeddings - many.embeddings).max() <= TOL
    assert np.array_equal(one.offsets, many.offsets)


def test_save_and_load_round_trip(tmp_path, events):
    enc = encoder(tmp_path / "b", events)
    old, new = split(events, 0.7)
    state = enc.state(old)
    path = state.save(tmp_path / "state.safetensors")
    loaded = enc.load_state(path)
    assert loaded.entity_ids.equals(state.entity_ids)
    for name in ("offsets", "items", "timestamps", "keys", "values", "embeddings", "prefix_sum"):
        assert np.array_equal(getattr(loaded, name), getattr(state, name)), name
    got, _ = enc.update(loaded, new, output="numpy")
    assert_matches(got, enc.encode(events, output="numpy"))


def test_integer_entity_ids_round_trip(tmp_path, events):
    events = events.assign(entity_id=events["entity_id"].str.extract(r"(\d+)")[0].astype("int64"))
    enc = encoder(tmp_path / "b", events)
    state = enc.state(events)
    loaded = enc.load_state(state.save(tmp_path / "s.safetensors"))
    assert loaded.entity_ids.type == state.entity_ids.type
    assert loaded.entity_ids.equals(state.entity_ids)


def test_a_state_file_from_another_bundle_or_changed_is_refused(tmp_path, events):
    enc = encoder(tmp_path / "a", events)
    path = enc.state(events).save(tmp_path / "state.safetensors")
    other = encoder(tmp_path / "b", events, positional="rope")
    with pytest.raises(SeqencError, match="another model") as info:
        other.load_state(path)
    assert "\n" not in str(info.value)
    data = bytearray(path.read_bytes())
    data[-5] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(SeqencError, match="corrupt"):
        enc.load_state(path)
    with pytest.raises(SeqencError, match="not found"):
        enc.load_state(tmp_path / "missing.safetensors")
    (tmp_path / "junk").write_text("not safetensors")
    with pytest.raises(SeqencError, match="not a seqenc state file"):
        enc.load_state(tmp_path / "junk")


def test_refusals_are_one_line(tmp_path, events):
    masked = encoder(tmp_path / "m", events, causal=False)
    with pytest.raises(SeqencError, match="causal model") as info:
        masked.state(events)
    assert "\n" not in str(info.value)
    enc = encoder(tmp_path / "c", events)
    old, new = split(events, 0.7)
    state = enc.state(new)
    with pytest.raises(SeqencError, match="older than their newest event"):
        enc.update(state, old)
    with pytest.raises(SeqencError, match="as_of=.* is earlier"):
        enc.update(state, None, as_of=old["timestamp"].max())
    with pytest.raises(SeqencError, match="another model"):
        encoder(tmp_path / "r", events, positional="rope").update(state, new)


@pytest.mark.shared_data
def test_movielens_100k(shared_data, tmp_path):
    events = ml100k(shared_data)
    schema = dataclasses.replace(SCHEMA, categorical=(), numeric=())
    bundle = random_bundle(tmp_path / "b", events, schema, 128)
    enc = load_encoder(bundle, "cpu")
    old, new = split(events, 0.9)
    got, after = enc.update(enc.state(old), new, output="numpy")
    assert after.stats["n_extended"] > 0 and after.stats["n_reencoded"] > 0
    assert_matches(got, enc.encode(events, output="numpy"))


@pytest.mark.parametrize("ahead", ["1h", "1825D"])
def test_update_equals_encode_at_a_distant_as_of(tmp_path, events, ahead):
    """The time inputs do not depend on how far ``as_of`` lies ahead: update equals encode within
    1e-5 an hour and five years after the newest event (times of ~1e8 s in float32 lose whole
    seconds)."""
    enc = encoder(tmp_path / "b", events)
    old, new = with_newcomers(*split(events, 0.7))
    as_of = events["timestamp"].max() + pd.Timedelta(ahead)
    got, _ = enc.update(enc.state(old, as_of=as_of), new, as_of=as_of, output="numpy")
    assert_matches(got, enc.encode(events, as_of=as_of, output="numpy"))


def test_same_time_events_follow_the_tie_rule_of_encode(tmp_path, events):
    """New events at the time of an entity's newest event in the state go among the state's events
    of that time as ``encode`` orders them (item, then categorical and numeric values): update
    equals encode within 1e-5 whether they sort before, between or after them, the tie values
    kept through a saved and loaded state and a second update."""
    enc = encoder(tmp_path / "b", events)
    old, _ = split(events, 0.7)
    newest = old.sort_values("timestamp").groupby("entity_id").tail(1)
    items = sorted(events["item_id"].unique())
    old = pd.concat([old, newest.iloc[::2].assign(item_id=items[len(items) // 2])])  # two at once
    later = newest.iloc[1::4].assign(timestamp=newest["timestamp"].iloc[1::4] + pd.Timedelta("1s"))
    new = pd.concat([newest.assign(item_id=items[0]), newest.iloc[::3].assign(item_id=items[-1])])
    new = pd.concat([new, later])
    state = enc.load_state(enc.state(old).save(tmp_path / "state.safetensors"))
    got, state = enc.update(state, new, output="numpy")
    assert_matches(got, enc.encode(pd.concat([old, new]), output="numpy"))
    assert state.stats["n_reordered"] > len(newest) / 2
    between = newest.iloc[2::2].assign(item_id=items[len(items) // 3])
    loaded = enc.load_state(state.save(tmp_path / "again.safetensors"))
    got, _ = enc.update(loaded, between, output="numpy")
    assert_matches(got, enc.encode(pd.concat([old, new, between]), output="numpy"))
