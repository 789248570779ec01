"""Model bundles: round trip, checkpoints read without unpickling code, clear errors, atomic writes."""

from __future__ import annotations

import json
import os
from pathlib import Path

import lightning.pytorch as pl
import numpy as np
import pandas as pd
import pytest
import torch
from tiny import SCHEMA, tiny_bundle, tiny_events

from seqenc.bundle import (
    CONFIG_FILE,
    VOCAB_FILE,
    WEIGHTS_FILE,
    load_bundle,
    save_bundle,
)
from seqenc.cli import main as cli_main
from seqenc.commands.model import fit_model
from seqenc.data.batches import collate
from seqenc.data.datamodule import SequenceDataModule
from seqenc.data.sequences import build_sequences
from seqenc.data.spec import DataSpec
from seqenc.data.split import full_view
from seqenc.errors import SeqencError
from seqenc.model.encoder import EncoderConfig, SequenceEncoder
from seqenc.training.checkpoint import bundle_from_checkpoint
from seqenc.training.module import SeqencModule


def _embed(encoder: SequenceEncoder, events: pd.DataFrame, vocabs, max_len: int) -> torch.Tensor:
    store, _ = build_sequences(events, SCHEMA, keep_newest=max_len, vocabs=vocabs)
    view = full_view(store)
    with torch.inference_mode():
        return encoder.eval().entity_embedding(collate(view, range(len(view)), max_len))


def test_round_trip_same_weights_config_and_embeddings(tmp_path):
    events = tiny_events()
    path = tiny_bundle(tmp_path / "b", events)
    encoder, meta, vocabs = load_bundle(path)
    assert sorted(p.name for p in path.iterdir()) == [CONFIG_FILE, WEIGHTS_FILE, VOCAB_FILE]
    config = json.loads((path / CONFIG_FILE).read_text())
    assert config["format_version"] == 2 and config["name"] == "tiny"
    assert config["objective"] == "causal" and config["history_len"] == 24
    assert config["encoder"]["n_positions"] == 25 and "max_len" not in config["encoder"]
    assert config["schema"]["categorical"] == ["event_type", "channel"]
    assert len(config["config_hash"]) == 16 and config["encoder"]["d_model"] == 16
    assert not encoder.training and meta.dim == 16

    _, fitted = build_sequences(events, SCHEMA, keep_newest=None)
    assert vocabs.to_dict() == fitted.to_dict()
    torch.manual_seed(0)  # the same seed rebuilds the same random weights
    original = SequenceEncoder(encoder.config)
    for name, value in original.state_dict().items():
        assert torch.equal(value, encoder.state_dict()[name]), name
    torch.testing.assert_close(
        _embed(encoder, events, vocabs, 24), _embed(original, events, vocabs, 24), rtol=0, atol=0
    )


def test_config_hash_depends_on_configuration_not_weights(tmp_path):
    events = tiny_events()
    a = json.loads((tiny_bundle(tmp_path / "a", events) / CONFIG_FILE).read_text())
    b = json.loads((tiny_bundle(tmp_path / "b", events, dropout=0.1) / CONFIG_FILE).read_text())
    c = json.loads((tiny_bundle(tmp_path / "c", events, history_len=12) / CONFIG_FILE).read_text())
    assert a["config_hash"] != b["config_hash"] != c["config_hash"] != a["config_hash"]
    again = json.loads((tiny_bundle(tmp_path / "d", events) / CONFIG_FILE).read_text())
    assert again["config_hash"] == a["config_hash"]


def _train_checkpoint(tmp_path: Path) -> tuple[Path, SeqencModule]:
    """Two training steps of a tiny SeqencModule, checkpointed by a Lightning Trainer."""
    data = SequenceDataModule(tiny_events(), schema=SCHEMA, history_len=16, batch_size=16)
    module = fit_model(
        data.spec, encoder=EncoderConfig(d_model=16, n_layers=1), splits=data.fit_splits
    )
    trainer = pl.Trainer(
        max_steps=2,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        limit_val_batches=1,
        use_distributed_sampler=False,
        default_root_dir=tmp_path,
    )
    trainer.fit(module, data)
    ckpt = tmp_path / "model.ckpt"
    trainer.save_checkpoint(ckpt)
    return ckpt, module


