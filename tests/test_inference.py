"""The Python API: invariance, determinism, unknown items, as_of, output formats, recommendations."""

from __future__ import annotations

import copy
import logging

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
import torch
from tiny import tiny_bundle, tiny_events

from seqenc.data.vocab import N_SPECIAL
from seqenc.errors import SeqencError
from seqenc.inference import Embeddings, encode, load_encoder


@pytest.fixture(scope="module")
def events() -> pd.DataFrame:
    return tiny_events(n_entities=80)


@pytest.fixture(scope="module", params=[(True, "last"), (False, "last"), (True, "mean")])
def encoder(request, tmp_path_factory, events):
    causal, pooling = request.param
    path = tiny_bundle(tmp_path_factory.mktemp("bundle"), events, causal=causal, pooling=pooling)
    return load_encoder(path, device="cpu")


def _by_entity(result: Embeddings) -> dict:
    return dict(zip(result.entity_ids, result.embeddings, strict=True))


def test_invariant_to_batch_size_and_other_entities(encoder, events):
    full = encoder.encode(events, output="numpy")
    assert full.embeddings.shape == (80, 16) and np.isfinite(full.embeddings).all()
    for batch_size in (1, 7, 1000):
        other = encoder.encode(events, batch_size=batch_size, output="numpy")
        np.testing.assert_allclose(other.embeddings, full.embeddings, rtol=0, atol=1e-5)
    reference = _by_entity(full)
    rng = np.random.default_rng(0)
    for size in (1, 5, 33):
        subset = rng.choice(events.entity_id.unique(), size, replace=False)
        part = encoder.encode(events[events.entity_id.isin(subset)], batch_size=4, output="numpy")
        assert sorted(part.entity_ids) == sorted(subset)
        for entity, vector in _by_entity(part).items():
            np.testing.assert_allclose(vector, reference[entity], rtol=0, atol=1e-5)


def test_token_budget_batches_equal_one_by_one_encoding(encoder, events):
    one_by_one = encoder.encode(events, batch_size=1, output="numpy")
    for max_tokens in (1, 50, 333, 10**6):
        got = encoder.encode(events, max_tokens=max_tokens, output="numpy")
        np.testing.assert_array_equal(got.entity_ids, one_by_one.entity_ids)
        np.testing.assert_allclose(got.embeddings, one_by_one.embeddings, rtol=0, atol=1e-5)


def test_two_calls_are_identical_despite_dropout(encoder, events):
    assert encoder.model.config.dropout > 0
    a = encoder.encode(events, output="torch")
    b = encoder.encode(events, output="torch")
    assert torch.equal(a.embeddings, b.embeddings)


def test_columns_against_pandas_reference(encoder, events):
    df = encoder.encode(events)
    assert list(df.columns) == ["entity_id", "embedding", "n_events_read", "last_event_time"]
    counts = events.groupby("entity_id").size()
    last = events.groupby("entity_id").timestamp.max()
    assert df.entity_id.tolist() == sorted(counts.index)  # ascending ids
    np.testing.assert_array_equal(df.n_events_read, np.minimum(counts.loc[df.entity_id], 24))
    np.testing.assert_array_equal(df.last_event_time, last.loc[df.entity_id].to_numpy())
    assert df.attrs["n_unknown_items"] == 0 and df.attrs["model"] == "tiny"


def test_output_formats_agree(encoder, events):
    pandas = encoder.encode(events)
    arrow = encoder.encode(events, output="arrow")
    numpy_ = encoder.encode(events, output="numpy")
    torch_ = encoder.encode(events, output="torch")
    stacked = np.stack(pandas.embedding)
    assert stacked.dtype == np.float32 and numpy_.embeddings.dtype == np.float32
    np.testing.assert_array_equal(stacked, numpy_.embeddings)
    np.testing.assert_array_equal(torch_.embeddings.numpy(), numpy_.embeddings)
    assert arrow.schema.field("embedding").type == pa.list_(pa.float32(), 16)
    assert arrow.schema.metadata[b"seqenc.model"] == b"tiny"
    assert arrow.column("entity_id").to_pylist() == list(numpy_.entity_ids)
    np.testing.assert_array_equal(
        numpy_.last_event_time, pandas.last_event_time.dt.tz_localize(None).to_numpy()
    )
    with pytest.raises(SeqencError, match="output must be one of"):
        encoder.encode(events, output="list")


