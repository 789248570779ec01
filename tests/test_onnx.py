"""The ONNX Runtime backend gives torch's entity embeddings (within 1e-4) for every model shape."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
import yaml
from tiny import SCHEMA, ml100k, random_bundle, tiny_events

pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from seqenc.cli import main as cli_main  # noqa: E402
from seqenc.encoding.backends import OnnxRuntimeBackend  # noqa: E402
from seqenc.encoding.onnx import export_onnx  # noqa: E402
from seqenc.errors import SeqencError  # noqa: E402
from seqenc.inference import load_encoder  # noqa: E402
from seqenc.model.batch import Batch  # noqa: E402
from seqenc.model.encoder import EncoderConfig  # noqa: E402

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
MAX_LEN = 12

# Every model shape of configs/ (the data decides time on for all of them: their logs have times),
# and every other option the readout depends on.
SHAPES = {
    "sasrec": {},  # quickstart, sasrec_ml1m, sasrec_ml100k_time
    "account_events": {"features": True},
    "clicks": {"repeat_head": True, "features": True},
    "bert4rec": {"causal": False},  # bert4rec_ml1m
    "causal_no_time": {"time": False},
    "masked_no_time": {"causal": False, "time": False, "features": True},
    "legacy_recency": {"query_time": False, "recency": True},
    "masked_legacy_recency": {"causal": False, "query_time": False, "recency": True},
    "rope": {"positional": "rope"},  # sasrec_beauty
    "rope_mean_normalize": {"positional": "rope", "pooling": "mean", "normalize": True},
    "masked_rope_normalize": {"causal": False, "positional": "rope", "normalize": True},
    "no_positions": {"positional": "none", "features": True},
    "account_embeddings": {"pooling": "mean", "features": True},  # account_embeddings.yaml
    "entity": {  # entity_pretrain: the entity model, its time values, per-item values with the item
        "causal": False,
        "pooling": "items",
        "features": True,
        "time_values": True,
        "item_values": True,
        "numeric_scaling": "per_item",
    },
    "entity_lean": {  # finetune.yaml from scratch: no positions, no gap tables, values per item
        "causal": False,
        "pooling": "items",
        "features": True,
        "time_values": True,
        "numeric_scaling": "per_item",
        "positional": "none",
        "token": "lean",
        "ffn_mult": 2,
    },
}
SHAPE_KEYS = ("causal", "time", "query_time", "token", "positional", "pooling", "normalize")


def make_bundle(path: Path, features: bool = False, **options) -> Path:
    schema = SCHEMA if features else dataclasses.replace(SCHEMA, categorical=(), numeric=())
    return random_bundle(path, tiny_events(30), schema, MAX_LEN, **options)


def random_batch(config: EncoderConfig, lengths: list[int], width: int, seed: int) -> Batch:
    """A right-padded batch as ``collate`` makes one (zeros after ``lengths``)."""
    g = torch.Generator().manual_seed(seed)
    lengths_t = torch.tensor(lengths)
    n = len(lengths)
    valid = torch.arange(width)[None, :] < lengths_t[:, None]

    def padded(t: torch.Tensor) -> torch.Tensor:
        return t * valid.view(n, width, *[1] * (t.dim() - 2)).to(t.dtype)

    dt_prev = torch.rand(n, width, generator=g) * 10 ** torch.randint(0, 7, (n, width), generator=g)
    dt_prev *= torch.rand(n, width, generator=g) > 0.4  # ties: events that share a time
    times = dt_prev.cumsum(1)
    dt_ref = padded(times.gather(1, (lengths_t - 1).clamp(min=0)[:, None]) - times)
    categorical = [torch.randint(0, s, (n, width), generator=g) for s in config.categorical_sizes]
    return Batch(
        items=padded(torch.randint(3, config.n_items, (n, width), generator=g)),
        lengths=lengths_t,
        dt_prev=padded(dt_prev),
        dt_ref=dt_ref.clamp(min=0),
        categorical=padded(torch.stack(categorical, -1))
        if categorical
        else torch.zeros(n, width, 0, dtype=torch.int64),
        numeric=padded(torch.randn(n, width, config.n_numeric, generator=g) * 100),
        index=torch.arange(n),
        dt_query=torch.rand(n, generator=g) * 1e5 * (lengths_t > 0),
    )


@pytest.fixture(scope="module", params=list(SHAPES))
def exported(request, tmp_path_factory) -> tuple[Path, str]:
    path = make_bundle(tmp_path_factory.mktemp(request.param) / "bundle", **SHAPES[request.param])
    export_onnx(path)
    return path, request.param


@pytest.mark.parametrize(
    ("lengths", "width"),
    [([5, 1, 0, 3, 2], 5), ([7, 7], 7), ([MAX_LEN, 4, 0, 1, 9, MAX_LEN, 2, 6], MAX_LEN), ([0], 1)],
)
def test_graph_equals_torch_on_batches(exported, lengths, width):
    """Batch sizes and widths other than the trace's, full rows, empty histories."""
    path, _ = exported
    encoder = load_encoder(path, "cpu", backend="onnxruntime")
    batch = random_batch(encoder.meta.encoder, lengths, width, seed=len(lengths))
    with torch.inference_mode():
        expected = encoder.model.entity_embedding(batch).numpy()
    got = encoder.backend.embed(batch)
    assert got.shape == expected.shape and got.dtype == np.float32
    np.testing.assert_allclose(got, expected, atol=1e-4, rtol=0)


