"""Time options of the model on every timestamped data set, beside the trivial baselines.

Every (data set, variant, seed) is one ``seqenc fit`` run of ``--config`` with the data set's data
overrides, the exact softmax (:data:`LOSS`) and the variant's model overrides, trained to the end
of its schedule (early stopping off); the test metrics of the checkpoint the config keeps
(``early_stopping.keep``: the best validation one or the last epoch's) are compared across variants
with the per-seed (paired) difference to a reference variant, next to the baselines `seqenc test`
prints (popularity, "repeat the most recent distinct items", the most frequent ones and the
time-decayed ones) on the same leave-one-out split (:mod:`seqenc.training.baselines`).

    python benchmarks/time_ablation.py                                  # the full grid, 5 seeds
    python benchmarks/time_ablation.py --datasets bpic2013 --variants default no_time \\
        --seeds 0 1 --max-epochs 5 --jobs 2
    python benchmarks/time_ablation.py --datasets berka -- --model.filter_seen false  # + overrides

Each run writes ``<runs-dir>/<data set>/<variant>/seed<N>/result.json`` and is skipped when that
file exists (so an interrupted grid resumes); the table goes to ``--output``. Data sets that need
preparing (berka, bpic2013, tafeng) are prepared once into ``<runs-dir>/data`` by their
``datasets/prep_*.py`` script from ``../shared/data``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from seqenc.atomic import write_text
from seqenc.data.datamodule import SequenceDataModule
from seqenc.data.schema import EventSchema
from seqenc.training.baselines import baseline_metrics

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "data"
METRICS = ("ndcg@10", "hr@1", "hr@10", "mrr")
SEEN = ("kept", "filtered")


@dataclass(frozen=True)
class Dataset:
    """``data``: the ``SequenceDataModule`` arguments that differ from the config (``path`` relative
    to the repo root, ``{prepared}`` = the prepared-data folder); ``prep``: the script that makes
    ``path`` from the raw folder under ``../shared/data``, as ``(script, raw folder name)``."""

    data: dict
    prep: tuple[str, str] | None = None


DATASETS = {
    "ml-100k": Dataset(
        {"path": "../shared/data/ml-100k/u.data", "format": "movielens"},
    ),
    "ml-1m-timed": Dataset(
        {"path": "../shared/data/ml-1m/ratings_partial_users1-2999.dat", "format": "movielens"},
    ),
    "berka": Dataset(
        {
            "path": "{prepared}/berka_events.parquet",
            "format": "events",
            "schema": {"entity": "account_id", "item": "item"},
        },
        prep=("datasets/prep_berka.py", "berka"),
    ),
    "bpic2013": Dataset(
        {
            "path": "{prepared}/bpic2013_events.parquet",
            "format": "events",
            "schema": {"entity": "case_id", "item": "activity"},
        },
        prep=("datasets/prep_bpic2013.py", "bpic2013"),
    ),
    "synthetic": Dataset({"path": "datasets/sample/events.parquet", "format": "events"}),
    # every line item of the whole log (item = product); ~800k events, minutes per epoch
    "tafeng": Dataset(
        {
            "path": "{prepared}/tafeng_events.parquet",
            "format": "events",
            "schema": {"entity": "customer_id", "item": "product_id"},
        },
        prep=("datasets/prep_tafeng.py", "ta-feng"),
    ),
}

# The model variants: each a list of `seqenc fit` overrides on top of --config (configs/clicks.yaml:
# time and query time on, repeat head by the data). Add a row for every new option.
VARIANTS: dict[str, list[str]] = {
    "no_time": ["--model.encoder.time", "false", "--model.encoder.repeat_head", "false"],
    "dt_prev": ["--model.encoder.query_time", "false", "--model.encoder.repeat_head", "false"],
    "query": ["--model.encoder.repeat_head", "false"],
    "repeat_no_time": ["--model.encoder.time", "false", "--model.encoder.repeat_head", "true"],
    "full": ["--model.encoder.repeat_head", "true"],  # dt_prev + query time + repeat head
}
# Every run's catalogue term: the exact softmax, named rather than left to the config's
# ``loss: auto``, which samples from 10,000 items for the next item (Ta-Feng's 23,812 products
# with --data.baskets false): the time options are compared, and the Ta-Feng next-item reference
# measured, on the exact term. Overrides after ``--`` come later (``--model.loss sampled_softmax``
# wins); each result records the term its fit printed.
LOSS = ["--model.loss", "ce"]


def prepare(name: str, prepared: Path) -> dict:
    """The data set's DataModule arguments with absolute paths, preparing its file if needed."""
    spec = DATASETS[name]
    data = dict(spec.data)
    path = Path(data["path"].format(prepared=prepared))
    data["path"] = str(path if path.is_absolute() else (ROOT / path).resolve())
    if spec.prep and not Path(data["path"]).exists():
        script, raw = spec.prep
        if not (ROOT / script).exists():
            raise SystemExit(f"{name}: {script} not found (it prepares {data['path']})")
        prepared.mkdir(parents=True, exist_ok=True)
        cmd = [sys.executable, str(ROOT / script), "--data", str(SHARED / raw), "--out", str(prepared)]  # fmt: skip
        subprocess.run(cmd, check=True, cwd=ROOT)
    if not Path(data["path"]).exists():
        raise SystemExit(f"{name}: data file {data['path']} not found")
    return data


