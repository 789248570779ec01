"""The encoding core: events → histories → token-budget batches → backend forward → the last step
(the head's predictions, the map into the space asked for) → chunks of output columns, steered by
one options object. :class:`seqenc.inference.Encoder`, the Parquet export (:mod:`seqenc.export`)
and Spark (:mod:`seqenc.encoding.spark`) go through it; incremental encoding shares its batches
(``collate``) and its last step.

- :mod:`~seqenc.encoding.options`: :class:`EncodeOptions`, the options of every encode, checked once.
- :mod:`~seqenc.encoding.store`: events → the bundle's store, the per-call :class:`Counts`.
- :mod:`~seqenc.encoding.batches`: where a batch is built (:func:`iter_batches`).
- :mod:`~seqenc.encoding.backends`: what runs the forward pass (torch or ONNX Runtime).
- :mod:`~seqenc.encoding.outputs`: the output columns (declared once) and the last step.
- :mod:`~seqenc.encoding.run`: a loaded bundle (:class:`LoadedBundle`, :func:`load_on`) and the
  core (:class:`Encoding`); the readout is :func:`seqenc.model.readout.entity_readout`.
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
