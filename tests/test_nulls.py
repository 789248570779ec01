"""A null or NaN in a numeric column means "not recorded", end to end: read as NaN, read by the
model as its item's centre plus its column's not-recorded vector, the same embeddings on every
encode path, left out of the statistics and the aggregates, and older bundles unchanged."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
import torch
from test_numeric import naive_statistics
from tiny import SCHEMA, random_bundle, tiny_events

from seqenc.bundle import CONFIG_FILE, _hash, load_bundle
from seqenc.commands.model import fit_model
from seqenc.data.aggregates import AggregateSpec, aggregate_features
from seqenc.data.datamodule import SequenceDataModule
from seqenc.data.events import read_events
from seqenc.data.numeric import item_statistics, require_recorded
from seqenc.data.schema import EventSchema
from seqenc.data.sequences import build_sequences
from seqenc.data.spec import DataSpec
from seqenc.errors import SeqencError
from seqenc.inference import load_encoder
from seqenc.model.batch import Batch
from seqenc.model.embeddings import TokenEmbedding, signed_log
from seqenc.model.encoder import EncoderConfig, SequenceEncoder
from seqenc.model.values import hide_values, value_loss
from seqenc.training.run_options import resume_options

TWO = EventSchema(numeric=("x", "y"))
ENTITY = dict(causal=False, pooling="mean", numeric_scaling="per_item", item_values=True)


def with_nulls(events: pd.DataFrame, share: float = 0.3, seed: int = 0) -> pd.DataFrame:
    """``events`` with a share of its amounts not recorded (NaN), and one entity none of whose
    amounts are."""
    out = events.copy()
    out.loc[np.random.default_rng(seed).random(len(out)) < share, "amount"] = np.nan
    out.loc[out["entity_id"] == out["entity_id"].iloc[0], "amount"] = np.nan
    return out


# --- reading ------------------------------------------------------------------------------------


def test_null_nan_and_blank_numbers_are_read_as_nan():
    frame = pd.DataFrame(
        {
            "entity_id": [1, 1, 1, 2, 2],
            "item_id": [10, 11, 10, 10, 12],
            "timestamp": [0, 5, 9, 1, 2],
            "x": [1.5, None, np.nan, 4.0, -2.0],
            "y": ["3", "", None, " 7 ", "nan"],
        }
    )
    x = read_events(frame, TWO)["x"].to_numpy()
    y = read_events(frame, TWO)["y"].to_numpy()
    np.testing.assert_array_equal(np.isnan(x), [False, True, True, False, False])
    np.testing.assert_array_equal(np.isnan(y), [False, True, True, False, True])
    assert x[0] == 1.5 and y[3] == 7.0
    arrow = pa.table({"entity_id": [1, 1], "item_id": [1, 2], "timestamp": [0, 1], "x": [None, 2]})
    got = read_events(arrow, EventSchema(numeric=("x",)))["x"].to_numpy()
    assert np.isnan(got[0]) and got[1] == 2.0
    every = pa.table({"entity_id": [1], "item_id": [1], "timestamp": [0], "x": pa.nulls(1)})
    assert np.isnan(read_events(every, EventSchema(numeric=("x",)))["x"].to_numpy()).all()
    base = frame.iloc[:3, :3]
    for x in (
        pd.array([1, pd.NA, 2], dtype="Int64"),
        pd.array([1.0, pd.NA, 2.0], dtype="Float64"),
        pd.Series([1, None, 2.0], dtype=object),
    ):
        got = read_events(base.assign(x=x), EventSchema(numeric=("x",)))["x"].to_numpy()
        np.testing.assert_array_equal(np.isnan(got), [False, True, False])
    nothing = base.assign(x=pd.Series([None] * 3, dtype=object))
    assert np.isnan(read_events(nothing, EventSchema(numeric=("x",)))["x"].to_numpy()).all()


def test_a_csv_with_empty_cells_reads_them_as_not_recorded(tmp_path):
    path = tmp_path / "log.csv"
    path.write_text("entity_id,item_id,timestamp,x\n1,1,0,2.5\n1,2,1,\n2,1,3,-1\n")
    x = read_events(path, EventSchema(numeric=("x",)))["x"].to_numpy()
    assert x[0] == 2.5 and np.isnan(x[1]) and x[2] == -1.0


@pytest.mark.parametrize(
    ("x", "pieces"),
    [
        ([1.0, 2.0, np.inf], ["'x'", "infinite", "row 2"]),
        ([1.0, -np.inf, None], ["'x'", "infinite", "row 1"]),
        ([1.0, None, 1e39], ["'x'", "float32", "row 2"]),
        (["1", None, "two"], ["'x'", "non-numeric", "row 2", "two"]),
    ],
)
def test_infinite_values_and_text_are_still_refused_in_one_line(x, pieces):
    frame = pd.DataFrame({"entity_id": [1, 1, 2], "item_id": [1, 2, 1], "timestamp": [0, 1, 2]})
    with pytest.raises(SeqencError) as info:
        read_events(frame.assign(x=x), EventSchema(numeric=("x",)))
    assert "\n" not in str(info.value)
    for piece in pieces:
        assert piece in str(info.value)


def test_a_fit_refuses_a_numeric_column_never_recorded():
    events = tiny_events(30).assign(amount=np.nan)
    data = SequenceDataModule(events, schema=SCHEMA, history_len=16, batch_size=16)
    with pytest.raises(SeqencError, match="'amount'.*no value recorded.*data.schema.numeric"):
        data.splits  # noqa: B018 (the property reads the log)
    once = events.assign(amount=np.where(np.arange(len(events)) == 7, 1.5, np.nan))
    require_recorded(build_sequences(once, SCHEMA)[0])  # one recorded value is enough
    with pytest.raises(SeqencError, match="'amount'.*no value recorded"):
        require_recorded(build_sequences(events, SCHEMA)[0])


# --- the statistics and the model's input ---------------------------------------------------------


def test_item_statistics_leave_out_the_values_not_recorded():
    rng = np.random.default_rng(1)
    items = rng.integers(3, 9, 400)
    values = np.stack([rng.normal(items * 10.0, 2.0), rng.exponential(5.0, 400)], axis=1)
    values[rng.random(400) < 0.3, 0] = np.nan
    values[items == 4, 1] = np.nan  # an item none of whose y values was recorded
    center, scale = item_statistics(items, values, 10)
    for j in range(2):
        kept = ~np.isnan(values[:, j])
        want_center, want_scale = naive_statistics(items[kept], values[kept, j : j + 1], 10)
        np.testing.assert_allclose(center[:, j], want_center[:, 0], rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(scale[:, j], want_scale[:, 0], rtol=1e-5, atol=1e-6)
    assert np.isfinite(center).all() and np.isfinite(scale).all()
    never = item_statistics(items, np.full((400, 1), np.nan), 10)
    assert (never[0] == 0).all() and (never[1] == 1).all()


def _embed(per_item: bool) -> TokenEmbedding:
    torch.manual_seed(0)
    embed = TokenEmbedding(
        12, 8, 6, True, False, False, False, 4, (), 2, per_item_numeric=per_item,
        item_values=per_item, missing_values=True,
    )  # fmt: skip
    with torch.no_grad():
        embed.missing.normal_()  # trained: not zero
    if per_item:
        embed.set_numeric_stats(torch.randn(12, 2), torch.rand(12, 2) + 0.5)
    return embed


def _numbers_batch(numeric: torch.Tensor) -> Batch:
    rows, width = numeric.shape[:2]
    return Batch(
        items=torch.arange(3, 3 + rows * width).view(rows, width) % 12,
        lengths=torch.full((rows,), width),
        dt_prev=torch.zeros(rows, width),
        dt_ref=torch.zeros(rows, width),
        categorical=torch.zeros(rows, width, 0, dtype=torch.int64),
        numeric=numeric,
        index=torch.arange(rows),
    )


@pytest.mark.parametrize("per_item", [True, False])
def test_a_value_not_recorded_reads_as_its_items_centre_plus_its_columns_vector(per_item):
    """Hand-built reference: the same tokens with each NaN replaced by its item's centre (raw
    scale; 0 without per-item statistics), plus the not-recorded vector of each NaN's column."""
    embed = _embed(per_item)
    numeric = torch.randn(2, 4, 2) * 20
    numeric[0, 1, 0] = numeric[1, 2, 1] = numeric[1, 3, 0] = numeric[1, 3, 1] = float("nan")
    batch = _numbers_batch(numeric)
    nan = torch.isnan(numeric)
    typical = torch.zeros_like(numeric)
    if per_item:
        center = embed.numeric_center[batch.items]
        typical = torch.sign(center) * torch.expm1(center.abs())
    filled = dataclasses.replace(batch, numeric=torch.where(nan, typical, numeric))
    with torch.no_grad():
        want = embed.content(filled) + nan.float() @ embed.missing
        got = embed.content(batch)
        assert torch.isfinite(got).all()
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    if per_item:  # the standardised value of a NaN is 0: nothing of a number
        z = embed.standardised(signed_log(filled.numeric), batch.items)
        assert z[nan].abs().max() < 1e-5


