"""Downstream evaluation: aggregates alone vs embeddings alone vs both, on Ta-Feng, Berka, the ICU
stays of PhysioNet 2012 and the sample.

One command per data set::

    OMP_NUM_THREADS=1 python benchmarks/downstream.py --data tafeng --seeds 0 1 2 3 4
    OMP_NUM_THREADS=1 python benchmarks/downstream.py --data berka --seeds 0 1 2 3 4

Fold by fold (``--folds``), e.g. one process per fold, then one table::

    OMP_NUM_THREADS=1 python benchmarks/downstream.py --data physionet --folds 0 \
        --bundles SELF_SUPERVISED_BUNDLE --finetune scratch --tag ft
    python benchmarks/downstream.py --data physionet --merge benchmarks/results/downstream-physionet-ft-fold*.json --tag ft

scores each fold of the probes' 5 stratified folds on its own: the probes (aggregates, and with
``--bundles`` the bundle's embeddings and both; linear and trees), with ``--finetune`` a
fine-tuned model (``scratch``; ``init`` from the bundle; ``pretrained`` from a self-supervised
start trained first with ``configs/entity_pretrain.yaml`` on every event of the log, no label,
its embeddings probed too) trained on the other folds' labels, and
on the ICU stays a reference GRU on hourly bins (``benchmarks/hourly_gru.py``): per fold, mean ±
std and the paired differences from the aggregates' linear probe.

1. Prepares the data set (``datasets/prep_tafeng.py`` / ``prep_berka.py`` from ``../shared/data``)
   into ``--work``.
2. For each seed trains the data config with ``configs/account_embeddings.yaml`` layered on it
   (``seqenc fit``; more overrides after ``--``) and, unless ``--no-sample``,
   ``configs/account_events.yaml`` + ``account_embeddings.yaml`` on the bundled sample. The run's
   next-event test metrics are kept beside the popularity and repeat-recent baselines.
3. Embeds every labelled entity at its label's cut-off (:func:`seqenc.evaluate.embed_at`),
   computes the hand-made aggregate features at the same cut-offs, and probes each task with the
   linear and the tree probe, 5-fold CV (the same folds for every feature set, so differences are
   paired). The aggregates' scores do not depend on the seed: they are computed once and kept in
   ``--work`` (``aggregate_scores.json``), so runs of other seeds in parallel processes share them.
4. Writes a Markdown table (``--output``, default ``benchmarks/results/downstream-DATA[-TAG].md``)
   and the raw per-fold scores as JSON beside it. ``--merge A.json B.json --tag T`` makes one table
   from several runs (e.g. seeds run in parallel processes), without training.

Tasks and their leakage rules: ``datasets/cards/ta-feng.md``, ``datasets/cards/berka.md``,
``datasets/cards/physionet2012.md``.
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import json
import os
import platform
import subprocess
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import pandas as pd
from hourly_gru import gru_fold  # benchmarks/hourly_gru.py, beside this script

from seqenc import EventSchema, load_encoder
from seqenc.atomic import write_text
from seqenc.data.aggregates import VALUE_STATS
from seqenc.evaluate import (
    aggregate_features,
    cv_folds,
    embed_at,
    feature_matrix,
    predict_at,
    prediction_scores,
    probe,
    probe_fold,
)
from seqenc.inference import Encoder

ROOT = Path(__file__).resolve().parents[1]
FEATURES_CONFIG = "configs/account_embeddings.yaml"
FINETUNE_CONFIG = "configs/finetune.yaml"
PRETRAIN_CONFIG = "configs/entity_pretrain.yaml"  # the entity model's self-supervised start
EMBEDDING = ("embedding",)  # the embeddings' column, stacked beside the aggregates in "both"
NEXT_EVENT_ROWS = ("model", "baseline/popularity", "baseline/repeat")
NEXT_EVENT_COLUMNS = ("hr@1", "hr@10", "ndcg@10", "hr@20", "ndcg@20", "mrr")


@dataclass
class Dataset:
    """What the benchmark needs to know of one labelled event log."""

    config: str
    prep: str  # datasets/ script writing events, training events and labels into a folder
    events: str  # file names in that folder
    train: str
    labels: str
    schema: EventSchema
    on: list[str]
    tasks: dict[str, str]  # task -> metric
    tree_tasks: list[str]  # the tasks the tree probe runs on (all but controls)
    source: str  # its folder under ../shared/data
    max_categories: dict[str, int] = field(default_factory=dict)
    value_stats: tuple[str, ...] = ()  # aggregate_features' per-value numeric summaries
    reference_gru: bool = False  # also the GRU on hourly bins (ICU stays) in --folds mode
    fit_options: list[str] = field(default_factory=list)  # `seqenc fit` options of every fit


DATASETS = {
    "tafeng": Dataset(
        config="configs/tafeng.yaml",
        prep="datasets/prep_tafeng.py",
        events="tafeng_events.parquet",
        train="tafeng_train.parquet",
        labels="tafeng_labels.parquet",
        schema=EventSchema(
            entity="customer_id",
            item="product_id",
            timestamp="timestamp",
            categorical=["subclass"],
            numeric=["amount", "price"],
        ),
        on=["customer_id", "as_of"],
        tasks={
            "age_group": "roc_auc",
            "age_under_35": "roc_auc",
            "area": "roc_auc",
            "buys_february": "roc_auc",
            "february_spend": "r2",
        },
        tree_tasks=["age_group", "age_under_35", "buys_february", "february_spend"],
        source="ta-feng",
        # The most frequent 100 subclasses (of 2,012) and 50 products (of 23,812): counts, shares
        # and spend shares of each, plus an "<other>" column.
        max_categories={"subclass": 100, "product_id": 50},
    ),
    "berka": Dataset(
        config="configs/berka.yaml",
        prep="datasets/prep_berka.py",
        events="berka_events.parquet",
        train="berka_events.parquet",
        labels="berka_labels.parquet",
        schema=EventSchema(
            entity="account_id",
            item="item",
            timestamp="timestamp",
            categorical=["type", "operation", "k_symbol", "bank"],
            numeric=["amount", "balance"],
        ),
        on=["account_id", "as_of"],
        tasks={
            "gender": "roc_auc",
            "age_group": "roc_auc",
            "region": "roc_auc",
            "statement": "roc_auc",
            "loan_default": "roc_auc",
            "loan_next_12m": "roc_auc",
            "age": "r2",
        },
        tree_tasks=["gender", "age_group", "statement", "loan_default", "loan_next_12m", "age"],
        source="berka",
    ),
    "physionet": Dataset(
        config="configs/account_events.yaml",  # the documented config of an account-like log
        prep="datasets/prep_physionet.py",
        events="physionet_events.parquet",
        train="physionet_events.parquet",
        labels="physionet_labels.parquet",
        schema=EventSchema(
            entity="stay_id", item="parameter", timestamp="timestamp", numeric=["value"]
        ),
        on=["stay_id", "as_of"],
        tasks={"in_hospital_death": "roc_auc"},
        tree_tasks=["in_hospital_death"],
        source="physionet2012-b",
        # every one of the 41 parameters gets its own columns, with its values' mean, min, max
        # and last: a clinician's per-parameter summary
        max_categories={"parameter": 64},
        value_stats=VALUE_STATS,
        reference_gru=True,
        # the schema on the command line, as a user of a generic config gives it
        fit_options=[
            "--data.schema.entity",
            "stay_id",
            "--data.schema.item",
            "parameter",
            "--data.schema.categorical",
            "[]",
            "--data.schema.numeric",
            "[value]",
        ],  # fmt: skip
    ),
}
SAMPLE = ROOT / "datasets/sample/events.parquet"
SAMPLE_TASKS = {"account_type": "roc_auc"}
SAMPLE_SCHEMA = EventSchema(categorical=["event_type", "channel"], numeric=["amount"])


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


def prepare(dataset: Dataset, data: str, work: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The data set's prep script from ``data`` into ``work``: its events and labels tables."""
    work.mkdir(parents=True, exist_ok=True)
    prep = [sys.executable, str(ROOT / dataset.prep), "--data", data]
    subprocess.run([*prep, "--out", str(work)], check=True, cwd=ROOT)
    return pd.read_parquet(work / dataset.events), pd.read_parquet(work / dataset.labels)


