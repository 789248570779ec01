"""Hostile inputs to the reader, the export and the commands (issue 28): outputs that are inputs, a
booby-trapped scratch path, SIGTERM, Spark leftovers in a directory, the same file twice, a
duplicated newest event, sources that are not paths, CSV that is not UTF-8, and SEQENC_DEBUG.
(Helpers that are new with these fixes are imported inside their tests, so that the file also runs
against the code before them.)"""

from __future__ import annotations

import gzip
import hashlib
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from lightning.pytorch.utilities.exceptions import SIGTERMException
from tiny import SCHEMA, tiny_bundle, tiny_events

import seqenc.export as export
from seqenc.cli import main as cli_main
from seqenc.data.events import read_events
from seqenc.data.schema import EventSchema
from seqenc.errors import SeqencError
from seqenc.export.scratch import Scratch
from seqenc.inference import encode

ROOT = Path(__file__).resolve().parents[1]
OPTIONS = {"chunk_events": 400, "batch_size": 16, "accelerator": "cpu", "progress": False}


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    """(bundle, events DataFrame, the events as one Parquet file)."""
    tmp = tmp_path_factory.mktemp("hostile")
    events = tiny_events(n_entities=30, seed=3)
    bundle = tiny_bundle(tmp / "bundle", events)
    events.to_parquet(tmp / "events.parquet")
    return bundle, events, tmp / "events.parquet"


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _embed_cli(bundle: Path, events: list[str], output: str, capsys) -> tuple[int, list[str]]:
    argv = ["embed", "--model", str(bundle), "--events", *events, "--output", output]
    try:
        cli_main([*argv, "--accelerator", "cpu", "--no-progress", "--chunk-events", "400"])
        code = 0
    except SystemExit as e:
        code = e.code
    lines = capsys.readouterr().err.strip().splitlines()
    return code, [line for line in lines if ".py:" not in line]  # less library warnings


# ---- 1. an output that is an input --------------------------------------------------------------


def test_embed_refuses_to_overwrite_its_own_input(setup, tmp_path, capsys, monkeypatch):
    bundle, events, source = setup
    monkeypatch.chdir(tmp_path)
    events.to_parquet("v.parquet")
    before = _digest(tmp_path / "v.parquet")
    code, err = _embed_cli(bundle, ["v.parquet"], "v.parquet", capsys)
    assert code == 1 and len(err) == 1, err
    assert "is the input file 'v.parquet'" in err[0] and "refusing" in err[0]
    assert _digest(tmp_path / "v.parquet") == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["v.parquet"]  # no scratch left


@pytest.mark.parametrize(
    "layout",
    ["link-output", "link-input", "hardlink", "dir-holds-it", "dir-would-read-it", "glob-would"],
)
def test_every_way_an_output_can_be_an_input_is_refused(setup, tmp_path, layout):
    bundle, events, _ = setup
    data = tmp_path / "data"
    data.mkdir()
    events.to_parquet(data / "v.parquet")
    events_arg, output = str(data / "v.parquet"), tmp_path / "out.parquet"
    if layout == "link-output":  # the output name is a link to the input
        output.symlink_to(data / "v.parquet")
    elif layout == "link-input":  # the input given is a link to the output
        (tmp_path / "in.parquet").symlink_to(data / "v.parquet")
        events_arg, output = str(tmp_path / "in.parquet"), data / "v.parquet"
    elif layout == "hardlink":
        os.link(data / "v.parquet", output)
    elif layout == "dir-holds-it":
        events_arg, output = str(data), data / "v.parquet"
    elif layout == "dir-would-read-it":  # written into the input folder: read back next time
        events_arg, output = str(data), data / "sub" / "emb.parquet"
    else:
        events_arg, output = str(tmp_path / "**" / "*.parquet"), tmp_path / "x" / "emb.parquet"
    before = _digest(data / "v.parquet")
    with pytest.raises(SeqencError, match="refusing to replace the event log|reads events"):
        export.export_embeddings(bundle, events_arg, output, **OPTIONS)
    assert _digest(data / "v.parquet") == before
    assert not list(tmp_path.rglob("*.seqenc-tmp"))


def test_an_output_the_reader_skips_may_lie_in_the_input_folder(setup, tmp_path):
    bundle, events, _ = setup
    events.to_parquet(tmp_path / "v.parquet")
    out = export.export_embeddings(bundle, str(tmp_path), tmp_path / "_emb.parquet", **OPTIONS)
    assert len(pd.read_parquet(out)) == events.entity_id.nunique()
    assert read_events(tmp_path, SCHEMA).num_rows == len(events)  # _emb.parquet is skipped


