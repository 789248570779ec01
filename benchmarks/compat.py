"""Compatible retrains (issue 31): does a downstream model trained on version 1 keep working on
version 2, and does the drift report tell an unconstrained retrain from a compatible one?

One command (after the trainings below; the map is fitted here, in seconds)::

    OMP_NUM_THREADS=1 python benchmarks/compat.py \\
        --tafeng-v1 runs/compat/tafeng_v1/.../bundle \\
        --tafeng-v2 benchmarks/out/downstream-tafeng/runs/tafeng/*/bundle \\
        --next-v1 runs/compat/ml_v1/.../bundle --next-v2 A/bundle B/bundle

Ta-Feng (labelled): version 1 trained on the events up to 2000-12-31, version 2 (one bundle per
seed) on those up to 2001-01-31 (``configs/tafeng.yaml`` + ``configs/account_embeddings.yaml``).
Each version-2 bundle is aligned to version 1 on version 2's training events with every map kind
(the pairs of :func:`seqenc.evaluate.drift.history_pairs`, as ``seqenc align`` fits them). Every labelled customer is embedded at its label's cut-off by every
model. Per task and probe (linear, trees; the probes of :mod:`seqenc.evaluate.probe`), 5-fold CV:
a probe fitted on version 1's embeddings of the training fold scores the test fold on version 1,
on raw version 2 and on mapped version 2; version 2's own probe (fitted and scored on version 2)
is its quality as an unconstrained retrain (the map leaves it untouched).

Next-event log (MovieLens-100K, ``configs/sasrec_ml100k_time.yaml``): version 1 on the ratings
before the 80 % time quantile, version 2 on all, two seeds; their NDCG@10 come from the fit logs
(``--next-logs``). Drift reports: version 1 against version 2 raw (unconstrained) and mapped
(compatible), and version 2 against its other seed.

Writes ``benchmarks/results/compat-{tafeng,next}[-TAG].{md,json}``; ``--merge A.json B.json``
joins Ta-Feng results whose version-2 seeds ran apart (same version 1, tasks and probes).
"""

from __future__ import annotations

import argparse
import copy
import json
import platform
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

from seqenc.atomic import atomic_file
from seqenc.compat.parent_map import KINDS, fit_with_stats
from seqenc.data.loaders import load_dataset
from seqenc.evaluate import embed_at
from seqenc.evaluate.drift import drift, history_pairs
from seqenc.evaluate.estimators import estimator
from seqenc.inference import Encoder, load_encoder

ROOT = Path(__file__).resolve().parents[1]
TAFENG = ROOT / "runs/tafeng_data"
ML100K = ROOT.parent / "shared/data/ml-100k/u.data"
RESULTS = ROOT / "benchmarks/results"


def make_probe(model: str, seed: int = 0):
    """The binary probes of :func:`seqenc.evaluate.probe` (same grids and searches)."""
    return estimator("binary", model, 5, seed)[1]


def auc(model, x: np.ndarray, y: np.ndarray) -> float:
    from sklearn.metrics import roc_auc_score

    return float(roc_auc_score(y, model.predict_proba(x)[:, 1]))


def cross_scores(
    train_on: np.ndarray, score_on: dict[str, np.ndarray], y: np.ndarray, model: str
) -> dict[str, list[float]]:
    """Per fold: a probe fitted on ``train_on``'s training rows, its ROC-AUC on each of
    ``score_on``'s test rows (the same entities in other spaces)."""
    from sklearn.model_selection import StratifiedKFold

    out: dict[str, list[float]] = {name: [] for name in score_on}
    for train, test in StratifiedKFold(5, shuffle=True, random_state=0).split(train_on, y):
        fitted = make_probe(model).fit(train_on[train], y[train])
        for name, x in score_on.items():
            out[name].append(auc(fitted, x[test], y[test]))
    return out


