"""Training events/s of every shipped config, in one run, with the ratio to ``sasrec_ml1m.yaml``'s.

    python benchmarks/bench_train.py [--steps 6] [--repeats 3] [--only clicks ...]

Each case is a config (layered as its comment says) on its data: the shared data folder's
MovieLens, Beauty, Berka, BPIC 2013 and Ta-Feng (event logs written by ``datasets/prep_*.py`` into
``runs/*_data`` when missing) and the bundled sample; ``clicks.yaml`` also on a ~100k-event log
(the sample's first entities up to 100,000 events), the issue's small timestamped log. A case whose
raw data is absent is skipped with a line saying why.

The model and data module are built by ``seqenc fit``'s own parser (:class:`SeqencCLI`), so a case
trains exactly what the command line would: its objective, repeat head, contrastive term, batch
size and windows. Of one epoch's training batches, ``--steps`` are timed, picked evenly across the
widths (batches are length-bucketed, and compute grows with width); a step is the module's
``training_step`` (every loss term), backward, gradient clipping at 1.0 (the command's default) and
the module's optimiser step (AdamW; row-sparse for the item table under a sampled loss). Events
are the real events of the timed batches; events/s is their sum over the summed step times, and the epoch time is extrapolated by events. Repeats of all cases are
interleaved (round robin), so load from other users of the machine hits every case alike; the table
holds the median over repeats. Validation, data loading and Lightning's loop are not in it (the
``time seqenc fit`` figures in BENCHMARKS.md are). fp32 matmul GFLOP/s at the same thread count is
measured before and after. Writes ``benchmarks/results/train_per_config.md``.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import io
import logging
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import torch

from seqenc.atomic import write_text
from seqenc.commands.model import fit_model
from seqenc.commands.train import SeqencCLI
from seqenc.data.datamodule import SequenceDataModule
from seqenc.model.optim import RowSparseAdamW, clip_grad_norm

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = "sasrec_ml1m"
PARTS = ("encoder", "next-item head + loss", "contrastive", "clipping + AdamW")
SMALL_LOG_EVENTS = 100_000


def shared_data() -> Path:
    return Path(os.environ.get("SEQENC_SHARED_DATA", ROOT.parent / "shared" / "data"))


@dataclass(frozen=True)
class Case:
    """One config on its data: ``configs`` layered in order, ``args`` the extra options, ``data``
    the file it trains on and ``prep`` (script, raw folder under the shared data) that writes it."""

    name: str
    configs: tuple[str, ...]
    data: str
    args: tuple[str, ...] = ()
    prep: tuple[str, str] | None = None


CASES = [
    Case(REFERENCE, ("sasrec_ml1m",), "{shared}/ml-1m/ml-1m_sequences.parquet"),
    Case("bert4rec_ml1m", ("bert4rec_ml1m",), "{shared}/ml-1m/ml-1m_sequences.parquet"),
    Case("sasrec_beauty", ("sasrec_beauty",), "{shared}/beauty/Beauty.txt"),
    Case("sasrec_ml100k_time", ("sasrec_ml100k_time",), "{shared}/ml-100k/u.data"),
    Case("quickstart (sample)", ("quickstart",), "datasets/sample/events.parquet"),
    Case("clicks (100k-event log)", ("clicks",), "{small}"),
    Case(
        "clicks (BPIC 2013)",
        ("clicks",),
        "runs/bpic2013_data/bpic2013_events.parquet",
        ("--data.schema.entity", "case_id", "--data.schema.item", "activity"),
        ("prep_bpic2013.py", "bpic2013"),
    ),
    Case(
        "berka",
        ("berka",),
        "runs/berka_data/berka_events.parquet",
        prep=("prep_berka.py", "berka"),
    ),
    Case(
        "account_events + account_embeddings (sample)",
        ("account_events", "account_embeddings"),
        "datasets/sample/events.parquet",
    ),
    Case(
        "tafeng + account_embeddings",
        ("tafeng", "account_embeddings"),
        "runs/tafeng_data/tafeng_train.parquet",
        prep=("prep_tafeng.py", "ta-feng"),
    ),
]


def small_log(folder: Path) -> Path:
    """The bundled sample's first entities (by id) up to :data:`SMALL_LOG_EVENTS` events."""
    table = pq.read_table(ROOT / "datasets" / "sample" / "events.parquet")
    ids, counts = np.unique(table["entity_id"].to_numpy(), return_counts=True)
    n = int(np.searchsorted(np.cumsum(counts), SMALL_LOG_EVENTS)) + 1
    path = folder / "sample_100k.parquet"
    keep = np.isin(table["entity_id"].to_numpy(), ids[:n])
    pq.write_table(table.filter(pa.array(keep)), path)
    return path