# ---- 2. the scratch path -------------------------------------------------------------------------


def test_a_scratch_path_that_is_a_link_is_refused_and_its_target_untouched(setup, tmp_path):
    bundle, _, source = setup
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "keep.txt").write_text("precious")
    output = tmp_path / "out" / "emb.parquet"
    output.parent.mkdir()
    (output.parent / ".emb.parquet.seqenc-tmp").symlink_to(victim)
    with pytest.raises(SeqencError, match="is a symbolic link; refusing to use it"):
        export.export_embeddings(bundle, source, output, **OPTIONS)
    assert sorted(p.name for p in victim.iterdir()) == ["keep.txt"]
    assert (victim / "keep.txt").read_text() == "precious" and not output.exists()


def test_a_scratch_path_that_is_a_file_is_refused(tmp_path):
    (tmp_path / ".o.parquet.seqenc-tmp").write_text("not ours")
    with pytest.raises(SeqencError, match="is not a directory; refusing"):
        Scratch(tmp_path / "o.parquet").acquire()
    assert (tmp_path / ".o.parquet.seqenc-tmp").read_text() == "not ours"


def test_scratch_is_private_and_a_killed_runs_leftovers_are_emptied(tmp_path):
    leftover = tmp_path / ".o.parquet.seqenc-tmp"
    leftover.mkdir(mode=0o755)
    (leftover / "partitions").mkdir()
    (leftover / "partitions" / "events-00000.parquet").write_text("x")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "f").write_text("x")
    (leftover / "link").symlink_to(outside)  # a link inside is removed, not followed
    scratch = Scratch(tmp_path / "o.parquet")
    scratch.acquire()
    try:
        assert (leftover.stat().st_mode & 0o777) == 0o700 and not list(leftover.iterdir())
        assert (outside / "f").exists()
    finally:
        scratch.release()
    assert not leftover.exists()
    fresh = Scratch(tmp_path / "p.parquet")
    fresh.acquire()
    assert (fresh.path.stat().st_mode & 0o777) == 0o700
    fresh.release()


# ---- 3. SIGTERM ----------------------------------------------------------------------------------

_SLOW_EMBED = """
import sys, time
from pathlib import Path
import seqenc.export.predict as predict
step = predict.EmbeddingModule.predict_step
def slow(self, batch, batch_idx):
    Path(sys.argv[1]).touch()
    time.sleep(0.5)
    return step(self, batch, batch_idx)
predict.EmbeddingModule.predict_step = slow
from seqenc.cli import main
main(sys.argv[2:])
"""


