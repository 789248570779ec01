"""RePlay's SASRec training speed on ml-1m, for the peer row of ``bench_train_speed.py``.

    /work/peers/replay/bin/python benchmarks/peer_replay.py [--batches 6] [--repeats 3] [--full-epoch]

Runs under RePlay's own virtual environment (``pip install 'replay-rec[torch]'``, torch pinned to the
CPU build) and never imports seqenc, so the two libraries share nothing but the input file and the
machine. Built with RePlay's documented (non-deprecated) API: ``replay.nn.sequential.SasRec.from_params``
(its CE loss: full softmax over all items, ``torch.nn.CrossEntropyLoss``), ``ParquetModule`` with
``make_default_sasrec_transforms`` for the batches, ``replay.nn.lightning.LightningModule`` and its
``OptimizerFactory`` (Adam, lr 1e-3).

Same data and config as seqenc's bench: ``ml-1m_sequences.parquet``, every user's last 2 items left
out, the newest 201 remaining events per user (200 inputs + next-item targets), 2 blocks, d=64,
2 heads, FFN 4·d, max_len 200, dropout 0.2, batch 128. RePlay pads every batch to max_len
(``[128, 200]``); that is its pipeline, not a choice made here.

Timed like seqenc's bench: a fresh model per repeat, one untimed step on the first batch, then ``--batches`` real
training batches (forward + loss + backward + optimizer step), median over ``--repeats``, extrapolated
to one epoch by rows (every RePlay batch has the same padded width). ``--full-epoch`` also times one
``lightning.Trainer.fit`` epoch, which includes RePlay's data pipeline (Parquet reading, padding,
transforms) and Lightning's per-step logging. Prints one JSON object to stdout.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
import warnings
from importlib.metadata import version
from pathlib import Path

import lightning
import polars as pl
import torch
from replay.data import FeatureHint, FeatureSource, FeatureType
from replay.data.nn import ParquetModule, TensorFeatureInfo, TensorFeatureSource, TensorSchema
from replay.nn.lightning import LightningModule
from replay.nn.lightning.optimizer import OptimizerFactory
from replay.nn.sequential import SasRec
from replay.nn.transform.template import make_default_sasrec_transforms

BATCH, MAX_LEN, D, HEADS, BLOCKS, DROPOUT, LR = 128, 200, 64, 2, 2, 0.2, 1e-3
HOLDOUT = 2  # last items per user kept out of training (validation + test), as in seqenc


def training_sequences(source: Path, out: Path) -> tuple[int, int, int]:
    """Write RePlay's training Parquet (one row per user: item ids 0..n-1, newest ``MAX_LEN + 1``
    training events) and return (users, items, real next-item targets)."""
    events = pl.read_parquet(source, columns=["user_id", "item_id", "position"])
    items = events["item_id"].unique().sort()
    encoded = events.with_columns(
        pl.col("item_id").replace_strict(items, pl.int_range(items.len(), eager=True))
    )
    rows = (
        encoded.sort("user_id", "position")
        .group_by("user_id", maintain_order=True)
        .agg(pl.col("item_id").head(pl.len() - HOLDOUT).tail(MAX_LEN + 1))
    )
    rows.write_parquet(out)
    targets = int((rows["item_id"].list.len() - 1).clip(lower_bound=0).sum())
    return rows.height, items.len(), targets


def schema(n_items: int) -> TensorSchema:
    return TensorSchema(
        TensorFeatureInfo(
            "item_id",
            feature_type=FeatureType.CATEGORICAL,
            is_seq=True,
            feature_hint=FeatureHint.ITEM_ID,
            feature_sources=[TensorFeatureSource(FeatureSource.INTERACTIONS, "item_id")],
            cardinality=n_items,
            padding_value=n_items,
            embedding_dim=D,
        )
    )


def data_module(path: Path, tensor_schema: TensorSchema, n_items: int, seed: int) -> ParquetModule:
    transforms = make_default_sasrec_transforms(tensor_schema)
    return ParquetModule(
        batch_size=BATCH,
        metadata={"train": {"item_id": {"shape": MAX_LEN + 1, "padding": n_items}}},
        transforms={"train": transforms["train"]},
        config={
            "train": {
                "generator": torch.Generator().manual_seed(seed),
                "device": torch.device("cpu"),
                "partition_size": BATCH * 64,
            }
        },
        train_path=str(path),
    )


def model(tensor_schema: TensorSchema) -> LightningModule:
    torch.manual_seed(0)
    sasrec = SasRec.from_params(
        tensor_schema,
        embedding_dim=D,
        num_heads=HEADS,
        num_blocks=BLOCKS,
        max_sequence_length=MAX_LEN,
        dropout=DROPOUT,
        hidden_dim=4 * D,
    )
    return LightningModule(sasrec, optimizer_factory=OptimizerFactory(learning_rate=LR))


def epoch_batches(module: ParquetModule) -> list[dict]:
    """One shuffled epoch of transformed training batches, as the Trainer would feed them."""
    module.setup("fit")
    transform = module.compiled_transforms["train"]
    return [transform(batch) for batch in module.train_dataloader()]


def time_steps(tensor_schema: TensorSchema, sample: list[dict], warm: dict) -> float:
    """Seconds to train on ``sample`` with a fresh model, after one untimed step on ``warm``."""
    lm = model(tensor_schema).train()
    optimizer = lm.configure_optimizers()

    def step(batch: dict) -> None:
        loss = lm(dict(batch))["loss"]
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    step(warm)
    start = time.perf_counter()
    for batch in sample:
        step(batch)
    return time.perf_counter() - start


def time_trainer_epoch(tensor_schema: TensorSchema, path: Path, n_items: int) -> float:
    """Wall seconds of one ``Trainer.fit`` epoch (data pipeline and Lightning loop included)."""
    trainer = lightning.Trainer(
        max_epochs=1,
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        limit_val_batches=0,
        num_sanity_val_steps=0,
    )
    lm, module = model(tensor_schema), data_module(path, tensor_schema, n_items, seed=1)
    start = time.perf_counter()
    trainer.fit(lm, datamodule=module)
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, required=True, help="ml-1m_sequences.parquet")
    parser.add_argument("--batches", type=int, default=6, help="timed batches per repeat")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--full-epoch", action="store_true", help="also time one Trainer epoch")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    warnings.filterwarnings("ignore")  # RePlay/Lightning advice on DataLoader workers, partitions
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "train.parquet"
        n_users, n_items, targets = training_sequences(args.data, path)
        tensor_schema = schema(n_items)
        epoch = epoch_batches(data_module(path, tensor_schema, n_items, seed=0))
        sample = epoch[: args.batches]
        rows = sum(len(b["positive_labels"]) for b in sample)
        times = [time_steps(tensor_schema, sample, sample[0]) for _ in range(args.repeats)]
        trainer_s = time_trainer_epoch(tensor_schema, path, n_items) if args.full_epoch else None
    median = statistics.median(times)
    result = {
        "library": f"replay-rec {version('replay-rec')}",
        "torch": torch.__version__,
        "lightning": version("lightning"),
        "threads": torch.get_num_threads(),
        "users": n_users,
        "items": n_items,
        "real_targets": targets,
        "epoch_batches": len(epoch),
        "batch_shape": list(sample[0]["feature_tensors"]["item_id"].shape),
        "timed_batches": len(sample),
        "timed_rows": rows,
        "repeats_s": times,
        "s_per_epoch": median * n_users / rows,
        "ms_per_batch": median / len(sample) * 1000,
        "trainer_epoch_s": trainer_s,
    }
    json.dump(result, sys.stdout)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
