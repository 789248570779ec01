"""A reference for the ICU-stay log written without seqenc's model: a per-event Transformer.

The issue's "120-line per-event Transformer" rebuilt from its description, to tell the design
from the data: each event is its parameter's embedding plus a small MLP of its value (standardised
per parameter on the training stays) and of its hour since admission; two pre-LN blocks with
bidirectional attention over a stay's newest 512 events, attention pooling, a linear head. The
folds are the probes' (``seqenc.evaluate.cv_folds``), 10 % of the training stays pick the epoch.
``--init gpt`` swaps PyTorch's default initialisation for seqenc's (every weight N(0, 0.02)),
``--positions`` / ``--raw-values`` add seqenc's learned positions and its shared map of the raw
value: the ablations that locate a gap. ``--model seqenc`` trains seqenc's own encoder
(``--encoder``: EncoderConfig fields as JSON) in this same pipeline, so that a gap is told apart
between the model and seqenc's training pipeline; ``--token reference`` gives that encoder this
script's token. One thread, seeded.

    OMP_NUM_THREADS=1 python benchmarks/event_transformer.py --work /tmp/icu --fold 0
    OMP_NUM_THREADS=1 python benchmarks/event_transformer.py --work /tmp/icu --fold 0 \
        --model seqenc --encoder '{"init": "fan_in", "positional": "none"}'
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F
from torch import nn

from seqenc.evaluate.probe import cv_folds

LABEL, MAX_EVENTS, HOURS = "in_hospital_death", 512, 48.0


def stays(work: Path, train_ids: np.ndarray) -> tuple[pd.DataFrame, list[tuple], int]:
    """The label table, each stay's newest events as ``(parameter, z, hours, signed log)``
    arrays (in label-table order) and the number of parameters."""
    ev = pd.read_parquet(work / "physionet_events.parquet")
    labels = pd.read_parquet(work / "physionet_labels.parquet")
    codes, params = pd.factorize(ev["parameter"], sort=True)
    ev["p"] = codes + 1
    ev["h"] = (ev.timestamp - ev.groupby("stay_id").timestamp.transform("min")).dt.total_seconds()
    ev["h"] /= 3600.0
    fit = ev[ev.stay_id.isin(train_ids)].groupby("p").value.agg(["mean", "std"])
    mean = ev.p.map(fit["mean"]).fillna(0.0)
    std = ev.p.map(fit["std"]).replace(0.0, 1.0).fillna(1.0)
    ev["z"] = ((ev.value - mean) / std).clip(-8, 8)
    ev["r"] = np.sign(ev.value) * np.log1p(ev.value.abs())
    ev = ev.sort_values(["stay_id", "timestamp"], kind="stable")
    groups = dict(tuple(ev.groupby("stay_id")[["p", "z", "h", "r"]]))
    out = []
    for sid in labels.stay_id:
        g = groups[sid].iloc[-MAX_EVENTS:]
        out.append(tuple(g[c].to_numpy(np.float32 if c != "p" else np.int64) for c in "pzhr"))
    return labels, out, len(params)


def collate(seqs: list[tuple], rows: np.ndarray) -> tuple[torch.Tensor, ...]:
    """Right-padded ``[B, L]`` parameter ids (0 = PAD), z, hours / 48 and signed-log values."""
    width = max(len(seqs[i][0]) for i in rows)
    out = [np.zeros((len(rows), width), np.int64)] + [np.zeros((len(rows), width), np.float32)] * 3
    out = [a.copy() for a in out]
    for r, i in enumerate(rows):
        for a, s in zip(out, seqs[i], strict=True):
            a[r, : len(s)] = s
    out[2] /= HOURS
    return tuple(torch.from_numpy(a) for a in out)


class ValueMLP(nn.Module):
    """A scalar to a ``d``-vector through one tanh layer (continuous value embedding)."""

    def __init__(self, d: int) -> None:
        super().__init__()
        self.inner, self.outer = nn.Linear(1, 16), nn.Linear(16, d, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.outer(torch.tanh(self.inner(x[..., None])))


class Model(nn.Module):
    """Event embeddings → bidirectional pre-LN blocks → attention pooling → one logit."""

    def __init__(self, n_params: int, args: argparse.Namespace, d: int = 64) -> None:
        super().__init__()
        self.param = nn.Embedding(n_params + 1, d, padding_idx=0)
        self.value, self.hour = ValueMLP(d), ValueMLP(d)
        self.raw = nn.Linear(1, d) if args.raw_values else None
        self.position = nn.Embedding(MAX_EVENTS, d) if args.positions else None
        layer = nn.TransformerEncoderLayer(d, 2, 2 * d, args.dropout, "gelu", batch_first=True,
                                           norm_first=True)  # fmt: skip
        self.blocks = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.norm, self.score, self.head = nn.LayerNorm(d), nn.Linear(d, 1), nn.Linear(d, 1)
        self.drop = nn.Dropout(args.dropout)

    def forward(self, p, z, h, r) -> torch.Tensor:
        real = p > 0
        x = self.param(p) + self.value(z) + self.hour(h)
        if self.raw is not None:
            x = x + self.raw(r[..., None])
        if self.position is not None:
            x = x + self.position.weight[: p.shape[1]]
        x = self.norm(self.blocks(self.drop(x), src_key_padding_mask=~real))
        weights = self.score(x).squeeze(-1).masked_fill(~real, -torch.inf).softmax(-1)
        return self.head(self.drop((weights[..., None] * x).sum(1))).squeeze(-1)


class SeqencModel(nn.Module):
    """seqenc's entity encoder (``--encoder`` JSON: EncoderConfig fields) and a linear head, fed
    the reference's arrays as a seqenc Batch: the hybrid that tells the model from the pipeline."""

    def __init__(self, n_params: int, args: argparse.Namespace, stats: tuple) -> None:
        super().__init__()
        from seqenc.model.encoder import EncoderConfig, SequenceEncoder

        options = dict(d_model=64, n_heads=2, n_layers=2, causal=False, pooling="attention",
                       n_numeric=1, numeric_scaling="per_item", time_values=True,
                       item_values=True, missing_values=True, n_positions=MAX_EVENTS + 2,
                       dropout=args.dropout)  # fmt: skip
        options |= json.loads(args.encoder)
        self.encoder = SequenceEncoder(EncoderConfig(n_items=n_params + 3, **options))
        center, scale = stats
        self.encoder.embed.set_numeric_stats(torch.from_numpy(center), torch.from_numpy(scale))
        self.head, self.drop = nn.Linear(64, 1), nn.Dropout(args.dropout)
        if args.token.startswith("reference"):
            part = args.token.removeprefix("reference").lstrip("-") or None
            self.encoder.embed = ReferenceToken(n_params + 3, self.encoder.embed, seqenc_part=part)
        elif args.token == "tanh":  # seqenc's token, its value and time MLPs bounded by tanh
            for mlp in (self.encoder.embed.value, self.encoder.embed.time):
                mlp[1] = nn.Tanh()

    def forward(self, p, z, h, r) -> torch.Tensor:
        from seqenc.model.batch import Batch

        lengths = (p > 0).sum(1)
        seconds = (h * HOURS * 3600.0).double()
        real = p > 0
        newest = seconds.gather(1, (lengths - 1).clamp(min=0)[:, None])
        dt_ref = ((newest - seconds) * real).double()
        dt_prev = torch.cat([torch.zeros_like(seconds[:, :1]), seconds.diff(dim=1)], 1)
        batch = Batch(
            items=torch.where(real, p + 2, 0), lengths=lengths, dt_prev=(dt_prev * real).float(),
            dt_ref=dt_ref, categorical=torch.zeros(*p.shape, 0, dtype=torch.long),
            numeric=(torch.sign(r) * torch.expm1(r.abs()))[..., None] * real[..., None],
            index=torch.arange(len(p)),
            dt_query=(HOURS * 3600.0 - newest[:, 0]).clamp(min=0).float(),
        )  # fmt: skip
        return self.head(self.drop(self.encoder.entity_embedding(batch))).squeeze(-1)


