"""What runs the encoder's forward pass for every encode (:mod:`seqenc.encoding`): the bundle's
torch model, or an ONNX Runtime session on the graph ``seqenc onnx`` wrote.

A backend is one method, ``embed(batch) -> [B, d] float32 numpy``; batching, vocabularies and
output columns stay in the encoding core (:mod:`seqenc.encoding`), so both backends see the same
batches. :func:`runtime_backend` is the one place a backend is chosen by name.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np
import torch

from seqenc.bundle import BundleMeta, file_sha256
from seqenc.data.batches import Batch
from seqenc.errors import SeqencError
from seqenc.model.encoder import SequenceEncoder
from seqenc.reading import read_bounded

BACKENDS = ("torch", "onnxruntime")
ONNX_FILE = "model.onnx"  # default place of the graph: inside the bundle, so it ships with it
SUMS_BYTES = 4096  # a <graph>.sha256 file: one digest and a name
ORT_TYPES = {"tensor(int64)": np.int64, "tensor(float)": np.float32, "tensor(double)": np.float64}


def embed_batch(encoder: SequenceEncoder, batch: Batch) -> torch.Tensor:
    """``[B, d]`` float32 entity embeddings (bf16 autocast on CUDA)."""
    device = batch.items.device
    with torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"):
        return encoder.entity_embedding(batch).float()


class Backend(Protocol):
    """What runs the encoder's forward pass: a batch in, ``[B, d]`` float32 embeddings out."""

    def embed(self, batch: Batch) -> np.ndarray: ...


@dataclass
class TorchBackend:
    """The bundle's :class:`SequenceEncoder` on ``device`` (:func:`embed_batch`)."""

    model: SequenceEncoder
    device: torch.device

    def embed(self, batch: Batch) -> np.ndarray:
        return embed_batch(self.model, batch.to(self.device)).cpu().numpy()


class OnnxRuntimeBackend:
    """An ONNX Runtime session on the graph ``seqenc onnx`` exported from the same bundle.

    Refuses a graph whose ``<graph>.sha256`` is missing or differs, or whose metadata names another
    configuration or other weights than ``meta``.
    """

    def __init__(self, path: Path, meta: BundleMeta) -> None:
        try:
            import onnxruntime
        except ImportError as e:
            raise SeqencError(
                "backend='onnxruntime' needs onnxruntime: pip install 'seqenc[onnx]'"
            ) from e
        sums = Path(f"{path}.sha256")
        missing = [p for p in (path, sums) if not p.exists()]
        if missing:
            raise SeqencError(
                f"ONNX graph file missing: {str(missing[0])!r}; write it with `seqenc onnx`"
            )
        if read_bounded(sums, SUMS_BYTES).split()[:1] != [file_sha256(path).encode()]:
            raise SeqencError(f"{str(path)!r} is corrupt: its SHA-256 differs from {sums.name}")
        options = onnxruntime.SessionOptions()
        options.log_severity_level = 3  # no warnings about unused initializers
        # One thread setting for both backends: torch's (OMP_NUM_THREADS / torch.set_num_threads).
        options.intra_op_num_threads = torch.get_num_threads()
        self.session = onnxruntime.InferenceSession(
            str(path), options, providers=["CPUExecutionProvider"]
        )
        props = self.session.get_modelmeta().custom_metadata_map
        for key in ("config_hash", "weights_sha256"):
            if props.get(f"seqenc.{key}") != getattr(meta, key):
                raise SeqencError(
                    f"{str(path)!r} was exported from another model ({key} differs from the "
                    "bundle's); re-export it with `seqenc onnx`"
                )
        self.inputs = [i.name for i in self.session.get_inputs()]
        # graphs exported before dt_ref became float64 take it as float32: fed what they declare
        self.dtypes = {i.name: ORT_TYPES[i.type] for i in self.session.get_inputs()}

    def embed(self, batch: Batch) -> np.ndarray:
        feeds = {
            name: (batch.query_gap if name == "dt_query" else getattr(batch, name))
            .numpy()
            .astype(self.dtypes[name], copy=False)
            for name in self.inputs
        }
        return self.session.run(None, feeds)[0]


def check_backend(name: str) -> None:
    """Refuse a backend name other than :data:`BACKENDS`, in one line."""
    if name not in BACKENDS:
        raise SeqencError(f"backend must be one of {BACKENDS}, got {name!r}")


def runtime_backend(
    name: str, bundle: str | Path, meta: BundleMeta, onnx: str | Path | None = None
) -> OnnxRuntimeBackend | None:
    """The backend called ``name`` for the bundle at ``bundle``: ``None`` for ``"torch"`` (the
    bundle's own model runs), else an ONNX Runtime session on the graph ``onnx`` (default
    ``<bundle>/model.onnx``, written by ``seqenc onnx``), on the CPU."""
    check_backend(name)
    if name == "torch":
        return None
    return OnnxRuntimeBackend(Path(bundle) / ONNX_FILE if onnx is None else Path(onnx), meta)
