"""Item vectors out: ``Encoder.items()`` and ``encode(..., query=True)`` reproduce ``recommend``'s
scores for every account of the bundled sample, with and without the repeat head; the naive
reference is the model's own full score matrix (``item_scores``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from tiny import SCHEMA, random_bundle

from seqenc.data.vocab import N_SPECIAL
from seqenc.encoding import EncodeOptions, Encoding, iter_batches
from seqenc.errors import SeqencError
from seqenc.inference import load_encoder

SAMPLE = Path(__file__).resolve().parents[1] / "datasets" / "sample" / "events.parquet"


@pytest.fixture(scope="module")
def events() -> pd.DataFrame:
    return pd.read_parquet(SAMPLE).drop(columns="account_type")


@pytest.fixture(scope="module", params=[False, True], ids=["logits", "repeat-head"])
def encoder(request, tmp_path_factory, events):
    path = random_bundle(
        tmp_path_factory.mktemp("bundle"), events, SCHEMA, 12, n_layers=1, repeat_head=request.param
    )
    return load_encoder(path, "cpu")


@pytest.fixture(scope="module")
def outside(encoder, events) -> tuple[pd.DataFrame, np.ndarray]:
    return scores_outside(encoder, events)


def scores_outside(encoder, events) -> tuple[pd.DataFrame, np.ndarray]:
    """``(queries table, [accounts, items] scores)`` from the two exported tables alone."""
    items = encoder.items()
    queries = encoder.encode(events, query=True)
    vectors = np.stack(items.vector)
    scores = np.stack(queries["query"]) @ vectors.T
    if "query_shift" in queries:
        scores = scores + queries.query_shift.to_numpy()[:, None]
        column = {item: j for j, item in enumerate(items.item_id)}
        for row, (owned, repeat) in enumerate(
            zip(queries.repeat_items, queries.repeat_scores, strict=True)
        ):
            where = [column[v] for v in owned]
            scores[row, where] = np.logaddexp(scores[row, where], repeat)
    return queries, scores


def test_items_and_queries_reproduce_recommend_for_every_account(encoder, events, outside):
    queries, scores = outside
    assert ("query_shift" in queries) == (encoder.model.repeat is not None)
    n_items = scores.shape[1]
    recs = encoder.recommend(events, k=n_items, filter_seen=False)
    assert recs.entity_id.nunique() == len(queries) == events.entity_id.nunique()
    items = encoder.items()
    row = pd.Series(np.arange(len(queries)), index=queries.entity_id)
    column = pd.Series(np.arange(n_items), index=items.item_id)
    expected = scores[row[recs.entity_id].to_numpy(), column[recs.item_id].to_numpy()]
    np.testing.assert_allclose(recs.score, expected, rtol=0, atol=1e-5)
    assert len(recs) == scores.size  # every account scores every item


def test_the_model_score_matrix_agrees(encoder, events, outside):
    """The independent reference: ``item_scores`` on the model's own batches, buckets left out."""
    scores = outside[1]
    run = Encoding(encoder, EncodeOptions())
    store = next(run.stores([events], None))
    stop = encoder.vocabs.item.bucket_start
    with torch.inference_mode():
        for batch in iter_batches(store, encoder.meta.history_len, batch_size=512):
            full = encoder.model.item_scores(batch)[:, N_SPECIAL:stop].numpy()
            np.testing.assert_allclose(full, scores[batch.index.numpy()], rtol=0, atol=1e-5)


def test_item_table_names_its_model_space_and_frequency(encoder, outside):
    table = encoder.items("arrow")
    meta = {k.decode(): v.decode() for k, v in table.schema.metadata.items()}
    assert meta["seqenc.vectors"] == "items" and meta["seqenc.space"] == "native"
    assert meta["seqenc.model"] == encoder.meta.name
    assert meta["seqenc.space_id"] == outside[0].attrs["space_id"]
    assert "not stored in the bundle" in meta["seqenc.frequency"]
    assert table.column_names == ["item_id", "vector", "frequency_rank"]
    assert table["frequency_rank"].to_pylist() == list(range(1, table.num_rows + 1))
    np.testing.assert_array_equal(
        np.stack(table["vector"].to_numpy(zero_copy_only=False)),
        encoder.model.item_embedding.weight.detach().numpy()[N_SPECIAL : N_SPECIAL + len(table)],
    )


def test_query_output_is_opt_in(encoder, events):
    few = events[events.entity_id.isin(events.entity_id.unique()[:5])]
    plain = encoder.encode(few)
    assert "query" not in plain and list(plain.columns)[:2] == ["entity_id", "embedding"]
    with_query = encoder.encode(few, query=True, output="arrow")
    assert with_query.column_names[: len(plain.columns)] == list(plain.columns)
    for output, space in (("numpy", "native"), ("pandas", "parent")):
        with pytest.raises(SeqencError, match="query=True adds columns"):
            encoder.encode(few, query=True, output=output, space=space)