class ReferenceToken(nn.Module):
    """The reference's token (parameter table + value MLP + hour MLP) in seqenc's encoder;
    ``seqenc_part`` ("time" or "value") takes that part from seqenc's token instead."""

    def __init__(self, n_items: int, embed: nn.Module, d: int = 64, seqenc_part=None) -> None:
        super().__init__()
        self.param = nn.Embedding(n_items, d, padding_idx=0)
        self.value, self.hour = ValueMLP(d), ValueMLP(d)
        self.seqenc, self.part = embed, seqenc_part
        self.register_buffer("center", embed.numeric_center[:, 0].clone())
        self.register_buffer("scale", embed.numeric_scale[:, 0].clone())

    def forward(self, batch, positions=None) -> torch.Tensor:
        from seqenc.model.embeddings import signed_log

        real = batch.padding_mask & (batch.items > 2)
        v = torch.nan_to_num(batch.numeric[..., 0])
        logs = signed_log(v)
        z = ((logs - self.center[batch.items]) / self.scale[batch.items]).clamp(-8, 8)
        hours = (batch.dt_ref[:, :1] - batch.dt_ref).clamp(min=0).float() / 3600.0 / HOURS
        value, hour = self.value(z), self.hour(hours)
        if self.part == "time":
            hour = self.seqenc.time(self.seqenc.time_values(batch))
        elif self.part == "value":
            value = self.seqenc.value(z[..., None])
        return self.param(batch.items) + (value + hour) * real[..., None]