def aligned(new: Encoder, old: Encoder, pairs: tuple, kind: str) -> tuple[Encoder, dict]:
    """``new`` with a map of ``kind`` to ``old`` fitted on ``pairs`` (:func:`history_pairs`, as
    ``seqenc align`` fits them; not written to disk: the benchmark compares kinds), and the fit
    statistics."""
    from seqenc.compat.lineage import Lineage, space_id

    x, y, counts = pairs
    fitted, stats = fit_with_stats(x, y, kind)
    stats |= counts
    parent = old.meta
    lineage = Lineage(
        parent.name, parent.config_hash, parent.weights_sha256, parent.dim,
        new.meta.weights_sha256, kind, "", stats,
    )  # fmt: skip
    assert lineage.parent_space == space_id(parent)
    copy = Encoder(new.model, new.meta, new.vocabs, new.device)
    copy.lineage = (lineage, fitted)
    return copy, stats


def matrix(frame: pd.DataFrame, rows: pd.DataFrame, on: list[str]) -> np.ndarray:
    return np.stack(rows[on].merge(frame, on=on, how="left")["embedding"].to_numpy())


def tafeng(v1_path: str, v2_paths: list[str], tasks: list[str], probes: list[str], done) -> dict:
    """The Ta-Feng measurement; ``done(result)`` after each task/probe (partial results kept)."""
    events = pd.read_parquet(TAFENG / "tafeng_events.parquet")
    train = pd.read_parquet(TAFENG / "tafeng_train.parquet")
    labels = pd.read_parquet(TAFENG / "tafeng_labels.parquet")
    on = ["customer_id", "as_of"]
    cutoffs = labels[labels[tasks].notna().any(axis=1)][on].drop_duplicates()
    v1 = load_encoder(v1_path, "cpu")
    start = time.perf_counter()
    base = embed_at(v1, events, cutoffs)
    print(f"v1 embedded in {time.perf_counter() - start:.0f} s", flush=True)
    out: dict = {"v1": v1_path, "seeds": [], "tasks": tasks, "probes": probes}
    seeds = []
    for path in v2_paths:
        v2 = load_encoder(path, "cpu")
        native = embed_at(v2, events, cutoffs)
        seed = {"bundle": path, "maps": {}, "spaces": {"raw": native}, "drift": {}}
        pairs = history_pairs(v2, v1, train)
        for kind in KINDS:
            start = time.perf_counter()
            mapped_encoder, stats = aligned(v2, v1, pairs, kind)
            wall = time.perf_counter() - start
            mapped = native.copy()
            mapped["embedding"] = list(mapped_encoder.lineage[1].apply(np.stack(native.embedding)))
            seed["spaces"][kind] = mapped
            seed["maps"][kind] = stats | {"fit_s": wall}
            report = drift(v1, mapped_encoder, train)
            seed["drift"][kind] = report.to_dict() | {"dimensions": None}
        report = drift(v1, v2, train)
        seed["drift"]["raw"] = report.to_dict() | {"dimensions": None}
        print(f"{path}: maps {seed['maps']}", flush=True)
        seeds.append(seed)
    for task in tasks:
        rows = labels[labels[task].notna()][[*on, task]].merge(base[on], on=on)
        for seed in seeds:
            rows = rows.merge(seed["spaces"]["raw"][on], on=on)
        y = rows[task].to_numpy().astype(int)
        x1 = matrix(base, rows, on)
        for model in probes:
            key = f"{task}/{model}"
            spaces = {"v1": x1}
            for i, seed in enumerate(seeds):
                for name, frame in seed["spaces"].items():
                    spaces[f"s{i}/{name}"] = matrix(frame, rows, on)
            cross = cross_scores(x1, spaces, y, model)
            own = [
                cross_scores(spaces[f"s{i}/raw"], {"own": spaces[f"s{i}/raw"]}, y, model)["own"]
                for i in range(len(seeds))
            ]
            out.setdefault("scores", {})[key] = {"n_rows": len(y), "cross": cross, "own": own}
            out["seeds"] = [{k: s[k] for k in ("bundle", "maps", "drift")} for s in seeds]
            done(out)
    return out


