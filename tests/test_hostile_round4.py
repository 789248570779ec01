"""Hostile inputs, round four (issue 49): generated output places, option values, label tables for
fine-tuning and process counts go to every command. Each ends in the right result or in one
:class:`SeqencError` line with nothing printed before it; no device node, input file or earlier
output is changed, no temporary is left behind.

Only public paths are imported (the CLI, ``load_encoder``, the data module), so the file also runs
against older code (the output, option and fine-tuning families fail on 1ca1f51)."""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import resource
import shutil
import signal
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from safetensors.torch import load_file, save_file
from tiny import tiny_bundle, tiny_events

from seqenc.bundle import file_sha256
from seqenc.cli import main as cli_main
from seqenc.data.datamodule import SequenceDataModule
from seqenc.errors import SeqencError
from seqenc.inference import load_encoder

SETTINGS = settings(
    max_examples=6,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
FIT = ["--data.history_len", "8", "--data.schema.categorical", "[event_type, channel]"]
FIT += ["--model.encoder.d_model", "16", "--model.encoder.n_heads", "2"]
FIT += ["--model.encoder.n_layers", "1", "--trainer.accelerator", "cpu"]
FIT += ["--trainer.max_steps", "1", "--seed_everything", "0"]


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> dict:
    """A bundle ``a`` and its events, a bundle ``other`` of another catalogue, a label table,
    embeddings, a checkpoint and a run folder to work in."""
    tmp = tmp_path_factory.mktemp("round4")
    events = tiny_events(n_entities=30, seed=3)
    events.to_parquet(tmp / "events.parquet")
    found = {"tmp": tmp, "events": events, "events_file": tmp / "events.parquet"}
    found["a"] = tiny_bundle(tmp / "a", events, history_len=8)
    other = events.assign(item_id=events["item_id"] + 1000)
    found["other"] = tiny_bundle(tmp / "other", other, history_len=8)
    ids = events["entity_id"].unique()
    labels = pd.DataFrame({"entity_id": ids, "y": np.arange(len(ids)) % 2})
    labels.to_parquet(tmp / "labels.parquet")
    found["labels"] = tmp / "labels.parquet"
    embeddings = load_encoder(found["a"], "cpu").encode(events, output="pandas")
    embeddings.to_parquet(tmp / "embeddings.parquet")
    found["embeddings"] = tmp / "embeddings.parquet"
    return found


def run_cli(argv: list[str], cwd: Path | None = None) -> tuple[int, str, str]:
    """``seqenc ARGV`` in this process: ``(exit code, stderr, stdout)``, with Lightning's log
    lines (its banner) in stderr; an exception that escapes the command fails the test."""
    err, out, here = io.StringIO(), io.StringIO(), os.getcwd()
    handlers = [
        h
        for name in ("lightning.pytorch", "lightning.fabric")
        for h in logging.getLogger(name).handlers
        if type(h) is logging.StreamHandler
    ]
    streams = [h.setStream(err) for h in handlers]
    try:
        os.chdir(cwd or here)
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
            cli_main(argv)
        code = 0
    except SystemExit as e:
        code = e.code
    finally:
        os.chdir(here)
        for handler, stream in zip(handlers, streams, strict=True):
            handler.setStream(stream)
    text = err.getvalue()
    assert "Traceback" not in text, text
    return code, text, out.getvalue()


def one_line(code: int, err: str, command: str) -> None:
    """Exit code 1 and one error line naming the command, with nothing printed before it."""
    assert code == 1, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith(f"seqenc {command}: error: "), err


def ends_in_one_line(code: int, err: str, command: str) -> None:
    """Exit code 1, one error line naming the command, the last (a run that started first)."""
    assert code == 1, err
    errors = [line for line in err.splitlines() if line.startswith(f"seqenc {command}: error: ")]
    assert len(errors) == 1 and err.strip().splitlines()[-1] == errors[0], err


def snapshot(folder: Path) -> dict[str, object]:
    """What each entry of ``folder`` is: a file's bytes' digest, a FIFO, a link's target."""
    found = {}
    for path in sorted(folder.iterdir()):
        if path.is_symlink():
            found[path.name] = ("link", os.readlink(path))
        elif path.is_fifo():
            found[path.name] = "fifo"
        elif path.is_file():
            found[path.name] = file_sha256(path)
    return found


# ---------------------------------------------------------------------------------------------
# Output places


PLACES = ["fifo", "link_to_fifo", "input", "hard_link", "link_to_input", "bundle_file"]
WRITERS = ["embed", "drift", "probe", "onnx", "bundle"]


def copies(world: dict, folder: Path) -> dict[str, Path]:
    """The inputs a command reads, copied into ``folder`` (a failure must not harm the world)."""
    found = {"a": folder / "a", "ckpt": folder / "none.ckpt"}
    shutil.copytree(world["a"], found["a"])
    for name in ("events_file", "labels", "embeddings"):
        found[name] = Path(shutil.copy(world[name], folder))
    return found


def writer_argv(inputs: dict[str, Path], command: str, out: str) -> list[str]:
    """``seqenc COMMAND`` on ``inputs``, writing ``out``."""
    a, events = str(inputs["a"]), str(inputs["events_file"])
    return {
        "embed": ["embed", "--model", a, "--events", events, "--output", out, "--no-progress"],
        "drift": ["drift", a, a, "--events", events, "--json", out],
        "probe": ["probe", "--labels", str(inputs["labels"]), "--label-column", "y"]
        + ["--embeddings", str(inputs["embeddings"]), "--folds", "2", "--model", "linear"]
        + ["--json", out],
        "onnx": ["onnx", "--model", a, "--output", out],
        "bundle": ["bundle", "--ckpt", str(inputs["ckpt"]), "--output", out],
    }[command]


def place(inputs: dict[str, Path], command: str, kind: str, folder: Path) -> Path:
    """An output path of ``kind`` in ``folder``: a FIFO (a device node as far as a rename goes),
    a link to one, one of the command's inputs itself, a hard or soft link to it, a file of the
    bundle it reads."""
    read = {"probe": inputs["embeddings"], "onnx": inputs["a"] / "config.json"}
    read = read.get(command, inputs["events_file"])
    target = folder / "out"
    if kind == "bundle_file":
        return inputs["a"] / "vocab.json"
    if kind == "input":
        return read
    if kind in ("fifo", "link_to_fifo"):
        os.mkfifo(folder / "fifo")
        if kind == "fifo":
            return folder / "fifo"
        target.symlink_to(folder / "fifo")
    elif kind == "hard_link":
        os.link(read, target)
    else:
        target.symlink_to(read)
    return target


@SETTINGS
@given(command=st.sampled_from(WRITERS), kind=st.sampled_from(PLACES))
def test_outputs_never_replace_what_is_there(world, tmp_path_factory, command, kind):
    """An output that is a device or pipe, or one of the command's inputs (by path, link or
    inode), is one line, and nothing in its folder or the bundle changes."""
    folder = tmp_path_factory.mktemp("place")
    inputs = copies(world, folder)
    out = place(inputs, command, kind, folder)
    before = [snapshot(folder), snapshot(inputs["a"])]
    code, err, _ = run_cli(writer_argv(inputs, command, str(out)))
    one_line(code, err, command)
    assert [snapshot(folder), snapshot(inputs["a"])] == before, err


@contextlib.contextmanager
def file_size_limit(limit: int):
    """Files this process writes stop at ``limit`` bytes (a write beyond fails with EFBIG, as one
    on a full disk fails with ENOSPC)."""
    old = resource.getrlimit(resource.RLIMIT_FSIZE)
    handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, old[1]))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, old)
        signal.signal(signal.SIGXFSZ, handler)


