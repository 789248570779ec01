"""The probes of ``benchmarks/downstream.py``: the aggregates, the embeddings, both and their
concatenation scored by the linear and the tree probe on the same folds, over every fold at once
(seed mode) or on chosen folds beside the GRU and the fine-tuned model (fold mode)."""

from __future__ import annotations

import argparse
import functools
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
from downstream_data import Dataset, task_rows
from downstream_fit import FitRun, finetune_fold, share_of
from downstream_report import command_line
from hourly_gru import gru_fold  # benchmarks/hourly_gru.py, beside this script

from seqenc import load_encoder
from seqenc.atomic import write_text
from seqenc.evaluate import (
    ProbeResult,
    cv_folds,
    embed_at,
    feature_matrix,
    probe,
    probe_fold,
    probes,
)
from seqenc.evaluate.stacking import stacked_columns

EMBEDDING = ("embedding",)  # the embeddings' column, stacked beside the aggregates in "both"


class ScoreCache:
    """Per-fold scores of the seed-independent aggregates, on disk so parallel runs share them."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.memory: dict[str, dict] = {}

    def get(self, key: str, compute: Callable[[], dict]) -> dict:
        """The scores kept under ``key``, computed (and kept) on first use."""
        if self.path is not None and self.path.exists():
            self.memory |= json.loads(self.path.read_text())
        if key not in self.memory:
            self.memory[key] = compute()
            if self.path is not None:
                write_text(self.path, json.dumps(self.memory))
        return self.memory[key]


def scores(
    features: pd.DataFrame,
    labels: pd.DataFrame,
    task: str,
    on: list[str],
    model: str,
    stack: tuple[str, ...] = (),
) -> dict:
    """One probe's per-fold scores of ``task`` on ``features`` (``stack``: columns stacked as
    their own probe's score)."""
    return kept(probe(features, labels, label_column=task, on=on, model=model, seed=0, stack=stack))


def kept(result: ProbeResult) -> dict:
    """What is kept of a probe's result: its row count and per-fold scores."""
    return {"n_rows": result.n_rows, "folds": {k: v.tolist() for k, v in result.folds.items()}}


def probe_plan(
    tasks: list[str], linear_tasks: list[str], tree_tasks: list[str]
) -> dict[str, list[str]]:
    """Task -> the probes it runs: linear where listed in ``linear_tasks``, trees in ``tree_tasks``."""
    pairs = (("linear", linear_tasks), ("trees", tree_tasks))
    return {task: [m for m, listed in pairs if task in listed] for task in tasks}


def evaluate(
    plan: dict[str, list[str]],
    labels: pd.DataFrame,
    aggregates: pd.DataFrame,
    embeddings: pd.DataFrame | None,
    on: list[str],
    cache: ScoreCache,
) -> dict[str, dict[str, dict]]:
    """``task/probe`` (from ``plan``: :func:`probe_plan`) -> feature set -> scores, on the rows
    every feature set covers: ``both`` is the aggregates with the embeddings stacked (as
    ``seqenc probe`` joins them: :func:`~seqenc.evaluate.probe`'s ``stack``), ``concat`` their
    columns side by side. Without ``embeddings`` only the aggregates' scores are computed
    (into ``cache``): they do not depend on the seed, so they can be computed while the models
    train."""
    both = aggregates if embeddings is None else aggregates.merge(embeddings, on=on, how="inner")
    out = {}
    for task, models in plan.items():
        rows = task_rows(labels, both, task, on)
        if embeddings is not None:  # the stacked block's columns once per fold, every probe
            kw = {"label_column": task, "on": on, "seed": 0, "stack": EMBEDDING}
            stacked = probes(both, rows, models=models, **kw)
        for model in models:
            key = f"{task}/{model}"
            compute = functools.partial(scores, aggregates, rows, task, on, model)
            cached = cache.get(f"{key}:{len(rows)}", compute)
            if embeddings is not None:
                out[key] = {
                    "aggregates": cached,
                    "embeddings": scores(embeddings, rows, task, on, model),
                    "both": kept(stacked[model]),
                    "concat": scores(both, rows, task, on, model),
                }
            print(f"  {key}: done", flush=True)
    return out


