"""The encoding core: events → histories → token-budget batches → backend forward → readout →
output columns and counts, and the checks of the options that steer it.

Every way to encode goes through here and holds no copy of its parts: :class:`seqenc.inference.Encoder`
(the Python API), the Parquet export (:mod:`seqenc.export`), Spark (:mod:`seqenc.encoding.spark`) and
incremental encoding (:mod:`seqenc.incremental.update`, which depends on this core, not on ``Encoder``).

- :mod:`~seqenc.encoding.options`: the option values and their one-line checks.
- :mod:`~seqenc.encoding.store`: events → a :class:`~seqenc.data.sequences.SequenceStore` with the
  bundle's vocabularies, the per-call :class:`Counts`, the entity output columns.
- :mod:`~seqenc.encoding.batches`: where a batch is built (:func:`iter_batches`).
- :mod:`~seqenc.encoding.run`: a loaded bundle (:class:`LoadedBundle`) and the loop that runs the
  backend over the batches (:func:`encode_events`). The readout itself is
  :func:`seqenc.model.readout.entity_readout`, inside the backend's forward pass.
"""

from seqenc.encoding.batches import iter_batches
from seqenc.encoding.options import MAX_TOKENS, ON_EMPTY, OUTPUTS
from seqenc.encoding.run import Encoded, LoadedBundle, embed_store, encode_events, load_on
from seqenc.encoding.store import Counts, entity_columns, sequences

__all__ = [
    "MAX_TOKENS",
    "ON_EMPTY",
    "OUTPUTS",
    "Counts",
    "Encoded",
    "LoadedBundle",
    "embed_store",
    "encode_events",
    "entity_columns",
    "iter_batches",
    "load_on",
    "sequences",
]