def test_sigterm_stops_embed_like_ctrl_c(setup, tmp_path):
    bundle, _, source = setup
    marker, output = tmp_path / "embedding-started", tmp_path / "emb.parquet"
    argv = ["embed", "--model", str(bundle), "--events", str(source), "--output", str(output)]
    argv += ["--accelerator", "cpu", "--no-progress", "--batch-size", "2"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    env.pop("SEQENC_DEBUG", None)
    proc = subprocess.Popen(
        [sys.executable, "-c", _SLOW_EMBED, str(marker), *argv],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 120
    while not marker.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert marker.exists(), proc.communicate()
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 143, (out, err)
    assert err.strip().splitlines()[-1] == "seqenc embed: stopped by SIGTERM"
    assert "Traceback" not in err and "embeddings:" not in out
    assert sorted(p.name for p in tmp_path.iterdir()) == ["embedding-started"]  # no scratch


def test_lightnings_sigterm_exit_is_not_success(capsys):
    from seqenc.cli_support import one_line_errors

    with pytest.raises(SystemExit) as info, one_line_errors("seqenc fit"):
        raise SIGTERMException  # what Lightning's fit loop raises after a step (exit code 0)
    assert info.value.code == 143
    assert capsys.readouterr().err.strip() == "seqenc fit: stopped by SIGTERM"


# ---- 6. directories: Spark / Hive leftovers and hidden files --------------------------------------


def _spark_layout(root: Path, events: pd.DataFrame) -> int:
    """A directory as Spark leaves it after a retried job; returns the true number of rows."""
    half = len(events) // 2
    (root / "date=1" / "_temporary" / "0").mkdir(parents=True)
    events.iloc[:half].to_parquet(root / "date=1" / "part-0.parquet")
    events.iloc[half:].to_parquet(root / "part-1.parquet")
    for copy in [
        root / "date=1" / "_temporary" / "0" / "part-0.parquet",
        root / ".part-1.parquet",
        root / "_part-1.parquet",
    ]:
        events.iloc[half:].to_parquet(copy)
    (root / "_SUCCESS").write_text("")
    (root / ".hidden").mkdir()
    events.to_parquet(root / ".hidden" / "all.parquet")
    return len(events)


def test_a_directory_skips_underscore_and_dot_paths(setup, tmp_path):
    _, events, _ = setup
    n = _spark_layout(tmp_path / "logs", events)
    assert read_events(tmp_path / "logs", SCHEMA).num_rows == n
    assert read_events(str(tmp_path / "logs" / "**" / "*.parquet"), SCHEMA).num_rows == n
    asked = read_events(str(tmp_path / "logs" / "_*.parquet"), SCHEMA)  # asked for by name
    assert asked.num_rows == len(events) - len(events) // 2


def test_the_export_of_a_spark_directory_counts_each_event_once(setup, tmp_path):
    bundle, events, source = setup
    _spark_layout(tmp_path / "logs", events)
    out = export.export_embeddings(bundle, tmp_path / "logs", tmp_path / "a.parquet", **OPTIONS)
    want = export.export_embeddings(bundle, source, tmp_path / "b.parquet", **OPTIONS)
    got, want = pd.read_parquet(out), pd.read_parquet(want)
    assert got.n_events_read.sum() == want.n_events_read.sum() and len(got) == len(want)


# ---- 10. the same file twice ---------------------------------------------------------------------


@pytest.mark.parametrize("how", ["twice", "glob-and-file", "link", "hardlink", "relative"])
def test_the_same_file_twice_is_refused(setup, tmp_path, how, monkeypatch):
    _, events, _ = setup
    monkeypatch.chdir(tmp_path)
    a = tmp_path / "a.parquet"
    events.to_parquet(a)
    other = {
        "twice": str(a),
        "glob-and-file": str(tmp_path / "*.parquet"),
        "link": str(tmp_path / "sub" / "l.parquet"),
        "hardlink": str(tmp_path / "sub" / "h.parquet"),
        "relative": "sub/../a.parquet",
    }[how]
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "l.parquet").symlink_to(a)
    os.link(a, tmp_path / "sub" / "h.parquet")
    with pytest.raises(SeqencError, match="is given twice.*count twice"):
        read_events([str(a), other], SCHEMA)


def test_embed_with_the_same_file_twice_is_one_line(setup, tmp_path, capsys):
    bundle, _, source = setup
    code, err = _embed_cli(bundle, [str(source), str(source)], str(tmp_path / "o.parquet"), capsys)
    assert code == 1 and len(err) == 1 and f"{str(source)!r} is given twice" in err[0], err
    assert not list(tmp_path.iterdir())


# ---- clear errors: sources that are not paths, CSV that is not UTF-8 -----------------------------


@pytest.mark.parametrize("kind", ["frames", "dict", "none", "int", "empty-path"])
def test_sources_that_are_not_paths_say_what_is_accepted(setup, kind):
    bundle, events, _ = setup
    source = {
        "frames": [events.iloc[:10], events.iloc[10:]],
        "dict": {"entity_id": [1]},
        "none": None,
        "int": 3,
        "empty-path": "",
    }[kind]
    with pytest.raises(SeqencError, match="events must be a pandas DataFrame, a pyarrow Table"):
        read_events(source, SCHEMA)
    with pytest.raises(SeqencError, match="pd.concat" if kind == "frames" else "events must be"):
        encode(source, bundle)


@pytest.mark.parametrize(
    "encoding, name, problem",
    [
        ("utf-16", "e.csv", "UTF-16 LE text"),
        ("utf-16-be", "e.csv", "NUL bytes"),  # no byte-order mark
        ("utf-32", "e.csv", "UTF-32 LE text"),
        ("utf-16", "e.csv.gz", "UTF-16 LE text"),
        ("latin-1", "e.csv", "header line is not UTF-8"),
    ],
)
def test_csv_that_is_not_utf8_is_refused_naming_the_file(setup, tmp_path, encoding, name, problem):
    _, events, _ = setup
    frame = events.rename(columns={"channel": "canal_é"}) if encoding == "latin-1" else events
    data = frame.to_csv(index=False).encode(encoding)
    (tmp_path / name).write_bytes(gzip.compress(data) if name.endswith(".gz") else data)
    with pytest.raises(SeqencError, match=problem) as info:
        read_events(tmp_path / name, SCHEMA)
    assert str(tmp_path / name) in str(info.value) and "UTF-8" in str(info.value)


def test_a_utf8_byte_order_mark_is_read(setup, tmp_path):
    _, events, _ = setup
    events.to_csv(tmp_path / "e.csv", index=False, encoding="utf-8-sig")
    assert read_events(tmp_path / "e.csv", SCHEMA).num_rows == len(events)


def test_embed_of_a_utf16_csv_is_one_line(setup, tmp_path, capsys):
    bundle, events, _ = setup
    events.to_csv(tmp_path / "e.csv", index=False, encoding="utf-16")
    code, err = _embed_cli(bundle, [str(tmp_path / "e.csv")], str(tmp_path / "o.parquet"), capsys)
    assert code == 1 and len(err) == 1 and "is UTF-16 LE text" in err[0], err


# ---- SEQENC_DEBUG ---------------------------------------------------------------------------------


@pytest.mark.parametrize("value", [None, "", "0", "false", "False", "no", "off", " NO "])
def test_debug_off_values_keep_one_line(setup, tmp_path, capsys, monkeypatch, value):
    bundle, _, _ = setup
    if value is None:
        monkeypatch.delenv("SEQENC_DEBUG", raising=False)
    else:
        monkeypatch.setenv("SEQENC_DEBUG", value)
    code, err = _embed_cli(bundle, ["missing.parquet"], str(tmp_path / "o.parquet"), capsys)
    assert code == 1 and err == ["seqenc embed: error: file not found: 'missing.parquet'"]


@pytest.mark.parametrize(
    "value, on",
    [("", False), ("0", False), (" False ", False), ("NO", False), ("off", False), ("1", True)]
    + [("true", True), ("Yes", True), ("on", True), ("2", True)],
)
def test_debug_enabled_reads_a_boolean(monkeypatch, value, on):
    from seqenc.cli_support import debug_enabled

    monkeypatch.setenv("SEQENC_DEBUG", value)
    assert debug_enabled() is on


@pytest.mark.parametrize("value", ["1", "true", "yes", "on"])
def test_debug_on_shows_the_traceback_of_embed(setup, tmp_path, monkeypatch, value):
    bundle, _, _ = setup
    monkeypatch.setenv("SEQENC_DEBUG", value)
    argv = ["embed", "--model", str(bundle), "--events", "missing.parquet", "--output", "o.parquet"]
    with pytest.raises(SeqencError, match="file not found"):
        cli_main(argv)


def test_debug_false_keeps_fit_errors_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SEQENC_DEBUG", "false")
    with pytest.raises(SystemExit) as info:
        cli_main(["fit", "--data.path", "missing.parquet"])
    err = capsys.readouterr().err.strip().splitlines()
    assert info.value.code == 1 and "file not found" in err[-1] and "Traceback" not in str(err)


# ---- 10. a duplicated newest event ---------------------------------------------------------------


def test_duplicated_newest_matches_a_naive_count():
    from seqenc.data.duplicates import duplicated_newest

    rng = np.random.default_rng(0)
    n = 400
    frame = pd.DataFrame(
        {
            "entity_id": rng.integers(0, 40, n).astype(str),
            "item_id": rng.integers(0, 3, n),
            "timestamp": rng.integers(0, 6, n).astype(float),
            "event_type": pd.Series(rng.choice(["a", "b", None], n), dtype=object),
        }
    )
    schema = EventSchema(categorical=("event_type",))
    for as_of in (None, 2.5):
        seen = frame if as_of is None else frame[frame.timestamp <= as_of]
        want = sum(  # per entity: the rows at its newest time, any of them twice?
            g[g.timestamp == g.timestamp.max()].duplicated(keep=False).any()
            for _, g in seen.groupby("entity_id")
        )
        table = read_events(frame, schema)
        assert duplicated_newest(table, schema, as_of) == want > 0


def test_export_warns_when_newest_events_are_duplicated(setup, tmp_path, caplog):
    bundle, events, _ = setup
    newest = events.sort_values("timestamp").groupby("entity_id").tail(1)
    older = events.sort_values("timestamp").groupby("entity_id").head(1)
    pd.concat([events, newest.iloc[:3]]).to_parquet(tmp_path / "dup.parquet")
    pd.concat([events, older.iloc[:3]]).to_parquet(tmp_path / "old.parquet")
    with caplog.at_level(logging.WARNING, logger="seqenc.export"):
        export.export_embeddings(bundle, tmp_path / "old.parquet", tmp_path / "o1.pq", **OPTIONS)
        assert "newest event twice" not in caplog.text
        export.export_embeddings(bundle, tmp_path / "dup.parquet", tmp_path / "o2.pq", **OPTIONS)
    assert "3 entities have their newest event twice or more" in caplog.text
