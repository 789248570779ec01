"""Every item's vector in the space the model scores in: row ``v`` of the tied item table, whose
inner product with an account's query vector (:mod:`seqenc.retrieval.queries`) is the model's
score of item ``v`` (with the repeat head: its generation part, before the account's repeat part
is mixed in). What ``Encoder.items`` and ``seqenc items`` give."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import torch

from seqenc.bundle import BundleMeta
from seqenc.compat.lineage import space_id
from seqenc.data.vocab import N_SPECIAL, Vocabularies
from seqenc.encoding.outputs import embedding_type, file_metadata
from seqenc.model.encoder import SequenceEncoder
from seqenc.retrieval.space import Space, metadata_of

# A bundle keeps its vocabulary in training-frequency order, not the counts themselves.
FREQUENCY = (
    "not stored in the bundle: frequency_rank is each item's rank by its count in the log the "
    "model was fitted on (1 = most frequent; equal counts ranked by value)"
)


def item_space(meta: BundleMeta, vectors: str = "items") -> Space:
    """The native scoring space of the bundle ``meta``, for ``vectors`` of that role."""
    return Space(meta.name, space_id(meta), vectors)


@torch.inference_mode()
def item_table(model: SequenceEncoder, meta: BundleMeta, vocabs: Vocabularies) -> pa.Table:
    """One row per item of the vocabulary (out-of-vocabulary buckets, which ``recommend`` never
    offers, left out), in id order: ``item_id``, ``vector`` (float32, the bundle's ``dim``) and
    ``frequency_rank``; the metadata names the model, its space and what the frequency is."""
    vocab = vocabs.item
    weight = model.item_embedding.weight[N_SPECIAL : vocab.bucket_start]
    vectors = np.ascontiguousarray(weight.detach().float().cpu().numpy())
    flat = pa.array(vectors.reshape(-1), type=pa.float32())
    metadata = file_metadata(meta, None) | metadata_of(
        item_space(meta), {"space": "native", "frequency": FREQUENCY}
    )
    schema = pa.schema(
        [
            ("item_id", vocab.values.type),
            ("vector", embedding_type(meta.dim)),
            ("frequency_rank", pa.int32()),
        ],
        metadata=metadata,
    )
    ranks = pa.array(np.arange(1, len(vectors) + 1, dtype=np.int32))
    vector_column = pa.FixedSizeListArray.from_arrays(flat, meta.dim)
    return pa.table([vocab.values, vector_column, ranks], schema=schema)
