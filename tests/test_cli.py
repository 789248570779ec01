"""`seqenc` end to end: a short fit through the LightningCLI beats a popularity baseline."""

import json
import math
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from seqenc import __version__
from seqenc.cli import COMMANDS, main
from seqenc.commands.train import FIRST_OPTIONS
from seqenc.commands.trainer_defaults import trainer_defaults
from seqenc.data.synthetic import generate_events
from seqenc.errors import SeqencError


def popularity_ndcg10(events: pd.DataFrame) -> float:
    """Leave-one-out NDCG@10 of 'most popular unseen item', computed independently."""
    log = events.sort_values(["entity_id", "timestamp"], kind="stable")
    log = log[log.groupby("entity_id")["item_id"].transform("size") >= 3]
    last = log.groupby("entity_id").tail(1)
    history = log.drop(last.index)
    popularity = history["item_id"].value_counts()
    total = 0.0
    for (_, target), (_, seen) in zip(
        last.groupby("entity_id")["item_id"], history.groupby("entity_id")["item_id"], strict=True
    ):
        ranking = [i for i in popularity.index if i not in set(seen)]
        rank = ranking.index(target.iloc[0]) if target.iloc[0] in ranking else len(ranking)
        total += 1 / math.log2(rank + 2) if rank < 10 else 0.0
    return total / len(last)


def test_version(capsys):
    main(["--version"])
    assert capsys.readouterr().out.strip() == f"seqenc {__version__}"


def fit_run(tmp_path, monkeypatch, capsys, events: pd.DataFrame, *args: str) -> Path:
    """``seqenc fit`` on ``events`` in ``tmp_path`` with ``args``; the run folder it reports."""
    events.to_parquet(tmp_path / "events.parquet")
    monkeypatch.chdir(tmp_path)
    main(
        [
            "fit",
            "--data.path", "events.parquet",
            "--trainer.enable_progress_bar", "false",
            "--trainer.enable_model_summary", "false",
            *args,
        ]
    )  # fmt: skip
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[-1].startswith("bundle: ")
    return tmp_path / lines[-1].removeprefix("bundle: ").rsplit("/bundle", 1)[0]


def test_fit_beats_popularity(tmp_path, monkeypatch, capsys):
    events = generate_events(400, n_items=80, seed=5, max_events=200)
    run_dir = fit_run(
        tmp_path,
        monkeypatch,
        capsys,
        events,
        "--seed_everything", "0",
        "--data.history_len", "32",
        "--data.batch_size", "32",
        "--model.encoder.d_model", "32",
        "--model.lr", "0.005",
        "--model.warmup_steps", "5",
        "--trainer.max_epochs", "4",
    )  # fmt: skip
    metrics = pd.read_csv(run_dir / "metrics.csv")
    test = metrics.dropna(subset=["test/ndcg@10"]).iloc[-1]
    baseline = popularity_ndcg10(events)
    assert test["test/ndcg@10"] > baseline + 0.05, (test["test/ndcg@10"], baseline)
    assert np.isfinite(metrics["train/loss"].dropna()).all()
    assert (run_dir / "config.yaml").exists() and list((run_dir / "checkpoints").glob("best-*"))


def test_print_config(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["fit", "--data.path", "x.parquet", "--print_config"])
    assert exit_info.value.code == 0
    config = capsys.readouterr().out
    assert "objective: causal" in config and "path: x.parquet" in config
    assert (
        "early_stopping:" in config and "patience: null" in config
    )  # PATIENCE, or a next-basket fit's own


def test_account_embeddings_config_layers_on_a_data_config(capsys):
    root = Path(__file__).resolve().parents[1] / "configs"
    args = ["--config", str(root / "account_events.yaml")]
    args += ["--config", str(root / "account_embeddings.yaml")]
    with pytest.raises(SystemExit) as exit_info:
        main(["fit", *args, "--print_config"])
    assert exit_info.value.code == 0
    config = capsys.readouterr().out
    assert "contrastive_weight: 1.0" in config and "pooling: mean" in config
    assert "path: datasets/sample/events.parquet" in config and "next_item_weight: 1.0" in config