@settings(SETTINGS, max_examples=5)
@given(
    command=st.sampled_from(["embed", "drift", "probe", "onnx"]), limit=st.sampled_from([512, 4096])
)
def test_full_disk_is_one_line(world, tmp_path_factory, command, limit):
    """A place that cannot take the output (the size limit hit, as a full disk) is one line; the
    earlier output stays and no temporary is left."""
    folder = tmp_path_factory.mktemp("full")
    inputs = copies(world, tmp_path_factory.mktemp("inputs"))
    (folder / "out").write_text("earlier output\n")
    with file_size_limit(limit):
        code, err, _ = run_cli(writer_argv(inputs, command, str(folder / "out")))
    one_line(code, err, command)
    assert snapshot(folder) == {"out": file_sha256(folder / "out")}
    assert (folder / "out").read_text() == "earlier output\n"


def test_fit_whose_run_folder_fills_up(world, tmp_path):
    """``seqenc fit`` whose checkpoint does not fit is one line, and no truncated checkpoint is
    left: every ``.ckpt`` in the run folder loads."""
    argv = ["fit", "--data.path", str(world["events_file"]), *FIT]
    with file_size_limit(100_000):  # the run folder takes a first write; a checkpoint does not
        code, err, _ = run_cli(argv, tmp_path)
    ends_in_one_line(code, err, "fit")
    for ckpt in tmp_path.rglob("*.ckpt"):
        torch.load(ckpt, weights_only=True)
    assert not [p for p in tmp_path.rglob(".*.tmp")]


