"""Hostile inputs, round five (issue 54, part 3): the families of the fit's options and stages.

- option values by type (ints, floats with inf / nan / 1e9 / negatives, strings of the wrong case,
  lists), on the command line and in ``--config`` YAML: one line, nothing printed before it;
- values jsonargparse rejects: one line naming the option, the value and what it takes;
- options the run would not read: one line;
- a run folder that cannot take the fit's checkpoints: one line before the banner;
- SIGTERM in every stage of ``seqenc fit``: exit 143, nothing half-written;
- a constant numeric column: a value within a small share of its magnitude reads as ordinary;
- ``seqenc test`` on a log the checkpoint does not know: encode's unknown-items line, figures
  that agree with each other, one line when it knows none of the items.

Only public paths are imported, so the file also runs against older code (each family fails on
f3e57bd)."""

from __future__ import annotations

import os
import re
import signal
from pathlib import Path
from pydoc import locate

import numpy as np
import pandas as pd
import pytest
import torch
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from test_hostile_round4 import FIT, SETTINGS, file_size_limit, one_line, run_cli
from tiny import tiny_events

from seqenc.cli_support import one_line_errors
from seqenc.data.numeric import item_statistics
from seqenc.inference import load_encoder
from seqenc.model.embeddings import Z_CLIP, TokenEmbedding, signed_log


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> dict:
    """A log, a label table of its entities, the log under another catalogue and with a third
    of its items unknown, and a checkpoint fitted on the log."""
    tmp = tmp_path_factory.mktemp("round5")
    events = tiny_events(n_entities=30, seed=3)
    events.to_parquet(tmp / "events.parquet")
    ids = events["entity_id"].unique()
    pd.DataFrame({"entity_id": ids, "y": np.arange(len(ids)) % 2}).to_parquet(
        tmp / "labels.parquet"
    )
    events.assign(item_id=events["item_id"] + 1000).to_parquet(tmp / "other.parquet")
    partial = events.copy()
    partial.loc[partial["item_id"] % 3 == 0, "item_id"] += 1000
    partial.to_parquet(tmp / "partial.parquet")
    code, err, _ = run_cli(["fit", "--data.path", str(tmp / "events.parquet"), *FIT], tmp)
    assert code == 0, err
    (ckpt,) = tmp.rglob("last.ckpt")
    return {"tmp": tmp, "events": tmp / "events.parquet", "labels": tmp / "labels.parquet",
            "other": tmp / "other.parquet", "partial": tmp / "partial.parquet", "ckpt": ckpt}  # fmt: skip


def fit_argv(world: dict, option: str, value: object, where: str, folder: Path) -> list[str]:
    """``seqenc fit`` on the log with ``--OPTION VALUE`` on the command line or in a config file,
    with the options it is read with (a label table, the masked objective)."""
    argv = ["fit", "--data.path", str(world["events"]), *FIT]
    if option in NEEDS_LABELS:
        argv += ["--data.labels", str(world["labels"]), "--data.label_column", "y"]
    if option in ("model.mask_prob", "model.mask_last_prob"):
        argv += ["--model.objective", "masked"]
    if where == "argv":
        return [*argv, f"--{option}", render(value)]
    tree: dict = {}
    node = tree
    *sections, name = option.split(".")
    for section in sections:
        node = node.setdefault(section, {})
    node[name] = value
    config = folder / "bad.yaml"
    config.write_text(yaml.safe_dump(tree))
    return [*argv, "--config", str(config)]


def render(value: object) -> str:
    """``value`` as a command-line value (YAML: ``.inf``, ``.nan``, ``[1, 2]``)."""
    if isinstance(value, float) and not np.isfinite(value):
        return ".nan" if np.isnan(value) else ("-.inf" if value < 0 else ".inf")
    if isinstance(value, list):
        return "[" + ", ".join(render(v) for v in value) + "]"
    return str(value)


# ---------------------------------------------------------------------------------------------
# Option values, by type