def data_overrides(data: dict) -> list[str]:
    """``--data.<key> <value>`` for each DataModule argument (dicts as JSON)."""
    args = []
    for key, value in data.items():
        args += [f"--data.{key}", json.dumps(value) if isinstance(value, dict) else str(value)]
    return args


def filter_setting(config: dict, overrides: list[str]) -> str:
    """The model's seen-item filter as configured: the last override, else the config, else the
    module's default (``"default"``: whatever the module decides, possibly from the data)."""
    pairs = zip(overrides, overrides[1:], strict=False)
    given = [value for flag, value in pairs if flag == "--model.filter_seen"]
    if given:
        return given[-1].lower()  # the last override wins, as in the CLI
    value = config.get("model", {}).get("filter_seen")
    return "default" if value is None else str(value).lower()


def data_options(extra: list[str]) -> dict:
    """The ``--data.<key> <value>`` pairs among the runs' overrides, as DataModule arguments."""
    pairs = zip(extra, extra[1:], strict=False)
    return {
        flag.removeprefix("--data."): yaml.safe_load(value)
        for flag, value in pairs
        if flag.startswith("--data.") and "." not in flag.removeprefix("--data.")
    }


def baselines(config: dict, data: dict, filter_seen: bool) -> dict[str, float]:
    """Both baselines on the test split the runs are evaluated on (same DataModule arguments)."""
    args = {**config.get("data", {}), **data}
    if isinstance(args.get("schema"), dict):
        args["schema"] = EventSchema(**args["schema"])
    datamodule = SequenceDataModule(**args)
    train, _, test = datamodule.splits
    return baseline_metrics(train, test, ks=(10, 20), filter_seen=filter_seen)


