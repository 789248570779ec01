"""A bundle's entity-embedding computation as an ONNX graph, for ONNX Runtime (``seqenc onnx``).

The graph is :meth:`SequenceEncoder.entity_embedding` traced once (``traced=True``, the readout
branch that holds on any batch) with dynamic batch and length axes by the TorchScript exporter:
the dynamo exporter needs onnxscript, and ``torch.export`` cannot follow the readout's
data-dependent branches. Its inputs are the :class:`~seqenc.model.batch.Batch` fields the bundle's
configuration reads (:func:`graph_inputs`), its output ``embedding`` ``[B, d]`` float32. The graph
lies inside the bundle by default, with a ``sha256sum`` line checked on load; its metadata names
the bundle's ``config_hash`` and ``weights_sha256``, so a graph of other weights is refused.
"""

from __future__ import annotations

import re
import warnings
from pathlib import Path

import torch
from torch import Tensor, nn

from seqenc.atomic import atomic_file, file_target
from seqenc.bundle import BundleMeta, bundle_inputs, file_sha256, load_bundle
from seqenc.encoding.backends import ONNX_FILE
from seqenc.errors import SeqencError
from seqenc.model.batch import Batch
from seqenc.model.encoder import SequenceEncoder
from seqenc.version import __version__

OPSET = 17


def graph_inputs(meta: BundleMeta) -> list[str]:
    """The :class:`Batch` fields the bundle's entity embedding reads, in graph input order."""
    enc = meta.encoder
    wanted = {
        "items": True,
        "lengths": True,
        "dt_prev": enc.time,
        "dt_query": enc.time and (enc.query_time or not enc.causal),
        "dt_ref": (enc.time and (enc.recency or enc.time_values)) or enc.baskets,
        "categorical": bool(enc.categorical_sizes),
        "numeric": enc.n_numeric > 0,
    }
    return [name for name, on in wanted.items() if on]


class EmbeddingGraph(nn.Module):
    """``entity_embedding`` over positional tensors (the ones :func:`graph_inputs` names): the
    model's own readout, in its ``traced`` form (the branches a trace can follow; the parity tests
    compare the two on other batch sizes than the trace's)."""

    def __init__(self, encoder: SequenceEncoder, inputs: list[str]) -> None:
        super().__init__()
        self.encoder, self.inputs = encoder.eval(), inputs

    def forward(self, *tensors: Tensor) -> Tensor:
        given = dict(zip(self.inputs, tensors, strict=True))
        items, lengths = given["items"], given["lengths"]
        zeros = torch.zeros_like(items, dtype=torch.float32)
        batch = Batch(
            items=items,
            lengths=lengths,
            dt_prev=given.get("dt_prev", zeros),
            dt_ref=given.get("dt_ref", zeros),
            categorical=given.get("categorical", items[..., None][..., :0]),
            numeric=given.get("numeric", zeros[..., None][..., :0]),
            index=lengths,
            dt_query=given.get("dt_query", zeros[:, 0]),
        )
        return self.encoder.entity_embedding(batch, traced=True)


def example_inputs(meta: BundleMeta, inputs: list[str]) -> tuple[Tensor, ...]:
    """A small batch to trace with: mixed lengths with an empty row, so the key-padding mask is in
    the graph."""
    enc, width = meta.encoder, min(3, meta.history_len)
    g = torch.Generator().manual_seed(0)
    lengths = torch.tensor([width, 1, 0]).clamp(max=width)
    batch_size = len(lengths)
    values = {
        "items": torch.randint(3, enc.n_items, (batch_size, width), generator=g),
        "lengths": lengths,
        "dt_prev": torch.rand(batch_size, width, generator=g) * 1e4,
        "dt_query": torch.rand(batch_size, generator=g) * 1e4,
        "dt_ref": torch.rand(batch_size, width, generator=g, dtype=torch.float64) * 1e4,
        "categorical": torch.stack(
            [torch.randint(0, s, (batch_size, width), generator=g) for s in enc.categorical_sizes]
            or [torch.zeros(batch_size, width, dtype=torch.int64)],
            dim=-1,
        ),
        "numeric": torch.randn(batch_size, width, max(enc.n_numeric, 1), generator=g),
    }
    return tuple(values[name] for name in inputs)


def export_onnx(
    bundle: str | Path, output: str | Path | None = None, option: str = "output"
) -> Path:
    """Export the entity embedding of ``bundle`` to ``output`` (default ``<bundle>/model.onnx``) and
    write ``<output>.sha256``; both atomically. Returns the graph's path. An existing file at
    either is replaced only when it is a graph seqenc wrote (and its digest), else refused in one
    line naming ``option`` (the command's ``onnx --output``)."""
    try:
        import onnx
    except ImportError as e:
        raise SeqencError("seqenc onnx needs the onnx package: pip install 'seqenc[onnx]'") from e
    encoder, meta, _ = load_bundle(bundle)
    output = Path(bundle) / ONNX_FILE if output is None else Path(output)
    read = bundle_inputs(bundle)
    for target, ours, what in (
        (output, _is_our_graph, "an ONNX graph seqenc wrote"),
        (Path(f"{output}.sha256"), _is_digest, "a digest file"),
    ):  # both checked before the export
        file_target(target, read, option=option, example=ONNX_FILE, ours=ours, what=what)
    inputs = graph_inputs(meta)
    per_row = {"lengths": {0: "batch"}, "dt_query": {0: "batch"}, "embedding": {0: "batch"}}
    dynamic = {k: per_row.get(k, {0: "batch", 1: "length"}) for k in [*inputs, "embedding"]}
    with atomic_file(output, read) as tmp, torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore", torch.jit.TracerWarning)  # the branches discussed above
        warnings.simplefilter("ignore", DeprecationWarning)  # the TorchScript exporter, on purpose
        torch.onnx.export(
            EmbeddingGraph(encoder, inputs),
            example_inputs(meta, inputs),
            str(tmp),
            input_names=inputs,
            output_names=["embedding"],
            dynamic_axes=dynamic,
            opset_version=OPSET,
            dynamo=False,
        )
        proto = onnx.load(str(tmp))
        for key, value in {
            "seqenc.model": meta.name,
            "seqenc.version": __version__,
            "seqenc.config_hash": meta.config_hash,
            "seqenc.weights_sha256": meta.weights_sha256,
        }.items():
            proto.metadata_props.add(key=key, value=value)
        onnx.checker.check_model(proto)
        onnx.save(proto, str(tmp))
        digest = file_sha256(tmp)
    with atomic_file(f"{output}.sha256", read) as tmp:
        tmp.write_text(f"{digest}  {output.name}\n")
    return output


def _is_our_graph(path: Path) -> bool:
    """Whether ``path`` is an ONNX graph with seqenc's metadata (what ``seqenc onnx`` writes)."""
    import onnx

    try:
        proto = onnx.load(str(path), load_external_data=False)
    except Exception:  # noqa: BLE001 (any file onnx cannot parse is not ours)
        return False
    return any(p.key == "seqenc.model" for p in proto.metadata_props)


def _is_digest(path: Path) -> bool:
    """Whether ``path`` holds one ``<sha256>  <name>`` line (the digest beside a graph)."""
    if path.stat().st_size > 4096:
        return False
    return re.fullmatch(r"[0-9a-f]{64}  \S+\n?", path.read_text(errors="replace")) is not None