def test_an_untrained_model_reads_a_nan_as_its_items_centre():
    """The not-recorded vectors start at zero: a fresh model gives the same embeddings with NaN
    as with each NaN replaced by its item's centre."""
    config = EncoderConfig(
        n_items=12, d_model=16, n_heads=2, n_positions=8, n_numeric=2, dropout=0.0,
        missing_values=True, **ENTITY,
    )  # fmt: skip
    model = SequenceEncoder(config).eval()
    assert model.embed.missing is not None and not model.embed.missing.any()
    model.embed.set_numeric_stats(torch.randn(12, 2), torch.rand(12, 2) + 0.5)
    numeric = torch.randn(3, 5, 2) * 5
    numeric[torch.rand(3, 5, 2, generator=torch.Generator().manual_seed(0)) < 0.4] = float("nan")
    batch = _numbers_batch(numeric)
    center = model.embed.numeric_center[batch.items]
    typical = torch.sign(center) * torch.expm1(center.abs())
    filled = dataclasses.replace(batch, numeric=torch.where(torch.isnan(numeric), typical, numeric))
    with torch.no_grad():
        got, want = model.entity_embedding(batch), model.entity_embedding(filled)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


def test_the_vectors_change_no_other_weight_of_a_seeded_model():
    """Zero without a draw: the same seed gives the same other weights with or without them, so
    a log whose numbers are all recorded trains and encodes as before."""
    config = EncoderConfig(n_items=12, d_model=16, n_heads=2, n_positions=8, n_numeric=2, **ENTITY)
    torch.manual_seed(0)
    plain = SequenceEncoder(config).state_dict()
    torch.manual_seed(0)
    marked = SequenceEncoder(dataclasses.replace(config, missing_values=True)).state_dict()
    assert set(marked) - set(plain) == {"embed.missing"}
    assert all(torch.equal(plain[k], marked[k]) for k in plain)