def test_early_stopping_patience_is_configurable(tmp_path, monkeypatch, capsys):
    """With lr 0 validation never improves: patience 1 stops after the second epoch of six. Resumed
    from the last epoch's checkpoint with patience 3, the config wins over the checkpoint's 1: the
    count of epochs without improvement goes on from 1, so epochs 2 and 3 run (patience 1 would stop
    after epoch 2)."""
    events = generate_events(100, n_items=30, seed=1, max_events=40)
    args = ("--data.history_len", "16", "--model.encoder.d_model", "16", "--model.lr", "0.0",
            "--trainer.max_epochs", "6", "--early_stopping.min_share", "0")  # fmt: skip
    run_dir = fit_run(
        tmp_path, monkeypatch, capsys, events, *args, "--early_stopping.patience", "1"
    )
    metrics = pd.read_csv(run_dir / "metrics.csv")
    assert metrics.dropna(subset=["val/ndcg@10"])["epoch"].tolist() == [0, 1]

    time.sleep(1)  # a new run folder (named by the second)
    checkpoints = run_dir / "checkpoints"
    assert sorted(p.name for p in checkpoints.iterdir()) == ["best-epoch=0.ckpt", "last.ckpt"]
    last = str(checkpoints / "last.ckpt")
    resumed = fit_run(
        tmp_path, monkeypatch, capsys, events, *args, "--early_stopping.patience", "3",
        "--ckpt_path", last,
    )  # fmt: skip
    metrics = pd.read_csv(resumed / "metrics.csv")
    assert metrics.dropna(subset=["val/ndcg@10"])["epoch"].tolist() == [2, 3]


def test_early_stopping_waits_for_a_share_of_the_schedule(tmp_path, monkeypatch, capsys):
    """Validation never improves (lr 0), patience 1: by default no stop before half of the six
    epochs has run, so epochs 0-2 run (with min_share 0 it stops after epoch 1, test above)."""
    events = generate_events(100, n_items=30, seed=1, max_events=40)
    run_dir = fit_run(
        tmp_path, monkeypatch, capsys, events,
        "--data.history_len", "16", "--model.encoder.d_model", "16", "--model.lr", "0.0",
        "--trainer.max_epochs", "6", "--early_stopping.patience", "1",
    )  # fmt: skip
    metrics = pd.read_csv(run_dir / "metrics.csv")
    assert metrics.dropna(subset=["val/ndcg@10"])["epoch"].tolist() == [0, 1, 2]


@pytest.mark.parametrize(("every", "validated"), [(1, [0, 1, 2, 3]), (3, [2])])
def test_early_stopping_keep_last_runs_the_schedule_and_keeps_its_end(
    tmp_path, monkeypatch, capsys, every, validated
):
    """``keep: last``: validation never improves (lr 0) and patience is 1, yet all four epochs run
    (no early stop), and the last epoch's checkpoint is tested and bundled, not the best
    validation one; also when validation runs every third epoch only (the last epoch, 3, does not
    validate: its checkpoint is still the one kept)."""
    events = generate_events(100, n_items=30, seed=1, max_events=40)
    events.to_parquet(tmp_path / "events.parquet")
    monkeypatch.chdir(tmp_path)
    main(
        [
            "fit", "--data.path", "events.parquet", "--trainer.enable_progress_bar", "false",
            "--data.history_len", "16", "--model.encoder.d_model", "16", "--model.lr", "0.0",
            "--trainer.max_epochs", "4", "--early_stopping.patience", "1",
            "--early_stopping.min_share", "0", "--early_stopping.keep", "last",
            "--trainer.check_val_every_n_epoch", str(every),
        ]
    )  # fmt: skip
    out = capsys.readouterr().out.splitlines()
    checkpoint = Path(next(line for line in out if line.startswith("checkpoint: ")).split(": ")[1])
    assert checkpoint.name == "last.ckpt"
    assert torch.load(checkpoint, weights_only=True)["epoch"] == 3
    best = f"best-epoch={validated[0]}.ckpt"
    assert sorted(p.name for p in checkpoint.parent.iterdir()) == [best, "last.ckpt"]
    metrics = pd.read_csv(checkpoint.parent.parent / "metrics.csv")
    assert metrics.dropna(subset=["val/ndcg@10"])["epoch"].tolist() == validated
    assert metrics["test/ndcg@10"].notna().sum() == 1