def test_truncated_checkpoint_is_one_line(world, tmp_path):
    """``fit`` / ``test --ckpt_path`` a truncated checkpoint: one line each."""
    bad = tmp_path / "bad.ckpt"
    torch.save({"state_dict": {"w": torch.zeros(1000)}}, bad)
    bad.write_bytes(bad.read_bytes()[:300])
    for command in ("fit", "test"):
        argv = [command, "--data.path", str(world["events_file"]), *FIT, "--ckpt_path", str(bad)]
        code, err, _ = run_cli(argv, tmp_path)
        one_line(code, err, command)


# ---------------------------------------------------------------------------------------------
# Option values, by option type


def bundle_with_vocab(world: dict, harm: str, target: Path) -> Path:
    """A copy of bundle ``a`` whose vocab.json is a link to /dev/zero, or a FIFO."""
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(world["a"], target)
    (target / "vocab.json").unlink()
    if harm == "devzero":
        (target / "vocab.json").symlink_to("/dev/zero")
    else:
        os.mkfifo(target / "vocab.json")
    return target


counts = st.sampled_from([0, -5, 1.5, "abc", 10**9, True, "1e9"])
BAD_OPTIONS = st.one_of(
    st.tuples(st.just("loss_options"), counts.map(lambda v: {"n_negatives": v})),
    st.tuples(st.just("loss_options"), st.sampled_from([{"sampler": "nope"}, {"t": 3},
                                                        {"generator": 1}, {"nope": 1}])),
    st.tuples(st.just("oov_buckets"), st.sampled_from([10_000_000, -1])),
    st.tuples(st.just("label_column"), st.just("entity_id")),
    st.tuples(st.just("as_of_column"), st.sampled_from(["asof", "cut_off"])),
    st.tuples(st.just("init_from"), st.sampled_from(["other", "devzero", "fifo"])),
    st.tuples(st.just("vocabs_from"), st.sampled_from(["other", "devzero"])),
    st.tuples(st.just("plain"), st.sampled_from([
        ("data.batch_size", "0"), ("data.eval_batch_size", "-1"), ("data.num_workers", "-1"),
        ("data.seed", "-1"), ("model.lr", "-1"), ("model.lr", "inf"), ("model.warmup_steps", "-5"),
        ("model.ks", "[0]"), ("model.weight_decay", "-0.5"),
    ])),
)  # fmt: skip