def test_masked_values_never_withhold_or_target_a_value_not_recorded():
    numeric = torch.randn(4, 6, 2)
    numeric[:, ::2, :] = float("nan")  # every other event: nothing recorded
    numeric[:, 1, 1] = float("nan")  # one column of an event
    batch = _numbers_batch(numeric)
    center = torch.randn(12, 2)
    inputs, hidden = hide_values(batch, 0.9, center, torch.Generator().manual_seed(3))
    assert hidden.any() and not hidden[:, ::2].any()
    assert torch.equal(torch.isnan(inputs.numeric), torch.isnan(numeric))  # still not recorded
    predicted, target = torch.randn(4, 6, 2), torch.where(torch.isnan(numeric), numeric, 1.0)
    cells = [
        (float(predicted[b, i, j]) - 1.0) ** 2
        for b in range(4)
        for i in range(6)
        for j in range(2)
        if hidden[b, i] and not torch.isnan(numeric[b, i, j])
    ]
    assert float(value_loss(predicted, target, hidden)) == pytest.approx(np.mean(cells))
    none = value_loss(predicted, torch.full_like(target, float("nan")), hidden)
    assert float(none) == 0.0


# --- every encode path ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def nulls(tmp_path_factory) -> tuple[Path, pd.DataFrame]:
    """A random-weights entity model (its not-recorded vectors drawn too) and a log with nulls."""
    events = with_nulls(tiny_events(40, seed=3))
    path = tmp_path_factory.mktemp("nulls") / "bundle"
    random_bundle(path, events, SCHEMA, 24, missing_values=True, **ENTITY)
    return path, events