def test_max_steps_ends_the_schedule_mid_epoch_and_keeps_that_step(tmp_path, monkeypatch, capsys):
    """``trainer.max_steps`` (``clicks.yaml``'s cap for large logs) ends training inside an epoch:
    the cosine schedule reaches zero at that step, and ``keep: last`` tests and bundles the
    weights of that step, not of the last whole epoch."""
    events = generate_events(100, n_items=30, seed=1, max_events=40)
    run = fit_run(
        tmp_path, monkeypatch, capsys, events,
        "--data.history_len", "16", "--data.batch_size", "16", "--model.encoder.d_model", "16",
        "--model.warmup_steps", "2", "--trainer.max_epochs", "4", "--trainer.max_steps", "20",
        "--early_stopping.keep", "last",
    )  # fmt: skip
    state = torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)
    assert state["global_step"] == 20
    assert state["epoch"] == 1  # 13 steps per epoch: the 20th is inside the second
    assert state["optimizer_states"][0]["param_groups"][0]["lr"] == pytest.approx(0.0, abs=1e-9)


def test_fit_without_trainable_entities_fails_before_training(tmp_path, monkeypatch, capsys):
    events = generate_events(20, n_items=10, seed=0, max_events=3)  # at most 3 events each
    events.to_parquet(tmp_path / "events.parquet")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as info:
        main(["fit", "--data.path", "events.parquet", "--trainer.enable_progress_bar", "false"])
    err = capsys.readouterr().err.strip().splitlines()
    assert info.value.code == 1
    assert "no entity has enough events to train" in err[-1] and "min_len=3" in err[-1]
    assert "Traceback" not in "\n".join(err) and not list(tmp_path.rglob("bundle"))


@pytest.mark.parametrize(
    "args, message",
    [
        (["--data.path", "missing.parquet"], "file not found: 'missing.parquet'"),
        (["--data.path", "events.parquet", "--data.schema.item", "sku"], "['sku'] not found"),
    ],
)
def test_fit_user_errors_are_one_line(tmp_path, monkeypatch, capsys, args, message):
    generate_events(5, n_items=5, seed=0).to_parquet(tmp_path / "events.parquet")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as info:
        main(["fit", *args])
    err = capsys.readouterr().err.strip().splitlines()
    assert info.value.code == 1 and message in err[-1] and "Traceback" not in "\n".join(err)
    monkeypatch.setenv("SEQENC_DEBUG", "1")
    with pytest.raises(SeqencError):
        main(["fit", *args])


def test_concurrent_runs_get_their_own_folder(monkeypatch):
    """Two processes started in the same second: same start time, different run folders."""
    monkeypatch.setattr("time.strftime", lambda fmt: "20260101-000000")
    versions = set()
    for pid in (101, 102):
        monkeypatch.setattr("os.getpid", lambda pid=pid: pid)
        versions |= {lg["init_args"]["version"] for lg in trainer_defaults("x")["logger"]}
    assert versions == {"20260101-000000-101", "20260101-000000-102"}


def test_loggers_fall_back_to_csv_without_tensorboard(monkeypatch, capsys):
    assert [lg["class_path"].rsplit(".")[-1] for lg in trainer_defaults("x")["logger"]] == [
        "CSVLogger",
        "TensorBoardLogger",
    ]
    monkeypatch.setitem(sys.modules, "tensorboard", None)
    monkeypatch.setitem(sys.modules, "tensorboardX", None)
    loggers = trainer_defaults("x")["logger"]
    assert [lg["class_path"].rsplit(".")[-1] for lg in loggers] == ["CSVLogger"]
    assert "TensorBoard is not installed" in capsys.readouterr().err


def test_validate_without_logger_writes_no_config_yaml(tmp_path, monkeypatch):
    generate_events(30, n_items=10, seed=0).to_parquet(tmp_path / "events.parquet")
    monkeypatch.chdir(tmp_path)
    main(["validate", "--data.path", "events.parquet", "--trainer.logger", "false",
          "--trainer.enable_progress_bar", "false"])  # fmt: skip
    assert sorted(p.name for p in tmp_path.iterdir()) == ["events.parquet"]


