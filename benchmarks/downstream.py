"""Downstream evaluation: aggregates alone vs embeddings alone vs both, on Berka and the sample.

One command::

    OMP_NUM_THREADS=1 python benchmarks/downstream.py --seeds 0 1 2

1. Prepares Berka (``datasets/prep_berka.py`` from ``../shared/data/berka``) into ``--work``.
2. For each seed trains ``configs/berka.yaml`` (``seqenc fit``; extra overrides after ``--``) and
   ``configs/account_events.yaml`` on the bundled sample.
3. Embeds every labelled account at its label's cut-off (:func:`seqenc.evaluate.embed_at`),
   computes the aggregate features at the same cut-offs, and probes each task with 5-fold CV (the
   same folds for every feature set, so differences are paired).
4. Writes a Markdown table (``--output``, default ``benchmarks/results/downstream[-TAG].md``) and the
   raw per-fold scores as JSON beside it. ``--merge A.json B.json --tag T`` makes one table from
   several runs of the same configuration (e.g. seeds 3 and 4 added later), without training.

Berka tasks (see ``datasets/cards/berka.md``): gender, age_group, region, statement,
loan_default, loan_next_12m (ROC-AUC), age (R²). Sample task: account_type (ROC-AUC), every account at its last event.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

from seqenc import EventSchema, load_encoder
from seqenc.evaluate import aggregate_features, embed_at, probe

ROOT = Path(__file__).resolve().parents[1]
BERKA_TASKS = {
    "gender": "roc_auc",
    "age_group": "roc_auc",
    "region": "roc_auc",
    "statement": "roc_auc",
    "loan_default": "roc_auc",
    "loan_next_12m": "roc_auc",
    "age": "r2",
}
BERKA_SCHEMA = EventSchema(
    entity="account_id",
    item="item",
    timestamp="timestamp",
    categorical=["type", "operation", "k_symbol", "bank"],
    numeric=["amount", "balance"],
)
SAMPLE = ROOT / "datasets/sample/events.parquet"
SAMPLE_TASKS = {"account_type": "roc_auc"}
SAMPLE_SCHEMA = EventSchema(categorical=["event_type", "channel"], numeric=["amount"])


def fit(
    config: str, seed: int, data: Path, work: Path, extra: list[str], checkpoint: str = "best"
) -> tuple[Path, float]:
    """Train one model with ``seqenc fit`` in ``work`` (its runs/ go there, so two benchmarks at
    once never share a run folder); returns the bundle of its best-validation (as ``seqenc fit``
    writes it) or last-epoch checkpoint, and the wall time."""
    # `-- --config configs/X.yaml` names a file of the repository, as the main config does; the
    # run's folder is `work`, so a relative path is resolved against the repository root here.
    extra = [
        str(ROOT / arg) if prev == "--config" and not Path(arg).is_absolute() else arg
        for prev, arg in zip(["", *extra], extra, strict=False)
    ]
    cmd = [
        sys.executable, "-m", "seqenc.cli", "fit",
        "--config", str(ROOT / config),
        "--seed_everything", str(seed),
        "--data.path", str(Path(data).resolve()),
        "--trainer.enable_progress_bar", "false",
        *extra,
    ]  # fmt: skip
    start = time.perf_counter()
    done = subprocess.run(cmd, cwd=work, capture_output=True, text=True)
    if done.returncode:
        sys.exit(f"seqenc fit failed ({' '.join(cmd)}):\n{done.stderr[-3000:]}")
    line = next(x for x in reversed(done.stdout.splitlines()) if x.startswith("bundle: "))
    bundle = work / line.removeprefix("bundle: ")
    if checkpoint == "last":
        last = bundle.parent / "checkpoints/last.ckpt"
        cmd = [sys.executable, "-m", "seqenc.cli", "bundle", "--ckpt", str(last)]
        subprocess.run([*cmd, "--output", str(bundle) + "-last"], check=True, capture_output=True)
        bundle = Path(str(bundle) + "-last")
    return bundle, time.perf_counter() - start


def prepare_berka(data: str, work: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``datasets/prep_berka.py`` from ``data`` into ``work``: its events and labels tables."""
    work.mkdir(parents=True, exist_ok=True)
    prep = [sys.executable, str(ROOT / "datasets/prep_berka.py"), "--data", data]
    subprocess.run([*prep, "--out", str(work)], check=True, cwd=ROOT)
    events = pd.read_parquet(work / "berka_events.parquet")
    return events, pd.read_parquet(work / "berka_labels.parquet")