def test_encode_reads_the_nulls_and_they_change_the_embedding(nulls):
    path, events = nulls
    enc = load_encoder(path, "cpu")
    assert enc.model.embed.missing.abs().sum() > 0
    got = enc.encode(events, output="numpy").embeddings
    filled = enc.encode(events.fillna({"amount": 0.0}), output="numpy").embeddings
    assert np.isfinite(got).all() and np.abs(got - filled).max() > 1e-3


def test_onnx_runtime_equals_torch_on_a_log_with_nulls(nulls):
    pytest.importorskip("onnxruntime")
    from seqenc.encoding.onnx import export_onnx

    path, events = nulls
    export_onnx(path)
    want = load_encoder(path, "cpu").encode(events, batch_size=7, output="numpy")
    got = load_encoder(path, "cpu", backend="onnxruntime").encode(
        events, batch_size=7, output="numpy"
    )
    np.testing.assert_array_equal(got.entity_ids, want.entity_ids)
    np.testing.assert_allclose(got.embeddings, want.embeddings, atol=1e-4, rtol=0)


def test_the_export_equals_encode_on_a_log_with_nulls(nulls, tmp_path):
    from seqenc import export

    path, events = nulls
    events.to_parquet(tmp_path / "events.parquet")
    out = export.export_embeddings(path, tmp_path / "events.parquet", tmp_path / "out.parquet")
    got = pd.read_parquet(out).sort_values("entity_id", ignore_index=True)
    want = load_encoder(path, "cpu").encode(events).sort_values("entity_id", ignore_index=True)
    assert got["entity_id"].tolist() == want["entity_id"].tolist()
    np.testing.assert_allclose(np.stack(got.embedding), np.stack(want.embedding), atol=1e-5)


def test_update_equals_encode_on_a_log_with_nulls(tmp_path):
    events = with_nulls(tiny_events(40, seed=3))
    path = random_bundle(
        tmp_path / "c", events, SCHEMA, 40, missing_values=True, numeric_scaling="per_item"
    )  # causal: incremental encoding
    enc = load_encoder(path, "cpu")
    cut = events["timestamp"].quantile(0.7)
    old, new = events[events["timestamp"] <= cut], events[events["timestamp"] > cut]
    saved = enc.state(old).save(tmp_path / "state.safetensors")  # NaN kept in the file
    got, _ = enc.update(enc.load_state(saved), new, output="numpy")
    want = enc.encode(events, output="numpy")
    assert list(got.entity_ids) == list(want.entity_ids)
    assert np.abs(got.embeddings - want.embeddings).max() <= 1e-5


# --- aggregates -----------------------------------------------------------------------------------


def test_aggregates_summarise_the_recorded_values_only():
    events = with_nulls(tiny_events(30, seed=1), share=0.4)
    events["amount"] = events["amount"].astype(float)
    got = aggregate_features(events, SCHEMA, value_stats=("mean", "min", "max", "last"))
    assert np.isfinite(got.drop(columns="entity_id").to_numpy()).all()
    got = got.set_index("entity_id")
    ordered = events.sort_values(["entity_id", "timestamp"], kind="stable")
    by = ordered.groupby("entity_id")["amount"]
    recorded = by.apply(lambda a: a.notna().mean())
    np.testing.assert_allclose(got["amount_recorded"], recorded.loc[got.index], rtol=1e-6)
    np.testing.assert_allclose(got["amount_mean"], by.mean().fillna(0.0).loc[got.index], rtol=1e-5)
    for entity, frame in ordered.groupby("entity_id"):  # per channel: a naive loop
        for channel, part in frame.groupby("channel", observed=True):
            kept = part["amount"].dropna()
            for stat, want in (
                ("mean", kept.mean()),
                ("min", kept.min()),
                ("max", kept.max()),
                ("last", kept.iloc[-1] if len(kept) else np.nan),
            ):
                want = 0.0 if np.isnan(want) else want  # never recorded: as an absent value
                name = f"amount_{stat}[channel={channel}]"
                assert got.loc[entity, name] == pytest.approx(want, rel=1e-5), (entity, name)


