"""``recommend``'s filters on every path: allow / deny lists, candidate lists and seen items,
exact, through an exact item index and through candidates, each against a naive reference (the
model's full score matrix, masked, sorted); the index and list errors in one line."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tiny import SCHEMA, random_bundle, tiny_events

from seqenc.data.vocab import N_SPECIAL
from seqenc.encoding import EncodeOptions, Encoding, iter_batches
from seqenc.errors import SeqencError
from seqenc.inference import load_encoder
from seqenc.retrieval.approximate import faiss_module
from seqenc.retrieval.index_files import save_index

K = 4


@pytest.fixture(scope="module")
def events() -> pd.DataFrame:
    return tiny_events(n_entities=30).drop(columns="account_type")


@pytest.fixture(scope="module", params=[False, True], ids=["logits", "repeat-head"])
def setup(request, tmp_path_factory, events):
    path = random_bundle(
        tmp_path_factory.mktemp("b"), events, SCHEMA, 10, n_layers=1, repeat_head=request.param
    )
    encoder = load_encoder(path, "cpu")
    return encoder, full_scores(encoder, events), encoder.index("items", kind="exact")


def full_scores(encoder, events) -> pd.DataFrame:
    """Every (entity, item) score from the model's own matrix, buckets left out."""
    store = next(Encoding(encoder, EncodeOptions()).stores([events], None))
    stop = encoder.vocabs.item.bucket_start
    items = encoder.vocabs.item.values.to_pylist()
    frames = []
    with torch.inference_mode():
        for batch in iter_batches(store, encoder.meta.history_len, batch_size=512):
            scores = encoder.model.item_scores(batch)[:, N_SPECIAL:stop].numpy()
            entities = store.entity_ids.take(batch.index.numpy()).to_pylist()
            frames.append(
                pd.DataFrame(
                    {
                        "entity_id": np.repeat(entities, len(items)),
                        "item_id": np.tile(items, len(entities)),
                        "score": scores.ravel(),
                    }
                )
            )
    return pd.concat(frames, ignore_index=True)


def naive(scores, events, filter_seen, allow=None, deny=None, candidates=None) -> pd.DataFrame:
    """The reference: mask, sort, keep ``K`` per entity."""
    keep = scores
    if filter_seen:
        seen = events[["entity_id", "item_id"]].drop_duplicates().assign(seen=True)
        keep = keep.merge(seen, how="left", on=["entity_id", "item_id"])
        keep = keep[keep.seen.isna()].drop(columns="seen")
    if allow is not None:
        keep = keep[keep.item_id.isin(allow)]
    if deny is not None:
        keep = keep[~keep.item_id.isin(deny)]
    if candidates is not None:
        keep = keep.merge(candidates.drop_duplicates(), on=["entity_id", "item_id"])
    keep = keep.sort_values(["entity_id", "score"], ascending=[True, False], kind="stable")
    return keep.groupby("entity_id").head(K).reset_index(drop=True)


def same(got: pd.DataFrame, want: pd.DataFrame) -> None:
    """Equal lists per entity, scores within float rounding, ranks 1..n."""
    assert got.entity_id.tolist() == want.entity_id.tolist()
    assert got.item_id.tolist() == want.item_id.tolist()
    np.testing.assert_allclose(got.score, want.score, rtol=0, atol=1e-5)
    assert (
        got.groupby("entity_id")["rank"].agg(list)
        == got.groupby("entity_id").size().map(lambda n: list(range(1, n + 1)))
    ).all()


lists = st.none() | st.lists(st.integers(0, 39), min_size=1, max_size=25)


@settings(
    max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(allow=lists, deny=lists, filter_seen=st.booleans(), data=st.data())
def test_allow_deny_and_candidates_on_every_path(setup, events, allow, deny, filter_seen, data):
    encoder, scores, index = setup
    known = set(encoder.vocabs.item.values.to_pylist())
    allow = None if allow is None else [i for i in allow if i in known] or None
    deny = None if deny is None else [i for i in deny if i in known] or None
    filters = {"allow": allow, "deny": deny, "filter_seen": filter_seen, "k": K}
    want = naive(scores, events, filter_seen, allow, deny)
    same(encoder.recommend(events, **filters), want)
    same(encoder.recommend(events, index=index, **filters), want)
    entities = sorted(events.entity_id.unique())
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16)))
    pairs = pd.DataFrame(
        {"entity_id": rng.choice(entities, 150), "item_id": rng.choice(sorted(known), 150)}
    )
    want = naive(scores, events, filter_seen, allow, deny, pairs)
    same(encoder.recommend(events, candidates=pairs, **filters), want)


def test_an_index_through_its_folder_and_refusals(setup, events, tmp_path):
    encoder, scores, index = setup
    save_index(index, tmp_path / "items.index")
    same(
        encoder.recommend(events, k=K, index=tmp_path / "items.index"), naive(scores, events, True)
    )
    if faiss_module() is not None:  # an inverted file of one cell here: the exact answer
        approximate = encoder.index("items", kind="approximate")
        allow = encoder.vocabs.item.values.to_pylist()[::2]
        same(
            encoder.recommend(events, k=K, index=approximate, allow=allow),
            naive(scores, events, True, allow),
        )
    other = load_encoder(
        random_bundle(tmp_path / "other", events, SCHEMA, 10, n_layers=1, std=0.2), "cpu"
    )
    with pytest.raises(SeqencError, match="the query comes from model"):
        other.recommend(events, index=index)
    accounts = encoder.index(encoder.encode(events))
    with pytest.raises(SeqencError, match="an index of accounts answers accounts"):
        encoder.recommend(events, index=accounts)
    (tmp_path / "nothing").mkdir()
    with pytest.raises(SeqencError, match="is not a seqenc index"):
        encoder.recommend(events, index=tmp_path / "nothing")


@pytest.mark.parametrize(
    "fields, message",
    [
        ({"allow": []}, "the allow list is empty"),
        ({"deny": [10_000]}, "the deny list: 1 item id"),
        ({"candidates": pd.DataFrame({"entity_id": [], "item_id": []})}, "candidate list is empty"),
        ({"candidates": pd.DataFrame({"account": [1]})}, "columns entity_id and item_id"),
    ],
)
def test_bad_lists_are_one_line(setup, events, fields, message):
    with pytest.raises(SeqencError, match=message):
        setup[0].recommend(events, **fields)


def test_unknown_accounts_and_items_in_a_candidate_list(setup, events):
    encoder = setup[0]
    entity = events.entity_id.iloc[0]
    item = encoder.vocabs.item.values[0].as_py()
    with pytest.raises(SeqencError, match="accounts not encoded"):
        encoder.recommend(
            events, candidates=pd.DataFrame({"entity_id": ["nobody"], "item_id": [item]})
        )
    with pytest.raises(SeqencError, match="the candidate list: 1 item id"):
        encoder.recommend(events, candidates=pd.DataFrame({"entity_id": [entity], "item_id": [-5]}))
