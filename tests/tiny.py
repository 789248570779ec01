"""Small seeded event logs and random-weights encoder bundles shared by the bundle, inference and
export tests, and the small fine-tuning fit of the label-head tests."""

from __future__ import annotations

import contextlib
import io
import os
from pathlib import Path

import pandas as pd
import torch

from seqenc import testing
from seqenc.cli import main
from seqenc.data.schema import EventSchema
from seqenc.data.synthetic import generate_events

SCHEMA = EventSchema(categorical=("event_type", "channel"), numeric=("amount",))
FIT = [
    "--data.schema.categorical", "[event_type, channel]",
    "--data.schema.numeric", "[amount]",
    "--data.history_len", "32",
    "--model.encoder.d_model", "32",
    "--model.encoder.n_layers", "1",
    "--trainer.enable_progress_bar", "false",
    "--trainer.enable_model_summary", "false",
]  # fmt: skip
CATALOGUE_FIT = [
    "--data.history_len", "8",
    "--model.encoder.d_model", "8",
    "--trainer.enable_progress_bar", "false",
    "--trainer.enable_model_summary", "false",
]  # fmt: skip


def tiny_events(n_entities: int = 60, seed: int = 0) -> pd.DataFrame:
    """A small synthetic log with the columns of :data:`SCHEMA`."""
    return generate_events(n_entities, n_items=40, seed=seed, max_events=80)


def tiny_bundle(
    path: Path,
    events: pd.DataFrame,
    causal: bool = True,
    pooling: str = "last",
    history_len: int = 24,
    dropout: float = 0.3,
) -> Path:
    """A random-weights encoder (seeded, its own initialisation) with vocabularies fitted on
    ``events``, saved as a bundle."""
    options = dict(n_layers=2, dropout=dropout, causal=causal, pooling=pooling)
    return random_bundle(path, events, SCHEMA, history_len, std=None, name="tiny", **options)


def random_bundle(
    path: Path, events: pd.DataFrame, schema: EventSchema, history_len: int, **options: object
) -> Path:
    """:func:`seqenc.testing.random_bundle` at the tests' size (d=16, 2 heads), every weight drawn
    from N(0, 0.3) unless ``std`` says otherwise."""
    options = {"d_model": 16, "n_heads": 2, "std": 0.3, **options}
    return testing.random_bundle(path, events, schema, history_len, **options)


def fit(folder: Path, *args: str) -> tuple[Path, str]:
    """``seqenc fit`` on ``folder``'s ``events.parquet`` (run in ``folder``, at :data:`FIT`'s small
    size); the bundle it reports and what it printed."""
    printed = _fit_in(folder, [*FIT, *args])
    line = printed.strip().splitlines()[-1]
    return folder / line.removeprefix("bundle: "), printed


def catalogue_fit(folder: Path, *args: str, daily: bool = False) -> str:
    """``seqenc fit`` in ``folder`` on a 20-item log of 40 entities (``daily``: its times cut to
    the day, so that same-day events make baskets), at :data:`CATALOGUE_FIT`'s tiny size: what it
    printed. The loss-choice and resume tests' fit."""
    events = generate_events(40, n_items=20, seed=3, max_events=20)
    if daily:
        events = events.assign(timestamp=events["timestamp"].dt.floor("D"))
    events.to_parquet(folder / "events.parquet")
    return _fit_in(folder, [*CATALOGUE_FIT, *args])


def _fit_in(folder: Path, args: list[str]) -> str:
    """``seqenc fit`` on ``folder``'s ``events.parquet``, run in ``folder``: what it printed."""
    old = Path.cwd()
    os.chdir(folder)
    try:
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            main(["fit", "--data.path", "events.parquet", *args])
    finally:
        os.chdir(old)
    return out.getvalue()


def label_fit(
    folder: Path, n_entities: int, label_steps: int, *args: str, as_of: bool = False
) -> tuple[Path, pd.DataFrame, pd.DataFrame, str]:
    """A seeded fine-tuning fit in ``folder`` on ``tiny_events(n_entities)`` whose label is each
    entity's latent ``account_type`` (with ``as_of``: each label row cut at the median of its
    entity's times), ``label_steps`` steps, ``args`` on top: ``(bundle, events without the
    label, labels, printed)``."""
    events = tiny_events(n_entities)
    events.drop(columns="account_type").to_parquet(folder / "events.parquet")
    columns = {"account_type": ("account_type", "first")}
    columns |= {"as_of": ("timestamp", "median")} if as_of else {}
    labels = events.groupby("entity_id", as_index=False).agg(**columns)
    labels.to_parquet(folder / "labels.parquet")
    torch.manual_seed(0)
    bundle, printed = fit(
        folder,
        "--data.labels", "labels.parquet",
        "--data.label_column", "account_type",
        "--model.next_item_weight", "0",
        "--model.label_steps", str(label_steps),
        "--seed_everything", "0",
        *args,
    )  # fmt: skip
    return bundle, events.drop(columns="account_type"), labels, printed


def ml100k(shared_data: Path) -> pd.DataFrame:
    """MovieLens-100K's ratings as events (skips the test when the file is absent)."""
    import pytest

    from seqenc.data.loaders import load_dataset

    path = shared_data / "ml-100k" / "u.data"
    if not path.is_file():
        pytest.skip(f"not found: {path}")
    return load_dataset(path, "movielens")