def data_path(case: Case, small: Path) -> Path | str:
    """The case's data file, written by its prep script when missing; a string says why not."""
    path = Path(case.data.format(shared=shared_data(), small=small))
    path = path if path.is_absolute() else ROOT / path
    if path.exists() or case.prep is None:
        return path if path.exists() else f"{path} not found"
    script, raw = case.prep
    if not (shared_data() / raw).exists():
        return f"{shared_data() / raw} not found"
    command = [sys.executable, str(ROOT / "datasets" / script), "--data", str(shared_data() / raw)]
    done = subprocess.run(command + ["--out", str(path.parent)], capture_output=True, text=True)
    if done.returncode != 0 or not path.exists():
        return f"{script} failed: {(done.stderr.strip().splitlines() or ['no output'])[-1]}"
    return path


def build(args: list[str]) -> SeqencCLI:
    """``seqenc fit``'s parser over ``args``, not run: its model, data module and trainer are what
    the command would train (built quietly, without a logger)."""
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        cli = SeqencCLI(
            fit_model,
            SequenceDataModule,
            run=False,
            args=args,
            trainer_defaults={"logger": False, "enable_checkpointing": False},
        )
    return cli


class Timed:
    """A case built as ``seqenc fit`` builds it, with its sample of training batches."""

    def __init__(self, case: Case, path: Path, steps: int) -> None:
        args = [a for c in case.configs for a in ("--config", str(ROOT / "configs" / f"{c}.yaml"))]
        args += ["--data.path", str(path), *case.args]
        cli = build(args)
        self.model, self.data = cli.model, cli.datamodule
        self.data.setup("fit")
        epoch = sorted(self.data.train_dataloader(), key=lambda b: b.items.shape[1])
        self.epoch_steps = len(epoch)
        self.epoch_events = sum(int(b.lengths.sum()) for b in epoch)
        picks = ((np.arange(steps) + 0.5) / steps * len(epoch)).astype(int)
        self.sample = [epoch[i] for i in picks]
        self.events = sum(int(b.lengths.sum()) for b in self.sample)
        rows = max(len(b) for b in epoch)
        self.shape = f"{rows} × {epoch[0].items.shape[1]}…{epoch[-1].items.shape[1]}"
        self.epochs = cli.trainer.max_epochs
        self.model.train()
        self.optimizer = RowSparseAdamW(self.model.parameters(), lr=1e-3)
        self.step(self.sample[-1])  # untimed: the widest batch, allocations settle

    def step(self, batch) -> None:
        loss = self.model.training_step(batch, 0)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        clip_grad_norm(self.model.parameters(), 1.0)
        self.optimizer.step()

    def parts(self) -> dict[str, float]:
        """Process CPU seconds of one pass over the sample, by part of the step: the encoder
        (forward + backward of its hidden states alone), the next-item head and loss (the
        objective's loss minus the encoder), the contrastive term, clipping + AdamW."""
        model, spent = self.model, dict.fromkeys(PARTS, 0.0)
        for batch in self.sample:
            start = time.process_time()
            if model.hparams.next_item_weight > 0:
                model.next_item_loss(batch).backward()
            loss_end = time.process_time()
            inputs, _ = model.objective.training_pair(batch, model.config.n_items)
            model.encoder(inputs).sum().backward()
            encoder_end = time.process_time()
            if model.hparams.contrastive_weight > 0:
                model.contrastive_loss(batch).backward()
            contrastive_end = time.process_time()
            clip_grad_norm(model.parameters(), 1.0)
            self.optimizer.step()
            self.optimizer.zero_grad(set_to_none=True)
            encoder = encoder_end - loss_end if model.hparams.next_item_weight > 0 else 0.0
            spent["encoder"] += encoder
            spent["next-item head + loss"] += loss_end - start - encoder
            spent["contrastive"] += contrastive_end - encoder_end
            spent["clipping + AdamW"] += time.process_time() - contrastive_end
        return spent

    def time(self) -> tuple[float, float]:
        """Wall-clock and process CPU seconds of one pass over the sample."""
        start, cpu = time.perf_counter(), time.process_time()
        for batch in self.sample:
            self.step(batch)
        return time.perf_counter() - start, time.process_time() - cpu


def cpu_name() -> str:
    """The CPU's model name from /proc/cpuinfo (Linux), else the platform's machine type."""
    cpuinfo = Path("/proc/cpuinfo")
    text = cpuinfo.read_text() if cpuinfo.exists() else ""
    names = [line for line in text.splitlines() if line.startswith("model name")]
    return names[0].split(":", 1)[1].strip() if names else platform.machine()


def matmul_gflops(size: int = 2048, rounds: int = 8) -> float:
    """fp32 ``size``² matmul rate at torch's thread count."""
    a, b = torch.randn(size, size), torch.randn(size, size)
    a @ b
    start = time.perf_counter()
    for _ in range(rounds):
        a @ b
    return 2 * size**3 * rounds / (time.perf_counter() - start) / 1e9


def parts_row(name: str, case: Timed) -> str:
    """One row of the parts table: each part's share of the step's CPU time (one pass)."""
    spent = case.parts()
    total = sum(spent.values())
    shares = " | ".join(f"{100 * spent[part] / total:.0f} %" for part in PARTS)
    return f"| {name} | {shares} | {1000 * total / len(case.sample):.0f} |"


