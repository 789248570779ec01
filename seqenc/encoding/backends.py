"""What runs the encoder's forward pass for every encode (:mod:`seqenc.encoding`): the bundle's
torch model, or an ONNX Runtime session on the graph ``seqenc onnx`` wrote.

A backend is one method, ``embed(batch) -> [B, d] float32 numpy``; batching, vocabularies and
output columns stay in the encoding core (:mod:`seqenc.encoding`), so both backends see the same
batches. :func:`runtime_backend` is the one place a backend is chosen by name, and
:func:`autocast` the one place the bf16 autocast of a CUDA forward pass is set.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Protocol

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


@contextmanager
def autocast(device: torch.device) -> Iterator[None]:
    """bf16 autocast for a forward pass on CUDA (float32 elsewhere)."""
    with torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"):
        yield


class Backend(Protocol):
    """What runs the encoder's forward pass: a batch in, ``[B, d]`` float32 embeddings out."""

    name: ClassVar[str]

    def embed(self, batch: Batch) -> np.ndarray: ...


@dataclass
class TorchBackend:
    """The bundle's :class:`SequenceEncoder` on ``device`` (:func:`autocast`)."""

    model: SequenceEncoder
    device: torch.device
    name: ClassVar[str] = "torch"

    def embed(self, batch: Batch) -> np.ndarray:
        batch = batch.to(self.device)
        with autocast(self.device):
            return self.model.entity_embedding(batch).float().cpu().numpy()


class OnnxRuntimeBackend:
    """An ONNX Runtime session on the graph ``seqenc onnx`` exported from the same bundle.

    Refuses a graph whose ``<graph>.sha256`` is missing or differs, or whose metadata names another
    configuration or other weights than ``meta``.
    """

    name: ClassVar[str] = "onnxruntime"

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


def runtime_backend(
    name: str,
    model: SequenceEncoder,
    device: torch.device,
    bundle: str | Path | None,
    meta: BundleMeta,
    onnx: str | Path | None = None,
) -> Backend:
    """The backend called ``name`` (one of :data:`BACKENDS`, checked by the options): the bundle's
    torch ``model`` on ``device``, or an ONNX Runtime session on the graph ``onnx`` (default
    ``<bundle>/model.onnx``, written by ``seqenc onnx``), on the CPU."""
    if name == "torch":
        return TorchBackend(model, device)
    if onnx is None and bundle is None:
        raise SeqencError("backend='onnxruntime' needs the bundle's path or onnx=<graph>")
    return OnnxRuntimeBackend(Path(bundle) / ONNX_FILE if onnx is None else Path(onnx), meta)