def test_bundle_from_checkpoint_matches_trained_module(tmp_path, capsys):
    ckpt, module = _train_checkpoint(tmp_path)
    path = bundle_from_checkpoint(ckpt, tmp_path / "bundle", name="run-1")
    encoder, meta, vocabs = load_bundle(path)
    assert (meta.name, meta.objective, meta.history_len) == ("run-1", "causal", 16)
    types = {"item_id": "int", "event_type": "string", "channel": "string"}  # the vocabularies'
    assert meta.schema == SCHEMA.with_id_types(types)
    assert vocabs == module.trainer.datamodule.vocabs
    for name, value in module.encoder.state_dict().items():
        assert torch.equal(value, encoder.state_dict()[name]), name

    cli_main(["bundle", "--ckpt", str(ckpt), "--output", str(tmp_path / "cli-bundle")])
    assert capsys.readouterr().out.strip().splitlines()[-1] == f"bundle: {tmp_path / 'cli-bundle'}"
    assert load_bundle(tmp_path / "cli-bundle")[1].name == "cli-bundle"


class _Payload:
    """Unpickling this runs a shell command: the loader must refuse it, not run it."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_malicious_checkpoint_is_refused_without_running_it(tmp_path):
    marker = tmp_path / "pwned"
    ckpt = tmp_path / "evil.ckpt"
    torch.save({"state_dict": {}, "hyper_parameters": _Payload(marker), "seqenc": {}}, ckpt)
    with pytest.raises(SeqencError, match=r"refusing to load checkpoint .*evil\.ckpt"):
        bundle_from_checkpoint(ckpt, tmp_path / "out")
    assert not marker.exists()
    assert not (tmp_path / "out").exists()


def test_pickled_weight_file_is_refused_without_running_it(tmp_path):
    path = tiny_bundle(tmp_path / "b", tiny_events())
    marker = tmp_path / "pwned"
    torch.save({"w": _Payload(marker)}, path / WEIGHTS_FILE)
    with pytest.raises(SeqencError, match=r"model\.safetensors.* is corrupt"):
        load_bundle(path)
    # Even with a matching checksum the file is parsed as safetensors, never unpickled.
    config = json.loads((path / CONFIG_FILE).read_text())
    from seqenc.bundle import file_sha256

    config["weights_sha256"] = file_sha256(path / WEIGHTS_FILE)
    (path / CONFIG_FILE).write_text(json.dumps(config))
    with pytest.raises(SeqencError, match=r"cannot read weights .*model\.safetensors"):
        load_bundle(path)
    assert not marker.exists()


def _truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


@pytest.mark.parametrize(
    ("damage", "file", "message"),
    [
        (lambda p: p.unlink(), CONFIG_FILE, "bundle file missing"),
        (lambda p: p.unlink(), VOCAB_FILE, "bundle file missing"),
        (lambda p: p.unlink(), WEIGHTS_FILE, "bundle file missing"),
        (lambda p: p.write_text("{not json"), CONFIG_FILE, "cannot read bundle file"),
        (lambda p: p.write_text('{"item": 1'), VOCAB_FILE, "cannot read bundle file"),
        (lambda p: p.write_text('{"item": {}}'), VOCAB_FILE, "invalid bundle file"),
        (_truncate, WEIGHTS_FILE, "corrupt"),
    ],
)
def test_damaged_bundle_gives_error_naming_the_file(tmp_path, damage, file, message):
    path = tiny_bundle(tmp_path / "b", tiny_events())
    damage(path / file)
    with pytest.raises(SeqencError, match=message) as err:
        load_bundle(path)
    assert str(path / file) in str(err.value)


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        ({"format_version": 99}, "format version 99 is not supported"),
        ({"objective": "other"}, "objective must be one of"),
        ({"history_len": 7}, "config_hash does not match"),
        ({"encoder": {"n_items": 2}}, "invalid model configuration"),
    ],
)
def test_bad_config_values_are_reported(tmp_path, edit, message):
    path = tiny_bundle(tmp_path / "b", tiny_events())
    config = json.loads((path / CONFIG_FILE).read_text())
    (path / CONFIG_FILE).write_text(json.dumps(config | edit))
    with pytest.raises(SeqencError, match=message) as err:
        load_bundle(path)
    assert CONFIG_FILE in str(err.value)


def test_missing_bundle_and_vocab_mismatch(tmp_path):
    with pytest.raises(SeqencError, match="model bundle not found"):
        load_bundle(tmp_path / "nowhere")
    events = tiny_events()
    _, vocabs = build_sequences(events.head(30), SCHEMA, keep_newest=None)  # fewer items
    encoder, _, _ = load_bundle(tiny_bundle(tmp_path / "b", events))
    with pytest.raises(SeqencError, match="do not match the encoder"):
        save_bundle(tmp_path / "c", encoder, DataSpec(SCHEMA, vocabs, 24))


def test_writes_are_atomic_and_only_replace_bundles(tmp_path, monkeypatch):
    events = tiny_events()
    path = tiny_bundle(tmp_path / "b", events)
    tiny_bundle(path, events, history_len=12)  # replacing a bundle is fine
    assert load_bundle(path)[1].history_len == 12

    (tmp_path / "precious").mkdir()
    (tmp_path / "precious" / "data.txt").write_text("keep me")
    with pytest.raises(SeqencError, match="not a seqenc bundle; refusing"):
        tiny_bundle(tmp_path / "precious", events)
    assert (tmp_path / "precious" / "data.txt").read_text() == "keep me"

    def crash(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr("seqenc.bundle.save_file", crash)
    with pytest.raises(OSError, match="disk full"):
        tiny_bundle(tmp_path / "new", events)
    assert not (tmp_path / "new").exists()
    with pytest.raises(OSError, match="disk full"):
        tiny_bundle(path, events)  # the old bundle survives a failed replacement
    assert load_bundle(path)[1].history_len == 12
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b", "precious"]  # no temp dirs left


def test_swapped_vocabulary_values_fail_the_checksum(tmp_path):
    path = tiny_bundle(tmp_path / "b", tiny_events())
    vocab = json.loads((path / VOCAB_FILE).read_text())
    values = vocab["item"]["values"]
    values[0], values[1] = values[1], values[0]
    (path / VOCAB_FILE).write_text(json.dumps(vocab) + "\n")
    with pytest.raises(SeqencError, match=r"vocab.json' is corrupt"):
        load_bundle(path)


def test_bundle_without_vocab_checksum_still_loads(tmp_path, caplog):
    """Bundles written before vocab_sha256 existed (same format version) load, with a warning."""
    path = tiny_bundle(tmp_path / "b", tiny_events())
    config = json.loads((path / CONFIG_FILE).read_text())
    del config["vocab_sha256"]
    (path / CONFIG_FILE).write_text(json.dumps(config))
    encoder, meta, _ = load_bundle(path)
    assert meta.vocab_sha256 == "" and "not verified" in caplog.text


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        ({"encoder": {"d_model": "16"}}, r"encoder.d_model must be int, got '16'"),
        ({"encoder": {"causal": 1}}, r"encoder.causal must be bool, got 1"),
        (
            {"encoder": {"n_positions": 12}},
            r"history_len 24 must lie in \[1, encoder.n_positions - 1 = 11\]",
        ),
        ({"encoder": {"causal": False}}, "does not match encoder.causal"),
        ({"encoder": {"n_numeric": 0}}, "schema.numeric has 1 column"),
        ({"schema": {"timestamp": None}}, "encoder.time is true but schema.timestamp is null"),
        ({"history_len": "24"}, "history_len must be int"),
        ({"encoder": {"colour": 1}}, r"unknown field\(s\) \['colour'\]"),
    ],
)
def test_config_fields_are_typed_and_cross_checked(tmp_path, edit, message):
    path = tiny_bundle(tmp_path / "b", tiny_events())
    config = json.loads((path / CONFIG_FILE).read_text())
    for key, value in edit.items():
        config[key] = config[key] | value if isinstance(value, dict) else value
    (path / CONFIG_FILE).write_text(json.dumps(config))
    with pytest.raises(SeqencError, match=message) as err:
        load_bundle(path)
    assert CONFIG_FILE in str(err.value)


@pytest.mark.parametrize("objective", ["causal", "masked"])
def test_bundles_written_before_the_data_spec_still_load_and_encode_the_same(objective):
    """tests/data/legacy_bundles: tiny bundles and their embeddings of events.parquet, written by
    seqenc at commit 9eff811 (before DataSpec, the query time and vocab checksums)."""
    from seqenc.inference import load_encoder

    root = Path(__file__).parent / "data" / "legacy_bundles"
    encoder = load_encoder(root / objective, device="cpu")
    assert encoder.model.config.recency and not encoder.model.config.query_time
    # format 1: max_len (events fed) is history_len, encoder.max_len is n_positions - 1
    config = json.loads((root / objective / CONFIG_FILE).read_text())
    assert encoder.meta.history_len == config["max_len"]
    assert encoder.model.config.n_positions == config["encoder"]["max_len"] + 1
    got = encoder.encode(root / "events.parquet", output="numpy").embeddings
    np.testing.assert_allclose(got, np.load(root / objective / "expected.npy"), rtol=0, atol=1e-5)


@pytest.mark.parametrize("token", ["full", "lean"])
def test_a_bundle_written_before_the_token_loads_as_the_token_it_built(tmp_path, token):
    """A config.json of the token's parts (``gap_buckets``, ``raw_values``, ``init``) and of the
    options taken out, off, loads as the token those parts build and encodes the same; one taken
    out but on is refused in one line naming it."""
    from tiny import random_bundle

    from seqenc.bundle import config_hash
    from seqenc.inference import load_encoder

    events, lean = tiny_events(), token == "lean"
    path = random_bundle(
        tmp_path / "b", events, SCHEMA, 24, token=token, numeric_scaling="per_item"
    )
    want = load_encoder(path, device="cpu").encode(events, output="numpy").embeddings
    config = json.loads((path / CONFIG_FILE).read_text())
    parts = {"gap_buckets": not lean, "raw_values": not lean, "init": "fan_in" if lean else "gpt"}
    old = {k: v for k, v in config["encoder"].items() if k != "token"} | parts
    old |= {"time_bias": False, "group_times": None}

    def write(encoder: dict) -> None:  # as written then, its hash of the fields as written
        hashed = config | {"encoder": encoder}
        parts = ("objective", "history_len", "encoder", "schema")
        hashed["config_hash"] = config_hash(*(hashed[k] for k in parts))
        (path / CONFIG_FILE).write_text(json.dumps(hashed))

    write(old)
    encoder = load_encoder(path, device="cpu")
    assert encoder.model.config.token == token
    got = encoder.encode(events, output="numpy").embeddings
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-6)
    for name in ("time_bias", "group_times"):
        write(old | {name: True})
        with pytest.raises(SeqencError, match=f"encoder.{name} .*train it again") as err:
            load_bundle(path)
        assert CONFIG_FILE in str(err.value) and "\n" not in str(err.value)


# --- issue 28, 5c: a bundle reads files with its id types ----------------------------------------


def _sku_events() -> pd.DataFrame:
    """The tiny log with text SKUs such as "000015" as items and zero-padded channel codes."""
    events = tiny_events(20)
    events["item_id"] = events["item_id"].astype(str).str.zfill(6)
    events["channel"] = events["channel"].cat.codes.astype(str).str.zfill(2)
    return events


def test_a_bundle_trained_on_text_skus_reads_a_csv_of_them_as_text(tmp_path):
    """A bundle trained on "000156"-style items read the same CSV as integers: every item UNK."""
    from seqenc.inference import load_encoder

    events = _sku_events()
    path = tiny_bundle(tmp_path / "b", events)
    types = json.loads((path / CONFIG_FILE).read_text())["schema"]["id_types"]
    assert types == {"item_id": "string", "event_type": "string", "channel": "string"}
    events.to_csv(tmp_path / "events.csv", index=False)
    encoder = load_encoder(path, device="cpu")
    from_csv = encoder.encode(tmp_path / "events.csv")
    assert from_csv.attrs["n_unknown_items"] == 0
    assert from_csv.attrs["n_unknown_categorical"] == {"event_type": 0, "channel": 0}
    from_frame = encoder.encode(events)
    np.testing.assert_allclose(
        np.stack(from_csv["embedding"]), np.stack(from_frame["embedding"]), rtol=1e-5, atol=1e-5
    )


def test_integer_items_written_with_leading_zeros_are_integers_for_an_integer_bundle(tmp_path):
    from seqenc.inference import load_encoder

    events = tiny_events(20)
    path = tiny_bundle(tmp_path / "b", events)
    assert load_bundle(path)[1].schema.id_type("item_id") == "int"
    padded = events.assign(item_id=events["item_id"].astype(str).str.zfill(5))
    padded.to_csv(tmp_path / "events.csv", index=False)
    encoder = load_encoder(path, device="cpu")
    assert encoder.encode(tmp_path / "events.csv").attrs["n_unknown_items"] == 0
    padded.loc[3, "item_id"] = "x7"  # text where the model's items are integers: ambiguous
    with pytest.raises(SeqencError, match=r"'item_id': not an integer.*holds integers.*row 3"):
        encoder.encode(padded)


def test_id_types_round_trip_and_bundles_without_them_take_the_vocabularies(tmp_path):
    from seqenc.bundle import config_hash

    events = tiny_events(20)
    _, vocabs = build_sequences(events, SCHEMA, keep_newest=None)
    schema = SCHEMA.with_id_types({"entity_id": "string"})
    path = tiny_bundle(tmp_path / "b", events)
    encoder, meta, _ = load_bundle(path)
    save_bundle(tmp_path / "s", encoder, DataSpec(schema, vocabs, 24))
    assert load_bundle(tmp_path / "s")[1].schema.id_type("entity_id") == "string"

    config = json.loads((path / CONFIG_FILE).read_text())  # as written before id_types existed
    del config["schema"]["id_types"]
    parts = ("objective", "history_len", "encoder", "schema")
    config["config_hash"] = config_hash(*(config[k] for k in parts))
    (path / CONFIG_FILE).write_text(json.dumps(config))
    assert load_bundle(path)[1].schema == meta.schema

    config["schema"]["id_types"] = {"item_id": "string"}  # contradicts the integer vocabulary
    config["config_hash"] = config_hash(*(config[k] for k in parts))
    (path / CONFIG_FILE).write_text(json.dumps(config))
    with pytest.raises(SeqencError, match=r"id_types\['item_id'\] is 'string'.*holds integers"):
        load_bundle(path)