@settings(SETTINGS, max_examples=14)
@given(option=BAD_OPTIONS)
def test_fit_refuses_any_bad_option_first(world, tmp_path_factory, option):
    """An option value that cannot train is one line before anything else is printed (no
    banner, no seed line), whatever its type."""
    name, value = option
    folder = tmp_path_factory.mktemp("opt")
    argv = ["fit", "--data.path", str(world["events_file"]), *FIT]
    if name == "loss_options":
        loss = "gbce" if "t" in value else "sampled_softmax"
        argv += ["--model.loss", loss, "--model.loss_options", json.dumps(value)]
    elif name == "plain":
        argv += [f"--{value[0]}", value[1]]
    elif name == "oov_buckets":
        argv += ["--data.oov_buckets", str(value), "--data.max_items", "10"]
    elif name in ("label_column", "as_of_column"):
        column = value if name == "label_column" else "y"
        argv += ["--data.labels", str(world["labels"]), "--data.label_column", column]
        argv += [f"--data.{name}", value] if name == "as_of_column" else []
    else:
        bundle = world["other"] if value == "other" else None
        bundle = bundle or bundle_with_vocab(world, value, folder / "harmed")
        section = "model" if name == "init_from" else "data"
        argv += [f"--{section}.{name}", str(bundle), "--model.encoder.n_layers", "2"]
    code, err, _ = run_cli(argv, folder)
    one_line(code, err, "fit")


@settings(SETTINGS, max_examples=8)
@given(value=st.sampled_from([2.5, True, 0, -1, "3", 1, 4, None]))
def test_eval_entities_any_value(world, value):
    """``SequenceDataModule(eval_entities=...)``: a whole number >= 1 or None, else one line."""
    try:
        SequenceDataModule(str(world["events_file"]), eval_entities=value)
    except Exception as e:  # noqa: BLE001 - any other type fails the test
        assert isinstance(e, SeqencError), f"{type(e).__name__}: {e}"
        assert isinstance(value, (float, bool, str)) or value < 1, value
        return
    assert value is None or (type(value) is int and value >= 1), value


@settings(SETTINGS, max_examples=4)
@given(devices=st.sampled_from([2, 3, 4]), shard=st.booleans())
def test_processes_beyond_batches_are_one_line(world, tmp_path_factory, devices, shard):
    """More processes than validation batches (or, sharded, than entities with a history) is
    one line before any process starts."""
    argv = ["fit", "--data.path", str(world["events_file"]), *FIT]
    argv += ["--trainer.devices", str(devices), "--trainer.strategy", "ddp"]
    if shard:  # 30 entities: more processes than that leaves one without any
        argv += ["--data.shard_entities", "true", "--trainer.devices", "40"]
    code, err, _ = run_cli(argv, tmp_path_factory.mktemp("ddp"))
    one_line(code, err, "fit")


# ---------------------------------------------------------------------------------------------
# Label tables for fine-tuning (and the probe)


@st.composite
def fine_tune_tables(draw, ids: list[str]) -> tuple[pd.DataFrame, str | None, str]:
    """A label table with a hostile label column, its as_of column option, and the task."""
    kind = draw(st.sampled_from(["classes", "constant", "huge", "inf", "near", "early"]))
    n = len(ids)
    y = {
        "classes": np.arange(n) % 2 * 1.0,
        "constant": np.full(n, 5.0),
        "huge": np.linspace(-1e300, 1e300, n) + 0.5,
        "inf": np.r_[np.inf, np.arange(n - 1) * 0.5 + 0.25],
        "near": np.arange(n) * 0.5 + 0.25,
        "early": np.arange(n) % 2 * 1.0,
    }[kind]
    table = pd.DataFrame({"entity_id": ids, "y": y})
    as_of = None
    if kind == "early":  # every cut-off before the first event
        table["cut"], as_of = pd.Timestamp("1990-01-01", tz="UTC"), "cut"
    task = "regression" if kind in ("constant", "huge", "inf", "near") else "classification"
    return table, as_of, task


