"""A bundle loaded for encoding, and the loop that runs its backend over the batches."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import torch

from seqenc.bundle import BundleMeta, load_bundle
from seqenc.data.events import Source
from seqenc.data.sequences import SequenceStore
from seqenc.data.vocab import Vocabularies
from seqenc.devices import torch_device
from seqenc.encoding.backends import Backend, TorchBackend, check_backend, runtime_backend
from seqenc.encoding.batches import iter_batches
from seqenc.encoding.options import MAX_TOKENS
from seqenc.encoding.outputs import check_finite
from seqenc.encoding.store import Counts, entity_columns, sequences
from seqenc.model.encoder import SequenceEncoder


@dataclass(eq=False)  # compared and hashed by identity, as a loaded model is
class LoadedBundle:
    """A bundle's model (eval mode, on ``device``), meta and vocabularies, and the backend that
    runs its forward pass (default: the torch model on ``device``)."""

    model: SequenceEncoder
    meta: BundleMeta
    vocabs: Vocabularies
    device: torch.device
    backend: Backend | None = None

    def __post_init__(self) -> None:
        self.device = torch_device(self.device)
        self.model = self.model.to(self.device).eval()
        if self.backend is None:
            self.backend = TorchBackend(self.model, self.device)


def load_on(
    path: str | Path,
    device: str | torch.device | None = None,
    backend: str = "torch",
    onnx: str | Path | None = None,
) -> LoadedBundle:
    """The bundle at ``path`` on ``device`` with its ``backend`` (:func:`runtime_backend`)."""
    check_backend(backend)  # before loading anything
    device = torch_device(device)
    model, meta, vocabs = load_bundle(path)
    runtime = runtime_backend(backend, path, meta, onnx)
    return LoadedBundle(model, meta, vocabs, device, runtime)


def embed_store(
    store: SequenceStore,
    backend: Backend,
    history_len: int,
    dim: int,
    batch_size: int,
    max_tokens: int = MAX_TOKENS,
) -> np.ndarray:
    """``[len(store), dim]`` float32 embeddings of every history, in store order: length-sorted
    batches through ``backend``, scattered back (so no row depends on the batch it was in)."""
    out = np.zeros((len(store), dim), dtype=np.float32)
    for batch in iter_batches(store, history_len, batch_size, max_tokens=max_tokens):
        out[batch.index.numpy()] = backend.embed(batch)
    return out


@dataclass
class Encoded:
    """One encode's result: the entity ``columns`` (:func:`entity_columns`), their
    ``embeddings`` ``[n, d]`` float32 in the same order, and the call's :class:`Counts`."""

    columns: pa.Table
    embeddings: np.ndarray
    counts: Counts


@torch.inference_mode()
def encode_events(
    bundle: LoadedBundle,
    events: Source,
    as_of: object = None,
    on_empty: str = "raise",
    batch_size: int = 256,
    max_tokens: int = MAX_TOKENS,
) -> Encoded:
    """Every entity of ``events`` (ascending id) encoded by ``bundle``: histories with its schema,
    vocabularies and ``history_len``, batched, embedded, read out; unknown values and skipped
    entities are logged."""
    history_len = bundle.meta.history_len
    store, counts = sequences(events, bundle.meta, bundle.vocabs, as_of, on_empty, history_len)
    counts.report()
    dim = bundle.meta.dim
    embeddings = embed_store(store, bundle.backend, history_len, dim, batch_size, max_tokens)
    check_finite(embeddings, "embeddings", bundle.meta.name)
    columns = entity_columns(store, np.arange(len(store)), history_len)
    return Encoded(columns, embeddings, counts)