def scores(features: pd.DataFrame, labels: pd.DataFrame, task: str, on: list[str]) -> dict:
    result = probe(features, labels, label_column=task, on=on, seed=0)
    return {"n_rows": result.n_rows, "folds": {k: v.tolist() for k, v in result.folds.items()}}


def evaluate(
    tasks: dict[str, str],
    labels: pd.DataFrame,
    aggregates: pd.DataFrame,
    embeddings: pd.DataFrame,
    on: list[str],
    cache: dict[str, dict],
) -> dict[str, dict[str, dict]]:
    """task -> feature set -> scores, on the rows every feature set covers. The aggregates do not
    depend on the training seed: their scores are computed once per task and kept in ``cache``."""
    both = aggregates.merge(embeddings, on=on, how="inner")
    out = {}
    for task in tasks:
        rows = labels[labels[task].notna()][[*on, task]].merge(both[on], on=on, how="inner")
        key = f"{task}:{len(rows)}"
        if key not in cache:
            cache[key] = scores(aggregates, rows, task, on)
        out[task] = {
            "aggregates": cache[key],
            "embeddings": scores(embeddings, rows, task, on),
            "both": scores(both, rows, task, on),
        }
    return out


def summarise(runs: list[dict], tasks: dict[str, str], dataset: str) -> list[dict]:
    """Per task and feature set: mean over seeds of the fold mean, mean fold std, std over seeds,
    and the paired difference both − aggregates over every (seed, fold)."""
    rows = []
    for task, metric in tasks.items():
        fold = {s: np.array([r[task][s]["folds"][metric] for r in runs]) for s in runs[0][task]}
        diff = (fold["both"] - fold["aggregates"]).ravel()
        for name, values in fold.items():
            rows.append(
                {
                    "dataset": dataset,
                    "task": task,
                    "metric": metric,
                    "features": name,
                    "n": runs[0][task][name]["n_rows"],
                    "mean": values.mean(),
                    "fold_std": values.std(axis=1).mean(),
                    "seed_std": values.mean(axis=1).std(),
                    "diff_mean": diff.mean() if name == "both" else np.nan,
                    "diff_std": diff.std() if name == "both" else np.nan,
                }
            )
    return rows


