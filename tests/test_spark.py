"""Spark encode equals ``Encoder.encode`` (within 1e-5) whatever the partitioning; local[2] mode."""

from __future__ import annotations

import os
import shutil
import sys

import numpy as np
import pandas as pd
import pytest
from tiny import SCHEMA, ml100k, random_bundle, tiny_bundle, tiny_events

pytest.importorskip("pyspark")
if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
    pytest.skip("Spark needs a Java runtime", allow_module_level=True)

from seqenc.data.schema import EventSchema  # noqa: E402
from seqenc.encoding import spark as seqenc_spark  # noqa: E402
from seqenc.errors import SeqencError  # noqa: E402
from seqenc.inference import load_encoder  # noqa: E402


@pytest.fixture(scope="module")
def spark():
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    session = (
        SparkSession.builder.master("local[2]")
        .appName("seqenc-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.sql.execution.arrow.maxRecordsPerBatch", "97")  # many batches per task
        .config("spark.driver.memory", "1g")
        .config("spark.sql.session.timeZone", "America/New_York")  # times must not depend on it
        .getOrCreate()
    )
    yield session
    session.stop()


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    events = tiny_events(70, seed=2)
    bundle = tiny_bundle(tmp_path_factory.mktemp("spark") / "bundle", events)
    return bundle, events


def collect(df) -> pd.DataFrame:
    """Rows by entity; times as epoch microseconds (``toPandas`` would shift them to local time)."""
    from pyspark.sql import functions as F

    micros = df.withColumn("last_event_time", F.unix_micros("last_event_time"))
    return micros.toPandas().sort_values("entity_id", ignore_index=True)


def assert_same(got: pd.DataFrame, expected: pd.DataFrame) -> None:
    assert got["entity_id"].tolist() == expected["entity_id"].tolist()
    np.testing.assert_allclose(
        np.stack(got["embedding"]), np.stack(expected["embedding"]), atol=1e-5, rtol=0
    )
    assert got["n_events_read"].tolist() == expected["n_events_read"].tolist()
    expected_micros = expected["last_event_time"].dt.as_unit("us").astype("int64")
    assert got["last_event_time"].tolist() == expected_micros.tolist()


@pytest.mark.parametrize(("num_partitions", "chunk_events"), [(1, 10_000), (3, 150), (7, 1)])
def test_equals_encode_whatever_the_partitioning(spark, setup, num_partitions, chunk_events):
    bundle, events = setup
    expected = load_encoder(bundle, "cpu").encode(events)
    shuffled = spark.createDataFrame(events.sample(frac=1.0, random_state=num_partitions))
    out = seqenc_spark.encode(
        shuffled.repartition(5), bundle, num_partitions=num_partitions, chunk_events=chunk_events
    )
    assert out.columns == ["entity_id", "embedding", "n_events_read", "last_event_time"]
    assert_same(collect(out), expected)


def test_as_of_and_shipped_bundle(spark, setup):
    bundle, events = setup
    as_of = "2024-02-10"
    expected = load_encoder(bundle, "cpu").encode(events, as_of=as_of, on_empty="skip")
    assert 0 < len(expected) < events["entity_id"].nunique()  # some entities start later
    df = spark.createDataFrame(events.assign(extra=1))  # other columns are ignored
    out = seqenc_spark.encode(df, bundle, as_of=as_of, ship=True, batch_size=5)
    assert_same(collect(out), expected)


def test_string_entity_ids_keep_their_type(spark, setup):
    bundle, events = setup
    events = events.assign(entity_id="acct-" + events["entity_id"].astype(str))
    expected = load_encoder(bundle, "cpu").encode(events)
    out = seqenc_spark.encode(spark.createDataFrame(events), bundle, num_partitions=2)
    assert dict(out.dtypes)["entity_id"] == "string"
    assert_same(collect(out), expected)


def test_bad_input_is_one_line_on_the_driver(spark, setup, tmp_path):
    bundle, events = setup
    df = spark.createDataFrame(events.drop(columns=["amount"]))
    with pytest.raises(SeqencError, match=r"lacks the bundle's column\(s\) \['amount'\]"):
        seqenc_spark.encode(df, bundle)
    with pytest.raises(SeqencError, match="model bundle not found"):
        seqenc_spark.encode(df, tmp_path / "nope")
    with pytest.raises(SeqencError, match="chunk_events must be a positive integer"):
        seqenc_spark.encode(df, bundle, chunk_events=0)
    with pytest.raises(SeqencError, match="events_per_call must be a positive integer"):
        seqenc_spark.encode(df, bundle, events_per_call=0)
    with pytest.raises(SeqencError, match="on_empty must be one of"):
        seqenc_spark.encode(df, bundle, on_empty="drop")


def test_chunk_events_is_the_deprecated_name_of_events_per_call(spark, setup):
    bundle, events = setup
    df = spark.createDataFrame(events)
    with pytest.warns(DeprecationWarning, match="events_per_call"):
        old = collect(seqenc_spark.encode(df, bundle, chunk_events=150))
    expected = load_encoder(bundle, "cpu").encode(events)  # both names give encode's result
    assert_same(old, expected)
    assert_same(collect(seqenc_spark.encode(df, bundle, events_per_call=150)), expected)


def test_on_empty_raise_fails_on_an_entity_without_events_before_as_of(spark, setup):
    bundle, events = setup
    early = events["timestamp"].min()
    df = spark.createDataFrame(events)
    with pytest.raises(Exception, match="no event at or before"):
        collect(seqenc_spark.encode(df, bundle, as_of=early, on_empty="raise"))


def test_a_log_with_numbers_not_recorded_equals_encode(spark, tmp_path):
    """Spark's nulls and NaNs in a numeric column are "not recorded", as encode reads them."""
    from pyspark.sql import functions as F

    events = tiny_events(40, seed=3)
    events.loc[np.random.default_rng(0).random(len(events)) < 0.3, "amount"] = np.nan
    options = dict(causal=False, pooling="mean", numeric_scaling="per_item", item_values=True)
    bundle = random_bundle(tmp_path / "b", events, SCHEMA, 24, missing_values=True, **options)
    expected = load_encoder(bundle, "cpu").encode(events)
    df = spark.createDataFrame(events)
    nulls = F.when(F.isnan("amount"), F.lit(None)).otherwise(F.col("amount"))
    df = df.withColumn(
        "amount", F.when(F.col("item_id") % 2 == 0, nulls).otherwise(F.col("amount"))
    )
    assert_same(collect(seqenc_spark.encode(df, bundle, num_partitions=3)), expected)


@pytest.mark.shared_data
def test_movielens_100k_equals_encode(spark, shared_data, tmp_path):
    events = ml100k(shared_data)
    schema = EventSchema()  # entity_id, item_id, timestamp
    bundle = random_bundle(tmp_path / "bundle", events, schema, 200, causal=True)
    expected = load_encoder(bundle, "cpu").encode(events)
    out = seqenc_spark.encode(spark.createDataFrame(events), bundle, num_partitions=3)
    got = collect(out)
    assert len(got) == 943
    assert_same(got, expected)
