"""Bounded vocabularies: the stable hash, the top-N and minimum-count bounds, hashed
out-of-vocabulary buckets that agree at fit and at encode time, the figures printed and stored."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st
from tiny import SCHEMA, random_bundle, tiny_events

from seqenc.bundle import CONFIG_FILE, load_bundle
from seqenc.data.bounds import VocabBounds
from seqenc.data.datamodule import SequenceDataModule
from seqenc.data.hashing import _fnv1a, stable_hash
from seqenc.data.sequences import build_sequences
from seqenc.data.vocab import N_SPECIAL, UNK, Vocabularies, Vocabulary
from seqenc.errors import SeqencError

# FNV-1a then splitmix64's finaliser, worked out by hand (a plain-Python loop over the bytes)
PINNED = {
    "5": 12158264550334679203,
    "12345": 6350255940425526121,
    "-7": 5470625268290893537,
    "a": 198367012849983736,
    "": 17665956581633026203,
    "café": 16195296087438488975,
}


def test_stable_hash_is_pinned_and_ints_hash_as_their_text():
    # the published FNV-1a 64 test vectors, before the finaliser
    fnv = _fnv1a(pa.array(["a", "foobar", ""], pa.large_string()))
    assert fnv.tolist() == [0xAF63DC4C8601EC8C, 0x85944171F73967E8, 0xCBF29CE484222325]
    assert stable_hash(list(PINNED)).tolist() == list(PINNED.values())
    assert stable_hash(np.array([5, 12345, -7])).tolist() == [
        PINNED[k] for k in ("5", "12345", "-7")
    ]
    sliced = pa.array(["x", "café", "", "a"]).slice(1)
    for arr in (sliced, pa.chunked_array([["café"], ["", "a"]])):
        assert stable_hash(arr).tolist() == [PINNED["café"], PINNED[""], PINNED["a"]]
    with pytest.raises(SeqencError, match="null"):
        stable_hash(["a", None])


@given(st.lists(st.integers(0, 6), max_size=40), st.integers(1, 8), st.integers(1, 3))
def test_max_size_keeps_exactly_the_top_n_by_count_ties_by_value(values, max_size, min_count):
    counts = Counter(values)
    ranked = sorted((v for v in counts if counts[v] >= min_count), key=lambda v: (-counts[v], v))
    vocab = Vocabulary.fit(values, min_count, max_size)
    kept = ranked[:max_size]
    assert vocab.values.to_pylist() == kept
    buckets = min(len(counts) - len(kept), max(len(kept), 1))  # at most one per value kept
    assert vocab.oov_buckets == buckets and len(vocab) == N_SPECIAL + len(kept) + buckets
    assert (vocab.fit_events, vocab.oov_events) == (
        len(values),
        sum(counts[v] for v in counts if v not in kept),
    )


def test_an_item_unseen_at_fit_lands_in_its_bucket_at_encode():
    fit = pd.DataFrame(
        {"entity_id": [1] * 6, "item_id": ["a", "a", "a", "b", "b", "c"], "timestamp": range(6)}
    )
    store, vocabs = build_sequences(fit, bounds=VocabBounds(max_items=1, oov_buckets=8))
    item = vocabs.item
    assert item.values.to_pylist() == ["a"] and item.bucket_start == 4 and len(item) == 12
    assert store.items[3:].tolist() == (4 + stable_hash(["b", "b", "c"]) % 8).tolist()
    np.testing.assert_array_equal(store.items, item.encode(fit["item_id"])[0])
    new = pd.DataFrame(
        {"entity_id": [2, 2, 2], "item_id": ["c", "café", "a"], "timestamp": range(3)}
    )
    again, _ = build_sequences(new, vocabs=vocabs)
    assert again.items.tolist() == [store.items[-1], 4 + PINNED["café"] % 8, 3]
    assert again.n_unknown_items == 2  # a bucket is not a known item
    assert item.decode(again.items).tolist() == [None, None, "a"]
    text = Vocabulary.fit(["5", "5", "6"], max_size=1, oov_buckets=8)  # ints hash as their text
    assert text.encode([7, 6])[0].tolist() == (4 + stable_hash(["7", "6"]) % 8).tolist()


def test_oov_buckets_zero_is_unk_and_nulls_stay_unk():
    vocab = Vocabulary.fit([1, 1, 2], max_size=1, oov_buckets=0)
    assert len(vocab) == N_SPECIAL + 1 and vocab.encode([2, 9])[0].tolist() == [UNK, UNK]
    bucketed = Vocabulary.fit([1, 1, 2], max_size=1)
    assert bucketed.oov_buckets == 1 and bucketed.encode(pa.array([2, None, 9]))[0].tolist() == [
        4,
        UNK,
        4,
    ]
    assert Vocabulary.fit([1, 1, 2]).oov_buckets == 0  # no bound, no bucket


def _share(column: pd.Series, kept: int) -> float:
    """Naively: the share of the non-null events whose value ranks below ``kept`` by count."""
    counts = Counter(column.dropna())
    ranked = sorted(counts, key=lambda v: (-counts[v], v))
    return sum(counts[v] for v in ranked[kept:]) / sum(counts.values())


def test_the_share_printed_equals_a_naive_count_for_items_and_each_column():
    events = tiny_events()
    bounds = {"max_items": 10, "max_categories": {"event_type": 2}, "min_category_count": 1}
    data = SequenceDataModule(events, schema=SCHEMA, **bounds)
    line = data.vocabs.describe()
    item, kind = _share(events["item_id"], 10), _share(events["event_type"].astype(str), 2)
    assert data.vocabs.item.oov_share == item
    assert data.vocabs.categorical["event_type"].oov_share == kind
    assert line.startswith(
        f"vocabulary: items: 10 kept, {data.vocabs.item.oov_buckets} buckets, {item:.2%} of events in buckets"
    )
    assert f"event_type: 2 kept, 2 buckets, {kind:.2%} of events in buckets" in line  # of 5 kinds
    assert "channel: 3 kept, 0 buckets, 0.00% of events to UNK" in line  # not bounded


def test_category_bounds_one_for_all_or_per_column_and_bad_options_are_one_line():
    events = tiny_events()
    table = pa.Table.from_pandas(events)
    every = Vocabularies.fit(table, SCHEMA, VocabBounds(max_categories=1, oov_buckets=3))
    assert [len(v.values) for v in every.categorical.values()] == [1, 1]
    assert [v.oov_buckets for v in every.categorical.values()] == [
        3,
        3,
    ] and every.item.oov_buckets == 0
    items_only = Vocabularies.fit(table, SCHEMA, VocabBounds(max_items=10, oov_buckets=64))
    assert items_only.item.oov_buckets == 64  # an unbounded column gets none
    assert [v.oov_buckets for v in items_only.categorical.values()] == [0, 0]
    per = Vocabularies.fit(table, SCHEMA, VocabBounds(min_category_count={"channel": 10**9}))
    assert (
        len(per.categorical["channel"].values) == 0 and per.categorical["channel"].oov_buckets == 1
    )
    assert len(per.categorical["event_type"].values) == 5  # not named: unbounded
    with pytest.raises(SeqencError, match=r"max_categories names \['chanel'\], not categorical"):
        Vocabularies.fit(table, SCHEMA, VocabBounds(max_categories={"chanel": 2}))
    with pytest.raises(SeqencError, match="min_item_count=1000000 leaves no item"):
        Vocabularies.fit(table, SCHEMA, VocabBounds(min_item_count=10**6))
    bad = [
        ({"max_items": 0}, "max_items must be an integer >= 1 or None, got 0"),
        ({"min_item_count": 1.5}, "min_item_count must be an integer >= 1, got 1.5"),
        ({"oov_buckets": -1}, "oov_buckets must be an integer >= 0 or None, got -1"),
        ({"min_category_count": {"channel": 0}}, "min_category_count['channel'] must be"),
    ]
    for options, message in bad:
        with pytest.raises(SeqencError) as info:
            SequenceDataModule(events, schema=SCHEMA, **options)
        assert message in str(info.value)


def test_a_bounded_bundle_stores_its_figures_and_encodes_unseen_values_alike(tmp_path):
    events = tiny_events()
    bounds = VocabBounds(max_items=12, max_categories={"event_type": 2})
    path = random_bundle(tmp_path / "b", events, SCHEMA, 16, bounds=bounds)
    encoder, meta, vocabs = load_bundle(path)
    _, fitted = build_sequences(events, SCHEMA, bounds=bounds)
    assert vocabs == fitted and encoder.config.n_items == N_SPECIAL + 12 + 12  # 28 left out
    config = json.loads((path / CONFIG_FILE).read_text())
    assert config["vocabulary"] == fitted.figures() == meta.vocabulary
    assert config["vocabulary"]["item"] == {
        "kept": 12,
        "oov_buckets": 12,
        "oov_share": fitted.item.oov_share,
    }
    unseen = events.assign(item_id=events["item_id"] + 1000)
    store, _ = build_sequences(unseen, SCHEMA, vocabs=vocabs)
    expected = 15 + stable_hash(unseen["item_id"].to_numpy()) % 12
    np.testing.assert_array_equal(np.sort(store.items), np.sort(expected.astype(np.int64)))


def test_a_bundle_written_before_bounds_loads_without_buckets():
    root = Path(__file__).parent / "data" / "legacy_bundles" / "causal"
    encoder, meta, vocabs = load_bundle(root)
    assert meta.vocabulary == {} and vocabs.item.oov_buckets == 0
    assert all(v.oov_buckets == 0 for v in vocabs.categorical.values())
    assert vocabs.item.encode([10, 12345])[0].tolist() == [4, UNK]  # unseen: UNK, as before
    saved = json.loads((root / "vocab.json").read_text())["item"]
    assert Vocabulary.from_dict(saved).to_dict() == saved | {
        "max_size": None,
        "oov_buckets": 0,
        "fit_events": 0,
        "oov_events": 0,
    }


def test_recommend_never_offers_a_bucket(tmp_path):
    from seqenc.inference import load_encoder

    events = tiny_events(20)
    path = random_bundle(tmp_path / "b", events, SCHEMA, 16, bounds=VocabBounds(max_items=5))
    top = load_encoder(path, device="cpu").recommend(events, k=50, filter_seen=False)
    assert top["item_id"].notna().all() and top.groupby("entity_id").size().max() == 5
