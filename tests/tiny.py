"""Small seeded event logs and random-weights encoder bundles shared by the bundle, inference and
export tests."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from seqenc import testing
from seqenc.data.schema import EventSchema
from seqenc.data.synthetic import generate_events

SCHEMA = EventSchema(categorical=("event_type", "channel"), numeric=("amount",))


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


def ml100k(shared_data: Path) -> pd.DataFrame:
    """MovieLens-100K's ratings as events (skips the test when the file is absent)."""
    import pytest

    from seqenc.data.loaders import load_dataset

    path = shared_data / "ml-100k" / "u.data"
    if not path.is_file():
        pytest.skip(f"not found: {path}")
    return load_dataset(path, "movielens")