def merge(results: list[dict]) -> dict:
    """Several Ta-Feng results of the same version 1, tasks and probes (version-2 seeds run
    apart) as one: their seeds in order."""
    out = copy.deepcopy(results[0])
    for other in results[1:]:
        offset = len(out["seeds"])
        if any(other[key] != out[key] for key in ("v1", "tasks", "probes")):
            sys.exit("--merge: the results differ in version 1, tasks or probes")
        out["seeds"] += other["seeds"]
        for key, scores in other["scores"].items():
            into = out["scores"][key]
            for name, folds in scores["cross"].items():
                if name != "v1":
                    seed, space = name.split("/")
                    into["cross"][f"s{int(seed[1:]) + offset}/{space}"] = folds
            into["own"] += scores["own"]
    return out


def summary(scores: dict, n_seeds: int) -> dict:
    """Per space kind: mean over seeds of the fold-mean AUC and its loss against version 1."""
    v1 = float(np.mean(scores["cross"]["v1"]))
    rows = {"v1 probe on v1": (v1, [v1])}
    for kind in ("raw", *KINDS):
        per_seed = [float(np.mean(scores["cross"][f"s{i}/{kind}"])) for i in range(n_seeds)]
        rows[f"v1 probe on v2 {kind}"] = (float(np.mean(per_seed)), per_seed)
    own = [float(np.mean(s)) for s in scores["own"]]
    rows["v2 own probe"] = (float(np.mean(own)), own)
    return {"v1": v1, "rows": rows}


