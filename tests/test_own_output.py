"""An entity's output is its own (issue 67, family 1): a function of the bundle, its own events and
its own cut-off, whatever else is read with it. For every bundle kind (next event, masked, fused
classes, fused regression), every output column of an entity encoded in a random split of the log
(calls, batch sizes, export partitions and chunks, Spark's batches, ONNX Runtime) equals the one it
gets when encoded alone; without ``as_of`` the cut-off is the entity's newest event, so
``predict_at`` at that event gives the same."""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from seqenc import load_encoder
from seqenc.data.aggregates import AggregateSpec
from seqenc.encoding.options import EncodeOptions
from seqenc.encoding.spark import encode_sorted
from seqenc.evaluate import embed_at, predict_at
from seqenc.export import export_embeddings
from seqenc.model.embeddings import signed_log
from tests.tiny import SCHEMA, random_bundle

N = 10  # entities
KINDS = ("next_event", "masked", "fused_classes", "fused_regression")
COLUMNS = ("embedding", "n_events_read", "last_event_time", "prediction", "probabilities")
SETTINGS = settings(  # no shrinking: each example encodes the log several times
    max_examples=6,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
    derandomize=True,
    phases=[Phase.explicit, Phase.generate],
)


def _events() -> pd.DataFrame:
    from seqenc.data.synthetic import generate_events

    events = generate_events(N, n_items=30, seed=5, max_events=25)
    return events.drop(columns="account_type")


def _layout(events: pd.DataFrame) -> dict:
    """A fused head's aggregate layout on ``events`` (whole histories), as a fit stores it."""
    spec = AggregateSpec.fit(events, SCHEMA, max_categories=6, value_stats=("mean", "last"))
    table = spec.transform(events, SCHEMA)
    logs = signed_log(torch.from_numpy(table.values)).double().numpy()
    center, scale = logs.mean(0), logs.std(0)
    scale = np.where(scale > 1e-6, scale, 1.0)
    return {
        "spec": spec.to_dict(),
        "names": table.names,
        "center": center.tolist(),
        "scale": scale.tolist(),
    }


@pytest.fixture(scope="module")
def setting(tmp_path_factory):
    """``(events, {kind: bundle path}, {kind: each entity's output encoded alone})``."""
    events = _events()
    root = tmp_path_factory.mktemp("own")
    layout = _layout(events)
    heads = {
        "next_event": None,
        "masked": None,
        "fused_classes": {"task": "classification", "classes": [0, 1, 2], "aggregates": layout},
        "fused_regression": {
            "task": "regression", "center": 3.0, "scale": 2.0, "aggregates": layout
        },
    }  # fmt: skip
    bundles, alone = {}, {}
    for kind in KINDS:
        causal = kind != "masked"
        bundles[kind] = random_bundle(
            root / kind, events, SCHEMA, 16, causal=causal, pooling="last", head=heads[kind]
        )
        enc = load_encoder(bundles[kind], "cpu")
        alone[kind] = pd.concat(
            [enc.encode(part) for _, part in events.groupby("entity_id")], ignore_index=True
        ).set_index("entity_id")
    return events, bundles, alone


def _same(out: pd.DataFrame, alone: pd.DataFrame) -> None:
    """Every output column of every entity of ``out`` equals its output alone."""
    out = out.set_index("entity_id")
    assert out.index.is_unique
    assert set(out.index) == set(alone.index)
    ref = alone.loc[out.index]
    for column in COLUMNS:
        if column not in ref.columns:
            assert column not in out.columns
            continue
        got, want = out[column].to_numpy(), ref[column].to_numpy()
        if column in ("embedding", "probabilities"):
            np.testing.assert_allclose(np.stack(got), np.stack(want), atol=2e-5, err_msg=column)
        elif column == "prediction" and want.dtype.kind == "f":
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=2e-5, err_msg=column)
        else:
            assert (got == want).all(), column


def _split(events: pd.DataFrame, groups: list[int]) -> list[pd.DataFrame]:
    """The log cut into parts by entity: entity ``i`` (in id order) goes to part ``groups[i]``."""
    ids = sorted(events["entity_id"].unique())
    part = events["entity_id"].map(dict(zip(ids, groups, strict=True)))
    return [events[part == g] for g in sorted(set(groups))]


