"""A bundle loaded for encoding, and the one streaming core every encode goes through."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from seqenc.bundle import BundleMeta, load_bundle
from seqenc.compat.lineage import Lineage, load_lineage
from seqenc.compat.parent_map import ParentMap
from seqenc.data.events import Events, Source, read_events
from seqenc.data.sequences import SequenceStore
from seqenc.data.vocab import Vocabularies
from seqenc.devices import torch_device
from seqenc.encoding.backends import Backend, runtime_backend
from seqenc.encoding.batches import iter_batches
from seqenc.encoding.options import EncodeOptions
from seqenc.encoding.outputs import Chunk, LastStep
from seqenc.encoding.store import Counts, entity_columns, sequences, wide_inputs
from seqenc.errors import SeqencError
from seqenc.model.encoder import SequenceEncoder


@dataclass(eq=False)  # compared and hashed by identity, as a loaded model is
class LoadedBundle:
    """A bundle's model (eval mode, on ``device``), meta and vocabularies, the backend that runs
    its forward pass (default: the torch model on ``device``) and its lineage (the map to its
    parent's space, :mod:`seqenc.compat.lineage`; ``None`` without one)."""

    model: SequenceEncoder
    meta: BundleMeta
    vocabs: Vocabularies
    device: torch.device
    backend: Backend | None = None
    lineage: tuple[Lineage, ParentMap] | None = None

    def __post_init__(self) -> None:
        self.device = torch_device(self.device)
        self.model = self.model.to(self.device).eval()
        if self.backend is None:
            self.backend = runtime_backend("torch", self.model, self.device, None, self.meta)

    def on(self, device: str | torch.device) -> LoadedBundle:
        """This bundle on ``device`` (the torch backend moves with the model; an ONNX Runtime
        session stays on the CPU)."""
        backend = None if self.backend.name == "torch" else self.backend
        return dataclasses.replace(self, device=device, backend=backend)


def load_on(
    path: str | Path,
    device: str | torch.device | None = None,
    options: EncodeOptions | None = None,
) -> LoadedBundle:
    """The bundle at ``path`` on ``device``, with the backend of ``options`` and its lineage
    (checked: a foreign map fails here)."""
    options = options or EncodeOptions()
    device = torch_device(device)
    model, meta, vocabs = load_bundle(path)
    runtime = runtime_backend(options.backend, model, device, path, meta, options.onnx)
    return LoadedBundle(model, meta, vocabs, device, runtime, load_lineage(path, meta))


def embed_batches(
    store: SequenceStore,
    backend: Backend,
    history_len: int,
    options: EncodeOptions,
    rank: int = 0,
    world_size: int = 1,
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """``(rows, embeddings)`` of each of rank ``rank``'s batches of ``store``
    (:func:`iter_batches`): the store rows and their ``[n, d]`` float32 embeddings."""
    sizes = {"batch_size": options.batch_size, "max_tokens": options.max_tokens}
    for batch in iter_batches(store, history_len, rank=rank, world_size=world_size, **sizes):
        yield batch.index.numpy(), backend.embed(batch)


def last_step(bundle: LoadedBundle, options: EncodeOptions) -> LastStep:
    """The :class:`LastStep` of ``bundle`` with ``options`` (refused in one line for a space it
    has no map to, or a backend it was not loaded with)."""
    if options.backend != bundle.backend.name:
        raise SeqencError(
            f"backend={options.backend!r}, but this bundle was loaded with "
            f"{bundle.backend.name!r}: load it with backend={options.backend!r}"
        )
    meta, head = bundle.meta, bundle.model.head
    return LastStep.of(meta, head, bundle.lineage, options.space, options.parent, options.as_of)


class Encoding:
    """One encode of ``bundle`` with ``options``: the last step (:class:`LastStep`: the space's
    map, the head) is resolved, or refused in one line, before any event is read; ``counts``
    adds up what every part read met."""

    def __init__(self, bundle: LoadedBundle, options: EncodeOptions) -> None:
        self.bundle, self.options, self.counts = bundle, options, Counts()
        self.last = last_step(bundle, options)

    def stores(self, parts: Iterable[Source], keep_newest: int | None) -> Iterator[SequenceStore]:
        """Each part's histories (:func:`sequences`, newest ``keep_newest`` events), counted;
        a fused head's aggregates are not computed (what reads the stores has no use for them)."""
        for store, _ in self._read(parts, keep_newest, aggregates=False):
            yield store

    def _read(
        self, parts: Iterable[Source], keep_newest: int | None, aggregates: bool = True
    ) -> Iterator[tuple[SequenceStore, np.ndarray | None]]:
        """Each part's store and, with ``aggregates``, a fused head's aggregates of its entities
        (:func:`wide_inputs`; else ``None``), both from the part read once (its typed
        :class:`Events`, which a reader takes as is)."""
        bundle, schema = self.bundle, self.bundle.meta.schema
        for part in parts:
            part = Events(read_events(part, schema, exact=True), schema)
            store, counts = sequences(part, bundle.meta, bundle.vocabs, self.options, keep_newest)
            wide = wide_inputs(part, store, bundle.meta, self.options.cut) if aggregates else None
            self.counts += counts
            del part  # the next part is read with this one's memory released
            yield store, wide
            del store, wide

    @torch.inference_mode()
    def chunks(
        self, parts: Iterable[Source], rank: int = 0, world_size: int = 1
    ) -> Iterator[Chunk]:
        """The core: every entity of each part (entity-complete event sources) → its key
        columns, its embedding and the head's predictions, a batch at a time; rank ``rank`` of
        ``world_size`` gets every ``world_size``-th batch of each part (an empty part: one empty
        chunk, on rank 0)."""
        history_len, dim = self.bundle.meta.history_len, self.bundle.meta.dim
        for store, wide in self._read(parts, history_len):
            if len(store) == 0 and rank == 0:
                none = np.zeros(0, dtype=np.int64)
                keys = entity_columns(store, none, history_len)
                yield self.last(keys, np.zeros((0, dim)), none, _rows(wide, none))
            batches = embed_batches(
                store, self.bundle.backend, history_len, self.options, rank, world_size
            )
            for rows, embeddings in batches:
                keys = entity_columns(store, rows, history_len)
                yield self.last(keys, embeddings, rows, _rows(wide, rows))
            del store, batches

    def whole(self, events: Source) -> Chunk:
        """Every entity of ``events`` in one chunk, in ascending id order (the store's): the
        batches' embeddings scattered into place, then one last step for all of them."""
        return self.whole_and_store(events)[0]

    @torch.inference_mode()
    def whole_and_store(self, events: Source) -> tuple[Chunk, SequenceStore]:
        """:meth:`whole`, and the store its entities were read into (its rows are the chunk's)."""
        history_len, dim = self.bundle.meta.history_len, self.bundle.meta.dim
        store, wide = next(self._read([events], history_len))
        native = np.zeros((len(store), dim), dtype=np.float32)
        for rows, embeddings in embed_batches(
            store, self.bundle.backend, history_len, self.options
        ):
            native[rows] = embeddings
        rows = np.arange(len(store), dtype=np.int64)
        return self.last(entity_columns(store, rows, history_len), native, rows, wide), store


def _rows(wide: np.ndarray | None, rows: np.ndarray) -> np.ndarray | None:
    return None if wide is None else wide[rows]