NEEDS_LABELS = {"model.label_steps", "model.class_weights", "data.val_share", "data.label_task"}
wrong_type = st.sampled_from(["abc", [1], {"a": 1}])
floats_bad = st.sampled_from([float("inf"), float("-inf"), float("nan"), "1e9x", -1.0, -1e9])
COUNTS = ["data.batch_size", "data.eval_batch_size", "data.min_item_count", "data.bucket_factor",
          "data.max_items", "data.eval_entities", "data.history_len", "model.encoder.d_model",
          "model.encoder.n_heads", "model.encoder.n_layers", "model.encoder.ffn_mult",
          "model.encoder.n_time_buckets", "model.label_steps", "trainer.accumulate_grad_batches",
          "trainer.check_val_every_n_epoch", "trainer.log_every_n_steps"]  # fmt: skip
NON_NEGATIVE = ["model.warmup_steps", "early_stopping.patience", "data.num_workers"]
SHARES = ["model.encoder.dropout", "model.encoder.attention_dropout", "model.mask_prob",
          "model.mask_last_prob", "early_stopping.min_share", "data.val_share"]  # fmt: skip
POSITIVE = ["model.lr", "model.weight_decay", "trainer.gradient_clip_val"]
CHOICES = {"model.objective": "causal", "model.loss": "ce", "model.encoder.positional": "rope",
           "model.encoder.pooling": "mean", "early_stopping.mode": "max",
           "data.label_task": "classification", "model.class_weights": "none"}  # fmt: skip
BOOLS = ["model.encoder.time", "model.encoder.normalize", "data.windows"]
OPTION_VALUES = st.one_of(
    st.tuples(st.sampled_from(COUNTS), st.one_of(
        st.sampled_from([0, -1, -16, 1.5, "1e9", "AUTO", float("inf")]), wrong_type)),
    st.tuples(st.sampled_from(NON_NEGATIVE), st.one_of(st.sampled_from([-1, 2.5, "1e9"]), wrong_type)),
    st.tuples(st.sampled_from(SHARES), st.one_of(st.sampled_from([1.5, 1e9]), floats_bad, wrong_type)),
    st.tuples(st.sampled_from(POSITIVE), st.one_of(floats_bad, wrong_type)),
    st.tuples(st.sampled_from(sorted(CHOICES)), st.sampled_from(["upper", "nope", 3, ["x"]])),
    st.tuples(st.sampled_from(BOOLS), st.sampled_from(["maybe", 2, ["true"]])),
    st.tuples(st.just("model.class_weights"), st.sampled_from(
        [[float("inf"), 1.0], [1.0, -1.0], [1.0], [1.0, 2.0, 3.0], [float("nan"), 1.0], "balanced",
         0, ["a", 1.0]])),
)  # fmt: skip


@settings(SETTINGS, max_examples=40)
@given(option_value=OPTION_VALUES, where=st.sampled_from(["argv", "argv", "config"]))
def test_fit_refuses_any_bad_option_value_in_one_line(world, tmp_path_factory, option_value, where):
    """An option value of the wrong type or out of its range, on the command line or in a config
    file, is one line naming the option before anything else is printed (no banner, no seed
    line, nothing on stdout), whatever the option and the stage that reads it."""
    option, value = option_value
    if value == "upper":
        value = CHOICES[option].upper()
    folder = tmp_path_factory.mktemp("value")
    code, err, out = run_cli(fit_argv(world, option, value, where, folder), folder)
    one_line(code, err, "fit")
    assert out == ""
    assert option.rsplit(".", 1)[-1] in err, err


