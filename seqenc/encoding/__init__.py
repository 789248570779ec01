"""The encoding core: events → histories → token-budget batches → backend forward → the last step
(the head's predictions, the map into the space asked for) → chunks of output columns, steered by
one options object.

Every way to encode goes through here and holds no copy of its parts: :class:`seqenc.inference.Encoder`
(the Python API), the Parquet export (:mod:`seqenc.export`), Spark (:mod:`seqenc.encoding.spark`);
incremental encoding (:mod:`seqenc.incremental.update`) shares its batches (``collate``) and its last
step.

- :mod:`~seqenc.encoding.options`: :class:`EncodeOptions`, the options of every encode, checked once.
- :mod:`~seqenc.encoding.store`: events → a :class:`~seqenc.data.sequences.SequenceStore` with the
  bundle's vocabularies, the per-call :class:`Counts`, the entity key columns.
- :mod:`~seqenc.encoding.batches`: where a batch is built (:func:`iter_batches`).
- :mod:`~seqenc.encoding.backends`: what runs the forward pass (torch or ONNX Runtime).
- :mod:`~seqenc.encoding.outputs`: the output columns (declared once) and the last step.
- :mod:`~seqenc.encoding.run`: a loaded bundle (:class:`LoadedBundle`, :func:`load_on`) and the
  core (:class:`Encoding`: :meth:`~Encoding.chunks`). The readout itself is
  :func:`seqenc.model.readout.entity_readout`, inside the backend's forward pass.
"""

from seqenc.encoding.batches import iter_batches
from seqenc.encoding.options import MAX_TOKENS, ON_EMPTY, OUTPUTS, EncodeOptions, encode_options
from seqenc.encoding.outputs import Chunk, LastStep
from seqenc.encoding.run import Encoding, LoadedBundle, embed_batches, last_step, load_on
from seqenc.encoding.store import Counts, entity_columns, sequences

__all__ = [
    "MAX_TOKENS",
    "ON_EMPTY",
    "OUTPUTS",
    "Chunk",
    "Counts",
    "EncodeOptions",
    "Encoding",
    "LastStep",
    "LoadedBundle",
    "embed_batches",
    "encode_options",
    "entity_columns",
    "iter_batches",
    "last_step",
    "load_on",
    "sequences",
]
