"""The Python API: a model bundle → one embedding per entity of an event log, and item recommendations.

>>> enc = load_encoder("runs/quickstart/.../bundle")          # doctest: +SKIP
>>> df = enc.encode(events, as_of="2024-06-01")                # doctest: +SKIP

The encoding itself is the core's (:mod:`seqenc.encoding`: the same path as training, items the
model never saw become UNK or a bucket, token-budget batches, eval mode, identical results on two
calls); this module is the facade: output forms, the backend (torch, or ``backend="onnxruntime"``
on the graph ``seqenc onnx`` writes), incremental states and recommendations (always torch).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import numpy as np
import pandas as pd
import pyarrow as pa
import torch

from seqenc.data.events import Source
from seqenc.encoding import (
    OUTPUTS,
    EncodeOptions,
    Encoding,
    LoadedBundle,
    encode_options,
    last_step,
    load_on,
)
from seqenc.encoding.options import check_choice
from seqenc.encoding.outputs import Embeddings
from seqenc.errors import SeqencError
from seqenc.incremental.state import EncoderState, load_state
from seqenc.incremental.update import build_state, state_output, update_state
from seqenc.retrieval.filters import banned_items, candidate_lists
from seqenc.retrieval.index import VectorIndex, build_index
from seqenc.retrieval.index_files import load_index
from seqenc.retrieval.items import item_table
from seqenc.retrieval.queries import query_columns
from seqenc.retrieval.recommend import ItemIndex, Request, recommend_store
from seqenc.retrieval.space import read_vectors, table_metadata

Output = Literal["pandas", "numpy", "torch", "arrow"]


class Encoder(LoadedBundle):
    """A loaded bundle on a device (``Encoder(model, meta, vocabs, device, backend=None,
    lineage=None)``); see :func:`load_encoder`. Every method takes an
    :class:`~seqenc.encoding.EncodeOptions`, or its fields by name (``as_of=...``,
    ``on_empty=...``, ``space=...``)."""

    @property
    def dim(self) -> int:
        return self.meta.dim

    def __repr__(self) -> str:
        m = self.meta
        return f"Encoder(name={m.name!r}, objective={m.objective!r}, dim={m.dim}, device={self.device})"

    def options(self, options: EncodeOptions | None = None, **fields: Any) -> EncodeOptions:
        """The options of a call: ``options`` (default: :class:`EncodeOptions` with this
        encoder's backend) with ``fields`` replaced, checked."""
        return encode_options(options, fields, backend=self.backend.name)

    def encode(
        self,
        events: Source,
        options: EncodeOptions | None = None,
        *,
        output: Output = "pandas",
        query: bool = False,
        **fields: Any,
    ) -> pd.DataFrame | pa.Table | Embeddings:
        """One embedding per entity of ``events``, entities in ascending id order.

        Args:
            events: a DataFrame, Arrow table, or Parquet/CSV path(s) / glob, with the bundle's columns.
            options, fields: :class:`~seqenc.encoding.EncodeOptions` (``as_of``, ``on_empty``,
                ``batch_size``, ``max_tokens``, ``space``, ``parent``), or its fields by name.
            output: ``"pandas"`` (columns ``entity_id``, ``embedding`` (float32 arrays),
                ``n_events_read``, ``last_event_time``, and a fine-tuned bundle's ``prediction``
                (and ``probabilities``); counts and space in ``df.attrs``), ``"arrow"`` (the
                columns of the Parquet export, counts and space in the schema metadata), ``"numpy"``
                or ``"torch"`` (an :class:`Embeddings`).
            query: also each entity's query vector, the vector the model scores items with
                (``"pandas"`` or ``"arrow"``, ``space="native"``): a ``query`` column, and with the
                repeat head ``query_shift``, ``repeat_items`` and ``repeat_scores``
                (:mod:`seqenc.retrieval.queries`); with :meth:`items` they give
                :meth:`recommend`'s scores.
        """
        check_choice("output", output, OUTPUTS)
        options = self.options(options, **fields)
        if query and (output not in ("pandas", "arrow") or options.space != "native"):
            raise SeqencError(
                "query=True adds columns of the model's own space: output 'pandas' or 'arrow', "
                f"space 'native' (got output={output!r}, space={options.space!r})"
            )
        run = Encoding(self, options)
        chunk, store = run.whole_and_store(events)
        run.counts.report()
        extra = query_columns(self, store, options) if query else None
        return run.last.output(chunk, run.counts.output(), output, extra)

    def items(self, output: Literal["pandas", "arrow"] = "pandas") -> pd.DataFrame | pa.Table:
        """Every item's vector in the space the model scores in: ``item_id``, ``vector`` (its
        inner product with an entity's ``query`` from ``encode(..., query=True)`` is the model's
        score, or with the repeat head its generation part) and ``frequency_rank`` (the bundle
        keeps no counts: 1 = most frequent in training); model, space and what the frequency is
        in the metadata (pandas: ``attrs``)."""
        check_choice("output", output, ("pandas", "arrow"))
        table = item_table(self.model, self.meta, self.vocabs)
        if output == "arrow":
            return table
        df = table.to_pandas()
        df.attrs.update(table_metadata(table))
        return df

    def index(
        self,
        vectors: pd.DataFrame | pa.Table | Literal["items"] = "items",
        kind: Literal["auto", "exact", "approximate"] = "auto",
        recall: float = 0.95,
        queries: pd.DataFrame | pa.Table | None = None,
    ) -> VectorIndex:
        """A nearest-neighbour index of this model's item vectors (``"items"``) or of a table it
        wrote (``encode``'s embeddings: accounts alike, by cosine). ``kind``: exact below
        :data:`~seqenc.retrieval.index.EXACT_BELOW` vectors (or without faiss), else faiss's
        inverted file whose ``nprobe`` keeps recall@10 ``recall`` against the exact top-10 on
        sampled ``queries`` (an ``encode(..., query=True)`` table; default: its own vectors).
        Save it with :func:`~seqenc.retrieval.index_files.save_index`."""
        table = self.items("arrow") if isinstance(vectors, str) else vectors
        ids, matrix, space = read_vectors(table)
        sample = None
        if queries is not None:
            roles = ("queries",) if space.vectors == "items" else ("accounts",)
            _, sample, asked = read_vectors(queries, roles, "the queries")
            space.admits(asked)
        return build_index(ids, matrix, space, kind, recall, sample)

    def state(
        self, events: Source, options: EncodeOptions | None = None, **fields: Any
    ) -> EncoderState:
        """Encode ``events`` keeping what :meth:`update` needs to extend each history (causal
        models; see :mod:`seqenc.incremental.update`). The embeddings: ``state_output``, or the next
        :meth:`update`. Runs the torch model in float32 whatever the backend."""
        return build_state(self, events, self.options(options, **fields))

    def update(
        self,
        state: EncoderState,
        events: Source | None,
        options: EncodeOptions | None = None,
        *,
        output: Output = "pandas",
        **fields: Any,
    ) -> tuple[pd.DataFrame | pa.Table | Embeddings, EncoderState]:
        """``(embeddings, new_state)``: what :meth:`encode` gives on the state's events and
        ``events`` together (every entity of both, within float rounding; in ``options.space``,
        with a fine-tuned bundle's predictions), running only the new positions; ``state`` is left
        as it was. ``events=None``: no new event, only a new ``as_of`` (a time-aware model's
        embeddings move with the query time). The counts of what ran are in ``new_state.stats``
        (and the pandas attrs / arrow metadata)."""
        check_choice("output", output, OUTPUTS)
        options = self.options(options, **fields)
        last = last_step(self, options)  # a space without a map is refused before any work
        new_state = update_state(self, state, events, options)
        return state_output(new_state, last, output), new_state

    def load_state(self, path: str | Path) -> EncoderState:
        """A state saved by ``EncoderState.save``; refused if another bundle made it."""
        return load_state(path, self.meta)

    def recommend(
        self,
        events: Source,
        k: int = 10,
        filter_seen: bool = True,
        options: EncodeOptions | None = None,
        *,
        candidates: pd.DataFrame | pa.Table | None = None,
        allow: Any = None,
        deny: Any = None,
        index: VectorIndex | str | Path | None = None,
        **fields: Any,
    ) -> pd.DataFrame:
        """Top-``k`` items per entity by the model's scores (the tied output layer's logits, or with
        the repeat head the log-probabilities of its mixture), for the next event at ``as_of``.

        Returns a long DataFrame: ``entity_id``, ``rank`` (1 = best), ``item_id`` (original item
        values) and ``score``, sorted by entity then rank. With ``filter_seen`` an item anywhere in
        the entity's history (not only its newest ``history_len`` events) is never recommended, so an
        entity may get fewer than ``k`` rows. An out-of-vocabulary bucket is never recommended.
        Options as in :meth:`encode` (``space`` does not apply: the scores are this model's).

        Filters, on every path: ``allow`` (only these item ids) and ``deny`` (never these);
        ``candidates`` (a table of ``entity_id``, ``item_id``: each entity ranks its own list,
        scored exactly; an entity without a row gets none). ``index``: an item index of this model
        (:meth:`index`, or its folder): retrieve by the query vector, re-score the retrieved and
        the history's items exactly (:mod:`seqenc.retrieval.recommend`); exact for an exact index.
        An id the model does not know, an empty list, an index of another model: one line.
        """
        if not isinstance(k, (int, np.integer)) or isinstance(k, bool) or k < 1:
            raise SeqencError(f"k must be a positive integer, got {k!r}")
        options = self.options(options, **fields)
        if options.space != "native":
            raise SeqencError("recommend scores this model's items: space='parent' does not apply")
        vocab = self.vocabs.item
        request = Request(
            min(int(k), len(vocab.values)), filter_seen, banned_items(vocab, allow, deny)
        )
        if index is not None and candidates is None:
            index = index if isinstance(index, VectorIndex) else load_index(index)
            request.index = ItemIndex.of(index, self.meta, vocab)
        run = Encoding(self, options)
        store = next(run.stores([events], None))
        run.counts.report()
        if candidates is not None:
            request.candidates = candidate_lists(vocab, store.entity_ids, candidates)
        return recommend_store(self, store, request, options).to_pandas()


def load_encoder(
    path: str | Path,
    device: str | torch.device | None = None,
    backend: Literal["torch", "onnxruntime"] = "torch",
    onnx: str | Path | None = None,
) -> Encoder:
    """Load a bundle directory onto ``device`` (default: CUDA when available, else CPU).

    ``backend="onnxruntime"`` embeds through the graph ``onnx`` (default ``<bundle>/model.onnx``,
    written by ``seqenc onnx``) on the CPU; the torch model still serves ``recommend``.
    """
    b = load_on(path, device, EncodeOptions(backend=backend, onnx=onnx))
    return Encoder(b.model, b.meta, b.vocabs, b.device, b.backend, b.lineage)


def encode(events: Source, model: str | Path | Encoder, **kwargs: Any) -> Any:
    """One-shot :meth:`Encoder.encode` with the bundle at ``model`` (or a loaded :class:`Encoder`)."""
    encoder = (
        model
        if isinstance(model, Encoder)
        else load_encoder(
            model,
            kwargs.pop("device", None),
            kwargs.pop("backend", "torch"),
            kwargs.pop("onnx", None),
        )
    )
    return encoder.encode(events, **kwargs)