@settings(SETTINGS, max_examples=6)
@given(data=st.data())
def test_fine_tune_any_label_table(world, tmp_path_factory, data):
    """A label table that cannot train a head (a constant, non-finite or overflowing regression
    label, cut-offs before every event) is one line first; a sound one writes a bundle whose
    config is valid JSON with a finite scale."""
    ids = world["events"]["entity_id"].unique().tolist()
    table, as_of, task = data.draw(fine_tune_tables(ids))
    folder = tmp_path_factory.mktemp("ft")
    table.to_parquet(folder / "labels.parquet")
    argv = ["fit", "--data.path", str(world["events_file"]), *FIT]
    argv += ["--data.labels", str(folder / "labels.parquet"), "--data.label_column", "y"]
    argv += ["--data.label_task", task] + (["--data.as_of_column", as_of] if as_of else [])
    code, err, _ = run_cli(argv, folder)
    y = table["y"].to_numpy()
    sound = np.isfinite(y).all() and np.std(y) > 0 and np.abs(y).max() < 1e150 and not as_of
    if not sound:
        one_line(code, err, "fit")
        return
    assert code == 0, err
    (config,) = folder.rglob("bundle/config.json")
    head = json.loads(config.read_text(), parse_constant=pytest.fail)["head"]
    assert np.isfinite(head["scale"]) and head["scale"] > 0


@settings(SETTINGS, max_examples=4)
@given(y=st.sampled_from([5.0, 1e308, -1e300]), task=st.sampled_from(["regression", "auto"]))
def test_probe_regression_on_an_unusable_label(world, tmp_path_factory, y, task):
    """``seqenc probe --task regression`` of a constant or overflowing label: one line, never
    r2 1.0 or sklearn's NaN error."""
    folder = tmp_path_factory.mktemp("probe")
    ids = world["events"]["entity_id"].unique()
    labels = pd.DataFrame({"entity_id": ids, "y": np.full(len(ids), y)})
    labels.loc[::2, "y"] = -y if abs(y) > 1e200 else y
    labels.to_parquet(folder / "labels.parquet")
    argv = ["probe", "--labels", str(folder / "labels.parquet"), "--label-column", "y"]
    argv += ["--embeddings", str(world["embeddings"]), "--folds", "2", "--model", "linear"]
    code, err, _ = run_cli([*argv, "--task", "regression"])
    one_line(code, err, "probe")


# ---------------------------------------------------------------------------------------------
# Results that can be wrong


@settings(SETTINGS, max_examples=3)
@given(factor=st.sampled_from([1e30, 1e20]))
def test_huge_weights_never_give_silent_nan(world, tmp_path_factory, factor):
    """A bundle of huge finite weights: ``encode`` and ``seqenc embed`` refuse its non-finite
    embeddings in one line naming the bundle (and write nothing)."""
    folder = tmp_path_factory.mktemp("huge")
    bundle = folder / "huge"
    shutil.copytree(world["a"], bundle)
    state = load_file(bundle / "model.safetensors")
    state = {k: v * factor if v.is_floating_point() else v for k, v in state.items()}
    save_file(state, bundle / "model.safetensors", metadata={"format": "pt"})
    meta = json.loads((bundle / "config.json").read_text())
    meta["weights_sha256"] = file_sha256(bundle / "model.safetensors")
    (bundle / "config.json").write_text(json.dumps(meta))
    with pytest.raises(SeqencError, match="non-finite"):
        load_encoder(bundle, "cpu").encode(world["events"], output="numpy")
    out = folder / "emb.parquet"
    argv = ["embed", "--model", str(bundle), "--events", str(world["events_file"])]
    code, err, _ = run_cli([*argv, "--output", str(out), "--no-progress"])
    one_line(code, err, "embed")
    assert not out.exists()


@pytest.mark.parametrize("n", [1, 5])
def test_intervals_only_where_they_exist(world, tmp_path, n):
    """``data.eval_entities 1``: no "±" row (one target has no interval); five targets have one."""
    argv = ["fit", "--data.path", str(world["events_file"]), *FIT, "--data.eval_entities", str(n)]
    code, err, out = run_cli(argv, tmp_path)
    assert code == 0, err
    assert ("0.95 interval" in out) == (n > 1), out