class ScoreCache:
    """Per-fold scores of the seed-independent aggregates, on disk so parallel runs share them."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.memory: dict[str, dict] = {}

    def get(self, key: str, compute) -> dict:
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
    result = probe(features, labels, label_column=task, on=on, model=model, seed=0, stack=stack)
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
        for model in models:
            key = f"{task}/{model}"
            compute = functools.partial(scores, aggregates, rows, task, on, model)
            cached = cache.get(f"{key}:{len(rows)}", compute)
            if embeddings is not None:
                out[key] = {
                    "aggregates": cached,
                    "embeddings": scores(embeddings, rows, task, on, model),
                    "both": scores(both, rows, task, on, model, EMBEDDING),
                    "concat": scores(both, rows, task, on, model),
                }
            print(f"  {key}: done", flush=True)
    return out


def task_rows(
    labels: pd.DataFrame, features: pd.DataFrame, task: str, on: list[str]
) -> pd.DataFrame:
    """The rows a task is scored on: labelled, with features; their order fixes the folds."""
    return labels[labels[task].notna()][[*on, task]].merge(features[on], on=on, how="inner")


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


def entity_subset(labels: pd.DataFrame, entity: str, n: int | None) -> pd.DataFrame:
    """The label rows of a fixed draw of ``n`` entities (all with ``None``)."""
    ids = labels[entity].drop_duplicates().sort_values()
    if n is None or n >= len(ids):
        return labels
    drawn = ids.sample(n, random_state=0)
    return labels[labels[entity].isin(drawn)].reset_index(drop=True)


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


def summarise(runs: list[dict], tasks: dict[str, str], dataset: str) -> list[dict]:
    """Per task, probe and feature set: mean over seeds of the fold mean, mean fold std, std over
    seeds, and the paired difference both − aggregates over every (seed, fold)."""
    rows = []
    for key in runs[0]:
        task, model = key.split("/")
        metric = tasks[task]
        fold = {s: np.array([r[key][s]["folds"][metric] for r in runs]) for s in runs[0][key]}
        diffs = {"both": (fold["both"] - fold["aggregates"]).ravel()}
        if "finetuned" in fold:  # paired against the better of the probes' two single inputs
            best = max(("aggregates", "embeddings"), key=lambda n: fold[n].mean())
            diffs["finetuned"] = (fold["finetuned"] - fold[best]).ravel()
        for name, values in fold.items():
            diff = diffs.get(name)
            rows.append(
                {
                    "dataset": dataset,
                    "task": task,
                    "probe": model,
                    "metric": metric,
                    "features": name,
                    "n": runs[0][key][name]["n_rows"],
                    "seeds": len(runs),
                    "mean": values.mean(),
                    "fold_std": values.std(axis=1).mean(),
                    "seed_std": values.mean(axis=1).std(),
                    "diff_mean": np.nan if diff is None else diff.mean(),
                    "diff_std": np.nan if diff is None else diff.std(),
                }
            )
    return rows


def markdown(rows: list[dict]) -> str:
    lines = [
        "| data | task (metric, n) | probe | aggregates | embeddings | both (stacked) | both − aggregates (paired) | concatenated | fine-tuned | fine-tuned − best single input (paired) |",  # noqa: E501
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    df = pd.DataFrame(rows)
    for (dataset, task, model), g in df.groupby(["dataset", "task", "probe"], sort=False):
        g = g.set_index("features")

        def cell(name: str, g=g) -> str:
            if name not in g.index:
                return "—"
            r = g.loc[name]
            return f"{r['mean']:.4f} ± {r['fold_std']:.4f} (seeds ± {r['seed_std']:.4f})"

        b = g.loc["both"]
        # A gain counts when it exceeds twice its paired spread over (seed, fold) and "both" itself
        # is above chance by more than its own spread (beating a below-chance score is no gain).
        chance = 0.5 if b["metric"] == "roc_auc" else 0.0
        beats = (b["diff_mean"] > 2 * b["diff_std"]) and (b["mean"] - chance > b["fold_std"])
        diff = f"{b['diff_mean']:+.4f} ± {b['diff_std']:.4f}{' **gain**' if beats else ''}"
        tuned = "—"
        if "finetuned" in g.index:
            f = g.loc["finetuned"]
            tuned = f"{f['diff_mean']:+.4f} ± {f['diff_std']:.4f}"
        lines.append(
            f"| {dataset} | {task} ({b['metric']}, {b['n']}) | {model} | {cell('aggregates')} | "
            f"{cell('embeddings')} | {cell('both')} | {diff} | {cell('concat')} | "
            f"{cell('finetuned')} | {tuned} |"
        )
    return "\n".join(lines)


def next_event_markdown(tables: list[dict], dataset: str) -> str:
    """Mean ± std over seeds of the next-event test metrics, model beside the baselines."""
    if not tables:
        return ""
    lines = [f"Next-event test metrics on {dataset} (same bundles, {len(tables)} seeds):", ""]
    lines += [
        "| | " + " | ".join(NEXT_EVENT_COLUMNS) + " |",
        "|---" * (len(NEXT_EVENT_COLUMNS) + 1) + "|",
    ]
    for row in NEXT_EVENT_ROWS:
        values = np.array([[t[row][c] for c in NEXT_EVENT_COLUMNS] for t in tables if row in t])
        if len(values):
            cells = [
                f"{m:.4f} ± {s:.4f}" for m, s in zip(values.mean(0), values.std(0), strict=True)
            ]
            lines.append(f"| {row} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", choices=sorted(DATASETS), default="tafeng")
    parser.add_argument("--source", default=None, help="raw data folder (../shared/data/DATA)")
    parser.add_argument("--work", default=None, help="default benchmarks/out/downstream-DATA")
    parser.add_argument(
        "--seeds",
        type=int,
        nargs="*",
        default=[0, 1, 2, 3, 4],
        help="training seeds; none: only the aggregates' scores (shared by later runs in --work)",
    )
    parser.add_argument("--config", default=None, help="the data config (default: the data set's)")
    parser.add_argument("--sample-config", default="configs/account_events.yaml")
    parser.add_argument("--no-sample", action="store_true", help="skip the synthetic sample")
    parser.add_argument("--tasks", nargs="*", default=None, help="tasks (none: the sample only)")
    parser.add_argument(
        "--linear-tasks", nargs="*", default=None, help="tasks for the linear probe (default: all)"
    )
    parser.add_argument(
        "--tree-tasks", nargs="*", default=None, help="tasks for the tree probe too (default: all)"
    )
    parser.add_argument(
        "--checkpoint", choices=("best", "last"), default="best", help="which weights to embed with"
    )
    parser.add_argument("--tag", default="", help="names the output (e.g. an ablation)")
    parser.add_argument("--output", default=None)
    parser.add_argument(
        "--merge", nargs="+", default=None, help="no training: one table from these runs' JSON"
    )
    parser.add_argument(
        "--bundles",
        nargs="+",
        default=None,
        help="no training: probe these bundles (one per seed of --seeds, in order; fine-tuning "
        "starts from them); the next-event table from each run's metrics.csv",
    )
    parser.add_argument(
        "--finetune-tasks",
        nargs="*",
        default=[],
        help="tasks to fine-tune on too (a `seqenc fit` per seed and fold; 'account_type': the sample)",
    )
    parser.add_argument(
        "--entities", type=int, default=None, help="a fixed draw of this many labelled entities"
    )
    parser.add_argument(
        "--folds",
        type=int,
        nargs="+",
        default=None,
        help="fold mode: score these of the probes' 5 folds only (0-4; one process per fold, "
        "then --merge); embeddings from the first of --bundles, if given",
    )
    parser.add_argument(
        "--finetune",
        choices=("scratch", "init", "pretrained"),
        default=None,
        help="fold mode: also a fine-tuned model per fold, from scratch, from the first of "
        "--bundles (--model.init_from), or pretrained: from a self-supervised start trained "
        "here with configs/entity_pretrain.yaml (its embeddings probed too)",
    )
    parser.add_argument(
        "--train-share",
        type=float,
        default=None,
        help="fold mode: probes and fine-tuning read this share of each training fold's labels "
        "(a fixed stratified draw per fold); every entity's events stay in the log",
    )
    parser.add_argument(
        "--no-gru", action="store_true", help="fold mode: skip the reference GRU (ICU stays)"
    )
    parser.add_argument("extra", nargs="*", help="more `seqenc fit` overrides (after --)")
    args = parser.parse_args()
    dataset = DATASETS[args.data]
    args.extra = [*dataset.fit_options, *args.extra]
    name = f"downstream-{args.data}{'-' + args.tag if args.tag else ''}"
    if args.merge:
        return merge([Path(p) for p in args.merge], dataset, name, args.output)
    if args.finetune == "init" and not args.bundles:
        sys.exit("--finetune init starts from a self-supervised bundle: give --bundles")
    start = time.perf_counter()
    chosen = dataset.tasks if args.tasks is None else args.tasks
    tasks = {t: dataset.tasks[t] for t in chosen}
    work = Path(args.work or ROOT / f"benchmarks/out/downstream-{args.data}").resolve()
    work.mkdir(parents=True, exist_ok=True)
    on = dataset.on
    if tasks:
        source = args.source or str(ROOT.parent / "shared/data" / dataset.source)
        events, labels = prepare(dataset, source, work)
        labels = entity_subset(labels, on[0], args.entities)
        cutoffs = labels[on].drop_duplicates()
        aggregates = aggregate_features(
            events,
            dataset.schema,
            cutoffs,
            max_categories=dataset.max_categories or 20,
            value_stats=dataset.value_stats,
        )
    sample = pd.read_parquet(SAMPLE)
    sample_labels = sample.groupby("entity_id", as_index=False)["account_type"].first()
    sample_aggregates = aggregate_features(sample, SAMPLE_SCHEMA)
    cache, sample_cache = ScoreCache(work / "aggregate_scores.json"), ScoreCache(None)
    tree_tasks = dataset.tree_tasks if args.tree_tasks is None else args.tree_tasks
    linear_tasks = list(tasks) if args.linear_tasks is None else args.linear_tasks
    plan = probe_plan(list(tasks), linear_tasks, tree_tasks)
    if args.folds is not None:
        config = args.config or dataset.config
        fits = FitRun(config, args.seeds[0] if args.seeds else 0, None, work / dataset.events,
                      work, args.extra)  # fmt: skip
        if args.finetune == "pretrained":
            fits = pretrained(fits, work / dataset.train, dataset.fit_options)
        raw = fold_scores(args, dataset, plan, events, labels, aggregates, fits)
        folds = "".join(str(k) for k in args.folds)
        return write_folds(raw, dataset, f"{name}-fold{folds}", args.output, start)
    sample_plan = {task: ["linear", "trees"] for task in SAMPLE_TASKS}
    if not args.seeds:
        evaluate(plan, labels, aggregates, None, on, cache)
        return
    runs, sample_runs, next_event, fit_s = [], [], [], []
    for seed, bundle in zip(args.seeds, args.bundles or [], strict=False):
        next_event.append(run_table(bundle))
        embeddings = embed_at(load_encoder(bundle, "cpu"), events, cutoffs)
        runs.append(evaluate(plan, labels, aggregates, embeddings, on, cache))
        run = FitRun(
            args.config or dataset.config,
            seed,
            Path(bundle).resolve(),
            work / dataset.events,
            work,
            args.extra,
        )
        both = aggregates.merge(embeddings, on=on)
        add_finetuned(runs[-1], run, labels, both, args.finetune_tasks, on, events)
    for seed in [] if args.bundles else args.seeds:
        if tasks:
            config = args.config or dataset.config
            bundle, wall, table = fit(
                config, seed, work / dataset.train, work, args.extra, args.checkpoint
            )
            fit_s.append(wall)
            next_event.append(table)
            print(f"seed {seed}: {args.data} trained in {wall:.0f} s ({bundle})", flush=True)
            embeddings = embed_at(load_encoder(bundle, "cpu"), events, cutoffs)
            runs.append(evaluate(plan, labels, aggregates, embeddings, on, cache))
            run = FitRun(config, seed, bundle, work / dataset.events, work, args.extra)
            both = aggregates.merge(embeddings, on=on)
            add_finetuned(runs[-1], run, labels, both, args.finetune_tasks, on, events)
        if args.no_sample:
            continue
        bundle, wall, _ = fit(args.sample_config, seed, SAMPLE, work, args.extra, args.checkpoint)
        df = load_encoder(bundle, "cpu").encode(sample)[["entity_id", "embedding"]]
        sample_runs.append(
            evaluate(
                sample_plan, sample_labels, sample_aggregates, df,
                ["entity_id"], sample_cache,
            )
        )  # fmt: skip
        run = FitRun(args.sample_config, seed, bundle, SAMPLE, work, args.extra)
        both = sample_aggregates.merge(df, on="entity_id")
        tuned = [t for t in args.finetune_tasks if t in SAMPLE_TASKS]
        add_finetuned(sample_runs[-1], run, sample_labels, both, tuned, ["entity_id"], sample)
        print(f"seed {seed}: sample trained in {wall:.0f} s ({bundle})", flush=True)
    wall = time.perf_counter() - start
    command = "OMP_NUM_THREADS=1 python benchmarks/downstream.py " + " ".join(sys.argv[1:])
    header = (
        f"command: `{command}`  \n"
        f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
        f"torch threads {os.environ.get('OMP_NUM_THREADS', 'default')}; "
        f"date: {time.strftime('%Y-%m-%d')}; wall time {wall:.0f} s "
        f"(training {np.mean(fit_s or [0]):.0f} s per {args.data} model); "
        + (f"bundles {args.bundles}\n\n" if args.bundles else f"seeds {args.seeds}\n\n")
    )
    raw = {
        "dataset": args.data,
        "runs": runs,
        "sample": sample_runs,
        "next_event": next_event,
        "command": command,
    }
    write(header, raw, dataset, name, args.output)


def write(header: str, raw: dict, dataset: Dataset, name: str, output: str | None) -> None:
    """The tables to ``output`` (default ``benchmarks/results/NAME.md``), raw JSON beside."""
    rows = summarise(raw["runs"], dataset.tasks, raw["dataset"]) if raw["runs"] else []
    if raw["sample"]:
        rows += summarise(raw["sample"], SAMPLE_TASKS, "sample")
    text = header + (markdown(rows) + "\n" if rows else "")
    text += "\n" + next_event_markdown(raw["next_event"], raw["dataset"])
    print(text)
    path = Path(output or ROOT / f"benchmarks/results/{name}.md")
    write_text(path, text)
    write_text(path.with_suffix(".json"), json.dumps(raw | {"rows": rows}, indent=1, default=float))


def merge(paths: list[Path], dataset: Dataset, name: str, output: str | None) -> None:
    """One table over the seeds of several runs of the same configuration (e.g. seeds run in
    parallel processes), or over the folds of several fold-mode runs."""
    raws = [json.loads(p.read_text()) for p in paths]
    if any(raw.get("mode") == "folds" for raw in raws):
        merged = {"dataset": raws[0]["dataset"], "mode": "folds", "folds": {}, "fit_s": {}}
        for raw in raws:  # the same fold in two runs (scratch and init): their methods side by side
            for k, tasks in raw["folds"].items():
                for task, scores in tasks.items():
                    merged["folds"].setdefault(k, {}).setdefault(task, {}).update(scores)
            merged["fit_s"] |= raw.get("fit_s", {})
        merged["command"] = [raw["command"] for raw in raws]
        merged["n_rows"] = raws[0]["n_rows"]
        return write_folds(merged, dataset, name, output, None)
    merged = {
        key: [item for raw in raws for item in raw[key]] for key in ("runs", "sample", "next_event")
    }
    commands = [raw["command"] for raw in raws]
    header = "".join(f"run: `{c}`  \n" for c in commands)
    header += f"merged: {', '.join(p.name for p in paths)}; {len(merged['runs'])} seeds\n\n"
    write(
        header, merged | {"dataset": raws[0]["dataset"], "command": commands}, dataset, name, output
    )


# ---------------------------------------------------------------------------------------------
# Fold mode: one fold of the probes' folds at a time, every method on it


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
            for model in models:
                for name in sets:
                    scores[f"{name}/{model}"] = probe_fold(x[name], y, kind, model, train, test)
                if "embeddings" in x:
                    both, concat = (x["aggregates"], x["embeddings"]), np.hstack(list(x.values()))
                    fold = (y, kind, model, train, test)
                    scores[f"both/{model}"] = probe_fold(both[0], *fold, stacked=both[1])
                    scores[f"concat/{model}"] = probe_fold(concat, *fold)
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
    command = "OMP_NUM_THREADS=1 python benchmarks/downstream.py " + " ".join(sys.argv[1:])
    return {"dataset": args.data, "mode": "folds", "folds": out, "n_rows": n_rows,
            "fit_s": fit_s, "command": command}  # fmt: skip


def _aligned(rows: pd.DataFrame, frame: pd.DataFrame, on: list[str], name: str) -> np.ndarray:
    """The feature matrix of ``frame`` in the order of ``rows`` (every row must have one)."""
    joined = rows[on].merge(frame, on=on, how="left")
    missing = joined.drop(columns=on).isna().all(axis=1)
    if missing.any():
        sys.exit(f"{name}: {int(missing.sum())} labelled rows have no features")
    return feature_matrix(joined, exclude=on)


REFERENCE = "aggregates/linear"  # what every method is paired against


def fold_rows(raw: dict, tasks: dict[str, str]) -> list[dict]:
    """Per task and method: the folds' scores, their mean ± std and the paired difference from
    :data:`REFERENCE` on the same folds."""
    folds = sorted(raw["folds"], key=int)
    rows = []
    for task, metric in tasks.items():
        per_fold = {k: raw["folds"][k].get(task, {}) for k in folds}
        methods = list(dict.fromkeys(m for scores in per_fold.values() for m in scores))
        for method in methods:
            done = [k for k in folds if method in per_fold[k]]
            values = np.array([per_fold[k][method][metric] for k in done])
            paired = [k for k in done if REFERENCE in per_fold[k]]
            diff = np.array([per_fold[k][method][metric] - per_fold[k][REFERENCE][metric]
                             for k in paired])  # fmt: skip
            rows.append(
                {"task": task, "metric": metric, "method": method, "n": raw["n_rows"].get(task),
                 "folds": done, "values": values.tolist(), "mean": values.mean(),
                 "std": values.std(), "diff_mean": diff.mean() if len(diff) else np.nan,
                 "diff_std": diff.std() if len(diff) else np.nan}
            )  # fmt: skip
    return rows


def fold_markdown(rows: list[dict]) -> str:
    lines = [
        f"| task (metric, n) | method | folds | mean ± std over folds | − {REFERENCE} (paired) "
        "| per fold |",
        "|---|---|---|---:|---:|---|",
    ]
    for r in rows:
        diff = "—" if r["method"] == REFERENCE else f"{r['diff_mean']:+.4f} ± {r['diff_std']:.4f}"
        paired = r["method"] != REFERENCE and len(r["folds"]) > 1  # a spread to beat
        gain = paired and r["diff_mean"] > 2 * r["diff_std"]
        per_fold = ", ".join(f"{v:.4f}" for v in r["values"])
        lines.append(
            f"| {r['task']} ({r['metric']}, {r['n']}) | {r['method']} | "
            f"{','.join(map(str, r['folds']))} | {r['mean']:.4f} ± {r['std']:.4f} | "
            f"{diff}{' **gain**' if gain else ''} | {per_fold} |"
        )
    return "\n".join(lines)


def write_folds(
    raw: dict, dataset: Dataset, name: str, output: str | None, start: float | None
) -> None:
    """The fold-mode table to ``output`` (default ``benchmarks/results/NAME.md``), JSON beside."""
    rows = fold_rows(raw, dataset.tasks)
    commands = raw["command"] if isinstance(raw["command"], list) else [raw["command"]]
    header = "".join(f"run: `{c}`  \n" for c in commands)
    header += (
        f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
        f"torch threads {os.environ.get('OMP_NUM_THREADS', 'default')}; "
        f"date: {time.strftime('%Y-%m-%d')}"
        + (f"; wall time {time.perf_counter() - start:.0f} s" if start is not None else "")
        + "; fits: "
        + (", ".join(f"{k} {v:.0f} s" for k, v in sorted(raw["fit_s"].items())) or "none")
        + "\n\n"
    )
    text = header + fold_markdown(rows) + "\n"
    print(text)
    path = Path(output or ROOT / f"benchmarks/results/{name}.md")
    write_text(path, text)
    write_text(path.with_suffix(".json"), json.dumps(raw | {"rows": rows}, indent=1, default=float))


if __name__ == "__main__":
    main()