def test_encode_equals_torch(exported):
    path, _ = exported
    events = tiny_events(40, seed=3)
    torch_out = load_encoder(path, "cpu").encode(events, batch_size=7, output="numpy")
    onnx_out = load_encoder(path, "cpu", backend="onnxruntime").encode(
        events, batch_size=7, output="numpy", as_of="2024-03-01", on_empty="skip"
    )
    torch_as_of = load_encoder(path, "cpu").encode(
        events, batch_size=7, output="numpy", as_of="2024-03-01", on_empty="skip"
    )
    np.testing.assert_array_equal(onnx_out.entity_ids, torch_as_of.entity_ids)
    np.testing.assert_allclose(onnx_out.embeddings, torch_as_of.embeddings, atol=1e-4, rtol=0)
    onnx_default = load_encoder(path, "cpu", backend="onnxruntime").encode(
        events, batch_size=7, output="numpy"
    )
    np.testing.assert_allclose(onnx_default.embeddings, torch_out.embeddings, atol=1e-4, rtol=0)


def test_graph_reads_only_the_fields_the_model_needs(exported):
    path, shape = exported
    backend = load_encoder(path, "cpu", backend="onnxruntime").backend
    options = SHAPES[shape]
    assert backend.inputs[:2] == ["items", "lengths"]
    gaps = options.get("time", True) and options.get("token", "full") == "full"
    assert ("dt_prev" in backend.inputs) == gaps  # without gap tables nothing reads it
    assert ("categorical" in backend.inputs) == options.get("features", False)
    reads_times = ("recency", "time_values")
    assert ("dt_ref" in backend.inputs) == any(options.get(k) for k in reads_times)


def embedding_shape(options: dict) -> tuple:
    """What the entity embedding depends on, with :class:`EncoderConfig`'s defaults filled in."""
    defaults = {f.name: f.default for f in dataclasses.fields(EncoderConfig)}
    return tuple(options.get(k, defaults[k]) for k in SHAPE_KEYS)


def test_every_config_in_configs_is_a_covered_shape():
    """A config with a new combination of options must get a parity case here."""
    covered = {embedding_shape(options) for options in SHAPES.values()}
    for path in sorted(CONFIGS.glob("*.yaml")):
        model = yaml.safe_load(path.read_text())["model"]
        model |= model.get("encoder") or {}
        options = {k: v for k, v in model.items() if k in SHAPE_KEYS and v is not None}
        options["causal"] = model.get("objective", "causal") == "causal"
        assert embedding_shape(options) in covered, path.name  # time: None = on (real times)


def test_checksum_and_provenance_are_checked(tmp_path):
    path = make_bundle(tmp_path / "a")
    graph = export_onnx(path, tmp_path / "graph.onnx")
    assert (tmp_path / "graph.onnx.sha256").read_text().split()[1] == "graph.onnx"
    assert not list(tmp_path.glob(".*tmp"))  # nothing half-written left behind
    load_encoder(path, backend="onnxruntime", onnx=graph)  # loads
    other = make_bundle(tmp_path / "b", time=False)
    with pytest.raises(SeqencError, match="exported from another model"):
        OnnxRuntimeBackend(graph, load_encoder(other).meta)
    with pytest.raises(SeqencError, match="ONNX graph file missing"):
        load_encoder(other, backend="onnxruntime")
    graph.write_bytes(graph.read_bytes()[:-1] + b"\0")
    with pytest.raises(SeqencError, match="corrupt"):
        load_encoder(path, backend="onnxruntime", onnx=graph)
    with pytest.raises(SeqencError, match="backend must be one of"):
        load_encoder(path, backend="tensorrt")


def test_cli_exports_into_the_bundle(tmp_path, capsys):
    path = make_bundle(tmp_path / "bundle", features=True)
    cli_main(["onnx", "--model", str(path)])
    assert capsys.readouterr().out.strip() == f"onnx: {path / 'model.onnx'}"
    assert (path / "model.onnx.sha256").is_file()
    with pytest.raises(SystemExit) as e:
        cli_main(["onnx", "--model", str(tmp_path / "nope")])
    assert e.value.code == 1
    assert "seqenc onnx: error: model bundle not found" in capsys.readouterr().err


def test_embed_command_with_onnxruntime_equals_torch(tmp_path):
    path = make_bundle(tmp_path / "bundle", features=True)
    events = tmp_path / "events.parquet"
    tiny_events(25, seed=5).to_parquet(events)
    cli_main(["onnx", "--model", str(path)])
    out = {}
    for backend in ("torch", "onnxruntime"):
        out[backend] = tmp_path / f"{backend}.parquet"
        argv = ["embed", "--model", str(path), "--events", str(events), "--output"]
        cli_main([*argv, str(out[backend]), "--backend", backend, "--no-progress"])
    torch_df, onnx_df = (
        pd.read_parquet(p).sort_values("entity_id", ignore_index=True) for p in out.values()
    )
    pd.testing.assert_frame_equal(
        torch_df.drop(columns="embedding"), onnx_df.drop(columns="embedding")
    )
    np.testing.assert_allclose(
        np.stack(onnx_df.embedding), np.stack(torch_df.embedding), atol=1e-4, rtol=0
    )


@pytest.mark.shared_data
@pytest.mark.parametrize("causal", [True, False])
def test_movielens_100k_equals_torch(shared_data, tmp_path, causal):
    """Every MovieLens-100K user (histories of 20 to 200+ events) through both backends."""
    events = ml100k(shared_data)
    schema = dataclasses.replace(SCHEMA, categorical=(), numeric=())
    path = random_bundle(tmp_path / "bundle", events, schema, 200, causal=causal)
    export_onnx(path)
    expected = load_encoder(path, "cpu").encode(events, output="numpy")
    got = load_encoder(path, "cpu", backend="onnxruntime").encode(events, output="numpy")
    assert len(got.entity_ids) == 943
    np.testing.assert_array_equal(got.entity_ids, expected.entity_ids)
    np.testing.assert_allclose(got.embeddings, expected.embeddings, atol=1e-4, rtol=0)
