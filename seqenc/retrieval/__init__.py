"""Embeddings into retrieval: the vectors a model scores with, nearest neighbours over them, and
``recommend`` with candidate lists and filters (see ``docs/retrieval.md``).

- :mod:`~seqenc.retrieval.topk`: exact top-k, a chunk of the vectors at a time, and per-row top-k of
  scored (row, item) pairs.
- :mod:`~seqenc.retrieval.approximate`: faiss's inverted-file index (the optional ``search`` extra).
- :mod:`~seqenc.retrieval.index`: :class:`~seqenc.retrieval.index.VectorIndex`, its kind by size,
  its files (JSON, ``.npy``, faiss's own format; never a pickle) and its space check.
- :mod:`~seqenc.retrieval.filters`: allow / deny lists and candidate lists → the model's item ids.
- :mod:`~seqenc.retrieval.items`: every item's vector (``Encoder.items``, ``seqenc items``).
- :mod:`~seqenc.retrieval.queries`: each account's query vector and repeat part.
- :mod:`~seqenc.retrieval.recommend`: top-k items per account on the exact, candidate and indexed
  paths.
"""
