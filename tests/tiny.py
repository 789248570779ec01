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