def tafeng_markdown(result: dict) -> str:
    n = len(result["seeds"])
    lines = [
        f"Ta-Feng: version 1 = `{result['v1']}`, version 2 = {n} seeds; ROC-AUC, 5-fold CV, "
        "mean over folds, then over version-2 seeds (± std over seeds).",
        "",
        "| task / probe | scored on | ROC-AUC | loss vs v1 | per seed |",
        "|---|---|---|---|---|",
    ]
    for key, scores in result["scores"].items():
        s = summary(scores, n)
        for name, (mean, per_seed) in s["rows"].items():
            std = f" ± {np.std(per_seed):.4f}" if len(per_seed) > 1 else ""
            loss = "" if name == "v1 probe on v1" else f"{s['v1'] - mean:+.4f}"
            seeds = ", ".join(f"{v:.4f}" for v in per_seed)
            lines.append(f"| {key} | {name} | {mean:.4f}{std} | {loss} | {seeds} |")
        raw = s["rows"]["v1 probe on v2 raw"][0]
        for kind in KINDS:
            value = s["rows"][f"v1 probe on v2 {kind}"][0]
            share = (s["v1"] - value) / max(s["v1"] - raw, 1e-12)
            lines.append(f"| {key} | {kind}: loss / raw loss | {share:.3f} | | |")
    lines += ["", "Maps (held-out 20 % of the fitting customers) and drift reports against v1:", ""]
    lines += ["| seed bundle | space | held-out cosine | held-out R² | fit s | drift cosine "
              "| overlap@10 | mean shift | verdict |", "|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for seed in result["seeds"]:
        name = seed["bundle"].split("/")[-2]
        for kind in ("raw", *KINDS):
            d = seed["drift"][kind]
            m = seed["maps"].get(kind)
            held = (
                f"{m['held_out']['cosine']:.4f} | {m['held_out']['r2']:.4f} | {m['fit_s']:.1f}"
                if m
                else "| |"
            )
            lines.append(
                f"| {name} | {kind} | {held} | {d['cosine']['mean']:.4f} | {d['overlap']:.4f} | "
                f"{d['mean_shift']:.3f} | **{d['verdict']}** |"
            )
    return "\n".join(lines) + "\n"


def next_event(v1_path: str, v2_paths: list[str], logs: list[str], data: Path) -> dict:
    """Drift reports on MovieLens-100K and the NDCG@10 the fit logs printed."""
    events = load_dataset(data, "movielens")
    v1 = load_encoder(v1_path, "cpu")
    v2 = [load_encoder(p, "cpu") for p in v2_paths]
    out: dict = {"v1": v1_path, "v2": v2_paths, "drift": {}, "maps": {}, "ndcg@10": {}}
    for log in logs:
        text = Path(log).read_text().splitlines()
        value = next(line.split()[-1] for line in text if line.strip().startswith("test/ndcg@10"))
        out["ndcg@10"][log] = float(value)
    pairs = history_pairs(v2[0], v1, events)
    for kind in KINDS:
        mapped, stats = aligned(v2[0], v1, pairs, kind)
        out["maps"][kind] = stats
        out["drift"][f"v1 vs v2 ({kind} map: compatible)"] = drift(v1, mapped, events).to_dict()
    raw = replace_lineage(v2[0])
    out["drift"]["v1 vs v2 (raw: unconstrained)"] = drift(v1, raw, events).to_dict()
    if len(v2) > 1:
        other = replace_lineage(v2[1])
        out["drift"]["v2 vs v2 other seed (raw)"] = drift(raw, other, events).to_dict()
    for value in out["drift"].values():
        value["dimensions"] = None
    return out


def replace_lineage(enc: Encoder) -> Encoder:
    """``enc`` without its map: what an unconstrained retrain gives."""
    return Encoder(enc.model, enc.meta, enc.vocabs, enc.device)


def next_markdown(result: dict) -> str:
    lines = [
        f"MovieLens-100K: version 1 = `{result['v1']}`, version 2 = `{result['v2'][0]}`.",
        "",
        "| run | test NDCG@10 |",
        "|---|---|",
        *(f"| `{k}` | {v:.4f} |" for k, v in result["ndcg@10"].items()),
        "",
        "| comparison | cosine mean | p5 / p50 | overlap@10 | mean shift | verdict |",
        "|---|---|---|---|---|---|",
    ]
    for name, d in result["drift"].items():
        c = d["cosine"]
        lines.append(
            f"| {name} | {c['mean']:.4f} | {c['p5']:.3f} / {c['p50']:.3f} | {d['overlap']:.4f} | "
            f"{d['mean_shift']:.3f} | **{d['verdict']}** |"
        )
    for kind, stats in result["maps"].items():
        held = stats["held_out"]
        lines.append(f"\n{kind} map: held-out cosine {held['cosine']:.4f}, R² {held['r2']:.4f}")
    return "\n".join(lines) + "\n"


def write(name: str, header: str, body: str, raw: dict) -> None:
    RESULTS.mkdir(parents=True, exist_ok=True)
    with atomic_file(RESULTS / f"{name}.md") as tmp:
        Path(tmp).write_text(header + "\n" + body)
    with atomic_file(RESULTS / f"{name}.json") as tmp:
        Path(tmp).write_text(json.dumps(raw, indent=1, default=str) + "\n")
    print(header + "\n" + body, flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tafeng-v1")
    parser.add_argument("--tafeng-v2", nargs="*", default=[])
    parser.add_argument("--tasks", nargs="+", default=["age_under_35"])
    parser.add_argument("--probes", nargs="+", default=["linear", "trees"])
    parser.add_argument("--next-v1")
    parser.add_argument("--next-v2", nargs="*", default=[])
    parser.add_argument("--next-logs", nargs="*", default=[], help="fit logs of the v2 runs")
    parser.add_argument("--ml100k", type=Path, default=ML100K, help="u.data of MovieLens-100K")
    parser.add_argument("--tag", default="", help="suffix of the result files' names")
    parser.add_argument(
        "--merge", nargs="+", type=Path, help="compat-tafeng JSON files to join (seeds run apart)"
    )
    args = parser.parse_args()
    suffix = f"-{args.tag}" if args.tag else ""
    header = (
        f"# `python benchmarks/compat.py {' '.join(sys.argv[1:])}`\n\n"
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {platform.machine()}, "
        "OMP_NUM_THREADS=1, CPU.\n"
    )
    if args.merge:
        result = merge([json.loads(path.read_text()) for path in args.merge])
        write(f"compat-tafeng{suffix}", header, tafeng_markdown(result), result)
    if args.tafeng_v1:
        tafeng(
            args.tafeng_v1,
            args.tafeng_v2,
            args.tasks,
            args.probes,
            lambda result: write(f"compat-tafeng{suffix}", header, tafeng_markdown(result), result),
        )
    if args.next_v1:
        result = next_event(args.next_v1, args.next_v2, args.next_logs, args.ml100k)
        write(f"compat-next{suffix}", header, next_markdown(result), result)


if __name__ == "__main__":
    main()