splits = st.lists(st.integers(0, 3), min_size=N, max_size=N)


@pytest.mark.parametrize("kind", KINDS)
@SETTINGS
@given(groups=splits, batch_size=st.integers(1, 6), max_tokens=st.sampled_from([16, 40, 2048]))
def test_encode_in_calls_and_batches_equals_alone(setting, kind, groups, batch_size, max_tokens):
    events, bundles, alone = setting
    enc = load_encoder(bundles[kind], "cpu")
    options = EncodeOptions(batch_size=batch_size, max_tokens=max_tokens)
    parts = [enc.encode(p, options) for p in _split(events, groups)]
    _same(pd.concat(parts, ignore_index=True), alone[kind])


@pytest.mark.parametrize("kind", KINDS)
@SETTINGS
@given(record_rows=st.integers(1, 60), per_call=st.integers(1, 200))
def test_spark_batches_equal_alone(setting, kind, record_rows, per_call):
    """Spark's executor path (:func:`encode_sorted`) on record batches of any size, sorted by
    entity, calls of any number of events."""
    events, bundles, alone = setting
    enc = load_encoder(bundles[kind], "cpu")
    table = pa.Table.from_pandas(events.sort_values("entity_id"), preserve_index=False)
    out = encode_sorted(
        table.to_batches(max_chunksize=record_rows), enc, EncodeOptions(), "entity_id", per_call
    )
    _same(pa.Table.from_batches(list(out)).to_pandas(), alone[kind])


@pytest.mark.parametrize("kind", ["fused_classes", "fused_regression"])
@settings(SETTINGS, max_examples=3)
@given(groups=splits, chunk_events=st.integers(5, 120))
def test_export_in_files_and_chunks_equals_alone(setting, kind, groups, chunk_events, tmp_path):
    events, bundles, alone = setting
    root = Path(tempfile.mkdtemp(dir=tmp_path))  # one per example
    (root / "in").mkdir()
    for i, part in enumerate(_split(events, groups)):
        part.to_parquet(root / "in" / f"part{i}.parquet")
    out = export_embeddings(
        bundles[kind], str(root / "in"), root / "out.parquet", chunk_events=chunk_events,
        progress=False,
    )  # fmt: skip
    _same(pq.read_table(out).to_pandas(), alone[kind])


@pytest.mark.parametrize("kind", ["fused_classes", "fused_regression"])
def test_predict_at_the_newest_event_is_the_output_without_as_of(setting, kind) -> None:
    """The cut-off when none is given is each entity's own newest event: ``predict_at`` and
    ``embed_at`` at it give what ``encode`` gives without one."""
    events, bundles, alone = setting
    enc = load_encoder(bundles[kind], "cpu")
    cut = events.groupby("entity_id", as_index=False)["timestamp"].max()
    cut = cut.rename(columns={"timestamp": "as_of"})
    keys, values = predict_at(enc, events, cut)
    want = alone[kind].loc[keys["entity_id"]]
    column = "probabilities" if kind == "fused_classes" else "prediction"
    expected = np.stack(want[column].to_numpy()) if column == "probabilities" else want[column]
    np.testing.assert_allclose(values, np.asarray(expected, dtype=np.float32), atol=2e-5)
    embedded = embed_at(enc, events, cut).set_index("entity_id").loc[keys["entity_id"]]
    np.testing.assert_allclose(
        np.stack(embedded["embedding"]), np.stack(want["embedding"]), atol=2e-5
    )


def test_onnx_runtime_in_calls_equals_alone(setting, tmp_path) -> None:
    """ONNX Runtime's graph with the head and aggregates in torch, in two calls."""
    pytest.importorskip("onnxruntime")
    from seqenc.encoding.onnx import export_onnx

    events, bundles, alone = setting
    graph = export_onnx(bundles["fused_classes"], tmp_path / "model.onnx")
    enc = load_encoder(bundles["fused_classes"], "cpu", backend="onnxruntime", onnx=graph)
    parts = [enc.encode(p) for p in _split(events, [i % 2 for i in range(N)])]
    _same(pd.concat(parts, ignore_index=True), alone["fused_classes"])
