"""seqenc: account and click event streams to embeddings with a small Transformer.

The public API: read and encode event logs (:func:`read_events`, :func:`build_sequences`), train
(:class:`SequenceDataModule`, :class:`SeqencModule`, or the ``seqenc`` command), and embed
(:func:`load_encoder`, :func:`encode`).
"""

__version__ = "0.1.0"

from seqenc.data.datamodule import SequenceDataModule
from seqenc.data.events import read_events
from seqenc.data.schema import EventSchema
from seqenc.data.sequences import SequenceStore, build_sequences
from seqenc.errors import SeqencError
from seqenc.inference import Encoder, encode, load_encoder
from seqenc.module import SeqencModule

__all__ = [
    "Encoder",
    "EventSchema",
    "SeqencError",
    "SeqencModule",
    "SequenceDataModule",
    "SequenceStore",
    "__version__",
    "build_sequences",
    "encode",
    "load_encoder",
    "read_events",
]