def test_fit_prints_the_baselines_beside_the_model(tmp_path, monkeypatch, capsys):
    events = generate_events(60, n_items=20, seed=2, max_events=30)
    events.to_parquet(tmp_path / "events.parquet")
    monkeypatch.chdir(tmp_path)
    main(["fit", "--data.path", "events.parquet", "--data.history_len", "16", "--model.encoder.d_model", "16",
          "--trainer.max_epochs", "1", "--trainer.enable_progress_bar", "false"])  # fmt: skip
    out = capsys.readouterr().out
    rows = {line.split()[0]: line.split()[1:] for line in out.splitlines() if line.strip()}
    names = ("popularity", "repeat", "topfreq", "timedecay")  # a timed single-event log
    assert {"model", *(f"baseline/{name}" for name in names)} <= set(rows)
    assert len(rows["baseline/repeat"]) == len(rows["model"]) == 6  # hr@1, hr/ndcg @10 @20, mrr
    lines = out.splitlines()
    header = lines[max(i for i, x in enumerate(lines) if x.startswith("model ")) - 1]
    assert header.split()[0] == "hr@1"  # the first slot leads the table
    assert "repeat an item of their history" in out
    metrics = pd.read_csv(next(tmp_path.rglob("metrics.csv")))
    assert "baseline/repeat/ndcg@10" in metrics.columns


def test_fit_prints_the_share_of_events_in_buckets_and_the_bundle_keeps_it(
    tmp_path, monkeypatch, capsys
):
    events = generate_events(60, n_items=20, seed=2, max_events=30)
    events.to_parquet(tmp_path / "events.parquet")
    monkeypatch.chdir(tmp_path)
    main(["fit", "--data.path", "events.parquet", "--data.max_items", "8", "--data.history_len", "16",
          "--model.encoder.d_model", "16", "--trainer.max_epochs", "1",
          "--trainer.enable_progress_bar", "false"])  # fmt: skip
    out = capsys.readouterr().out
    counts = events["item_id"].value_counts().sort_index()
    counts = counts.sort_values(ascending=False, kind="stable")  # ties by value
    share = counts.iloc[8:].sum() / counts.sum()
    assert f"vocabulary: items: 8 kept, 8 buckets, {share:.2%} of events in buckets\n" in out
    bundle = tmp_path / out.strip().splitlines()[-1].removeprefix("bundle: ")
    config = json.loads((bundle / "config.json").read_text())
    assert config["vocabulary"]["item"] == {"kept": 8, "oov_buckets": 8, "oov_share": share}


RESUME = ("--data.history_len", "8", "--model.encoder.d_model", "8", "--trainer.max_epochs", "1")


def trained(tmp_path, monkeypatch, capsys, *args: str) -> tuple[pd.DataFrame, str]:
    """A one-epoch run (lr 0.005, dropout 0.1, d_model 8, ``args`` on top): its events and last
    checkpoint."""
    events = generate_events(60, n_items=20, seed=2, max_events=30)
    run_dir = fit_run(
        tmp_path, monkeypatch, capsys, events, *RESUME, "--model.lr", "0.005",
        "--model.encoder.dropout", "0.1", *args,
    )  # fmt: skip
    time.sleep(1)  # the next run gets its own folder (named by the second)
    return events, str(run_dir / "checkpoints" / "last.ckpt")


def test_resume_applies_the_options_that_keep_the_weights_shapes(tmp_path, monkeypatch, capsys):
    """A resumed run trains with the learning rate, dropout and weight decay given (Lightning put
    the checkpoint's back silently, in the model and in the optimizer's restored state); options
    not given are the checkpoint's (d_model 8, not the default)."""
    events, last = trained(tmp_path, monkeypatch, capsys)
    resumed = fit_run(
        tmp_path, monkeypatch, capsys, events, "--data.history_len", "8", "--trainer.max_epochs", "2",
        "--ckpt_path", last, "--model.lr", "1e-4", "--model.encoder.dropout", "0.3",
        "--model.weight_decay", "0.05",
    )  # fmt: skip
    checkpoint = torch.load(resumed / "checkpoints" / "last.ckpt", weights_only=True)
    assert checkpoint["epoch"] == 1
    hp, config = checkpoint["hyper_parameters"], checkpoint["encoder_config"]
    assert (hp["lr"], hp["weight_decay"], config["dropout"], config["d_model"]) == (
        1e-4, 0.05, 0.3, 8,
    )  # fmt: skip
    groups = checkpoint["optimizer_states"][0]["param_groups"]
    assert [g["initial_lr"] for g in groups] == [1e-4, 1e-4]
    assert all(0 <= g["lr"] <= 1e-4 for g in groups)  # the schedule's factor times the new rate
    assert [g["weight_decay"] for g in groups] == [0.05, 0.0]
    assert checkpoint["lr_schedulers"][0]["base_lrs"] == [1e-4, 1e-4]