def test_a_recorded_share_only_where_the_fit_saw_a_value_not_recorded():
    events = tiny_events(20, seed=1)
    assert "amount_recorded" not in aggregate_features(events, SCHEMA).columns
    spec = AggregateSpec.fit(with_nulls(events), SCHEMA)
    assert spec.recorded == ("amount",)
    assert AggregateSpec.from_dict(spec.to_dict()) == spec
    older = {k: v for k, v in spec.to_dict().items() if k != "recorded"}  # a stored layout
    assert AggregateSpec.from_dict(older).recorded == ()


# --- older bundles and checkpoints ------------------------------------------------------------------


def test_a_bundle_written_before_the_not_recorded_vectors_loads_and_encodes_the_same(tmp_path):
    """Its config.json has no ``missing_values`` and its weights no ``embed.missing``: it loads
    (strict weights), and a NaN reads as its item's centre, as the same model with none."""
    events = with_nulls(tiny_events(30, seed=2))
    path = random_bundle(tmp_path / "b", events, SCHEMA, 24, **ENTITY)
    config = json.loads((path / CONFIG_FILE).read_text())
    assert config["encoder"]["missing_values"] is None
    before = load_encoder(path, "cpu").encode(events, output="numpy").embeddings
    del config["encoder"]["missing_values"]
    hashed = ("objective", "history_len", "max_len", "encoder", "schema")
    config["config_hash"] = _hash({k: config[k] for k in config if k in hashed})
    (path / CONFIG_FILE).write_text(json.dumps(config))
    model, meta, _ = load_bundle(path)
    assert model.embed.missing is None and not meta.encoder.missing_values
    got = load_encoder(path, "cpu").encode(events, output="numpy").embeddings
    np.testing.assert_allclose(got, before, atol=1e-6, rtol=0)


def test_a_per_item_bundle_of_the_previous_version_encodes_as_it_did():
    """tests/data/legacy_bundles/per_item: an entity model with per-item values (random weights
    and statistics) and its embeddings of events.parquet, written by seqenc at commit e203205,
    before numbers could be not recorded. It loads with its weights as they are and gives the same embeddings; a
    number not recorded then reads as its item's centre, without a not-recorded vector."""
    root = Path(__file__).parent / "data" / "legacy_bundles"
    events = pd.read_parquet(root / "events.parquet")
    enc = load_encoder(root / "per_item", device="cpu")
    assert enc.model.embed.missing is None and enc.model.embed.value is not None
    got = enc.encode(events, output="numpy").embeddings
    np.testing.assert_allclose(got, np.load(root / "per_item" / "expected.npy"), atol=1e-5, rtol=0)
    center = enc.model.embed.numeric_center[:, 0].numpy().astype(np.float64)
    items, _ = enc.vocabs.item.encode(events["item_id"].to_numpy())
    typical = np.sign(center[items]) * np.expm1(np.abs(center[items]))
    gone = np.arange(len(events)) % 3 == 0
    unrecorded = events.assign(amount=np.where(gone, np.nan, events["amount"]))
    filled = events.assign(amount=np.where(gone, typical, events["amount"]))
    a = enc.encode(unrecorded, output="numpy").embeddings
    np.testing.assert_allclose(a, enc.encode(filled, output="numpy").embeddings, atol=1e-4, rtol=0)
    assert np.abs(a - got).max() > 1e-3


def test_saved_configurations_without_the_field_have_no_vectors():
    assert EncoderConfig.upgrade({"d_model": 8})["missing_values"] is False
    assert EncoderConfig.upgrade({"missing_values": True})["missing_values"] is True
    older = {"lr": 0.1, "encoder": {"d_model": 16, "n_numeric": 1}}  # a checkpoint written before
    assert resume_options({}, older)["encoder"]["missing_values"] is False
    newer = {"encoder": {"d_model": 16, "missing_values": True}}
    assert resume_options({}, newer)["encoder"]["missing_values"] is True
    with pytest.raises(SeqencError, match="missing_values.*cannot change when resuming"):
        resume_options({"encoder": {"missing_values": True}}, older)