@pytest.mark.parametrize(
    ("option", "value", "where", "accepted"),
    [
        ("model.class_weights", "balanced", "argv", "auto, none or a list of numbers"),
        ("model.label_steps", "1e9", "argv", "a whole number or null"),
        ("data.history_len", "AUTO", "argv", "a whole number or auto"),
        ("model.objective", "Causal", "config", "causal or masked"),
        ("data.schema.categorical", 5, "config", "a list"),
        ("model.encoder.d_mdoel", 64, "argv", "did you mean --model.encoder.d_model?"),
        ("model.encoder.d_mdoel", 64, "config", "did you mean --model.encoder.d_model?"),
    ],
)
def test_rejected_values_are_one_line_naming_option_value_and_choices(
    world, tmp_path, option, value, where, accepted
):
    """What jsonargparse rejects is one line: the option, the value, what it takes (and the
    config file it came from), not 136 lines of usage."""
    code, err, _ = run_cli(fit_argv(world, option, value, where, tmp_path), tmp_path)
    one_line(code, err, "fit")
    assert option in err and accepted in err, err
    assert str(value) in err or "not an option" in err, err  # an unknown key: no value to show
    assert (where == "config") == ("bad.yaml" in err), err


@pytest.mark.parametrize(
    "argv",
    [
        ["--model.encoder.numeric_scaling", "per_item"],  # FIT reads no numeric column
        ["--model.contrastive_temperature", "0.5"],  # the contrastive loss is off
        ["--model.contrastive_min_share", "0.3"],
        ["--model.mask_prob", "0.5"],  # the causal objective masks nothing
        ["--early_stopping.monitor", "val/ndgc@10"],  # no such metric: early stopping never runs
    ],
)
def test_options_the_run_would_not_read_are_one_line(world, tmp_path, argv):
    """An option the run would ignore is refused in one line naming it, before anything prints."""
    code, err, out = run_cli(["fit", "--data.path", str(world["events"]), *FIT, *argv], tmp_path)
    one_line(code, err, "fit")
    assert argv[0][2:] in err and "would be ignored" in err and out == "", err


def test_a_run_folder_too_small_for_a_checkpoint_is_one_line_first(world, tmp_path):
    """A run folder that takes the first write but not a checkpoint fails in one line before
    Lightning prints anything, and nothing is left in it."""
    argv = ["fit", "--data.path", str(world["events"]), *FIT]
    with file_size_limit(80_000):  # above the first write's 64 KiB, below a checkpoint
        code, err, out = run_cli(argv, tmp_path)
    one_line(code, err, "fit")
    assert "checkpoint" in err and out == ""
    assert not [p for p in tmp_path.rglob("*") if p.is_file()]


# ---------------------------------------------------------------------------------------------
# SIGTERM in every stage of a fit

STAGES = {  # stage: (the function it calls, a fine-tuning fit)
    "fit": ("seqenc.finetune.module.LabelModule.training_step", True),
    "test": ("seqenc.finetune.module.LabelModule.test_step", True),
    "label baseline": ("seqenc.finetune.baseline.aggregates_score", True),
    "baselines": ("seqenc.training.baseline_report.baseline_metrics", False),
    "bundle": ("seqenc.training.callbacks.bundle_from_checkpoint", True),
    "printing": ("seqenc.commands.train.align_after_fit", False),
}


@pytest.fixture
def sigterm_noted():
    """SIGTERM noted, not fatal, while the test runs (older code would let it kill pytest)."""
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: None)
    yield
    signal.signal(signal.SIGTERM, previous)


@pytest.mark.parametrize("stage", sorted(STAGES))
def test_sigterm_stops_every_stage_of_a_fit(world, tmp_path, monkeypatch, sigterm_noted, stage):
    """SIGTERM at any stage (a training step, the held-out test, the aggregates' baseline, the
    next-event baselines, the bundle, the printing) ends the fit with 143 and its one line; a
    bundle is either whole (it loads) or absent, and no temporary is left."""
    target, fine_tuning = STAGES[stage]
    original = locate(target)

    def terminated(*args, **kwargs):
        os.kill(os.getpid(), signal.SIGTERM)
        return original(*args, **kwargs)

    monkeypatch.setattr(target, terminated)
    argv = ["fit", "--data.path", str(world["events"]), *FIT]
    if fine_tuning:
        argv += ["--data.labels", str(world["labels"]), "--data.label_column", "y"]
    code, err, _ = run_cli(argv, tmp_path)
    assert code == 128 + signal.SIGTERM, err
    assert err.strip().splitlines()[-1] == "seqenc fit: stopped by SIGTERM", err
    assert not [p for p in tmp_path.rglob(".*.tmp")]
    for config in tmp_path.rglob("bundle/config.json"):
        load_encoder(config.parent, "cpu")
    if stage in ("fit", "bundle"):
        assert not list(tmp_path.rglob("bundle"))