def epoch_seconds(run_dir: Path, every: int) -> float:
    """Median wall time between consecutive validations (train + validate), from the
    TensorBoard event file's timestamps, per epoch (validation every ``every`` epochs)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(run_dir), size_guidance={"scalars": 0})
    events.Reload()
    times = [e.wall_time for e in events.Scalars("val/ndcg@10")]
    return float(np.median(np.diff(times))) / every if len(times) > 1 else float("nan")


def train(
    config: Path,
    data: dict,
    variant: str,
    seed: int,
    max_epochs: int,
    extra: list[str],
    out: Path,
    threads: int,
) -> dict:
    """One ``seqenc fit`` in its own folder; returns (and writes) its result record."""
    out.mkdir(parents=True, exist_ok=True)
    cmd = [
        sys.executable, "-m", "seqenc.cli", "fit",
        "--config", str(config),
        *data_overrides(data),
        "--seed_everything", str(seed),
        "--data.seed", str(seed),
        "--trainer.max_epochs", str(max_epochs),
        "--trainer.enable_progress_bar", "false",
        "--early_stopping.patience", str(max_epochs + 1),  # the whole schedule
        *LOSS,
        *extra,
        *VARIANTS[variant],
    ]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=out, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    (out / "fit.log").write_text(proc.stdout + proc.stderr)
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:]
        raise RuntimeError(f"{out}: seqenc fit failed ({tail}); see {out / 'fit.log'}")
    run_dir = max((out / "runs").glob("*/*/metrics.csv"), key=os.path.getmtime).parent
    metrics = pd.read_csv(run_dir / "metrics.csv")
    test = metrics.dropna(subset=["test/ndcg@10"]).iloc[-1]
    validated = metrics.dropna(subset=["val/ndcg@10"])
    val, val_epochs = validated["val/ndcg@10"].to_numpy(), validated["epoch"].to_numpy()
    every = int(val_epochs[0]) + 1  # the first validation ends epoch ``every``
    trained = re.search(r"\bloss: (\w+) \(", proc.stderr + proc.stdout)
    result = {
        "variant": variant,
        "seed": seed,
        "loss": trained.group(1) if trained else "not printed",
        "overrides": VARIANTS[variant],
        "extra": extra,
        **{f"test/{m}": float(test.get(f"test/{m}", "nan")) for m in METRICS},
        "epochs": int(test["epoch"]),  # the test row is logged at the epoch count
        "val_every": every,
        "best_val_epoch": int(val_epochs[val.argmax()]) + 1,
        "best_val_ndcg@10": float(val.max()),
        "last_val_ndcg@10": float(val[-1]),
        "epoch_s": epoch_seconds(run_dir, every),
        "wall_s": wall,
        "run_dir": str(run_dir),
    }
    write_text(out / "result.json", json.dumps(result, indent=1))  # whole or absent
    return result


def mean_std(values: pd.Series) -> str:
    """``mean ± std`` to four places (std NaN for one value)."""
    spread = values.std() if len(values) > 1 else float("nan")
    return f"{values.mean():.4f} ± {spread:.4f}"


def table(
    name: str,
    runs: pd.DataFrame,
    base: dict[str, dict[str, float]],
    reference: str,
    filt: str,
) -> str:
    """The markdown section of one data set; ``base``: baseline metrics with seen items
    ``"kept"`` and ``"filtered"``; ``filt``: the model's seen-item filter setting."""
    recorded = "loss" in runs  # results written before the term was recorded have none
    terms = runs["loss"].fillna("not recorded") if recorded else pd.Series(["not recorded"])
    lines = [
        f"### {name}",
        "",
        f"The model's seen-item filter: `{filt}`; the baselines are shown both ways (filtered: "
        "every history item leaves the ranking, a repeated target is a miss). "
        f"{int(base['kept']['n_repeat_targets'])} test targets "
        f"({base['kept']['share_repeat_targets']:.1%}) repeat "
        "an item of their history. Δ = per-seed difference to "
        f"`{reference}` (mean ± std over the seeds both ran). Catalogue term trained (the fit's "
        f"`loss:` line): {', '.join(f'`{term}`' for term in terms.unique())}.",
        "",
        "| variant | overrides | seeds | test NDCG@10 | test HR@1 | test HR@10 | test MRR "
        "| Δ NDCG@10 | better | epochs | best val epoch | s / epoch |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    ref = runs[runs.variant == reference].set_index("seed")["test/ndcg@10"]
    for variant, group in runs.groupby("variant", sort=False):
        ndcg = group.set_index("seed")["test/ndcg@10"]
        paired = (ndcg - ref).dropna()
        delta = "—" if variant == reference or paired.empty else mean_std(paired)
        better = "—" if variant == reference else f"{int((paired > 0).sum())}/{len(paired)}"
        overrides = " ".join(VARIANTS.get(variant, group["overrides"].iloc[0])) or "(config)"
        lines.append(
            f"| {variant} | `{overrides}` | {len(group)} | {mean_std(group['test/ndcg@10'])} "
            f"| {mean_std(group.get('test/hr@1', pd.Series(dtype=float)))} | {mean_std(group['test/hr@10'])} | {mean_std(group['test/mrr'])} | {delta} "
            f"| {better} | {group['epochs'].median():.0f} | {group['best_val_epoch'].median():.0f} "
            f"| {group['epoch_s'].median():.2f} |"
        )
    for seen, values in base.items():
        for method in dict.fromkeys(k.split("/")[0] for k in values if k.endswith("/mrr")):
            lines.append(
                f"| baseline: {method}, seen {seen} | — | — | {values[f'{method}/ndcg@10']:.4f} "
                f"| {values.get(f'{method}/hr@1', float('nan')):.4f} | {values[f'{method}/hr@10']:.4f} | {values[f'{method}/mrr']:.4f} | | | | | |"
            )
    return "\n".join(lines) + "\n"


def main() -> None:
    """Runs the grid (resuming what is done) and writes one section per data set."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", nargs="+", default=list(DATASETS), choices=list(DATASETS))
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    parser.add_argument("--reference", default="no_time", help="variant the differences are to")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--config", type=Path, default=ROOT / "configs/clicks.yaml")
    parser.add_argument("--max-epochs", type=int, help="default: the config's trainer.max_epochs")
    parser.add_argument("--jobs", type=int, default=1, help="runs at once (each one thread)")
    parser.add_argument("--threads", type=int, default=1, help="OMP threads per run")
    parser.add_argument("--runs-dir", type=Path, default=ROOT / "runs/time_ablation")
    parser.add_argument("--output", type=Path, default=ROOT / "benchmarks/results/time_ablation.md")
    parser.add_argument("extra", nargs="*", help="`seqenc fit` overrides of every run (after --)")
    args = parser.parse_args()
    config_path, args.runs_dir = args.config.resolve(), args.runs_dir.resolve()
    config = yaml.safe_load(config_path.read_text()) or {}
    max_epochs = args.max_epochs or int(config.get("trainer", {}).get("max_epochs", 20))
    reference = args.reference if args.reference in args.variants else args.variants[0]
    kept = config.get("early_stopping", {}).get("keep", "best")

    data = {name: prepare(name, args.runs_dir / "data") for name in args.datasets}
    grid = [(d, v, s) for d in args.datasets for v in args.variants for s in args.seeds]

    def run(job: tuple[str, str, int]) -> dict:
        name, variant, seed = job
        out = args.runs_dir / name / variant / f"seed{seed}"
        if (out / "result.json").exists():
            result = json.loads((out / "result.json").read_text())
            if result.get("extra", []) != args.extra:
                raise SystemExit(
                    f"{out} was run with the overrides {result.get('extra', [])}, not "
                    f"{args.extra}: use another --runs-dir"
                )
            return {"dataset": name, **result}
        result = train(
            config_path, data[name], variant, seed, max_epochs, args.extra, out, args.threads
        )
        print(
            f"{name} {variant} seed {seed}: test NDCG@10 {result['test/ndcg@10']:.4f}, "
            f"{result['epochs']} epochs, {result['wall_s']:.0f} s",
            flush=True,
        )
        return {"dataset": name, **result}

    with ThreadPoolExecutor(args.jobs) as pool:
        runs = pd.DataFrame(list(pool.map(run, grid)))

    sections = [
        "## Time options on timestamped data sets, with the trivial baselines",
        "",
        f"`python benchmarks/time_ablation.py --datasets {' '.join(args.datasets)} "
        f"--variants {' '.join(args.variants)} --seeds {' '.join(map(str, args.seeds))} "
        f"--max-epochs {max_epochs} --jobs {args.jobs}{' -- ' + ' '.join(args.extra) if args.extra else ''}` on {time.strftime('%Y-%m-%d')}, "
        f"{platform.machine()}, {os.cpu_count()} CPU cores, {args.threads} thread(s) per run, "
        f"{args.jobs} run(s) at once. Config `{config_path.relative_to(ROOT)}` with each data set's "
        f"data overrides and `{' '.join(LOSS)}` (the exact softmax, unless the overrides after "
        f"`--` name another loss); every run trains its whole schedule ({max_epochs} epochs, or "
        f"`trainer.max_steps` where that comes first; early stopping off) and the "
        f"{'last epoch' if kept == 'last' else 'best validation NDCG@10'} checkpoint is tested "
        f"(`early_stopping.keep: {kept}`). Leave-one-out, full ranking. s / epoch: "
        "median wall time between validations (train + validate) per epoch.",
        "",
    ]
    for name in args.datasets:
        variants = [v for v in args.variants if v in set(runs.variant)]
        sub = runs[(runs.dataset == name) & runs.variant.isin(variants)]
        filt = filter_setting(config, args.extra + VARIANTS[reference])
        options = data[name] | data_options(args.extra)  # what the runs read, overrides included
        base = {seen: baselines(config, options, seen == "filtered") for seen in SEEN}
        sections.append(table(name, sub, base, reference, filt))
    text = "\n".join(sections)
    write_text(args.output, text)
    print(text)


if __name__ == "__main__":
    main()