def fold_scores(
    args: argparse.Namespace,
    dataset: Dataset,
    plan: dict[str, list[str]],
    events: pd.DataFrame,
    labels: pd.DataFrame,
    aggregates: pd.DataFrame,
    fits: FitRun,
) -> dict:
    """Fold -> task -> method -> metric -> score, on the folds ``args.folds`` of the probes' folds
    (:func:`cv_folds` of each task's rows: the same in every process). Methods: ``SET/PROBE`` for
    the aggregates and, with a bundle, its embeddings, both (the embeddings stacked beside the
    aggregates) and concat (their columns side by side); ``gru`` (the reference on hourly
    bins, ICU stays); ``finetuned/scratch`` or ``finetuned/init`` (``--finetune``)."""
    on = dataset.on
    sets = {"aggregates": aggregates}
    bundle = Path(args.bundles[0]).resolve() if args.bundles else fits.bundle
    if bundle is not None:
        embeddings = embed_at(load_encoder(bundle, "cpu"), events, labels[on].drop_duplicates())
        sets["embeddings"] = embeddings
    else:
        print("no --bundles: the embeddings' probes are skipped", flush=True)
    if args.finetune == "init":
        fits = FitRun(fits.config, fits.seed, bundle, fits.events, fits.work, fits.extra)
    out: dict[str, dict] = {str(k): {} for k in args.folds}
    n_rows, fit_s = {}, {}
    for task, models in plan.items():
        rows = task_rows(labels, aggregates, task, on)
        n_rows[task] = len(rows)
        kind, y, classes, splits = cv_folds(rows[task].to_numpy())
        x = {name: _aligned(rows, frame, on, name) for name, frame in sets.items()}
        for k in args.folds:
            train, test = splits[k]
            if args.train_share is not None:
                train = share_of(train, y, args.train_share, k)
            scores = out[str(k)].setdefault(task, {})
            matrices = dict(x)
            if "embeddings" in x:  # the stacked block's columns once per fold, every probe
                columns = stacked_columns(x["embeddings"], y, train, test, kind)
                matrices["both"] = np.hstack([x["aggregates"], columns])
                matrices["concat"] = np.hstack([x["aggregates"], x["embeddings"]])
            for model in models:
                for name, matrix in matrices.items():
                    scores[f"{name}/{model}"] = probe_fold(matrix, y, kind, model, train, test)
            if dataset.reference_gru and kind == "binary" and not args.no_gru:
                clock = time.perf_counter()
                scores["gru"] = gru_fold(events, rows, y, train, test)
                fit_s[f"{task}/gru/{k}"] = time.perf_counter() - clock
            if args.finetune:
                clock = time.perf_counter()
                tuned = f"finetuned/{args.finetune}"  # scratch and init runs merge side by side
                scores[tuned] = finetune_fold(
                    fits, rows, task, on, events, k, kind, classes, args.train_share
                )
                fit_s[f"{task}/{tuned}/{k}"] = time.perf_counter() - clock
            print(f"fold {k} {task}: " + json.dumps(scores), flush=True)
    return {"dataset": args.data, "mode": "folds", "folds": out, "n_rows": n_rows,
            "fit_s": fit_s, "command": command_line()}  # fmt: skip


def _aligned(rows: pd.DataFrame, frame: pd.DataFrame, on: list[str], name: str) -> np.ndarray:
    """The feature matrix of ``frame`` in the order of ``rows`` (every row must have one)."""
    joined = rows[on].merge(frame, on=on, how="left")
    missing = joined.drop(columns=on).isna().all(axis=1)
    if missing.any():
        sys.exit(f"{name}: {int(missing.sum())} labelled rows have no features")
    return feature_matrix(joined, exclude=on)
