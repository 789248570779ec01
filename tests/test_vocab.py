"""Vocabulary: deterministic order, min_count, UNK handling, JSON round-trips and load errors."""

from __future__ import annotations

import json
from collections import Counter

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from seqenc.data.bounds import VocabBounds
from seqenc.data.events import read_events
from seqenc.data.hashing import stable_hash
from seqenc.data.schema import EventSchema
from seqenc.data.vocab import MASK, N_SPECIAL, PAD, UNK, Vocabularies, Vocabulary
from seqenc.errors import SeqencError


def test_reserved_ids():
    assert (PAD, MASK, UNK, N_SPECIAL) == (0, 1, 2, 3)
    assert (Vocabulary.PAD, Vocabulary.MASK, Vocabulary.UNK, Vocabulary.N_SPECIAL) == (0, 1, 2, 3)


@given(
    st.lists(st.integers(-5, 5)) | st.lists(st.text("abcé", max_size=3)),
    st.integers(1, 3),
    st.sampled_from([0, None, 2]),
)
def test_fit_order_matches_a_counter(values, min_count, oov_buckets):
    counts = Counter(values)
    expected = sorted((v for v in counts if counts[v] >= min_count), key=lambda v: (-counts[v], v))
    vocab = Vocabulary.fit(values, min_count, oov_buckets=oov_buckets)
    assert vocab.values.to_pylist() == expected
    n_left = len(counts) - len(expected)
    buckets = min(n_left, max(len(expected), 1)) if oov_buckets is None else oov_buckets
    assert len(vocab) == N_SPECIAL + len(expected) + buckets
    ids, n_unknown = vocab.encode(values)
    assert n_unknown == sum(counts[v] < min_count for v in values)
    assert list(vocab.decode(ids)) == [v if counts[v] >= min_count else None for v in values]
    start = N_SPECIAL + len(expected)
    for v, i in zip(values, ids, strict=True):
        if counts[v] < min_count:  # the bucket of its hash, or UNK without buckets
            assert i == (start + int(stable_hash([v])[0]) % buckets if buckets else UNK)


def test_input_kinds_agree():
    values = ["b", "a", "b", "c"]
    kinds = [
        values,
        np.array(values),
        np.array(values, dtype=object),
        pd.Series(values, dtype="string"),
        pd.Series(values, dtype="category"),
        pa.chunked_array([values[:2], values[2:]]),
    ]
    for kind in kinds:
        vocab = Vocabulary.fit(kind)
        assert vocab.values.to_pylist() == ["b", "a", "c"] and vocab.dtype == "string"
    assert Vocabulary.fit(np.array([3, 3, 1], dtype=np.int32)).dtype == "int64"


def test_encode_unknowns_nulls_shapes_and_cross_type():
    vocab = Vocabulary.fit([7, 7, 8])
    ids, n_unknown = vocab.encode(np.array([[7, 9], [8, 7]]))
    assert ids.shape == (2, 2) and n_unknown == 1
    np.testing.assert_array_equal(ids, [[3, UNK], [4, 3]])
    assert vocab.encode(pa.array([7, None]))[0].tolist() == [3, UNK]
    assert vocab.encode(["7", "x"])[0].tolist() == [3, UNK]  # text looked up as text
    assert Vocabulary.fit(["7"]).encode([7, 8])[0].tolist() == [3, UNK]
    assert vocab.decode(np.array([PAD, MASK, UNK, 3, 4])).tolist() == [None, None, None, 7, 8]
    with pytest.raises(SeqencError, match=r"\[0, 5\)"):
        vocab.decode(np.array([5]))


def test_json_round_trip():
    vocab = Vocabulary.fit(["x", "y", "y", "z"], min_count=1)
    assert Vocabulary.from_dict(json.loads(json.dumps(vocab.to_dict()))) == vocab
    assert vocab.to_dict() == {
        "dtype": "string",
        "values": ["y", "x", "z"],
        "min_count": 1,
        "max_size": None,
        "oov_buckets": 0,
        "fit_events": 4,
        "oov_events": 0,
    }


@pytest.mark.parametrize(
    "content, message",
    [
        ('{"dtype": "float", "values": [], "min_count": 1}', "'float'"),
        ('{"dtype": "int64", "values": [1, "a"], "min_count": 1}', "'a'"),
        ('{"dtype": "int64", "values": [1, true], "min_count": 1}', "True"),
        ('{"dtype": "string", "values": ["a", "b", "a"], "min_count": 1}', "duplicates, e.g. 'a'"),
        ('{"dtype": "string", "values": [], "min_count": 0}', "min_count"),
        ('{"values": []}', "keys"),
        ('{"dtype": "string", "values": [], "min_count": 1, "extra": 1}', "may have"),
        ('{"dtype": "string", "values": [], "min_count": 1, "oov_buckets": -1}', "oov_buckets"),
        ('{"dtype": "string", "values": [], "min_count": 1, "max_size": 0}', "max_size"),
        ('{"dtype": "string", "values": [], "min_count": 1, "oov_events": 2}', "exceed"),
    ],
)
def test_from_dict_rejects_bad_contents(content, message):
    # files are read by the bundle, whose errors name the file (tests/test_bundle.py)
    with pytest.raises(SeqencError) as info:
        Vocabulary.from_dict(json.loads(content))
    assert message in str(info.value)


def test_vocabularies_fit_and_round_trip():
    schema = EventSchema(categorical=("kind",))
    df = pd.DataFrame(
        {
            "entity_id": [1, 1, 2, 2],
            "item_id": ["a", "b", "a", "c"],
            "timestamp": [0, 1, 2, 3],
            "kind": ["buy", "view", "view", None],
        }
    )
    vocabs = Vocabularies.fit(read_events(df, schema), schema, VocabBounds(min_item_count=2))
    assert vocabs.item.values.to_pylist() == ["a"]  # min_item_count applies to items only
    assert vocabs.categorical["kind"].values.to_pylist() == ["view", "buy"]
    assert Vocabularies.from_dict(json.loads(json.dumps(vocabs.to_dict()))) == vocabs
    with pytest.raises(SeqencError, match="keys"):
        Vocabularies.from_dict({"item": {"dtype": "int64"}, "categorical": {}})


def test_fit_rejects_bad_min_count_and_types():
    with pytest.raises(SeqencError, match="min_count"):
        Vocabulary.fit([1, 2], min_count=0)
    with pytest.raises(SeqencError, match="double"):
        Vocabulary.fit(np.array([1.5, 2.5]))
    with pytest.raises(SeqencError, match="all integers or all strings"):
        Vocabulary.fit([1, "a"])