def test_resume_refuses_a_shape_option_or_another_vocabulary_in_one_line(
    tmp_path, monkeypatch, capsys
):
    events, last = trained(tmp_path, monkeypatch, capsys)
    more = events.copy()
    more.loc[more.index[::7], "item_id"] += 1000  # items the checkpoint's vocabulary lacks
    more.to_parquet(tmp_path / "more.parquet")
    n_items = {
        name: frame["item_id"].nunique() + 3 for name, frame in (("old", events), ("new", more))
    }
    cases = {
        ("events.parquet", "--model.encoder.d_model", "16"): [
            "--model.encoder.d_model 16",
            "trained with 8",
        ],
        ("events.parquet", "--model.encoder.token", "lean"): [
            "--model.encoder.token lean",
            "with full",
        ],
        ("more.parquet",): [
            "vocabulary differs from the checkpoint's",
            f"column 'item_id' has {n_items['new']} item ids here, {n_items['old']} in the checkpoint",
        ],
    }
    for (path, *option), words in cases.items():
        with pytest.raises(SystemExit) as info:
            main(["fit", "--data.path", path, "--data.history_len", "8", "--trainer.max_epochs", "2",
                  "--trainer.enable_progress_bar", "false", "--ckpt_path", last, *option])  # fmt: skip
        assert info.value.code == 1
        err = capsys.readouterr().err
        line = err.strip().splitlines()[-1]
        assert "Traceback" not in err and line.startswith("seqenc fit: error: "), err
        assert all(word in line for word in words), line


@pytest.mark.parametrize("config", sorted((Path(__file__).parents[1] / "configs").glob("*.yaml")))
def test_every_shipped_config_parses(config, capsys):
    with pytest.raises(SystemExit) as info:
        main(["fit", "--config", str(config), "--print_config"])
    assert info.value.code == 0 and "history_len:" in capsys.readouterr().out


def test_an_old_option_name_is_one_line_naming_the_new_one(tmp_path, capsys):
    old = tmp_path / "old.yaml"
    old.write_text("data:\n  path: x.parquet\n  max_len: 50\n")
    lean = tmp_path / "lean.yaml"  # a part of the lean token, as configs/finetune.yaml set it
    lean.write_text("data:\n  path: x.parquet\nmodel:\n  encoder:\n    gap_buckets: false\n")
    cases = {
        ("--data.path", "x.parquet", "--model.d_model", "16"): "model.d_model is now model.encoder.d_model",
        ("--config", str(old)): f"{old}: data.max_len is now data.history_len",
        ("--data.path", "x.parquet", "--data.min_count", "2"): "data.min_count is now data.min_item_count",
        ("--config", str(lean)): f"{lean}: model.encoder.gap_buckets is now model.encoder.token (lean: no gap tables",
        ("--data.path", "x.parquet", "--model.encoder.time_bias", "false"): "model.encoder.time_bias was taken out (the attention bias",
    }  # fmt: skip
    for args, words in cases.items():
        with pytest.raises(SystemExit) as info:
            main(["fit", *args])
        err = capsys.readouterr().err.strip().splitlines()
        assert info.value.code == 1 and err[-1].startswith(f"seqenc fit: error: {words}")


def test_vocabulary_bounds_parse_as_one_number_or_one_per_column(capsys):
    args = ["--data.path", "x.parquet", "--data.max_items", "1000", "--data.oov_buckets", "64"]
    args += ["--data.min_category_count", "5", "--data.max_categories", "{merchant: 100}"]
    with pytest.raises(SystemExit) as info:
        main(["fit", *args, "--print_config"])
    out = capsys.readouterr().out
    assert info.value.code == 0 and "max_items: 1000" in out and "oov_buckets: 64" in out
    assert "min_category_count: 5" in out and "merchant: 100" in out


