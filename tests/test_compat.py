"""Compatible versions (issue 31): the maps against known transforms, the lineage on load, the
parent space in encode, the drift report and the commands."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch
from safetensors.torch import load_file, save_file
from tiny import tiny_bundle, tiny_events

from seqenc.bundle import file_sha256
from seqenc.cli import main
from seqenc.compat.lineage import LINEAGE_FILE, MAP_FILE, load_lineage, save_lineage, space_id
from seqenc.compat.parent_map import ALPHAS, choose_alpha, fit_map, fit_with_stats
from seqenc.errors import SeqencError
from seqenc.evaluate.drift import align, cutoffs, drift, neighbour_overlap
from seqenc.inference import load_encoder


def reweighted(bundle: Path, target: Path, seed: int) -> Path:
    """A copy of ``bundle`` with its weights moved by seeded noise: another model, another space."""
    shutil.copytree(bundle, target)
    state = load_file(target / "model.safetensors")
    gen = torch.Generator().manual_seed(seed)
    state = {k: v + 0.2 * torch.randn(v.shape, generator=gen) for k, v in state.items()}
    save_file(state, target / "model.safetensors")
    config = json.loads((target / "config.json").read_text())
    config["weights_sha256"] = file_sha256(target / "model.safetensors")
    (target / "config.json").write_text(json.dumps(config))
    return target


def rotation(d: int, seed: int) -> np.ndarray:
    q, _ = np.linalg.qr(np.random.default_rng(seed).normal(size=(d, d)))
    return q


def test_orthogonal_map_recovers_a_known_rotation_scale_and_shift():
    x = np.random.default_rng(0).normal(size=(300, 8))
    q, shift = rotation(8, 1), np.arange(8) / 10
    fitted = fit_map(x, 2.5 * x @ q + shift, "orthogonal")
    np.testing.assert_allclose(fitted.weight, 2.5 * q, atol=1e-5)
    np.testing.assert_allclose(fitted.bias, shift, atol=1e-5)


def test_ridge_map_fixes_a_stretch_the_orthogonal_one_cannot():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(500, 6))
    y = x @ np.diag([4.0, 1, 1, 1, 1, 0.2]) @ rotation(6, 2) + rng.normal(scale=0.01, size=(500, 6))
    ridge = fit_with_stats(x, y, "ridge")[1]["held_out"]
    orthogonal = fit_with_stats(x, y, "orthogonal")[1]["held_out"]
    assert ridge["r2"] > 0.99 > orthogonal["r2"]


def test_ridge_strength_is_chosen_on_held_out_pairs():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(400, 8))
    assert choose_alpha(x, x @ rotation(8, 3), seed=0) == ALPHAS[0]  # exact: least shrinkage
    assert choose_alpha(x, rng.normal(size=(400, 8)), seed=0) == ALPHAS[-1]  # noise: the most


def test_mlp_map_fits_a_bend_the_linear_maps_cannot():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(3000, 8))
    y = x @ rotation(8, 4) + 2 * np.maximum(x @ rotation(8, 5), 0) ** 2
    mlp, ridge = (fit_with_stats(x, y, kind)[1]["held_out"]["r2"] for kind in ("mlp", "ridge"))
    assert mlp > ridge + 0.1, (mlp, ridge)


def test_blend_map_is_the_mean_of_the_ridge_and_mlp_maps():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(500, 8))
    y = x @ rotation(8, 4) + np.maximum(x @ rotation(8, 5), 0) ** 2
    ridge, mlp, blend = (fit_map(x, y, kind).apply(x) for kind in ("ridge", "mlp", "blend"))
    assert np.abs(mlp - ridge).mean() > 0.05  # the residual is there to be halved
    np.testing.assert_allclose(blend, (ridge + mlp) / 2, atol=1e-4)


@pytest.mark.parametrize("kind", ["mlp", "blend"])
def test_residual_map_is_stored_and_read_back(tmp_path, log, kind):
    old = tiny_bundle(tmp_path / "v1", log)
    new = reweighted(old, tmp_path / "v2", 1)
    meta, parent = (load_encoder(b, "cpu").meta for b in (new, old))
    rng = np.random.default_rng(0)
    x = rng.normal(size=(600, 16))
    fitted = fit_map(x, x + np.abs(x), kind)
    assert fitted.residual is not None
    save_lineage(new, meta, parent, fitted, {"n_entities": 600})
    _, loaded = load_lineage(new, meta)
    np.testing.assert_array_equal(loaded.apply(x), fitted.apply(x))
    with pytest.raises(SeqencError, match="dim"):  # a map of another width is refused
        save_lineage(new, meta, parent, fit_map(x[:, :8], x, kind), {})


def test_align_pairs_entities_at_time_quantiles():
    times = np.arange(10.0)
    assert cutoffs(times, 3) == [None, 3.0, 6.0, 9.0]
    assert cutoffs(times, 0) == [None]
    assert cutoffs(times, 2, as_of=4.0) == [4.0, 2.0]  # events up to as_of; each point once


def test_bad_map_kind_and_shapes_are_one_line_errors():
    with pytest.raises(SeqencError, match="kind"):
        fit_map(np.zeros((4, 2)), np.zeros((4, 2)), "affine")
    with pytest.raises(SeqencError, match="paired rows"):
        fit_map(np.zeros((4, 2)), np.zeros((3, 2)))


@pytest.fixture
def log(tmp_path):
    events = tiny_events(60)
    events.to_parquet(tmp_path / "events.parquet")
    return events


def test_a_map_from_a_space_to_itself_is_the_identity(tmp_path, log):
    bundle = tiny_bundle(tmp_path / "v1", log)
    x = np.stack(load_encoder(bundle, "cpu").encode(log)["embedding"]).astype(np.float64)
    fitted, stats = fit_with_stats(x, x, "ridge")  # shrunk by its ridge term
    alpha = stats["fit"]["alpha"]
    gram = (x - x.mean(0)).T @ (x - x.mean(0))
    shrunk = np.linalg.solve(gram + alpha * np.trace(gram) / 16 * np.eye(16), gram)
    np.testing.assert_allclose(fitted.weight, shrunk, atol=1e-4)
    assert alpha == ALPHAS[0]  # an exact fit wants the least shrinkage
    fitted, _ = fit_with_stats(x, x, "orthogonal")
    np.testing.assert_allclose(fitted.weight, np.eye(16), atol=1e-5)
    np.testing.assert_allclose(fitted.bias, 0, atol=1e-5)


def test_a_bundle_cannot_be_its_own_parent(tmp_path, log):
    """``seqenc align A A`` (or A onto a copy of itself) would make A its own parent."""
    bundle = tiny_bundle(tmp_path / "v1", log)
    shutil.copytree(bundle, tmp_path / "copy")
    for parent in (bundle, tmp_path / "copy"):
        with pytest.raises(SeqencError, match="cannot be its own parent"):
            align(bundle, parent, log, kind="ridge", n_cutoffs=0)
    assert load_encoder(bundle, "cpu").lineage is None  # nothing written


def test_lineage_is_checked_on_load(tmp_path, log):
    old = tiny_bundle(tmp_path / "v1", log)
    new = reweighted(old, tmp_path / "v2", 1)
    other = reweighted(old, tmp_path / "other", 2)
    align(new, old, log)
    for name in (LINEAGE_FILE, MAP_FILE):  # a lineage copied into a bundle it was not made for
        shutil.copy(new / name, other / name)
    with pytest.raises(SeqencError, match="other weights"):
        load_encoder(other, "cpu")
    raw = np.frombuffer((new / MAP_FILE).read_bytes(), np.uint8).copy()
    raw[-4:] ^= 0xFF  # an edited map
    (new / MAP_FILE).write_bytes(raw.tobytes())
    with pytest.raises(SeqencError, match="SHA-256"):
        load_encoder(new, "cpu")


def test_a_map_from_another_parent_is_refused(tmp_path, log):
    old = tiny_bundle(tmp_path / "v1", log)
    new = reweighted(old, tmp_path / "v2", 1)
    stranger = load_encoder(reweighted(old, tmp_path / "other", 2), "cpu").meta
    with pytest.raises(SeqencError, match="no parent space"):  # refused before reading events
        load_encoder(new, "cpu").encode(tmp_path / "nowhere.parquet", space="parent")
    align(new, old, log)
    enc = load_encoder(new, "cpu")
    parent = load_encoder(old, "cpu").meta
    enc.encode(log, space="parent", parent=parent)  # the right parent, as meta or as space id
    enc.encode(log, space="parent", parent=space_id(parent))
    with pytest.raises(SeqencError, match="maps to the space of"):
        enc.encode(log, space="parent", parent=stranger)
    with pytest.raises(SeqencError, match="space must be one of"):
        enc.encode(log, space="old")


def test_neighbour_overlap_matches_a_naive_count():
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=(40, 5)), rng.normal(size=(40, 5))
    rows = np.array([0, 7, 39])

    def knn(x, i):
        sims = [
            (x[i] @ x[j] / np.linalg.norm(x[i]) / np.linalg.norm(x[j]), j)
            for j in range(len(x))
            if j != i
        ]
        return {j for _, j in sorted(sims, reverse=True)[:3]}

    naive = np.mean([len(knn(a, i) & knn(b, i)) / 3 for i in rows])
    assert neighbour_overlap(a, b, rows, 3) == pytest.approx(naive)
    assert neighbour_overlap(a, 2 * a @ rotation(5, 0), rows, 3) == pytest.approx(1.0)


def test_drift_of_a_bundle_against_itself_is_same(tmp_path, log):
    enc = load_encoder(tiny_bundle(tmp_path / "v1", log), "cpu")
    report = drift(enc, enc, log, k=5)
    assert report.verdict == "same"
    assert report.cosine["mean"] == pytest.approx(1.0, abs=1e-5)
    assert report.overlap == pytest.approx(1.0)
    assert report.mean_shift == pytest.approx(0.0, abs=1e-5)
    assert report.n_entities == log["entity_id"].nunique()


def test_align_and_drift_commands(tmp_path, log, capsys):
    old = tiny_bundle(tmp_path / "v1", log)
    new = reweighted(old, tmp_path / "v2", 1)
    events = str(tmp_path / "events.parquet")
    main(["align", str(new), str(old), "--events", events, "--kind", "ridge"])
    assert capsys.readouterr().out.startswith(f"aligned: {new} -> space of 'tiny'")
    main(["drift", str(old), str(new), "--events", events, "--json", str(tmp_path / "d.json")])
    out = capsys.readouterr().out
    assert "mapped to old" in out and out.strip().splitlines()[-1].startswith("verdict: ")
    report = json.loads((tmp_path / "d.json").read_text())
    assert report["mapped"] and len(report["dimensions"]) == 16
    out = str(tmp_path / "e.parquet")
    main(["embed", "--model", str(new), "--events", events, "--output", out, "--space", "parent",
          "--no-progress", "--accelerator", "cpu"])  # fmt: skip
    metadata = pq.read_schema(out).metadata
    assert metadata[b"seqenc.space"] == b"parent" and metadata[b"seqenc.dim"] == b"16"


def test_commands_fail_in_one_line(tmp_path, log, capsys):
    old = tiny_bundle(tmp_path / "v1", log)
    with pytest.raises(SystemExit) as exit_info:
        main(["drift", str(old), str(tmp_path / "missing"), "--events", str(tmp_path)])
    assert exit_info.value.code == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "missing" in err[0]


def test_fit_compatible_with_aligns_the_new_bundle(tmp_path, log, monkeypatch, capsys):
    old = tiny_bundle(tmp_path / "v1", log)
    monkeypatch.chdir(tmp_path)
    args = ["fit", "--data.path", "events.parquet", "--trainer.max_epochs", "1"]
    main([*args, "--trainer.enable_progress_bar", "false", "--compatible_with", str(old)])
    last = capsys.readouterr().out.strip().splitlines()
    assert last[-1].startswith("aligned: ") and last[-2].startswith("bundle: ")
    new = load_encoder(tmp_path / last[-2].removeprefix("bundle: "), "cpu")
    assert new.lineage[0].parent_space == space_id(load_encoder(old, "cpu").meta)
    with pytest.raises(SystemExit):  # a wrong OLD fails in one line, before training
        main([*args, "--compatible_with", str(tmp_path / "missing")])
    captured = capsys.readouterr()
    assert "model bundle not found" in captured.err and "Epoch" not in captured.out


def test_export_writes_the_parent_space_and_names_it(tmp_path, log):
    from seqenc.export import export_embeddings

    old = tiny_bundle(tmp_path / "v1", log)
    new = reweighted(old, tmp_path / "v2", 1)
    align(new, old, log)
    out = export_embeddings(new, tmp_path / "events.parquet", tmp_path / "e.parquet",
                            space="parent", progress=False, accelerator="cpu")  # fmt: skip
    table = pq.read_table(out).sort_by("entity_id")  # the export writes in batch order
    expected = load_encoder(new, "cpu").encode(log, space="parent")
    got = np.stack(table["embedding"].to_numpy(False))
    np.testing.assert_allclose(got, np.stack(expected["embedding"]), atol=1e-5)
    metadata = table.schema.metadata
    assert metadata[b"seqenc.space"] == b"parent"
    assert metadata[b"seqenc.space_id"].decode() == space_id(load_encoder(old, "cpu").meta)
    with pytest.raises(SeqencError, match="no parent space"):
        export_embeddings(old, tmp_path / "events.parquet", tmp_path / "f.parquet", space="parent")
    assert not (tmp_path / "f.parquet").exists()
