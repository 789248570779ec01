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

The code, by job: ``downstream_data.py`` (the data sets, their tasks), ``downstream_fit.py``
(``seqenc fit`` runs, fine-tuning), ``downstream_probe.py`` (the probes, seed and fold mode),
``downstream_report.py`` (the tables, ``--merge``); this file, the command line.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
from downstream_data import (
    DATASETS,
    ROOT,
    SAMPLE,
    SAMPLE_SCHEMA,
    SAMPLE_TASKS,
    Dataset,
    entity_subset,
    prepare,
)
from downstream_fit import FitRun, add_finetuned, fit, pretrained, run_table
from downstream_probe import ScoreCache, evaluate, fold_scores, probe_plan
from downstream_report import command_line, machine_line, merge, write, write_folds

from seqenc import load_encoder
from seqenc.evaluate import aggregate_features, embed_at


def parse_args() -> argparse.Namespace:
    """The command line (every flag documented in ``--help``)."""
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
    return parser.parse_args()


def main() -> None:
    """Merge, fold mode, the aggregates alone (no ``--seeds``) or seed mode, as the flags say."""
    args = parse_args()
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
    events = labels = aggregates = None
    if tasks:
        source = args.source or str(ROOT.parent / "shared/data" / dataset.source)
        events, labels = prepare(dataset, source, work)
        labels = entity_subset(labels, dataset.on[0], args.entities)
        aggregates = aggregate_features(
            events,
            dataset.schema,
            labels[dataset.on].drop_duplicates(),
            max_categories=dataset.max_categories or 20,
            value_stats=dataset.value_stats,
        )
    tree_tasks = dataset.tree_tasks if args.tree_tasks is None else args.tree_tasks
    linear_tasks = list(tasks) if args.linear_tasks is None else args.linear_tasks
    plan = probe_plan(list(tasks), linear_tasks, tree_tasks)
    if args.folds is not None:
        fits = FitRun(args.config or dataset.config, args.seeds[0] if args.seeds else 0, None,
                      work / dataset.events, work, args.extra)  # fmt: skip
        if args.finetune == "pretrained":
            fits = pretrained(fits, work / dataset.train, dataset.fit_options)
        raw = fold_scores(args, dataset, plan, events, labels, aggregates, fits)
        folds = "".join(str(k) for k in args.folds)
        return write_folds(raw, dataset, f"{name}-fold{folds}", args.output, start)
    cache = ScoreCache(work / "aggregate_scores.json")
    if not args.seeds:
        return evaluate(plan, labels, aggregates, None, dataset.on, cache)
    log = (events, labels, aggregates)
    seed_mode(args, dataset, log, plan, work, cache, name, start)


def seed_mode(
    args: argparse.Namespace,
    dataset: Dataset,
    log: tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame],
    plan: dict[str, list[str]],
    work: Path,
    cache: ScoreCache,
    name: str,
    start: float,
) -> None:
    """Per seed, a model trained here (or the seed's bundle of ``--bundles``) probed on every fold
    of the data set, ``log`` (its events, labels and aggregates), and a model of the bundled
    sample probed on it; one table over the seeds."""
    events, labels, aggregates = log
    on, config = dataset.on, args.config or dataset.config
    runs, sample_runs, next_event, fit_s = [], [], [], []

    def probe_bundle(seed: int, bundle: Path) -> None:
        embeddings = embed_at(load_encoder(bundle, "cpu"), events, labels[on].drop_duplicates())
        runs.append(evaluate(plan, labels, aggregates, embeddings, on, cache))
        run = FitRun(config, seed, bundle, work / dataset.events, work, args.extra)
        both = aggregates.merge(embeddings, on=on)
        add_finetuned(runs[-1], run, labels, both, args.finetune_tasks, on, events)

    for seed, bundle in zip(args.seeds, args.bundles or [], strict=False):
        next_event.append(run_table(bundle))
        probe_bundle(seed, Path(bundle).resolve())
    sample = pd.read_parquet(SAMPLE)
    sample_labels = sample.groupby("entity_id", as_index=False)["account_type"].first()
    sample_aggregates = aggregate_features(sample, SAMPLE_SCHEMA)
    sample_plan = {task: ["linear", "trees"] for task in SAMPLE_TASKS}
    for seed in [] if args.bundles else args.seeds:
        if plan:
            bundle, wall, table = fit(
                config, seed, work / dataset.train, work, args.extra, args.checkpoint
            )
            fit_s.append(wall)
            next_event.append(table)
            print(f"seed {seed}: {args.data} trained in {wall:.0f} s ({bundle})", flush=True)
            probe_bundle(seed, bundle)
        if args.no_sample:
            continue
        bundle, wall, _ = fit(args.sample_config, seed, SAMPLE, work, args.extra, args.checkpoint)
        df = load_encoder(bundle, "cpu").encode(sample)[["entity_id", "embedding"]]
        sample_runs.append(
            evaluate(
                sample_plan, sample_labels, sample_aggregates, df,
                ["entity_id"], ScoreCache(None),
            )
        )  # fmt: skip
        run = FitRun(args.sample_config, seed, bundle, SAMPLE, work, args.extra)
        both = sample_aggregates.merge(df, on="entity_id")
        tuned = [t for t in args.finetune_tasks if t in SAMPLE_TASKS]
        add_finetuned(sample_runs[-1], run, sample_labels, both, tuned, ["entity_id"], sample)
        print(f"seed {seed}: sample trained in {wall:.0f} s ({bundle})", flush=True)
    wall = time.perf_counter() - start
    header = (
        f"command: `{command_line()}`  \n"
        f"{machine_line()}; wall time {wall:.0f} s "
        f"(training {np.mean(fit_s or [0]):.0f} s per {args.data} model); "
        + (f"bundles {args.bundles}\n\n" if args.bundles else f"seeds {args.seeds}\n\n")
    )
    raw = {
        "dataset": args.data,
        "runs": runs,
        "sample": sample_runs,
        "next_event": next_event,
        "command": command_line(),
    }
    write(header, raw, dataset, name, args.output)


if __name__ == "__main__":
    main()