def test_a_schema_for_a_format_that_names_its_own_columns_is_refused(tmp_path, capsys):
    with pytest.raises(SystemExit) as info:
        main(["fit", "--data.path", "x.txt", "--data.format", "sasrec", "--data.schema.item", "i"])
    err = capsys.readouterr().err.strip().splitlines()
    assert info.value.code == 1 and "data.schema applies to format 'events' only" in err[-1]


def test_a_checkpoint_written_before_the_encoder_section_resumes(tmp_path, monkeypatch, capsys):
    """A checkpoint as seqenc wrote it before the lengths were named: flat model options (None for
    the automatic ones), ``max_len`` in the encoder configuration and the data spec, no purchase
    counts (``repeat_counts`` came later). It resumes with its own options (d_model 8) and turns
    into a bundle."""
    from seqenc.inference import load_encoder
    from seqenc.training.checkpoint import bundle_from_checkpoint

    counts = ("--model.encoder.repeat_counts", "false")  # the weights of a head without counts
    events, last = trained(tmp_path, monkeypatch, capsys, *counts)
    ckpt = torch.load(last, weights_only=True)
    hp = ckpt["hyper_parameters"]
    encoder = hp.pop("encoder")
    hp |= {k: encoder[k] for k in ("d_model", "n_layers", "n_heads", "dropout", "pooling")}
    hp |= {"time": None, "repeat_head": None, "filter_seen": None}
    config = ckpt["encoder_config"]
    config["max_len"] = config.pop("n_positions") - 1
    del config["repeat_counts"]
    spec = next(v for v in ckpt.values() if isinstance(v, dict) and "spec" in v)["spec"]
    spec["max_len"] = spec.pop("history_len")
    old = tmp_path / "old.ckpt"
    torch.save(ckpt, old)
    resumed = fit_run(
        tmp_path, monkeypatch, capsys, events, "--data.history_len", "8",
        "--trainer.max_epochs", "2", "--ckpt_path", str(old),
    )  # fmt: skip
    again = torch.load(resumed / "checkpoints" / "last.ckpt", weights_only=True)
    assert again["epoch"] == 1 and again["encoder_config"]["d_model"] == 8
    meta = load_encoder(bundle_from_checkpoint(old, tmp_path / "b"), device="cpu").meta
    assert (meta.history_len, meta.encoder.n_positions, meta.dim) == (8, 9, 8)


def test_every_subcommand_has_help_and_the_overview_names_them_all(capsys):
    main(["--help"])
    overview = capsys.readouterr().out
    assert all(f"seqenc {name} " in overview for name in COMMANDS)
    for name in COMMANDS:
        try:
            main([name, "--help"])  # fit, validate, test: the curated help returns
        except SystemExit as exit_info:  # argparse's help exits 0
            assert exit_info.code == 0
        assert f"usage: seqenc {name}" in capsys.readouterr().out
    with pytest.raises(SystemExit) as info:
        main(["frobnicate"])
    assert info.value.code == 2 and "unknown command 'frobnicate'" in capsys.readouterr().err


def test_fit_help_is_curated_and_the_full_list_is_one_option_away(capsys):
    main(["fit", "--help"])
    curated = capsys.readouterr().out
    lines = curated.splitlines()
    assert len(lines) < 50, len(lines)
    for section, options in FIRST_OPTIONS.items():
        assert all(f"--{section}.{name} " in curated for name, _ in options)
    assert "--data.history_len" in curated and "(default: 200)" in curated
    assert "--model.encoder.d_model" in curated and "(default: 128)" in curated
    assert "--help-all" in curated and "--config FILE" in curated
    with pytest.raises(SystemExit) as info:
        main(["fit", "--help-all"])
    full = capsys.readouterr().out
    assert info.value.code == 0 and len(full.splitlines()) > 300
    assert "--trainer.gradient_clip_val" in full and "--model.encoder.n_time_buckets" in full


def test_embed_refuses_an_onnx_graph_the_torch_backend_would_ignore(tmp_path, capsys):
    with pytest.raises(SystemExit) as info:
        main(["embed", "--model", "b", "--events", "e.parquet", "--output", str(tmp_path / "o"),
              "--onnx", "g.onnx"])  # fmt: skip
    err = capsys.readouterr().err.strip().splitlines()
    assert info.value.code == 1
    assert err[-1] == (
        "seqenc embed: error: --onnx would be ignored: the graph runs with --backend "
        "onnxruntime, and the backend is torch; drop it (got 'g.onnx')"
    )
