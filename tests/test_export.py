"""Streaming Parquet export: schema, metadata, equality with encode(), atomicity, DDP shards, CLI."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from tiny import tiny_bundle, tiny_events

import seqenc.encoding.run as core
import seqenc.export as export
from seqenc.cli import main as cli_main
from seqenc.errors import SeqencError
from seqenc.export.scratch import Scratch
from seqenc.inference import load_encoder

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    """(bundle, events DataFrame, two Parquet files splitting the log by rows)."""
    tmp = tmp_path_factory.mktemp("export")
    events = tiny_events(n_entities=120, seed=1)
    bundle = tiny_bundle(tmp / "bundle", events)
    half = len(events) // 2  # an entity's events span both files
    events.iloc[:half].to_parquet(tmp / "events-a.parquet")
    events.iloc[half:].to_parquet(tmp / "events-b.parquet")
    return bundle, events, str(tmp / "events-*.parquet")


def _export(setup, output: Path, **kwargs) -> Path:
    bundle, _, pattern = setup
    options = {"chunk_events": 1500, "batch_size": 16, "accelerator": "cpu", "progress": False}
    return export.export_embeddings(bundle, pattern, output, **(options | kwargs))


def _sorted(df: pd.DataFrame) -> pd.DataFrame:
    return df.sort_values("entity_id").reset_index(drop=True)


def test_export_matches_encode_with_schema_and_metadata(setup, tmp_path):
    bundle, events, _ = setup
    output = _export(setup, tmp_path / "emb.parquet", row_group_size=50)
    assert output == tmp_path / "emb.parquet" and output.is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["emb.parquet"]  # scratch removed

    file = pq.ParquetFile(output)
    assert file.schema_arrow.remove_metadata() == pa.schema(
        [
            ("entity_id", pa.large_string()),
            ("embedding", pa.list_(pa.float32(), 16)),
            ("n_events_read", pa.int32()),
            ("last_event_time", pa.timestamp("us", tz="UTC")),
        ]
    )
    meta = file.schema_arrow.metadata
    encoder = load_encoder(bundle, "cpu")
    assert meta[b"seqenc.model"] == b"tiny" and meta[b"seqenc.as_of"] == b""
    assert meta[b"seqenc.config_hash"].decode() == encoder.meta.config_hash
    assert meta[b"seqenc.version"].decode() == encoder.meta.seqenc_version
    assert file.metadata.num_rows == 120
    sizes = [file.metadata.row_group(i).num_rows for i in range(file.metadata.num_row_groups)]
    assert max(sizes) == 50 and sum(sizes) == 120

    got = _sorted(pd.read_parquet(output))
    want = encoder.encode(events)
    assert got.entity_id.tolist() == want.entity_id.tolist()  # every entity exactly once
    np.testing.assert_allclose(np.stack(got.embedding), np.stack(want.embedding), atol=1e-5)
    np.testing.assert_array_equal(got.n_events_read, want.n_events_read)
    assert (got.last_event_time == want.last_event_time).all()


def test_partitions_are_entity_complete_and_deterministic(tmp_path):
    ids = pa.chunked_array([pa.array([f"u{i % 37}" for i in range(500)], pa.large_string())])
    parts = export.partition_of(ids, 7)
    again = export.partition_of(ids.slice(100), 7)  # another batch: same id → same partition
    np.testing.assert_array_equal(parts[100:], again)
    frame = pd.DataFrame({"id": ids.to_pylist(), "part": parts})
    assert frame.groupby("id").part.nunique().eq(1).all()
    assert frame.part.nunique() >= 5  # spread over most partitions
    ints = export.partition_of(pa.array(np.arange(10_000, dtype=np.int64)), 4)
    assert np.bincount(ints).min() > 2000  # roughly uniform


def test_csv_input_as_of_and_skipping(setup, tmp_path):
    bundle, events, _ = setup
    events.to_csv(tmp_path / "events.csv", index=False)
    as_of = "2024-02-01T00:00:00Z"
    output = export.export_embeddings(
        bundle, tmp_path / "events.csv", tmp_path / "cut.parquet", as_of=as_of, progress=False
    )
    got = _sorted(pd.read_parquet(output))
    want = load_encoder(bundle, "cpu").encode(events, as_of=as_of, on_empty="skip")
    assert 0 < len(got) == len(want) < 120
    np.testing.assert_allclose(np.stack(got.embedding), np.stack(want.embedding), atol=1e-5)
    assert pq.read_schema(output).metadata[b"seqenc.as_of"] == as_of.encode()
    with pytest.raises(SeqencError, match="no event at or before"):
        export.export_embeddings(
            bundle, tmp_path / "events.csv", tmp_path / "x.parquet", as_of=as_of, on_empty="raise"
        )
    assert not (tmp_path / "x.parquet").exists()


def test_failure_mid_export_leaves_no_output_and_rerun_completes(setup, tmp_path, monkeypatch):
    real = core.sequences
    calls = []

    def fail_on_second_chunk(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("worker lost")
        return real(*args, **kwargs)

    monkeypatch.setattr(core, "sequences", fail_on_second_chunk)
    output = tmp_path / "emb.parquet"
    with pytest.raises(RuntimeError, match="worker lost"):
        _export(setup, output, batch_size=8, row_group_size=8)  # rows were written before
    assert len(calls) == 2
    assert list(tmp_path.iterdir()) == []  # no output, no scratch

    monkeypatch.setattr(core, "sequences", real)
    assert pq.ParquetFile(_export(setup, output)).metadata.num_rows == 120


def test_bad_arguments(setup, tmp_path):
    bundle, _, _ = setup
    (tmp_path / "precious").mkdir()
    (tmp_path / "precious" / "notes.txt").write_text("keep")
    with pytest.raises(SeqencError, match="refusing to overwrite"):
        _export(setup, tmp_path / "precious")
    with pytest.raises(SeqencError, match="no file matches"):
        export.export_embeddings(bundle, tmp_path / "none-*.parquet", tmp_path / "o.parquet")
    with pytest.raises(SeqencError, match="chunk_events must be a positive integer"):
        _export(setup, tmp_path / "o.parquet", chunk_events=0)
    pd.DataFrame({"entity_id": ["a"], "item_id": [1]}).to_parquet(tmp_path / "thin.parquet")
    with pytest.raises(SeqencError, match=r"thin\.parquet.*not found"):
        export.export_embeddings(bundle, tmp_path / "thin.parquet", tmp_path / "o.parquet")


def test_embed_cli_end_to_end(setup, tmp_path, capsys):
    bundle, _, pattern = setup
    output = tmp_path / "cli.parquet"
    args = ["embed", "--model", str(bundle), "--events", pattern, "--output", str(output)]
    cli_main([*args, "--chunk-events", "2000", "--accelerator", "cpu", "--no-progress"])
    assert capsys.readouterr().out.strip().splitlines()[-1] == f"embeddings: {output}"
    assert pq.ParquetFile(output).metadata.num_rows == 120
    with pytest.raises(SystemExit):
        cli_main(["embed", "--model", str(tmp_path / "nope"), "--events", pattern, "--output", "x"])
    assert "seqenc embed: error: model bundle not found" in capsys.readouterr().err


def test_ddp_two_cpu_processes_write_disjoint_complete_shards(setup, tmp_path):
    bundle, events, pattern = setup
    output = tmp_path / "shards"
    command = [
        sys.executable,
        "-m",
        "seqenc.cli",
        "embed",
        "--model",
        str(bundle),
        "--events",
        pattern,
        "--output",
        str(output),
        "--chunk-events",
        "1500",
        "--batch-size",
        "8",
        "--accelerator",
        "cpu",
        "--devices",
        "2",
        "--strategy",
        "ddp",
        "--no-progress",
    ]
    env = os.environ | {"PYTHONPATH": str(ROOT)}
    run = subprocess.run(command, capture_output=True, text=True, timeout=120, env=env)
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.strip().splitlines()[-1] == f"embeddings: {output}"
    assert sorted(p.name for p in output.iterdir()) == ["part-00000.parquet", "part-00001.parquet"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["shards"]  # scratch removed
    shards = [pq.read_table(p) for p in sorted(output.iterdir())]
    assert all(s.num_rows > 0 for s in shards)
    ids = [i for s in shards for i in s["entity_id"].to_pylist()]
    assert sorted(ids) == sorted(events.entity_id.unique())  # every entity exactly once
    got = _sorted(pd.read_parquet(output))
    want = load_encoder(bundle, "cpu").encode(events)
    np.testing.assert_allclose(np.stack(got.embedding), np.stack(want.embedding), atol=1e-5)


# --- hardening (issue 13) -----------------------------------------------------------------------


def test_every_path_rejects_a_later_file_missing_a_column(setup, tmp_path):
    bundle, events, _ = setup
    events.iloc[:100].to_parquet(tmp_path / "a.parquet")
    events.iloc[100:].drop(columns="channel").to_parquet(tmp_path / "b.parquet")
    encoder = load_encoder(bundle, "cpu")
    for run in (
        lambda: encoder.encode(tmp_path),
        lambda: export.export_embeddings(bundle, tmp_path, tmp_path / "_o.parquet"),
    ):
        with pytest.raises(SeqencError, match=r"b\.parquet.*\['channel'\] not found"):
            run()


def test_errors_give_the_row_in_the_file(setup, tmp_path, monkeypatch):
    bundle, events, _ = setup
    monkeypatch.setattr("seqenc.data.events.SCAN_ROWS", 1000)  # many blocks per file
    bad = events.iloc[:3000].copy()
    bad.loc[bad.index[2500], "timestamp"] = pd.NaT
    bad.to_parquet(tmp_path / "log.parquet", row_group_size=700)
    encoder = load_encoder(bundle, "cpu")
    for run in (
        lambda: encoder.encode(tmp_path / "log.parquet"),
        lambda: export.export_embeddings(bundle, tmp_path / "log.parquet", tmp_path / "o.parquet"),
    ):
        with pytest.raises(SeqencError, match=r"log\.parquet.*NaT.*first at row 2500 "):
            run()


def test_csv_with_text_ids_after_the_first_block_reads_alike_everywhere(setup, tmp_path):
    bundle, events, _ = setup
    n = 60_000  # a few MB: more than one block of Arrow's CSV type inference (1 MB)
    log = events.sample(n, replace=True, random_state=0).reset_index(drop=True)
    log["entity_id"] = (np.arange(n) % 50).astype(object)
    log.loc[n - 1, "entity_id"] = "user-x"
    log.to_csv(tmp_path / "log.csv", index=False)
    output = export.export_embeddings(
        bundle, tmp_path / "log.csv", tmp_path / "o.parquet", chunk_events=20_000, progress=False
    )
    got = _sorted(pd.read_parquet(output))
    want = load_encoder(bundle, "cpu").encode(tmp_path / "log.csv")
    assert got.entity_id.tolist() == want.entity_id.tolist() and "user-x" in set(got.entity_id)
    np.testing.assert_allclose(np.stack(got.embedding), np.stack(want.embedding), atol=1e-5)


def test_a_second_export_to_the_same_output_fails_cleanly(setup, tmp_path):
    output = tmp_path / "emb.parquet"
    running = Scratch(output)
    running.acquire()  # another run holds the output's scratch
    try:
        with pytest.raises(SeqencError, match="another export is writing"):
            _export(setup, output)
        assert running.path.is_dir() and not output.exists()  # the other run's files untouched
    finally:
        running.release()
    (running.path / "partitions").mkdir(parents=True)  # a killed run's leftovers: unlocked
    (running.path / "partitions" / "events-00000.parquet").write_text("junk")
    assert pq.ParquetFile(_export(setup, output)).metadata.num_rows == 120
    assert sorted(p.name for p in tmp_path.iterdir()) == ["emb.parquet"]


@pytest.mark.parametrize("name", ["dir/", "empty", "shards"])
def test_a_directory_is_never_replaced_by_a_file(setup, tmp_path, name):
    (tmp_path / "empty").mkdir()
    (tmp_path / "shards").mkdir()
    (tmp_path / "shards" / "part-00000.parquet").write_text("x")
    with pytest.raises(SeqencError, match="names a directory"):
        _export(setup, f"{tmp_path}/{name}")
    assert (tmp_path / "empty").is_dir() and (tmp_path / "shards" / "part-00000.parquet").exists()


@pytest.mark.parametrize(
    "args, message",
    [
        (["--batch-size", "0"], "batch_size must be a positive integer, got 0"),
        (["--row-group-size", "0"], "row_group_size must be a positive integer, got 0"),
        (["--as-of", "1704119688000"], "milliseconds"),
        (["--output", "FILE/o.parquet"], "a parent is not a directory"),
    ],
)
def test_cli_user_errors_are_one_line(setup, tmp_path, capsys, args, message):
    bundle, _, pattern = setup
    (tmp_path / "FILE").write_text("x")
    argv = ["embed", "--model", str(bundle), "--events", pattern, "--output", "o.parquet"]
    argv += ["--accelerator", "cpu", "--no-progress", *args]
    argv = [a.replace("FILE", str(tmp_path / "FILE")) for a in argv]
    with pytest.raises(SystemExit) as info:
        cli_main(argv)
    err = capsys.readouterr().err.strip().splitlines()
    assert info.value.code == 1 and len(err) == 1 and message in err[0], err


def test_epoch_seconds_as_of_on_the_command_line(setup, tmp_path, capsys):
    bundle, events, pattern = setup
    output = tmp_path / "o.parquet"
    argv = ["embed", "--model", str(bundle), "--events", pattern, "--output", str(output)]
    cli_main([*argv, "--as-of", "1706745600", "--accelerator", "cpu", "--no-progress"])
    want = load_encoder(bundle, "cpu").encode(events, as_of="2024-02-01", on_empty="skip")
    assert pq.ParquetFile(output).metadata.num_rows == len(want)


def test_everything_after_as_of_warns_or_raises(setup, tmp_path, caplog):
    output = tmp_path / "o.parquet"
    with caplog.at_level("WARNING"):
        _export(setup, output, as_of="2000-01-01")
    assert pq.ParquetFile(output).metadata.num_rows == 0
    assert "no entity has an event at or before as_of=2000-01-01" in caplog.text
    with pytest.raises(SeqencError, match="entities have no event at or before"):
        _export(setup, tmp_path / "x.parquet", as_of="2000-01-01", on_empty="raise")


def test_an_export_replaces_its_own_output_but_never_a_file_not_ours(setup, tmp_path):
    """Issue 67, family 4: an existing file is replaced only when seqenc wrote it (its Parquet
    schema carries seqenc's metadata); any other file is refused in one line, untouched."""
    output = tmp_path / "emb.parquet"
    _export(setup, output)
    assert pq.ParquetFile(_export(setup, output)).metadata.num_rows == 120  # ours: replaced
    for name, write in (
        ("table.parquet", lambda p: pd.DataFrame({"a": [1, 2]}).to_parquet(p)),
        ("notes.csv", lambda p: p.write_text("a,b\n1,2\n")),
    ):
        other = tmp_path / name
        write(other)
        before = other.read_bytes()
        with pytest.raises(SeqencError, match="exists and is not a Parquet file seqenc wrote"):
            _export(setup, other)
        assert other.read_bytes() == before