# ---------------------------------------------------------------------------------------------
# A constant numeric column


@settings(SETTINGS, max_examples=20)
@given(
    value=st.one_of(st.sampled_from([5.0, 0.0, -3.0, 1e6]), st.floats(-1e6, 1e6)),
    change=st.floats(-1e-5, 1e-5),
)
def test_a_constant_items_value_reads_as_ordinary_within_its_magnitude(value, change):
    """An item whose values were all ``value`` in training reads ``value * (1 + change)`` (a
    change in the fifth digit: 5.0001 for 5) as ordinary, and a tenth more (for a value of
    magnitude 1 or more) as extreme: its scale's floor follows the value's magnitude."""
    items = np.full(200, 3)
    center, scale = item_statistics(items, np.full((200, 1), value), 5)
    embed = TokenEmbedding(5, 8, 5, True, False, False, False, 4, (), 1, per_item_numeric=True)
    embed.set_numeric_stats(torch.from_numpy(center), torch.from_numpy(scale))
    read = torch.tensor([[[value * (1 + change)], [value * 1.1]]], dtype=torch.float32)
    z = embed.standardised(signed_log(read), torch.tensor([[3, 3]]))[0, :, 0]
    assert abs(z[0].item()) <= 1.0
    if abs(value) >= 1:
        assert abs(z[1].item()) == Z_CLIP


# ---------------------------------------------------------------------------------------------
# seqenc test on a log of unknown items


def argv_of_test(world: dict, log: str) -> list[str]:
    """``seqenc test`` of the world's checkpoint on the log ``log``."""
    return ["test", "--data.path", str(world[log]), *FIT, "--ckpt_path", str(world["ckpt"])]


def test_testing_a_log_of_unknown_items_is_one_line(world, tmp_path):
    """``seqenc test`` on a log none of whose items the checkpoint knows: one line first, not a
    table of zeros."""
    code, err, out = run_cli(argv_of_test(world, "other"), tmp_path)
    one_line(code, err, "test")
    assert "knows none" in err and out == ""


def test_testing_a_log_of_some_unknown_items_says_so_and_agrees(world, tmp_path, caplog):
    """``seqenc test`` on a log with unknown items: encode's line, and the repeat share printed
    beside the figures is the one logged (an unknown target repeats nothing)."""
    code, err, out = run_cli(argv_of_test(world, "partial"), tmp_path)
    assert code == 0, err
    said = err + caplog.text
    assert re.search(r"\d+ of \d+ events have items unknown to the model", said), said
    printed = float(re.search(r"([\d.]+)% repeat an item", out).group(1)) / 100
    logged = float(re.search(r"test/repeat_targets\s+([\d.]+)", out).group(1))
    assert printed == pytest.approx(logged, abs=1e-3)


@pytest.mark.parametrize(
    "error",
    [
        RuntimeError(
            "[enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: can't allocate "
            "memory: you tried to allocate 64000000064 bytes. Error code 12"
        ),
        MemoryError(),
    ],
)
def test_an_option_too_large_for_memory_is_one_line(capsys, error):
    """A value that asks for more memory than the machine has (``data.history_len 1000000000``
    allocates a 64 GB position table) is one line, not a traceback: the allocation's error as it
    reaches the command."""
    with pytest.raises(SystemExit) as stopped, one_line_errors("seqenc fit"):
        raise error
    err = capsys.readouterr().err
    assert stopped.value.code == 1 and err.startswith("seqenc fit: error: out of memory"), err
    assert len(err.strip().splitlines()) == 1
