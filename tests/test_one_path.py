"""One encode path (issue 47): ``encode``, the Parquet export, Spark, ``update`` and the head's
predictions (``encode``, ``predict_at``) give the same rows on the same events, in the bundle's own
space and its parent's, against a reference built outside the core (the map and the head applied
by hand to a one-entity-at-a-time encode)."""

from __future__ import annotations

import os
import shutil
import sys

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
import torch
from tiny import SCHEMA, random_bundle, tiny_events

from seqenc.bundle import load_bundle, save_bundle
from seqenc.compat.lineage import save_lineage
from seqenc.compat.parent_map import fit_map
from seqenc.data.spec import DataSpec
from seqenc.encoding import EncodeOptions
from seqenc.encoding.spark import encode_sorted
from seqenc.evaluate import predict_at
from seqenc.export import export_embeddings
from seqenc.inference import load_encoder
from seqenc.model.head import SupervisedHead

TOL = 1e-5
SPACES = ("native", "parent")


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    """A fine-tuned child of a random bundle (other weights, per-item numeric statistics, a
    classification head) with a map to its parent's space; the events, also as Parquet."""
    tmp = tmp_path_factory.mktemp("one_path")
    events = tiny_events(50, seed=3)
    events.to_parquet(tmp / "events.parquet")
    options = dict(std=None, n_layers=2, dropout=0.0, numeric_scaling="per_item")
    parent = random_bundle(tmp / "v1", events, SCHEMA, 24, name="tiny", **options)
    model, meta, vocabs = load_bundle(parent)
    torch.manual_seed(1)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.1 * torch.randn_like(p))
    n_items = model.config.n_items
    model.embed.set_numeric_stats(torch.randn(n_items, 1), torch.rand(n_items, 1) + 0.5)
    model.head = SupervisedHead(meta.dim, "classification", classes=[3, 5, 8])
    child = save_bundle(tmp / "v2", model, DataSpec(SCHEMA, vocabs, meta.history_len))
    rng = np.random.default_rng(0)
    x = rng.normal(size=(200, meta.dim))
    fitted = fit_map(x, x @ rng.normal(size=(meta.dim, meta.dim)) + 1.0, "ridge")
    save_lineage(child, load_bundle(child)[1], meta, fitted, {"n_entities": 200})
    return child, events, tmp


def reference(encoder, events: pd.DataFrame, space: str) -> tuple[np.ndarray, np.ndarray]:
    """``(embeddings, probabilities)`` of every entity (ascending id), each encoded alone; the
    head (layer norm, linear, softmax) and the map applied here."""
    native = encoder.encode(events, output="numpy", batch_size=1).embeddings
    head = encoder.model.head
    x = torch.from_numpy(native)
    x = torch.nn.functional.layer_norm(x, (x.shape[1],), head.norm.weight, head.norm.bias)
    probabilities = torch.softmax(x @ head.linear.weight.T + head.linear.bias, -1).detach().numpy()
    mapped = native if space == "native" else encoder.lineage[1].apply(native)
    return mapped, probabilities


def check(rows: pd.DataFrame, expected: tuple[np.ndarray, np.ndarray], ids: np.ndarray) -> None:
    """``rows`` (one per entity, any order) hold the expected embeddings and predictions."""
    rows = rows.sort_values("entity_id", ignore_index=True)
    assert rows["entity_id"].tolist() == ids.tolist()
    embeddings, probabilities = expected
    np.testing.assert_allclose(np.stack(rows["embedding"]), embeddings, atol=TOL, rtol=0)
    np.testing.assert_allclose(np.stack(rows["probabilities"]), probabilities, atol=TOL, rtol=0)
    assert rows["prediction"].tolist() == np.array([3, 5, 8])[probabilities.argmax(1)].tolist()


@pytest.mark.parametrize("space", SPACES)
def test_encode_export_update_and_sorted_batches_agree(setup, space, tmp_path):
    bundle, events, folder = setup
    encoder = load_encoder(bundle, "cpu")
    expected = reference(encoder, events, space)
    ids = np.sort(events["entity_id"].unique())
    check(encoder.encode(events, space=space, batch_size=7), expected, ids)
    arrow = encoder.encode(events, EncodeOptions(space=space, max_tokens=64), output="arrow")
    check(arrow.to_pandas(), expected, ids)
    numpy = encoder.encode(events, space=space, output="numpy")
    np.testing.assert_allclose(numpy.predictions, expected[1], atol=TOL, rtol=0)

    options = {"space": space, "batch_size": 5, "max_tokens": 40}
    run = {"chunk_events": 700, "accelerator": "cpu", "progress": False}
    out = export_embeddings(
        bundle, folder / "events.parquet", tmp_path / "e.parquet", **options, **run
    )
    check(pd.read_parquet(out), expected, ids)

    cut = events["timestamp"].quantile(0.6)
    state = encoder.state(events[events["timestamp"] <= cut])
    updated, _ = encoder.update(state, events[events["timestamp"] > cut], space=space)
    check(updated, expected, ids)
    assert updated.attrs["space"] == space

    table = pa.Table.from_pandas(
        events.sort_values("entity_id", kind="stable"), preserve_index=False
    )
    batches = table.to_batches(max_chunksize=97)
    sorted_out = encode_sorted(batches, encoder, encoder.options(**options), "entity_id", 300)
    check(pa.Table.from_batches(list(sorted_out)).to_pandas(), expected, ids)


def test_predict_at_gives_encodes_predictions(setup):
    bundle, events, _ = setup
    encoder = load_encoder(bundle, "cpu")
    when = events["timestamp"].quantile(0.7)
    cutoffs = pd.DataFrame({"entity_id": events["entity_id"].unique(), "as_of": when})
    keys, output = predict_at(encoder, events, cutoffs)
    got = keys.assign(p=list(output)).sort_values("entity_id", ignore_index=True)
    want = encoder.encode(events, as_of=when, on_empty="skip", output="numpy")
    assert got["entity_id"].tolist() == want.entity_ids.tolist()
    np.testing.assert_allclose(np.stack(got["p"]), want.predictions, atol=TOL, rtol=0)


def test_recommend_refuses_the_parent_space_and_options_are_checked_once(setup):
    bundle, events, _ = setup
    encoder = load_encoder(bundle, "cpu")
    with pytest.raises(Exception, match="space='parent' does not apply"):
        encoder.recommend(events, space="parent")
    with pytest.raises(Exception, match="^max_tokens must be a positive integer, got 0$"):
        encoder.encode(events, max_tokens=0)
    with pytest.raises(Exception, match=r"unknown encode option\(s\) \['as_off'\]"):
        encoder.encode(events, as_off="2024-01-01")


@pytest.mark.parametrize("space", SPACES)
def test_spark_agrees(setup, space):
    pytest.importorskip("pyspark")
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        pytest.skip("Spark needs a Java runtime")
    from pyspark.sql import SparkSession

    from seqenc.encoding import spark as seqenc_spark

    bundle, events, _ = setup
    encoder = load_encoder(bundle, "cpu")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    session = (
        SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false").getOrCreate()
    )
    out = seqenc_spark.encode(
        session.createDataFrame(events), bundle, space=space, num_partitions=2
    )
    rows = out.drop("last_event_time").toPandas()
    check(rows, reference(encoder, events, space), np.sort(events["entity_id"].unique()))