def test_unknown_items_and_unseen_entities_are_counted_not_errors(encoder, events, caplog):
    new = events[events.entity_id.isin(events.entity_id.unique()[:3])].copy()
    new["entity_id"] = "new_" + new["entity_id"]  # entities the model never saw
    n_changed = 4
    last = new.groupby("entity_id").tail(2).index[:n_changed]  # within max_len
    new.loc[last, "item_id"] = 10_000 + np.arange(n_changed)
    new["channel"] = new["channel"].astype(str)
    new.loc[last, "channel"] = "carrier-pigeon"  # an unknown category: UNK, not counted as item
    with caplog.at_level(logging.WARNING, logger="seqenc.inference"):
        df = encoder.encode(new)
    assert df.attrs["n_unknown_items"] == n_changed
    n_used = int(np.minimum(new.groupby("entity_id").size(), 24).sum())  # newest max_len events
    assert f"{n_changed} of {n_used} events have items unknown" in caplog.text
    assert df.attrs["n_unknown_categorical"] == {"event_type": 0, "channel": n_changed}
    assert f"{n_changed} of {n_used} events have a 'channel' value unknown" in caplog.text
    table = encoder.encode(new, output="arrow")
    assert (
        table.schema.metadata[b"seqenc.n_unknown_categorical"] == b'{"event_type": 0, "channel": 4}'
    )
    assert np.isfinite(np.stack(df.embedding)).all() and len(df) == 3


def test_as_of_ignores_later_events_and_handles_empty_entities(encoder, events):
    as_of = events.timestamp.quantile(0.5)
    before = events[events.timestamp <= as_of]
    n_gone = events.entity_id.nunique() - before.entity_id.nunique()
    assert n_gone > 0
    with pytest.raises(SeqencError, match=f"{n_gone} entities have no event at or before"):
        encoder.encode(events, as_of=as_of)
    cut = encoder.encode(events, as_of=as_of, on_empty="skip", output="numpy")
    assert cut.n_skipped == n_gone and len(cut.entity_ids) == before.entity_id.nunique()
    same = encoder.encode(before, as_of=as_of, output="numpy")  # the future is invisible
    np.testing.assert_array_equal(cut.embeddings, same.embeddings)
    everyone_gone = encoder.encode(events, as_of="2000-01-01", on_empty="skip", output="numpy")
    assert everyone_gone.embeddings.shape == (0, 16) and everyone_gone.n_skipped == 80


def test_bad_inputs_raise_clear_errors(encoder, events):
    with pytest.raises(SeqencError, match="empty"):
        encoder.encode(events.iloc[:0])
    with pytest.raises(SeqencError, match="channel"):
        encoder.encode(events.drop(columns="channel"))
    with pytest.raises(SeqencError, match="on_empty must be one of"):
        encoder.encode(events, on_empty="ignore")
    with pytest.raises(SeqencError, match="model bundle not found"):
        load_encoder("/nonexistent/bundle")


def test_recommend_matches_naive_scoring(encoder, events):
    subset = events[events.entity_id.isin(events.entity_id.unique()[:6])]
    recs = encoder.recommend(subset, k=5)
    # The next-item head reads the raw newest state, whatever the entity readout: the embedding
    # of the same weights read out with pooling "last", unnormalised.
    newest = copy.deepcopy(encoder)
    newest.model.config.pooling, newest.model.config.normalize = "last", False
    embeddings = newest.encode(subset, output="numpy")
    table = encoder.model.item_embedding.weight.detach().numpy()
    items = encoder.vocabs.item.values.to_numpy()  # id N_SPECIAL + k ↔ items[k]
    for entity, vector in zip(embeddings.entity_ids, embeddings.embeddings, strict=True):
        scores = table[N_SPECIAL:] @ vector
        seen = np.isin(items, subset.loc[subset.entity_id == entity, "item_id"])
        scores[seen] = -np.inf
        n = min(5, int((~seen).sum()))  # fewer when the entity has seen all but a few items
        expected = items[np.argsort(-scores, kind="stable")[:n]]
        got = recs[recs.entity_id == entity]
        assert got["rank"].tolist() == list(range(1, n + 1))
        assert got.item_id.tolist() == expected.tolist()
        np.testing.assert_allclose(got.score, np.sort(scores)[::-1][:n], rtol=1e-5, atol=1e-5)
    unfiltered = encoder.recommend(subset, k=len(items) + 10, filter_seen=False)
    assert unfiltered.groupby("entity_id").size().eq(len(items)).all()  # k capped at n items


def test_one_shot_encode(tmp_path, events):
    path = tiny_bundle(tmp_path / "b", events)
    df = encode(events, model=path, device="cpu", batch_size=3)
    np.testing.assert_array_equal(
        np.stack(df.embedding),
        np.stack(load_encoder(path, "cpu").encode(events, batch_size=3).embedding),
    )
