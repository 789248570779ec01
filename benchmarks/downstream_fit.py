"""The training side of ``benchmarks/downstream.py``: ``seqenc fit`` in a subprocess (a data config's
self-supervised model, its entity-model start, a fine-tune on one fold's labels) and the fine-tuned
model's scores on the held-out fold."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pandas as pd
from downstream_data import ROOT, task_rows

from seqenc import load_encoder
from seqenc.atomic import write_text
from seqenc.evaluate import cv_folds, predict_at, prediction_scores
from seqenc.inference import Encoder

FEATURES_CONFIG = "configs/account_embeddings.yaml"
FINETUNE_CONFIG = "configs/finetune.yaml"
PRETRAIN_CONFIG = "configs/entity_pretrain.yaml"  # the entity model's self-supervised start
NEXT_EVENT_ROWS = ("model", "baseline/popularity", "baseline/repeat")
NEXT_EVENT_COLUMNS = ("hr@1", "hr@10", "ndcg@10", "hr@20", "ndcg@20", "mrr")


def fit(
    config: str,
    seed: int,
    data: Path,
    work: Path,
    extra: list[str],
    checkpoint: str = "best",
    layers: tuple[str, ...] = (FEATURES_CONFIG,),
) -> tuple[Path, float, dict]:
    """Train one model with ``seqenc fit`` in ``work`` (its runs/ go there, so two benchmarks at
    once never share a run folder), ``config`` with ``layers`` layered on it; returns the bundle of
    its best-validation (as ``seqenc fit`` writes it) or last-epoch checkpoint, the wall time and
    the printed next-event test table."""
    # `-- --config configs/X.yaml` names a file of the repository, as the main config does; the
    # run's folder is `work`, so a relative path is resolved against the repository root here.
    extra = [
        str(ROOT / arg) if prev == "--config" and not Path(arg).is_absolute() else arg
        for prev, arg in zip(["", *extra], extra, strict=False)
    ]
    cmd = [
        sys.executable, "-m", "seqenc.cli", "fit",
        "--config", str(ROOT / config),
        *(arg for layer in layers for arg in ("--config", str(ROOT / layer))),
        "--seed_everything", str(seed),
        "--data.path", str(Path(data).resolve()),
        "--trainer.enable_progress_bar", "false",
        *extra,
    ]  # fmt: skip
    start = time.perf_counter()
    done = subprocess.run(cmd, cwd=work, capture_output=True, text=True)
    if done.returncode:
        sys.exit(f"seqenc fit failed ({' '.join(cmd)}):\n{done.stderr[-3000:]}")
    lines = done.stdout.splitlines()
    line = next(x for x in reversed(lines) if x.startswith("bundle: "))
    bundle = work / line.removeprefix("bundle: ")
    if checkpoint == "last":
        last = bundle.parent / "checkpoints/last.ckpt"
        cmd = [sys.executable, "-m", "seqenc.cli", "bundle", "--ckpt", str(last)]
        subprocess.run([*cmd, "--output", str(bundle) + "-last"], check=True, capture_output=True)
        bundle = Path(str(bundle) + "-last")
    return bundle, time.perf_counter() - start, next_event_table(lines)


def next_event_table(lines: list[str]) -> dict[str, dict[str, float]]:
    """The model and baseline rows of the test table ``seqenc fit`` prints."""
    table = {}
    for line in lines:
        words = line.split()
        if len(words) == 1 + len(NEXT_EVENT_COLUMNS) and words[0] in NEXT_EVENT_ROWS:
            table[words[0]] = dict(zip(NEXT_EVENT_COLUMNS, map(float, words[1:]), strict=True))
    return table


def run_table(bundle: Path) -> dict[str, dict[str, float]]:
    """The next-event test table of the ``seqenc fit`` run that wrote ``bundle``, from the run's
    ``metrics.csv`` beside it (empty if there is none); a metric the run did not log is NaN."""
    path = Path(bundle).parent / "metrics.csv"
    if not path.exists():
        return {}
    metrics = pd.read_csv(path)
    prefixes = {"model": "test/", "baseline/popularity": "baseline/popularity/"}
    prefixes["baseline/repeat"] = "baseline/repeat/"
    return {
        row: {
            c: float(metrics[prefix + c].dropna().iloc[-1]) if prefix + c in metrics else np.nan
            for c in NEXT_EVENT_COLUMNS
        }
        for row, prefix in prefixes.items()
        if prefix + "ndcg@10" in metrics
    }


@dataclass
class FitRun:
    """What a fine-tune of one seed needs: the data config, the seed and its self-supervised
    bundle (``None``: from scratch), the event log read up to each label's cut-off, the work
    folder, fit overrides and the configs the bundle was trained with (layered again under
    ``configs/finetune.yaml``, so the shapes match)."""

    config: str
    seed: int
    bundle: Path | None
    events: Path
    work: Path
    extra: list[str]
    layers: tuple[str, ...] = (FEATURES_CONFIG,)


def pretrained(run: FitRun, train: Path, options: list[str]) -> FitRun:
    """The fold mode's self-supervised start, as the docs' first command: the data config with
    ``configs/entity_pretrain.yaml`` on every event of ``train`` (no label; ``options``: the data
    set's schema), trained once per seed and configuration in the work folder (its bundle's path
    kept in ``pretrained-*.txt``) and reused by later folds; fine-tuned with the lower learning
    rate ``configs/finetune.yaml`` names for a start from a bundle."""
    key = hashlib.sha256(
        "\n".join([(ROOT / PRETRAIN_CONFIG).read_text(), run.config, *options]).encode()
    ).hexdigest()[:10]
    note = run.work / f"pretrained-seed{run.seed}-{key}.txt"
    if note.exists() and Path(note.read_text()).exists():
        bundle = Path(note.read_text())
        print(f"self-supervised start (trained before): {bundle}", flush=True)
    else:
        bundle, wall, _ = fit(
            run.config, run.seed, train, run.work, options, layers=(PRETRAIN_CONFIG,)
        )
        write_text(note, str(bundle))
        print(f"self-supervised start trained in {wall:.0f} s: {bundle}", flush=True)
    extra = ["--model.lr", "0.0003", *run.extra]  # an --model.lr after -- still wins
    return replace(run, bundle=bundle, layers=(PRETRAIN_CONFIG,), extra=extra)


def finetune_scores(
    run: FitRun, rows: pd.DataFrame, task: str, on: list[str], events: pd.DataFrame
) -> dict:
    """Fine-tunes the encoder (:func:`finetune_fold`) on each training fold of the probes' folds
    of ``rows`` and scores its predictions on the held-out fold: the same rows and folds as the
    probes (:func:`cv_folds`), so the scores pair fold by fold."""
    kind, _, classes, splits = cv_folds(rows[task].to_numpy())
    folds: dict[str, list[float]] = {}
    for k in range(len(splits)):
        for name, value in finetune_fold(run, rows, task, on, events, k, kind, classes).items():
            folds.setdefault(name, []).append(value)
    return {"n_rows": len(rows), "folds": folds}


def finetune_fold(
    run: FitRun,
    rows: pd.DataFrame,
    task: str,
    on: list[str],
    events: pd.DataFrame,
    k: int,
    kind: str,
    classes: list,
    train_share: float | None = None,
) -> dict[str, float]:
    """One fold ``k`` of the probes' folds of ``rows`` (its training rows a ``train_share`` of
    them: :func:`share_of`): ``seqenc fit`` with
    ``configs/finetune.yaml`` on the training fold's labels (from the run's self-supervised bundle
    when it has one, layered on the configs it was trained with; else from scratch), its
    checkpoint picked on a share of the training fold; scored on the held-out fold."""
    _, y, _, splits = cv_folds(rows[task].to_numpy())
    train, test = splits[k]
    train = train if train_share is None else share_of(train, y, train_share, k)
    if set(rows[on[0]].iloc[train]) & set(rows[on[0]].iloc[test]):
        sys.exit(f"{task}: an entity has rows in both the training and the test fold")
    start = "init" if run.bundle is not None else "scratch"
    path = run.work / f"finetune-{task}-{start}-seed{run.seed}-fold{k}.parquet"
    rows.iloc[train].to_parquet(path)
    extra = ["--data.labels", str(path), "--data.label_column", task]
    layers: tuple[str, ...] = (FINETUNE_CONFIG,)
    if run.bundle is not None:
        extra += ["--model.init_from", str(run.bundle)]
        layers = (*run.layers, FINETUNE_CONFIG)
    tuned, wall, _ = fit(
        run.config, run.seed, run.events, run.work, [*run.extra, *extra], layers=layers
    )
    held = rows.iloc[test][on].reset_index(drop=True)
    rows_at, output = held_predictions(tuned, events, held)
    output = _in_classes(output, tuned, classes, kind)
    print(f"  {task}/fine-tuned fold {k}: {len(rows_at)} rows, trained in {wall:.0f} s", flush=True)
    return prediction_scores(kind, y[test][rows_at], output)


def share_of(train: np.ndarray, y: np.ndarray, share: float, k: int) -> np.ndarray:
    """A fixed draw (seeded by the fold ``k``) of ``share`` of the training rows ``train``,
    stratified by class for coded labels (at least 2 rows a class): few labels, every event."""
    from sklearn.model_selection import train_test_split

    if share >= 1:
        return train
    classes = y.dtype.kind in "iu"
    n = max(int(round(share * len(train))), 2 * (len(np.unique(y[train])) if classes else 1))
    kept, _ = train_test_split(
        train, train_size=n, random_state=k, stratify=y[train] if classes else None
    )
    return np.sort(kept)


def held_predictions(
    bundle: Path, events: pd.DataFrame, held: pd.DataFrame, encoder: Encoder | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """``(rows of held, outputs)``: the bundle's prediction of each row of ``held`` (its key
    columns, at its ``as_of``) that it predicts, and which row each is; ``encoder``: the bundle
    already loaded (and changed)."""
    keys, output = predict_at(encoder or load_encoder(bundle, "cpu"), events, held)
    order = held.reset_index().merge(keys.reset_index(), on=list(held.columns))
    return order["index_x"].to_numpy(), np.asarray(output)[order["index_y"].to_numpy()]


def _in_classes(output: np.ndarray, bundle: Path, classes: list, kind: str) -> np.ndarray:
    """The head's probabilities as columns of ``classes`` (the probe's codes; a class the training
    fold lacked gets 0)."""
    if kind == "regression":
        return output
    head = json.loads((Path(bundle) / "config.json").read_text())["head"]["classes"]
    full = np.zeros((len(output), len(classes)), dtype=np.float64)
    full[:, [classes.index(c) for c in head]] = output
    return full


def add_finetuned(
    scores: dict,
    run: FitRun,
    labels: pd.DataFrame,
    both: pd.DataFrame,
    tasks: list[str],
    on: list[str],
    events: pd.DataFrame,
) -> None:
    """Adds the fine-tuned model's fold scores (:func:`finetune_scores`) beside every probe of each
    of ``tasks`` that ``scores`` holds (``task/probe`` keys, :func:`evaluate`'s)."""
    for task in tasks:
        keys = [k for k in scores if k.split("/")[0] == task]
        if keys:
            tuned = finetune_scores(run, task_rows(labels, both, task, on), task, on, events)
            for key in keys:
                scores[key]["finetuned"] = tuned