def test_a_model_started_from_such_a_bundle_starts_its_vectors_at_zero(tmp_path):
    events = tiny_events(30)
    data = SequenceDataModule(events, schema=SCHEMA, history_len=16, batch_size=16)
    shape = dict(d_model=16, n_heads=2, n_layers=1, repeat_head=False)
    old = random_bundle(tmp_path / "b", events, SCHEMA, 16, numeric_scaling="per_item", **shape)
    module = fit_model(data.spec, encoder=EncoderConfig(**shape), init_from=str(old))
    assert module.config.missing_values and not module.encoder.embed.missing.any()
    bundle, _, _ = load_bundle(old)
    torch.testing.assert_close(module.encoder.embed.value[0].weight, bundle.embed.value[0].weight)


def test_the_vectors_are_on_for_a_log_with_numbers_and_refused_without():
    from test_contrastive import SPEC

    assert fit_model(SPEC, encoder=EncoderConfig(d_model=8, n_heads=2)).config.missing_values
    off = fit_model(SPEC, encoder=EncoderConfig(d_model=8, n_heads=2, missing_values=False))
    assert off.encoder.embed.missing is None
    plain = DataSpec(dataclasses.replace(SPEC.schema, numeric=()), SPEC.vocabs, SPEC.history_len)
    assert not fit_model(plain, encoder=EncoderConfig(d_model=8, n_heads=2)).config.missing_values
    with pytest.raises(SeqencError, match="missing_values would be ignored"):
        fit_model(plain, encoder=EncoderConfig(d_model=8, n_heads=2, missing_values=True))


def test_a_fit_on_a_log_with_nulls_trains_the_vectors_and_stays_finite(tmp_path):
    """Two steps of the masked objective with masked values: the statistics, the losses and the
    weights stay finite and the not-recorded vector of the column learns."""
    import lightning.pytorch as pl

    events = with_nulls(tiny_events(40, seed=4), share=0.5)
    data = SequenceDataModule(events, schema=SCHEMA, history_len=16, batch_size=16)
    encoder = EncoderConfig(d_model=16, n_heads=2, n_layers=1, dropout=0.0)
    module = fit_model(
        data.spec, objective="masked", encoder=encoder, value_weight=1.0, splits=data.fit_splits
    )
    trainer = pl.Trainer(
        max_steps=2, logger=False, enable_checkpointing=False, enable_progress_bar=False,
        enable_model_summary=False, limit_val_batches=0, default_root_dir=tmp_path,
    )  # fmt: skip
    trainer.fit(module, data)
    embed = module.encoder.embed
    assert torch.isfinite(embed.numeric_center).all() and torch.isfinite(embed.numeric_scale).all()
    assert all(torch.isfinite(p).all() for p in module.parameters())
    assert embed.missing.abs().sum() > 0
    assert all(np.isfinite(float(v)) for k, v in trainer.callback_metrics.items() if "train" in k)


def test_a_fused_fine_tuned_model_reads_a_log_with_nulls_end_to_end(tmp_path, caplog):
    """``seqenc fit`` with labels and fused aggregates on a log with nulls: the bundle has the
    not-recorded vectors and the recorded share among its aggregates, and its predictions on
    the log are finite."""
    from test_finetune import fit

    events = with_nulls(tiny_events(120), share=0.4)
    events.drop(columns="account_type").to_parquet(tmp_path / "events.parquet")
    labels = events.groupby("entity_id", as_index=False)["account_type"].first()
    labels.to_parquet(tmp_path / "labels.parquet")
    caplog.set_level("INFO")
    bundle, _ = fit(
        tmp_path,
        "--data.labels", "labels.parquet", "--data.label_column", "account_type",
        "--model.objective", "masked", "--model.fusion", "aggregates",
        "--model.next_item_weight", "0", "--model.label_steps", "4",
    )  # fmt: skip
    assert (
        f"numbers not recorded (null/NaN): amount {events['amount'].isna().mean():.1%}"
        in caplog.text
    )
    config = json.loads((bundle / CONFIG_FILE).read_text())
    assert config["encoder"]["missing_values"]
    assert "amount_recorded" in config["head"]["aggregates"]["names"]
    out = load_encoder(bundle, "cpu").encode(events.drop(columns="account_type"), output="numpy")
    assert np.isfinite(out.predictions).all() and np.isfinite(out.embeddings).all()