def markdown(rows: list[dict]) -> str:
    lines = [
        "| data | task (metric, n) | aggregates | embeddings | both | both − aggregates (paired) |",
        "|---|---|---:|---:|---:|---:|",
    ]
    df = pd.DataFrame(rows)
    for (dataset, task), g in df.groupby(["dataset", "task"], sort=False):
        g = g.set_index("features")

        def cell(name: str, g=g) -> str:
            r = g.loc[name]
            return f"{r['mean']:.4f} ± {r['fold_std']:.4f} (seeds ± {r['seed_std']:.4f})"

        b = g.loc["both"]
        # A gain counts when it exceeds the aggregates' fold spread and "both" itself is above
        # chance by more than its own spread (beating a below-chance score is no gain).
        chance = 0.5 if b["metric"] == "roc_auc" else 0.0
        beats = (b["diff_mean"] > g.loc["aggregates", "fold_std"]) and (
            b["mean"] - chance > b["fold_std"]
        )
        diff = f"{b['diff_mean']:+.4f} ± {b['diff_std']:.4f}{' **beats**' if beats else ''}"
        lines.append(
            f"| {dataset} | {task} ({b['metric']}, {b['n']}) | {cell('aggregates')} | "
            f"{cell('embeddings')} | {cell('both')} | {diff} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default="../shared/data/berka")
    parser.add_argument("--work", default=str(ROOT / "benchmarks/out/downstream"))
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--config", default="configs/berka.yaml")
    parser.add_argument("--sample-config", default="configs/account_events.yaml")
    parser.add_argument("--no-sample", action="store_true", help="skip the synthetic sample")
    parser.add_argument(
        "--tasks", nargs="*", default=list(BERKA_TASKS), help="Berka tasks (none: the sample only)"
    )
    parser.add_argument(
        "--checkpoint", choices=("best", "last"), default="best", help="which weights to embed with"
    )
    parser.add_argument("--tag", default="", help="names the output (e.g. an ablation)")
    parser.add_argument("--output", default=None)
    parser.add_argument(
        "--merge", nargs="+", default=None, help="no training: one table from these runs' JSON"
    )
    parser.add_argument("extra", nargs="*", help="more `seqenc fit` overrides (after --)")
    args = parser.parse_args()
    if args.merge:
        return merge([Path(p) for p in args.merge], args.tag, args.output)
    start = time.perf_counter()
    tasks = {t: BERKA_TASKS[t] for t in args.tasks}
    work = Path(args.work).resolve()
    work.mkdir(parents=True, exist_ok=True)
    on = ["account_id", "as_of"]
    if tasks:
        events, labels = prepare_berka(args.data, work)
        cutoffs = labels[on].drop_duplicates()
        aggregates = aggregate_features(events, BERKA_SCHEMA, cutoffs)
    sample = pd.read_parquet(SAMPLE)
    sample_labels = sample.groupby("entity_id", as_index=False)["account_type"].first()
    sample_aggregates = aggregate_features(sample, SAMPLE_SCHEMA)
    berka_runs, sample_runs, fit_s, cache, sample_cache = [], [], [], {}, {}
    for seed in args.seeds:
        if tasks:
            data = work / "berka_events.parquet"
            bundle, wall = fit(args.config, seed, data, work, args.extra, args.checkpoint)
            fit_s.append(wall)
            embeddings = embed_at(load_encoder(bundle, "cpu"), events, cutoffs)
            berka_runs.append(evaluate(tasks, labels, aggregates, embeddings, on, cache))
            print(f"seed {seed}: berka trained in {wall:.0f} s ({bundle})", flush=True)
        if args.no_sample:
            continue
        bundle, wall = fit(args.sample_config, seed, SAMPLE, work, args.extra, args.checkpoint)
        df = load_encoder(bundle, "cpu").encode(sample)[["entity_id", "embedding"]]
        sample_runs.append(
            evaluate(
                SAMPLE_TASKS, sample_labels, sample_aggregates, df, ["entity_id"], sample_cache
            )
        )
        print(f"seed {seed}: sample trained in {wall:.0f} s ({bundle})", flush=True)
    rows = summarise(berka_runs, tasks, "berka") if berka_runs else []
    if sample_runs:
        rows += summarise(sample_runs, SAMPLE_TASKS, "sample")
    wall = time.perf_counter() - start
    command = "OMP_NUM_THREADS=1 python benchmarks/downstream.py " + " ".join(sys.argv[1:])
    header = (
        f"command: `{command}`  \n"
        f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
        f"torch threads {os.environ.get('OMP_NUM_THREADS', 'default')}; "
        f"date: {time.strftime('%Y-%m-%d')}; wall time {wall:.0f} s "
        f"(training {np.mean(fit_s or [0]):.0f} s per Berka model); seeds {args.seeds}\n\n"
    )
    raw = {"berka": berka_runs, "sample": sample_runs, "rows": rows, "command": command}
    write(header + markdown(rows) + "\n", raw, args.tag, args.output)


def write(table: str, raw: dict, tag: str, output: str | None) -> None:
    """The table to ``output`` (default ``benchmarks/results/downstream[-TAG].md``), raw JSON beside."""
    print(table)
    name = f"downstream{'-' + tag if tag else ''}"
    path = Path(output or ROOT / f"benchmarks/results/{name}.md")
    path.write_text(table)
    path.with_suffix(".json").write_text(json.dumps(raw, indent=1, default=float))


def merge(paths: list[Path], tag: str, output: str | None) -> None:
    """One table over the seeds of several runs of the same configuration (e.g. seeds added later)."""
    raws = [json.loads(p.read_text()) for p in paths]
    berka = [run for raw in raws for run in raw["berka"]]
    sample = [run for raw in raws for run in raw["sample"]]
    rows = summarise(berka, {t: BERKA_TASKS[t] for t in berka[0]}, "berka") if berka else []
    if sample:
        rows += summarise(sample, SAMPLE_TASKS, "sample")
    commands = [raw["command"] for raw in raws]
    header = "".join(f"run: `{c}`  \n" for c in commands)
    header += f"merged: {', '.join(p.name for p in paths)}; {len(berka)} Berka seeds\n\n"
    raw = {"berka": berka, "sample": sample, "rows": rows, "command": commands}
    write(header + markdown(rows) + "\n", raw, tag, output)


if __name__ == "__main__":
    main()
