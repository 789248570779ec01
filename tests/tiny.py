"""Small seeded event logs and random-weights encoder bundles shared by the bundle, inference and
export tests."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import torch

from seqenc.bundle import save_bundle
from seqenc.data.schema import EventSchema
from seqenc.data.sequences import build_sequences
from seqenc.data.spec import DataSpec
from seqenc.data.synthetic import generate_events
from seqenc.model.encoder import EncoderConfig, SequenceEncoder

SCHEMA = EventSchema(categorical=("event_type", "channel"), numeric=("amount",))


def tiny_events(n_entities: int = 60, seed: int = 0) -> pd.DataFrame:
    """A small synthetic log with the columns of :data:`SCHEMA`."""
    return generate_events(n_entities, n_items=40, seed=seed, max_events=80)


def tiny_bundle(
    path: Path,
    events: pd.DataFrame,
    causal: bool = True,
    pooling: str = "last",
    max_len: int = 24,
    dropout: float = 0.3,
) -> Path:
    """A random-weights encoder (seeded) with vocabularies fitted on ``events``, saved as a bundle."""
    _, vocabs = build_sequences(events, SCHEMA, max_len=None)
    torch.manual_seed(0)
    config = EncoderConfig(
        n_items=len(vocabs.item),
        d_model=16,
        n_layers=2,
        n_heads=2,
        dropout=dropout,
        max_len=max_len + 1,
        categorical_sizes=tuple(len(vocabs.categorical[c]) for c in SCHEMA.categorical),
        n_numeric=1,
        causal=causal,
        pooling=pooling,
    )
    spec = DataSpec(SCHEMA, vocabs, max_len)
    return save_bundle(path, SequenceEncoder(config), spec, name="tiny")


def random_bundle(
    path: Path, events: pd.DataFrame, schema: EventSchema, max_len: int, **options: object
) -> Path:
    """A bundle of ``EncoderConfig(**options)`` (d=16) fitted on ``events``, every weight drawn from
    N(0, 0.3): large enough that each input moves the embedding (parity tests need that)."""
    _, vocabs = build_sequences(events, schema, max_len=None)
    config = EncoderConfig(
        n_items=len(vocabs.item),
        d_model=16,
        n_heads=2,
        max_len=max_len,
        categorical_sizes=tuple(len(vocabs.categorical[c]) for c in schema.categorical),
        n_numeric=len(schema.numeric),
        **options,
    )
    torch.manual_seed(0)
    model = SequenceEncoder(config)
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.3)
    objective = "causal" if config.causal else "masked"
    return save_bundle(path, model, DataSpec(schema, vocabs, max_len), objective, name="random")


def ml100k(shared_data: Path) -> pd.DataFrame:
    """MovieLens-100K's ratings as events (skips the test when the file is absent)."""
    import pytest

    from seqenc.data.loaders import load_dataset

    path = shared_data / "ml-100k" / "u.data"
    if not path.is_file():
        pytest.skip(f"not found: {path}")
    return load_dataset(path, "movielens")
