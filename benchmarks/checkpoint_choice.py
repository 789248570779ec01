"""Which checkpoint a run should keep: the best-validation one or the end of its schedule.

Reads the runs of ``benchmarks/time_ablation.py`` (each trained its whole cosine schedule, with
``best-epoch=N.ckpt`` and ``last.ckpt``) and tests both checkpoints of every run on the same
leave-one-out test split, beside the two trivial baselines (the better of seen items kept and
filtered). With the repeat head it also reports the mean gate g at the test position, for targets
that repeat an item of their history and for new ones (a gate that does not tell them apart puts
the history's items above a new target at the top of the list), and HR@1 of the model's catalogue
softmax alone, without the copy distribution.

    python benchmarks/checkpoint_choice.py --datasets bpic2013 berka synthetic \\
        --variants full query --output benchmarks/results/checkpoint_choice.md
"""

from __future__ import annotations

import argparse
import json
import os
import uuid
from pathlib import Path

import pandas as pd
import torch
import yaml
from time_ablation import DATASETS, ROOT, SEEN, VARIANTS, baselines, prepare, read_config

from seqenc.data.datamodule import SequenceDataModule
from seqenc.data.schema import EventSchema
from seqenc.training.checkpoint import load_checkpoint
from seqenc.training.metrics import RankingMetrics
from seqenc.training.module import SeqencModule

METRICS = ("ndcg@10", "hr@1", "mrr")
DATA_KEYS = ("path", "format", "history_len", "min_len", "eval_batch_size")


def datamodule(run_dir: Path) -> SequenceDataModule:
    """The run's data (``config.yaml`` in its folder): the same split it was tested on."""
    data = yaml.safe_load((run_dir / "config.yaml").read_text())["data"]
    schema = {k: v for k, v in (data.get("schema") or {}).items() if v is not None}
    kwargs = {k: data[k] for k in DATA_KEYS}
    return SequenceDataModule(**kwargs, schema=EventSchema(**schema), seed=data.get("seed"))


@torch.no_grad()
def evaluate(checkpoint: Path, data: SequenceDataModule) -> dict[str, float]:
    """Test metrics of one checkpoint, and with the repeat head the mean gate at the test
    position for repeated (``gate_repeat``) and new (``gate_new``) targets and the HR@1 of the
    catalogue softmax alone (``hr@1_catalogue``)."""
    saved = load_checkpoint(checkpoint)
    options = {k: v for k, v in saved["hyper_parameters"].items() if not k.startswith("_")}
    module = SeqencModule(**{**options, "spec": data.spec}).eval()
    module.load_state_dict(saved["state_dict"])
    metrics, catalogue, gates, repeats = RankingMetrics((10,)), RankingMetrics((10,)), [], []
    for batch in data.test_dataloader():
        metrics.update(module.item_scores(batch, module.filter_seen), batch.target)
        seen = torch.zeros(len(batch), module.config.n_items, dtype=torch.bool)
        seen[batch.seen[0], batch.seen[1]] = True
        rows = torch.arange(len(batch))
        repeats.append(seen[rows, batch.target])
        head = module.encoder.repeat
        if head is not None:
            hidden = module.encoder(batch)
            last = (batch.lengths - 1).clamp(min=0)
            log_g, _ = head.log_gates(hidden)
            gates.append(log_g[rows, last].exp())
            logits = module.encoder.item_logits(hidden[rows, last].float())
            if module.filter_seen:
                logits[batch.seen[0], batch.seen[1]] = -torch.inf
            catalogue.update(logits, batch.target)
    out = {k: float(v) for k, v in metrics.compute().items() if k in METRICS}
    if gates:
        gate, repeat = torch.cat(gates), torch.cat(repeats)
        out["gate_repeat"] = float(gate[repeat].mean()) if repeat.any() else float("nan")
        out["gate_new"] = float(gate[~repeat].mean()) if (~repeat).any() else float("nan")
        out["hr@1_catalogue"] = float(catalogue.compute()["hr@1"])
    return out


