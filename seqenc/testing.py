"""Random-weights model bundles: the one helper the tests and the benchmarks build them with."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd
import torch

from seqenc.bundle import save_bundle
from seqenc.data.bounds import VocabBounds
from seqenc.data.schema import EventSchema
from seqenc.data.sequences import build_sequences
from seqenc.data.spec import DataSpec
from seqenc.model.encoder import EncoderConfig, SequenceEncoder
from seqenc.model.head import SupervisedHead


def random_bundle(
    path: str | Path,
    events: pd.DataFrame,
    schema: EventSchema,
    history_len: int,
    std: float | None = None,
    name: str = "random",
    bounds: VocabBounds | None = None,
    head: Mapping[str, Any] | None = None,
    **options: Any,
) -> Path:
    """A bundle of a seeded random-weights ``EncoderConfig(**options)`` with vocabularies fitted on
    ``events``, fed ``history_len`` events and holding ``history_len + 1`` positions, as a trained
    model does. ``std``: every weight drawn from N(0, std), large enough that each input moves the
    embedding (parity tests need that); ``None`` keeps the model's own initialisation. ``bounds``:
    the vocabulary bounds (none: every value kept). ``head``: a label head's description
    (:meth:`~seqenc.model.head.SupervisedHead.describe`: a fine-tuned bundle; with
    ``aggregates``, a fused one), every weight of it drawn from N(0, 0.3)."""
    _, vocabs = build_sequences(events, schema, keep_newest=None, bounds=bounds)
    config = EncoderConfig(
        n_items=len(vocabs.item),
        n_positions=history_len + 1,
        categorical_sizes=tuple(len(vocabs.categorical[c]) for c in schema.categorical),
        n_numeric=len(schema.numeric),
        **options,
    )
    torch.manual_seed(0)
    model = SequenceEncoder(config)
    if std is not None:
        with torch.no_grad():
            for p in model.parameters():
                p.normal_(0.0, std)
    if head is not None:
        model.head = SupervisedHead(config.d_model, **head)
        with torch.no_grad():
            for p in model.head.parameters():
                p.normal_(0.0, 0.3)
    objective = "causal" if config.causal else "masked"
    spec = DataSpec(schema, vocabs, history_len)
    return save_bundle(path, model, spec, objective, name=name)
