"""Outputs and the API's types (issue 67, family 4): every command's output by the one rule of
``seqenc embed`` and the export (never an input, never where an event-log argument reads next,
never a file the command did not write), with messages naming the command's own option; numpy
integers wherever Python integers are; options that would be ignored refused; a boolean numeric
column read as 0 / 1 (documented); the logits' memory pool released on request."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import torch

from seqenc.cli import main as cli_main
from seqenc.data.events import read_events
from seqenc.data.schema import EventSchema
from seqenc.encoding.options import EncodeOptions
from seqenc.errors import SeqencError
from seqenc.export.options import ExportOptions
from seqenc.model import workspace
from seqenc.model.config import EncoderConfig
from tests.tiny import SCHEMA, random_bundle, tiny_events


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("outputs")
    events = tiny_events(8).drop(columns="account_type")
    (tmp / "log").mkdir()
    events.to_parquet(tmp / "log" / "events.parquet")
    ids = sorted(events["entity_id"].unique())
    pd.DataFrame({"entity_id": ids, "y": np.arange(len(ids)) % 2}).to_csv(
        tmp / "labels.csv", index=False
    )
    bundle = random_bundle(tmp / "bundle", events, SCHEMA, 8)
    return tmp, bundle


def run_cli(argv: list[str], capsys) -> str:
    """The one line a refused command prints (exit 1, nothing else on stderr or stdout)."""
    with pytest.raises(SystemExit) as stop:
        cli_main(argv)
    out = capsys.readouterr()
    assert stop.value.code == 1, out
    assert len(out.err.strip().splitlines()) == 1 and not out.out, out
    return out.err.strip()


def _probe(tmp, out: str, events: str) -> list[str]:
    return [
        "probe", "--labels", str(tmp / "labels.csv"), "--label-column", "y",
        "--events", events, "--categorical", "event_type", "channel", "--numeric", "amount",
        "--folds", "2", "--json", out,
    ]  # fmt: skip


@pytest.mark.parametrize(
    "where", ["glob", "dir_parquet", "labels"], ids=["in_glob", "in_dir", "over_labels"]
)
def test_probe_json_never_where_an_input_is_read(world, capsys, where) -> None:
    tmp, _ = world
    events = str(tmp / "log" / "*") if where == "glob" else str(tmp / "log")
    out = {
        "glob": tmp / "log" / "probe.json",
        "dir_parquet": tmp / "log" / "probe.parquet",
        "labels": tmp / "labels.csv",
    }[where]
    err = run_cli(_probe(tmp, str(out), events), capsys)
    assert err.startswith("seqenc probe: error: --json"), err
    assert not out.exists() or where == "labels"
    assert pd.read_csv(tmp / "labels.csv").shape[1] == 2  # the labels survive


@pytest.mark.parametrize("command", ["probe", "onnx"])
def test_a_directory_output_names_the_commands_option_and_its_own_file(
    world, capsys, command
) -> None:
    tmp, bundle = world
    argv = {
        "probe": _probe(tmp, str(tmp), str(tmp / "log")),
        "onnx": ["onnx", "--model", str(bundle), "--output", str(tmp)],
    }[command]
    err = run_cli(argv, capsys)
    assert err.startswith(f"seqenc {command}: error: --") and "names a directory" in err, err
    assert "embeddings.parquet" not in err
    assert ("probe.json" if command == "probe" else "model.onnx") in err


def test_onnx_output_never_replaces_a_file_it_did_not_write(world, capsys, tmp_path) -> None:
    pytest.importorskip("onnx")
    tmp, bundle = world
    log = tmp_path / "events.parquet"
    log.write_bytes((tmp / "log" / "events.parquet").read_bytes())
    before = log.read_bytes()
    err = run_cli(["onnx", "--model", str(bundle), "--output", str(log)], capsys)
    assert (
        err.startswith("seqenc onnx: error: --output") and "not an ONNX graph seqenc wrote" in err
    ), err
    assert log.read_bytes() == before
    graph = tmp_path / "model.onnx"
    for _ in range(2):  # its own graph (and digest) it replaces
        cli_main(["onnx", "--model", str(bundle), "--output", str(graph)])
    assert graph.is_file() and (tmp_path / "model.onnx.sha256").is_file()


def test_drift_json_never_replaces_a_file_it_did_not_write(world, capsys, tmp_path) -> None:
    tmp, bundle = world
    other = tmp_path / "notes.txt"
    other.write_text("my notes\n")
    argv = ["drift", str(bundle), str(bundle), "--events", str(tmp / "log"), "--json", str(other)]
    err = run_cli(argv, capsys)
    assert err.startswith("seqenc drift: error: --json") and "not JSON" in err, err
    assert other.read_text() == "my notes\n"


@pytest.mark.parametrize("make", [np.int64, np.int32, np.uint16, int])
def test_numpy_integers_are_integers(make) -> None:
    options = EncodeOptions(max_tokens=make(4096), batch_size=make(8))
    assert type(options.max_tokens) is int and options.max_tokens == 4096
    assert type(ExportOptions(chunk_events=make(5)).chunk_events) is int
    config = EncoderConfig(n_items=10, n_positions=9, d_model=make(16), n_heads=make(2))
    json.dumps({"d_model": config.d_model, "n_heads": config.n_heads})  # plain ints


@pytest.mark.parametrize("value", [True, np.bool_(True), 3.0, "8", np.float64(8)])
def test_non_integers_are_refused_in_one_line(value) -> None:
    with pytest.raises(SeqencError, match="max_tokens must be a positive integer"):
        EncodeOptions(max_tokens=value)


@pytest.mark.parametrize("parent", [5, "space-id"])
def test_parent_with_the_native_space_is_refused_as_ignored(parent) -> None:
    with pytest.raises(SeqencError, match="parent would be ignored.*space='native'"):
        EncodeOptions(parent=parent)
    assert EncodeOptions(space="parent", parent="space-id").parent == "space-id"


def test_a_boolean_numeric_column_reads_as_zero_and_one() -> None:
    """Documented in docs/event-log.md: True is 1, False 0, a null is not recorded."""
    frame = pd.DataFrame(
        {
            "entity_id": [1, 1, 1],
            "item_id": [1, 2, 3],
            "timestamp": [1.0, 2.0, 3.0],
            "refund": pd.array([True, False, None], dtype="boolean"),
        }
    )
    table = read_events(frame, EventSchema(numeric=("refund",)))
    values = table["refund"].to_numpy(zero_copy_only=False)
    np.testing.assert_array_equal(values[:2], [1.0, 0.0])
    assert np.isnan(values[2])


def test_the_logits_pool_is_released() -> None:
    with workspace.lending() as matrix:
        matrix(1024, 2048, torch.device("cpu")).fill_(1.0)
    assert workspace.POOL.nbytes() >= 1024 * 2048 * 4
    assert workspace.release() >= 1024 * 2048 * 4
    assert workspace.POOL.nbytes() == 0


def test_a_fit_gives_the_logits_pool_back_when_it_ends(tmp_path) -> None:
    """Issue 67: after a fit from Python the pool kept its buffers for the process's life; every
    module (next-event and fine-tuning alike) releases them when its fit ends."""
    from tests.tiny import catalogue_fit

    with workspace.lending() as matrix:  # what the fit's exact normaliser would have kept
        matrix(1024, 2048, torch.device("cpu")).fill_(1.0)
    assert workspace.POOL.nbytes() > 0
    catalogue_fit(tmp_path, "--trainer.max_steps", "2", "--trainer.max_epochs", "1")
    assert workspace.POOL.nbytes() == 0
