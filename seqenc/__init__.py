"""seqenc: account and click event streams to embeddings with a small Transformer.

The public API: read and encode event logs (:func:`read_events`, :func:`build_sequences`), train
(:class:`SequenceDataModule`, :class:`SeqencModule`, or the ``seqenc`` command), and embed
(:func:`load_encoder`, :func:`encode`, :class:`EncodeOptions`). ``import seqenc`` is light: each name is imported on first
use, so a feature pipeline that only encodes never loads Lightning.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

from seqenc.errors import SeqencError
from seqenc.version import __version__

_WHERE = {
    "DataSpec": "seqenc.data.spec",
    "EncodeOptions": "seqenc.encoding.options",
    "Encoder": "seqenc.inference",
    "EventSchema": "seqenc.data.schema",
    "LabelModule": "seqenc.finetune.module",
    "SeqencModule": "seqenc.training.module",
    "SequenceDataModule": "seqenc.data.datamodule",
    "SequenceStore": "seqenc.data.sequences",
    "build_sequences": "seqenc.data.sequences",
    "encode": "seqenc.inference",
    "label_module": "seqenc.finetune.build",
    "load_encoder": "seqenc.inference",
    "read_events": "seqenc.data.events",
}

__all__ = ["SeqencError", "__version__", *sorted(_WHERE)]


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module 'seqenc' has no attribute {name!r}")
    value = getattr(import_module(_WHERE[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