def run_rows(runs_dir: Path, dataset: str, variant: str, seeds: list[int]) -> list[dict]:
    """One row per (seed, checkpoint) of a variant's finished runs."""
    rows, data = [], None
    for seed in seeds:
        result_file = runs_dir / dataset / variant / f"seed{seed}" / "result.json"
        if not result_file.exists():
            continue
        run_dir = Path(json.loads(result_file.read_text())["run_dir"])
        data = data or datamodule(run_dir)
        best = next((run_dir / "checkpoints").glob("best-*.ckpt"))
        epoch = int(best.stem.split("=")[1]) + 1
        for kept, path in (("best", best), ("last", run_dir / "checkpoints" / "last.ckpt")):
            values = evaluate(path, data)
            rows.append({"variant": variant, "seed": seed, "kept": kept, "epoch": epoch, **values})
            print(json.dumps({"dataset": dataset, **rows[-1]}), flush=True)
    return rows


def mean_std(values: pd.Series) -> str:
    spread = values.std() if len(values) > 1 else float("nan")
    return f"{values.mean():.4f} ± {spread:.4f}"


def section(dataset: str, runs: pd.DataFrame, base: dict[str, dict[str, float]]) -> str:
    """The markdown table of one data set: per variant and kept checkpoint, mean ± std over
    seeds; then each baseline's better setting of the seen-item filter."""
    lines = [
        f"### {dataset}",
        "",
        "| variant | kept checkpoint | seeds | NDCG@10 | HR@1 | MRR | gate, repeated target "
        "| gate, new target | HR@1, catalogue alone | best-validation epoch (median) |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for (variant, kept), group in runs.groupby(["variant", "kept"], sort=False):
        gate = {
            k: mean_std(group[k]) if k in group and group[k].notna().any() else "—"
            for k in ("gate_repeat", "gate_new", "hr@1_catalogue")
        }
        lines.append(
            f"| {variant} | {kept} | {len(group)} | {mean_std(group['ndcg@10'])} "
            f"| {mean_std(group['hr@1'])} | {mean_std(group['mrr'])} | {gate['gate_repeat']} "
            f"| {gate['gate_new']} | {gate['hr@1_catalogue']} | {group['epoch'].median():.0f} |"
        )
    for method in ("popularity", "repeat"):
        seen = max(SEEN, key=lambda s: base[s][f"{method}/ndcg@10"])
        values = base[seen]
        lines.append(
            f"| baseline: {method} (seen {seen}) | — | — | {values[f'{method}/ndcg@10']:.4f} "
            f"| {values[f'{method}/hr@1']:.4f} | {values[f'{method}/mrr']:.4f} | | | | |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", nargs="+", required=True, choices=list(DATASETS))
    parser.add_argument("--variants", nargs="+", default=["full"], choices=list(VARIANTS))
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--config", type=Path, default=ROOT / "configs/clicks.yaml")
    parser.add_argument("--runs-dir", type=Path, default=ROOT / "runs/time_ablation")
    parser.add_argument(
        "--output", type=Path, default=ROOT / "benchmarks/results/checkpoint_choice.md"
    )
    args = parser.parse_args()
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    config = read_config(args.config.resolve())
    runs_dir = args.runs_dir.resolve()
    sections, records = [], []
    for dataset in args.datasets:
        rows = [r for v in args.variants for r in run_rows(runs_dir, dataset, v, args.seeds)]
        if not rows:
            continue
        data = prepare(dataset, runs_dir / "data")
        base = {seen: baselines(config, data, seen == "filtered") for seen in SEEN}
        sections.append(section(dataset, pd.DataFrame(rows), base))
        records += [{"dataset": dataset, **r} for r in rows]
    text = "\n".join(sections)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    for path, content in ((args.output, text), (args.output.with_suffix(".json"), records)):
        tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
        tmp.write_text(content if isinstance(content, str) else json.dumps(content, indent=1))
        os.replace(tmp, path)
    print(text)


if __name__ == "__main__":
    main()