def parts_table(rows: list[str]) -> list[str]:
    """Where a step goes: the parts table, measured once per case after the timing."""
    return [
        "",
        "Where a step goes (CPU time of one more pass over the same batches; the encoder part is "
        "its forward and backward alone, the next-item part what the objective's head and loss "
        "add to it; the encoder runs once more here, untimed in the table above):",
        "",
        f"| config (data) | {' | '.join(PARTS)} | CPU ms/step |",
        "|---|" + "---|" * (len(PARTS) + 1),
        *rows,
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=6, help="timed training steps per repeat")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--parts", action="store_true", help="also where a step goes (a second table)"
    )
    parser.add_argument("--only", nargs="*", help="cases whose name contains one of these words")
    parser.add_argument(
        "--out", type=Path, default=ROOT / "benchmarks" / "results" / "train_per_config.md"
    )
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    logging.getLogger("lightning").setLevel(logging.ERROR)
    logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)
    cases = [c for c in CASES if not args.only or any(w in c.name for w in args.only)]
    timed: dict[str, Timed] = {}
    skipped = []
    with tempfile.TemporaryDirectory() as folder:
        small = small_log(Path(folder))
        for case in cases:
            path = data_path(case, small)
            if isinstance(path, str):
                skipped.append(f"- {case.name}: skipped, {path}")
                print(skipped[-1], file=sys.stderr)
                continue
            timed[case.name] = Timed(case, path, args.steps)
            print(f"{case.name}: built ({timed[case.name].shape})", file=sys.stderr)
    gflops_before, load_before = matmul_gflops(), os.getloadavg()[0]
    times: dict[str, list[float]] = {name: [] for name in timed}
    cpu_times: dict[str, list[float]] = {name: [] for name in timed}
    for _ in range(args.repeats):
        for name, case in timed.items():
            wall, cpu = case.time()
            times[name].append(wall)
            cpu_times[name].append(cpu)
            rate = case.events / wall
            print(f"{name}: {wall:.2f} s ({cpu:.2f} CPU s), {rate:,.0f} events/s", file=sys.stderr)
    shares = [parts_row(name, case) for name, case in timed.items()] if args.parts else []
    gflops_after, load_after = matmul_gflops(), os.getloadavg()[0]
    rates = {name: timed[name].events / statistics.median(t) for name, t in times.items()}
    cpu_rates = {name: timed[name].events / statistics.median(t) for name, t in cpu_times.items()}
    reference, cpu_reference = rates.get(REFERENCE), cpu_rates.get(REFERENCE)
    rows = []
    for name, case in timed.items():
        epoch_s = case.epoch_events / rates[name]
        ratio = f"{rates[name] / reference:.2f}" if reference else "n/a"
        cpu_ratio = f"{cpu_rates[name] / cpu_reference:.2f}" if cpu_reference else "n/a"
        spread = ", ".join(f"{case.events / t:,.0f}" for t in times[name])
        rows.append(
            f"| {name} | {case.shape} | {case.epoch_steps} | {case.epoch_events:,} | "
            f"{rates[name]:,.0f} | {ratio} | {cpu_rates[name]:,.0f} | {cpu_ratio} | "
            f"{epoch_s:.1f} | {case.epochs} | "
            f"{epoch_s * case.epochs / 60:.1f} | {spread} |"
        )
    command = "python benchmarks/bench_train.py " + " ".join(sys.argv[1:])
    report = "\n".join(
        [
            "# Training events/s per shipped config (CPU)",
            "",
            f"- command: `OMP_NUM_THREADS={torch.get_num_threads()} {command.strip()}`",
            f"- date: {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC",
            f"- machine: {cpu_name()}, {os.cpu_count()} logical "
            f"cores, torch {torch.__version__}, {torch.get_num_threads()} threads; fp32 matmul "
            f"(2048²) {gflops_before:.0f} GFLOP/s before, {gflops_after:.0f} after the timing; "
            f"1-min load average {load_before:.1f} before, {load_after:.1f} after",
            f"- timing: {args.steps} training batches per case (picked evenly across the epoch's "
            f"widths), median of {args.repeats} interleaved repeats; a step = training_step + "
            "backward + clipping + AdamW; events = real events of the batches; s/epoch "
            "extrapolated by events, without validation; minutes = s/epoch × the config's "
            "max_epochs (an upper bound where early stopping ends the run sooner); events/CPU s: "
            "over the process's CPU time (threads summed), which other users' load inflates less "
            "than wall-clock time",
            "",
            "| config (data) | batch × widths | steps/epoch | events/epoch | events/s | vs "
            f"{REFERENCE} | events/CPU s | vs {REFERENCE} (CPU) | s/epoch | epochs | "
            "min (training) | events/s per repeat |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|",
            *rows,
            *(parts_table(shares) if shares else []),
            *([""] + skipped if skipped else []),
            "",
        ]
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    write_text(args.out, report)
    print(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
