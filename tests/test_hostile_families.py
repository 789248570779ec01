"""Hostile inputs by family (issue 42): generated devices, run places, frames in every input form,
label tables, bundles, model pairs and output paths go to the public functions and to every
command. Each ends in a result that agrees with an independent reference, or in one
:class:`SeqencError` line; never another exception, never a traceback on the command line.

The strategies, not a list of cases, are the point: a new hostile value of a family is one more
draw. (Helpers new with the fixes are not imported, so the file also runs against older code.)"""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
import shutil
from decimal import Decimal
from fractions import Fraction
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from safetensors.torch import load_file, save_file
from tiny import SCHEMA, tiny_bundle, tiny_events

from seqenc.bundle import file_sha256
from seqenc.cli import main as cli_main
from seqenc.data.events import read_events
from seqenc.errors import SeqencError
from seqenc.evaluate.drift import align, drift
from seqenc.inference import load_encoder

SETTINGS = settings(
    max_examples=8,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
HAVE = {"cpu", "auto"} | ({"cuda", "gpu"} if torch.cuda.is_available() else set())
HAVE |= {"mps", "gpu"} if torch.backends.mps.is_available() else set()


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> dict:
    """Two bundles that share no item (``a``, ``b``), their event files, a third bundle of
    ``a``'s items (``c``), ``a``'s embeddings."""
    tmp = tmp_path_factory.mktemp("families")
    events = tiny_events(n_entities=30, seed=3)
    other = events.assign(item_id=events["item_id"].astype(str) + "_b")
    found = {"tmp": tmp, "events": events}
    for name, log in (("a", events), ("b", other)):
        found[name] = tiny_bundle(tmp / name, log, history_len=8)
        log.to_parquet(tmp / f"{name}.parquet")
        found[f"{name}_events"] = tmp / f"{name}.parquet"
    found["c"] = tiny_bundle(tmp / "c", events, pooling="mean", history_len=8)  # a's items
    embeddings = load_encoder(found["a"], "cpu").encode(events, output="arrow")
    pq.write_table(embeddings, tmp / "embeddings.parquet")
    found["embeddings"] = tmp / "embeddings.parquet"
    (tmp / "a_file").write_text("not a directory\n")
    return found


def one_line(error: BaseException) -> None:
    """A user error: a SeqencError whose message is one line."""
    assert isinstance(error, SeqencError), f"{type(error).__name__}: {error}"
    assert "\n" not in str(error).strip(), str(error)


def call(function, *args, **kwargs):
    """``function(*args, **kwargs)``, or None after a one-line SeqencError."""
    try:
        return function(*args, **kwargs)
    except Exception as e:  # noqa: BLE001 - any other type fails the test in one_line
        one_line(e)
        return None


def run_cli(argv: list[str], cwd: Path | None = None) -> tuple[int, str]:
    """``seqenc ARGV`` in this process: ``(exit code, stderr)``; an exception that escapes the
    command (a traceback on the command line) fails the test."""
    err, here = io.StringIO(), os.getcwd()
    try:
        os.chdir(cwd or here)
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            cli_main(argv)
        code = 0
    except SystemExit as e:
        code = e.code
    finally:
        os.chdir(here)
    text = err.getvalue()
    assert "Traceback" not in text, text
    assert code in (0, 1, 2), (code, text)  # 2: argparse's own usage error
    if code == 1:
        errors = [line for line in text.splitlines() if line.startswith(f"seqenc {argv[0]}: ")]
        assert len(errors) == 1, text
    return code, text


# ---------------------------------------------------------------------------------------------
# Strategies

DEVICE_NAMES = ["cpu", "cuda", "cuda:0", "cuda:7", "mps", "gpu", "tpu", "xla", "meta", "cpu:0"]
devices = st.one_of(
    st.sampled_from(DEVICE_NAMES), st.text(max_size=6), st.integers(-2, 3), st.none()
)
accelerators = st.sampled_from(["cpu", "auto", "gpu", "cuda", "mps", "tpu", "Gpu", "nope"])
device_counts = st.sampled_from(["1", "auto", "2", "0", "-1", "abc", "0,1", "-3"])
# Where a run or an output goes: a writable folder, one with a file in the way, read-only places.
places = st.sampled_from(["tmp", "file_in_way", "/proc", "/sys"])
MUTATIONS = ["none", "dup_entity", "dup_item", "dup_timestamp", "drop_item", "null_item"]
MUTATIONS += ["inf_amount", "text_amount", "bool_item", "empty"]
forms = st.sampled_from(["pandas", "arrow", "parquet", "csv"])
as_of_values = st.one_of(
    st.none(),
    st.decimals(min_value=0, max_value=2_000_000_000, places=3),
    st.decimals(allow_nan=True, allow_infinity=True),
    st.floats(),
    st.fractions(min_value=0, max_value=2_000_000_000),
    st.sampled_from(["2024-01-01", "yesterday", "", "1e3", "2024-13-45T00:00"]),
    st.integers(-(2**70), 2**70),
)
labels_values = st.sampled_from([0.0, 1.0, 0.0, 1.0, math.nan, math.inf, -math.inf])
BUNDLE_HARM = ["none", "devzero_config", "fifo_vocab", "nan_weights", "inf_weight", "big_config"]
BUNDLE_HARM += ["truncated_config", "weights_dir", "missing_vocab", "config_is_list"]


def mutated(events: pd.DataFrame, mutation: str) -> tuple[pd.DataFrame, list[str]]:
    """``events`` harmed by ``mutation``: the frame's columns, and their names (which may repeat)."""
    frame = events[list(SCHEMA.columns)].copy()
    names = list(frame.columns)
    if mutation.startswith("dup_"):
        column = mutation[4:] + ("_id" if mutation != "dup_timestamp" else "")
        frame = pd.concat([frame, frame[[column]].iloc[::-1].reset_index(drop=True)], axis=1)
        names = [*names, column]
    elif mutation == "drop_item":
        frame, names = frame.drop(columns="item_id"), [n for n in names if n != "item_id"]
    elif mutation == "null_item":
        frame["item_id"] = frame["item_id"].astype(object)
        frame.loc[3, "item_id"] = None
    elif mutation == "inf_amount":
        frame.loc[2, "amount"] = math.inf
    elif mutation == "text_amount":
        frame["amount"] = frame["amount"].astype(object)
        frame.loc[1, "amount"] = "lots"
    elif mutation == "bool_item":
        frame["item_id"] = frame["item_id"] % 2 == 0
    elif mutation == "empty":
        frame = frame.iloc[:0]
    frame.columns = names
    return frame, names


def in_form(frame: pd.DataFrame, form: str, tmp: Path) -> object:
    """``frame`` as ``form``: itself, an Arrow table or a file (names repeated as given)."""
    if form == "pandas":
        return frame
    table = pa.table(
        [_arrow(frame.iloc[:, i].tolist()) for i in range(frame.shape[1])],
        names=list(frame.columns),
    )
    if form == "arrow":
        return table
    path = tmp / f"events.{form}"
    if form == "parquet":
        pq.write_table(table, path)
    else:
        frame.to_csv(path, index=False)
    return path


def _arrow(values: list) -> pa.Array:
    """``values`` as an Arrow array; mixed values Arrow cannot hold in one type become text."""
    try:
        return pa.array(values)
    except pa.ArrowException:
        return pa.array([None if v is None else str(v) for v in values])


def harmed_bundle(source: Path, harm: str, target: Path) -> Path:
    """A copy of the bundle ``source`` harmed by ``harm``."""
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(source, target)
    config = target / "config.json"
    if harm == "devzero_config":
        config.unlink()
        config.symlink_to("/dev/zero")
    elif harm == "fifo_vocab":
        (target / "vocab.json").unlink()
        os.mkfifo(target / "vocab.json")
    elif harm in ("nan_weights", "inf_weight"):
        state = load_file(target / "model.safetensors")
        for i, name in enumerate(sorted(state)):
            if state[name].is_floating_point() and (harm == "nan_weights" or i == 3):
                state[name] = state[name].fill_(math.nan if harm == "nan_weights" else math.inf)
        save_file(state, target / "model.safetensors", metadata={"format": "pt"})
        meta = json.loads(config.read_text())  # the checksum updated: only the values say it
        meta["weights_sha256"] = file_sha256(target / "model.safetensors")
        config.write_text(json.dumps(meta))
    elif harm == "big_config":
        config.write_text(config.read_text() + " " * (2 << 20))
    elif harm == "truncated_config":
        config.write_text(config.read_text()[:40])
    elif harm == "weights_dir":
        (target / "model.safetensors").unlink()
        (target / "model.safetensors").mkdir()
    elif harm == "missing_vocab":
        (target / "vocab.json").unlink()
    elif harm == "config_is_list":
        config.write_text("[1, 2]")
    return target


# ---------------------------------------------------------------------------------------------
# Devices


@SETTINGS
@given(device=devices)
def test_load_encoder_on_any_device(world, device):
    """A device the machine lacks, or no device at all, is one line; one it has loads."""
    encoder = call(load_encoder, world["a"], device)
    if device in ("cpu", "cpu:0", None):
        assert encoder is not None and encoder.device.type in ("cpu", "cuda")


@settings(SETTINGS, max_examples=6)
@given(accelerator=accelerators, count=device_counts)
def test_embed_on_any_accelerator(world, accelerator, count):
    """``seqenc embed --accelerator/--devices``: the output, or one line naming the cause."""
    out = world["tmp"] / "accel.parquet"
    argv = ["embed", "--model", str(world["a"]), "--events", str(world["a_events"])]
    argv += ["--output", str(out), "--accelerator", accelerator, "--devices", count]
    code, err = run_cli([*argv, "--no-progress"])
    if accelerator.lower() not in HAVE:
        assert code == 1, err


# ---------------------------------------------------------------------------------------------
# Run places (fit / validate / test)


def fit_cli(
    world: dict, accelerator: str, place: str, command: str, seed: int = 0
) -> tuple[int, str]:
    """``seqenc COMMAND`` on ``a``'s events, run from ``place``, on ``accelerator``."""
    cwd = world["tmp"] / f"run_{place}" if place in ("tmp", "file_in_way") else Path(place)
    if place in ("tmp", "file_in_way"):
        cwd.mkdir(exist_ok=True)
    if place == "file_in_way":
        (cwd / "runs").write_text("in the way\n")
    argv = [command, "--data.path", str(world["a_events"]), "--data.history_len", "8"]
    argv += ["--data.schema.categorical", "[event_type, channel]"]
    argv += ["--trainer.accelerator", accelerator, "--trainer.max_steps", "1"]
    return run_cli([*argv, "--seed_everything", str(seed)], cwd)


commands = st.sampled_from(["fit", "validate", "test"])


@settings(SETTINGS, max_examples=4)
@given(accelerator=accelerators.filter(lambda a: a.lower() not in HAVE), command=commands)
def test_fit_on_any_accelerator(world, accelerator, command):
    """An accelerator the machine lacks fails in one line before anything is built."""
    code, err = fit_cli(world, accelerator, "tmp", command)
    assert code == 1, err


@settings(SETTINGS, max_examples=3)
@given(seed=st.sampled_from([-5, 2**32, 2**40]), command=commands)
def test_fit_any_seed(world, seed, command):
    """A seed numpy cannot take is one line."""
    code, err = fit_cli(world, "cpu", "tmp", command, seed)
    assert code == 1, err


@settings(SETTINGS, max_examples=4)
@given(place=places.filter(lambda p: p != "tmp"), command=commands)
def test_fit_in_any_place(world, place, command):
    """A run folder that cannot be written (a read-only place, a file in the way) fails in one
    line before training."""
    code, err = fit_cli(world, "cpu", place, command)
    assert code == 1, err


# ---------------------------------------------------------------------------------------------
# Frames in every input form


@settings(SETTINGS, max_examples=24)
@given(mutation=st.sampled_from(MUTATIONS), form=forms)
def test_read_events_any_frame(world, tmp_path_factory, mutation, form):
    """Every input form refuses a column the schema reads when it is there twice (which one would
    be read?); the unharmed frame reads in every form."""
    frame, names = mutated(world["events"], mutation)
    source = in_form(frame, form, tmp_path_factory.mktemp("frame"))
    table = call(read_events, source, SCHEMA)
    if any(names.count(c) > 1 for c in SCHEMA.columns):
        assert table is None, f"{mutation} in {form} was read"
    if mutation == "none":
        assert table is not None and table.num_rows == len(frame)


@SETTINGS
@given(as_of=as_of_values)
def test_encode_any_as_of(world, as_of):
    """``as_of`` in any form the timestamp column accepts gives what its float gives."""
    encoder = load_encoder(world["a"], "cpu")
    options = {"on_empty": "skip", "output": "numpy"}
    found = call(encoder.encode, world["events"], as_of=as_of, **options)
    exact = isinstance(as_of, Fraction) or (isinstance(as_of, Decimal) and as_of.is_finite())
    if exact and 0 <= as_of <= 2_000_000_000:
        expected = call(encoder.encode, world["events"], as_of=float(as_of), **options)
        assert (found is None) == (expected is None), as_of
        if found is not None:
            np.testing.assert_array_equal(found.embeddings, expected.embeddings)


# ---------------------------------------------------------------------------------------------
# Label tables (seqenc probe)


@st.composite
def label_tables(draw, ids: list[str]) -> pd.DataFrame:
    """Rows of (entity, label): repeated entities, unknown ones, missing and infinite labels."""
    entity = st.sampled_from([*ids, "stranger_1", "stranger_2"])
    rows = draw(st.lists(st.tuples(entity, labels_values), min_size=0, max_size=36))
    unique = draw(st.lists(st.sampled_from(ids), min_size=24, max_size=30, unique=True))
    rows += [(e, float(i % 2)) for i, e in enumerate(unique)]
    return pd.DataFrame(rows, columns=["entity_id", "y"])


def expected_rows(labels: pd.DataFrame, ids: set) -> int | None:
    """The label rows a probe may use (one per entity with features and a label), or ``None``
    when it must refuse: an infinite label, or two labels for one entity."""
    rows = labels[labels["y"].notna()].drop_duplicates()
    if np.isinf(rows["y"]).any() or rows["entity_id"].duplicated().any():
        return None
    return int(rows["entity_id"].isin(ids).sum())


@settings(SETTINGS, max_examples=10)
@given(data=st.data(), column=st.sampled_from(["y", "y", "entity_id"]))
def test_probe_any_label_table(world, tmp_path_factory, data, column):
    """``seqenc probe``: each entity once in the folds, every dropped row counted, or one line."""
    ids = world["events"]["entity_id"].unique().tolist()
    labels = data.draw(label_tables(ids))
    options = ["--label-column", column, "--folds", "2"]
    code, err, row = probe_cli(world, tmp_path_factory, labels, options)
    expected = expected_rows(labels, set(ids))
    if column == "entity_id" or expected is None:
        assert code == 1, err
    if code == 0:
        assert row["n_rows"] == expected


@settings(SETTINGS, max_examples=6)
@given(folds=st.integers(-1, 4), seed=st.sampled_from([0, 7, -1, 2**40]))
def test_probe_any_options(world, tmp_path_factory, folds, seed):
    """Folds and seeds a probe cannot use are one line."""
    labels = pd.DataFrame({"entity_id": world["events"]["entity_id"].unique()})
    labels["y"] = np.arange(len(labels)) % 2
    options = ["--label-column", "y", "--folds", str(folds), "--seed", str(seed)]
    code, err, _ = probe_cli(world, tmp_path_factory, labels, options)
    assert code == (0 if folds >= 2 and 0 <= seed < 2**32 else 1), err


def probe_cli(world: dict, tmp_path_factory, labels: pd.DataFrame, options: list[str]):
    """``seqenc probe`` (linear) of ``labels`` on ``a``'s embeddings: code, stderr, JSON row."""
    tmp = tmp_path_factory.mktemp("probe")
    labels.to_parquet(tmp / "labels.parquet")
    argv = ["probe", "--labels", str(tmp / "labels.parquet"), "--model", "linear", *options]
    argv += ["--embeddings", str(world["embeddings"]), "--json", str(tmp / "out.json")]
    code, err = run_cli(argv)
    return code, err, json.loads((tmp / "out.json").read_text())[0] if code == 0 else None


# ---------------------------------------------------------------------------------------------
# Bundles


@settings(SETTINGS, max_examples=10)
@given(harm=st.sampled_from(BUNDLE_HARM))
def test_load_any_bundle(world, harm):
    """A harmed bundle is one line (read with bounds, its weights finite); a sound one encodes
    to finite embeddings."""
    bundle = harmed_bundle(world["a"], harm, world["tmp"] / "harmed")
    encoder = call(load_encoder, bundle, "cpu")
    assert (encoder is not None) == (harm == "none"), harm
    if encoder is not None:
        found = encoder.encode(world["events"], output="numpy")
        assert np.isfinite(found.embeddings).all()


READS = {"a": "a", "c": "a", "b": "b"}  # bundle -> the log whose items it knows


@settings(SETTINGS, max_examples=10)
@given(
    new=st.sampled_from("abc"), old=st.sampled_from("abc"), log=st.sampled_from("ab"),
    what=st.sampled_from(["align", "drift"]), k=st.integers(-1, 12), sample=st.integers(-1, 40),
)  # fmt: skip
def test_pairs_of_bundles(world, new, old, log, what, k, sample):
    """``align`` maps a child onto another parent when both read the events, and refuses any
    other pair; ``drift`` never calls two models compatible on events one of them cannot read."""
    events, readers = (
        world[f"{log}_events"],
        {new, old} <= {b for b, r in READS.items() if r == log},
    )
    if what == "align":
        target = world["tmp"] / "child"
        shutil.rmtree(target, ignore_errors=True)
        shutil.copytree(world[new], target)
        lineage = call(align, target, world[old], events, "ridge", None, 0)
        assert (lineage is not None) == (new != old and readers), (new, old, log)
        return
    pair = load_encoder(world[old], "cpu"), load_encoder(world[new], "cpu")
    report = call(drift, *pair, events, k=k, sample=sample)
    assert report is None or (k > 0 and sample > 0), (k, sample)
    if readers and k > 0 and sample > 0:
        assert report is not None, (new, old, log)
    if report is not None and (new == old or not readers):
        want = "same" if readers else "incompatible"
        assert report.verdict == want, (new, old, log, report.verdict)


# ---------------------------------------------------------------------------------------------
# Output paths of every command that writes


@settings(SETTINGS, max_examples=8)
@given(
    command=st.sampled_from(["embed", "onnx", "drift", "probe", "bundle"]),
    place=st.sampled_from(["/proc/out", "/sys/out", "file_parent", "trailing/", "dir"]),
)  # fmt: skip
def test_outputs_anywhere(world, command, place):
    """An output that cannot be written is one line, whatever the command."""
    tmp = world["tmp"]
    out = {"file_parent": str(tmp / "a_file" / "out"), "trailing/": str(tmp / "out_dir") + "/"}
    out = out.get(place, str(tmp) if place == "dir" else place)
    a, events = str(world["a"]), str(world["a_events"])
    argv = {
        "embed": ["embed", "--model", a, "--events", events, "--output", out, "--no-progress"],
        "onnx": ["onnx", "--model", a, "--output", out],
        "drift": ["drift", a, a, "--events", events, "--json", out],
        "probe": ["probe", "--labels", str(tmp / "labels.csv"), "--label-column", "y"]
        + ["--embeddings", str(world["embeddings"]), "--folds", "2", "--json", out],
        "bundle": ["bundle", "--ckpt", str(tmp / "none.ckpt"), "--output", out],
    }[command]
    labels = world["events"][["entity_id"]].drop_duplicates()
    labels.assign(y=np.arange(len(labels)) % 2).to_csv(tmp / "labels.csv", index=False)
    code, err = run_cli(argv)
    assert code == 1, err