def item_stats(seqs: list[tuple], rows: np.ndarray, n_params: int) -> tuple:
    """seqenc's per-item centre and scale of the training stays' signed-log values."""
    from seqenc.data.numeric import item_statistics

    items = np.concatenate([seqs[i][0] for i in rows]) + 2
    logs = np.concatenate([seqs[i][3] for i in rows]).astype(np.float64)
    return item_statistics(items, np.sign(logs) * np.expm1(np.abs(logs)), n_params + 3)


def gpt_init(model: nn.Module) -> None:
    """seqenc's initialisation: N(0, 0.02) weights, zero biases."""
    for name, param in model.named_parameters():
        if name.endswith("bias"):
            nn.init.zeros_(param)
        elif param.dim() >= 2:
            nn.init.normal_(param, std=0.02)


def predict(model: Model, seqs: list[tuple], rows: np.ndarray) -> np.ndarray:
    """Death probabilities of ``rows``, batched by length."""
    model.eval()
    order = rows[np.argsort([len(seqs[i][0]) for i in rows], kind="stable")]
    with torch.no_grad():
        probs = [torch.sigmoid(model(*collate(seqs, order[j : j + 256])))
                 for j in range(0, len(order), 256)]  # fmt: skip
    out = pd.Series(torch.cat(probs).numpy(), index=order)
    return out.loc[rows].to_numpy()


def train(args: argparse.Namespace) -> dict:
    """Trains on the fold's training stays; the held-out ROC-AUC at the best validation epoch."""
    from sklearn.metrics import roc_auc_score

    torch.manual_seed(args.seed)
    rng = np.random.default_rng(args.seed)
    labels = pd.read_parquet(args.work / "physionet_labels.parquet")
    y = labels[LABEL].to_numpy()
    fit_rows, test = cv_folds(y)[3][args.fold]
    fit_rows = rng.permutation(fit_rows)
    val, fit_rows = fit_rows[: len(fit_rows) // 10], fit_rows[len(fit_rows) // 10 :]
    _, seqs, n_params = stays(args.work, labels.stay_id.to_numpy()[fit_rows])
    if args.model == "seqenc":
        model = SeqencModel(n_params, args, item_stats(seqs, fit_rows, n_params))
    else:
        model = Model(n_params, args)
    if args.init == "gpt":
        gpt_init(model)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01)
    steps = args.epochs * -(-len(fit_rows) // args.batch)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda k: min(1.0, (k + 1) / 50) * 0.5 * (1 + np.cos(np.pi * min(k, steps) / steps))
    )
    target, weight = torch.tensor(y, dtype=torch.float32), torch.tensor(args.pos_weight)
    best, history, clock = (-1.0, None), [], time.perf_counter()
    for epoch in range(args.epochs):
        model.train()
        jitter = [len(seqs[i][0]) + rng.random() * 64 for i in fit_rows]
        by_length = fit_rows[np.argsort(jitter, kind="stable")]
        batches = [by_length[j : j + args.batch] for j in range(0, len(by_length), args.batch)]
        for b in rng.permutation(len(batches)):
            rows = batches[b]
            loss = F.binary_cross_entropy_with_logits(
                model(*collate(seqs, rows)), target[rows], pos_weight=weight
            )
            opt.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            schedule.step()
        v, t = (roc_auc_score(y[r], predict(model, seqs, r)) for r in (val, test))
        history.append({"epoch": epoch, "val": v, "test": t, "s": time.perf_counter() - clock})
        print(history[-1], flush=True)
        best = max(best, (v, t), key=lambda b: b[0])
    return {"args": {k: str(v) for k, v in vars(args).items()}, "val": best[0],
            "test_roc_auc": best[1], "history": history}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--work", type=Path, required=True, help="prepared physionet folder")
    parser.add_argument("--fold", type=int, default=0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--epochs", type=int, default=12)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--pos-weight", type=float, default=6.0, help="positives' loss weight")
    parser.add_argument("--dropout", type=float, default=0.2)
    parser.add_argument("--init", choices=["torch", "gpt"], default="torch")
    parser.add_argument("--positions", action="store_true")
    parser.add_argument("--raw-values", action="store_true")
    parser.add_argument("--model", choices=["reference", "seqenc"], default="reference")
    parser.add_argument(
        "--token",
        choices=["seqenc", "reference", "reference-time", "reference-value", "tanh"],
        default="seqenc",
    )
    parser.add_argument("--encoder", default="{}", help="seqenc EncoderConfig fields (JSON)")
    parser.add_argument("--output", type=Path, help="JSON of the run")
    args = parser.parse_args()
    result = train(args)
    print(json.dumps({k: result[k] for k in ("val", "test_roc_auc")}))
    if args.output:
        args.output.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
