"""The tables of ``benchmarks/downstream.py``: per seed (mean over folds, paired gains) or per fold
(every method beside the aggregates' linear probe), written as Markdown with the raw JSON beside,
and ``--merge`` of several runs' JSON into one table."""

from __future__ import annotations

import json
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
from downstream_data import ROOT, SAMPLE_TASKS, Dataset
from downstream_fit import NEXT_EVENT_COLUMNS, NEXT_EVENT_ROWS

from seqenc.atomic import write_text

REFERENCE = "aggregates/linear"  # what every method is paired against in fold mode


def command_line() -> str:
    """This run's command, as a results page quotes it."""
    return "OMP_NUM_THREADS=1 python benchmarks/downstream.py " + " ".join(sys.argv[1:])


def machine_line() -> str:
    """The CPU, its cores, the torch threads and today's date."""
    return (
        f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
        f"torch threads {os.environ.get('OMP_NUM_THREADS', 'default')}; "
        f"date: {time.strftime('%Y-%m-%d')}"
    )


def save(text: str, raw: dict, rows: list[dict], name: str, output: str | None) -> None:
    """``text`` printed and written to ``output`` (default ``benchmarks/results/NAME.md``), the raw
    scores and table rows as JSON beside it."""
    print(text)
    path = Path(output or ROOT / f"benchmarks/results/{name}.md")
    write_text(path, text)
    write_text(path.with_suffix(".json"), json.dumps(raw | {"rows": rows}, indent=1, default=float))


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
    """The seed mode's table: one line per data set, task and probe."""
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


def write(header: str, raw: dict, dataset: Dataset, name: str, output: str | None) -> None:
    """The seed mode's tables (:func:`summarise`, the next-event metrics) under ``header``."""
    rows = summarise(raw["runs"], dataset.tasks, raw["dataset"]) if raw["runs"] else []
    if raw["sample"]:
        rows += summarise(raw["sample"], SAMPLE_TASKS, "sample")
    text = header + (markdown(rows) + "\n" if rows else "")
    text += "\n" + next_event_markdown(raw["next_event"], raw["dataset"])
    save(text, raw, rows, name, output)


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
    """The fold mode's table: one line per task and method."""
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
    """The fold mode's table (:func:`fold_rows`) with its commands, machine and fit times."""
    rows = fold_rows(raw, dataset.tasks)
    commands = raw["command"] if isinstance(raw["command"], list) else [raw["command"]]
    header = "".join(f"run: `{c}`  \n" for c in commands)
    header += (
        machine_line()
        + (f"; wall time {time.perf_counter() - start:.0f} s" if start is not None else "")
        + "; fits: "
        + (", ".join(f"{k} {v:.0f} s" for k, v in sorted(raw["fit_s"].items())) or "none")
        + "\n\n"
    )
    save(header + fold_markdown(rows) + "\n", raw, rows, name, output)
