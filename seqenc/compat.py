"""Embeddings that survive a retrain: a linear map from a bundle's space to its parent's.

A retrained encoder (version 2) starts a new, unrelated embedding space; a downstream model trained
on version 1's embeddings gets noise from it. :func:`align` fits, after training, a map ``x @ W + b``
from version 2's embeddings to version 1's on entities both models encode, and stores it in version
2's bundle with its lineage. Version 2's own space is untouched (its quality is exactly that of an
unconstrained retrain), new items and entities still work (the map acts on embeddings), and
``encode(..., space="parent")`` returns embeddings a version-1 downstream model can use.

Two kinds (``BENCHMARKS.md``, "Compatible retrains", compares them on downstream probes):

- ``"ridge"`` (default): a general linear map by ridge regression (``RIDGE_ALPHA`` times the mean
  feature variance), which also fixes axes the two models stretch differently. On Ta-Feng it keeps
  a version-1 probe within 0.005 ROC-AUC (linear and trees), a third of the orthogonal map's loss.
- ``"orthogonal"``: Procrustes with one global scale and a shift. It can only rotate, so it keeps
  version 2's geometry (cosines, neighbours) exactly; a model mapped to itself is the identity.

Files beside the bundle's own (plain JSON and safetensors, never pickle; written atomically):
``lineage.json`` (the parent's name, config hash, SHA-256 of its weights and space id, this
bundle's weights SHA-256, the map's kind, its SHA-256 and fit statistics) and ``parent_map.safetensors``
(``weight [d, d_parent]``, ``bias [d_parent]``). :func:`load_lineage` checks both on load: a lineage
copied into another bundle, or a map file that was edited, is refused.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from seqenc.atomic import atomic_file
from seqenc.bundle import BundleMeta, file_sha256
from seqenc.errors import SeqencError

LINEAGE_FILE, MAP_FILE = "lineage.json", "parent_map.safetensors"
KINDS = ("ridge", "orthogonal")
DEFAULT_KIND = "ridge"  # the smaller downstream loss on Ta-Feng (BENCHMARKS.md)
SPACES = ("native", "parent")
RIDGE_ALPHA = 1e-2  # relative to the mean feature variance: a light pull towards zero
HELD_OUT = 0.2  # share of the fitting entities that scores the map before it is refitted on all


def space_id(meta: BundleMeta) -> str:
    """The id of a bundle's own embedding space: its config hash and the start of its weights'
    SHA-256 (two trainings of one config are two spaces)."""
    return f"{meta.config_hash}-{meta.weights_sha256[:16]}"


@dataclass(frozen=True)
class LinearMap:
    """``x @ weight + bias``: ``weight [d, d_parent]``, ``bias [d_parent]`` (float32)."""

    kind: str
    weight: np.ndarray
    bias: np.ndarray

    def apply(self, x: np.ndarray) -> np.ndarray:
        return (np.asarray(x, dtype=np.float32) @ self.weight + self.bias).astype(np.float32)


def fit_map(x: np.ndarray, y: np.ndarray, kind: str = DEFAULT_KIND) -> LinearMap:
    """The map of ``kind`` taking rows of ``x`` (this model's embeddings) to the same entities'
    rows of ``y`` (the parent's), least squares after centring both."""
    if kind not in KINDS:
        raise SeqencError(f"map kind must be one of {KINDS}, got {kind!r}")
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    if x.ndim != 2 or y.ndim != 2 or len(x) != len(y) or len(x) < 2:
        raise SeqencError(f"a map needs paired rows of two matrices, got {x.shape} and {y.shape}")
    mx, my = x.mean(0), y.mean(0)
    xc, yc = x - mx, y - my
    if kind == "orthogonal":
        u, s, vt = np.linalg.svd(xc.T @ yc, full_matrices=False)
        weight = (s.sum() / max((xc**2).sum(), 1e-30)) * (u @ vt)
    else:
        gram = xc.T @ xc
        alpha = RIDGE_ALPHA * np.trace(gram) / x.shape[1]
        weight = np.linalg.solve(gram + alpha * np.eye(x.shape[1]), xc.T @ yc)
    bias = my - mx @ weight
    return LinearMap(kind, weight.astype(np.float32), bias.astype(np.float32))


def map_stats(mapped: np.ndarray, target: np.ndarray) -> dict[str, float]:
    """How well ``mapped`` rows match ``target``: mean cosine and R² (share of the target's
    variance around its mean that the map explains)."""
    mapped, target = np.asarray(mapped, np.float64), np.asarray(target, np.float64)
    norms = np.linalg.norm(mapped, axis=1) * np.linalg.norm(target, axis=1)
    cosine = (mapped * target).sum(1) / np.maximum(norms, 1e-30)
    sse = ((mapped - target) ** 2).sum()
    sst = ((target - target.mean(0)) ** 2).sum()
    return {"cosine": float(cosine.mean()), "r2": float(1 - sse / max(sst, 1e-30))}


def fit_with_stats(
    x: np.ndarray, y: np.ndarray, kind: str = DEFAULT_KIND, seed: int = 0
) -> tuple[LinearMap, dict[str, Any]]:
    """:func:`fit_map` on all rows, with statistics: on the fitting rows, and on a held-out
    ``HELD_OUT`` share of them scored by a map fitted on the rest (how the map generalises)."""
    order = np.random.default_rng(seed).permutation(len(x))
    n_test = int(len(x) * HELD_OUT)
    test, train = order[:n_test], order[n_test:]
    stats: dict[str, Any] = {"n_entities": len(x)}
    if n_test >= 2 and len(train) >= 2:
        held = fit_map(x[train], y[train], kind)
        stats["held_out"] = map_stats(held.apply(x[test]), y[test]) | {"n": n_test}
    final = fit_map(x, y, kind)
    stats["fit"] = map_stats(final.apply(x), y)
    return final, stats


@dataclass(frozen=True)
class Lineage:
    """What ``lineage.json`` holds: where a bundle's parent space is and how to get there."""

    parent_name: str
    parent_config_hash: str
    parent_weights_sha256: str
    parent_dim: int
    child_weights_sha256: str
    kind: str
    map_sha256: str
    stats: dict[str, Any] = field(default_factory=dict)

    @property
    def parent_space(self) -> str:
        return f"{self.parent_config_hash}-{self.parent_weights_sha256[:16]}"


def save_lineage(bundle: str | Path, meta: BundleMeta, parent: BundleMeta, fitted: LinearMap,
                 stats: dict[str, Any]) -> Lineage:  # fmt: skip
    """Store ``fitted`` (this bundle's space -> ``parent``'s) and the lineage in ``bundle``."""
    bundle = Path(bundle)
    if fitted.weight.shape != (meta.dim, parent.dim):
        raise SeqencError(
            f"map shape {fitted.weight.shape} does not go from dim {meta.dim} to {parent.dim}"
        )
    tensors = {"weight": torch.from_numpy(fitted.weight), "bias": torch.from_numpy(fitted.bias)}
    with atomic_file(bundle / MAP_FILE) as tmp:
        save_file(tensors, tmp)
    lineage = Lineage(
        parent_name=parent.name,
        parent_config_hash=parent.config_hash,
        parent_weights_sha256=parent.weights_sha256,
        parent_dim=parent.dim,
        child_weights_sha256=meta.weights_sha256,
        kind=fitted.kind,
        map_sha256=file_sha256(bundle / MAP_FILE),
        stats=stats,
    )
    with atomic_file(bundle / LINEAGE_FILE) as tmp:
        Path(tmp).write_text(json.dumps(asdict(lineage), indent=2) + "\n")
    return lineage


def load_lineage(bundle: str | Path, meta: BundleMeta) -> tuple[Lineage, LinearMap] | None:
    """The lineage and map of the bundle at ``bundle`` (whose config is ``meta``), checked: the
    lineage must name this bundle's weights, the map file its recorded SHA-256 and shape.
    ``None`` when the bundle has no parent."""
    bundle = Path(bundle)
    path = bundle / LINEAGE_FILE
    if not path.is_file():
        return None
    try:
        raw = json.loads(path.read_text())
        lineage = Lineage(**raw)
    except (OSError, ValueError, TypeError) as e:
        raise SeqencError(f"invalid lineage file {str(path)!r}: {e}") from e
    for name in ("parent_name", "parent_config_hash", "parent_weights_sha256", "kind"):
        if not isinstance(getattr(lineage, name), str):
            raise SeqencError(f"{str(path)!r}: {name} must be a string")
    if lineage.child_weights_sha256 != meta.weights_sha256:
        raise SeqencError(
            f"{str(path)!r} was written for other weights than this bundle's model.safetensors "
            "(copied from another bundle?): run `seqenc align` again"
        )
    weights = bundle / MAP_FILE
    if not weights.is_file() or file_sha256(weights) != lineage.map_sha256:
        raise SeqencError(f"{str(weights)!r} is missing or its SHA-256 differs from lineage.json's")
    try:
        tensors = load_file(weights)
        fitted = LinearMap(lineage.kind, tensors["weight"].numpy(), tensors["bias"].numpy())
    except (SafetensorError, OSError, KeyError) as e:
        raise SeqencError(f"cannot read {str(weights)!r}: {e}") from e
    if fitted.weight.shape != (meta.dim, lineage.parent_dim) or fitted.bias.shape != (
        lineage.parent_dim,
    ):
        raise SeqencError(f"{str(weights)!r}: map shape does not fit dim {meta.dim}")
    return lineage, fitted


def check_parent(lineage: Lineage | None, parent: str | BundleMeta | None, name: str) -> None:
    """Refuse a map of bundle ``name`` that does not lead to ``parent`` (a bundle's meta or a
    space id, as an export's ``seqenc.space_id`` metadata gives it); ``None`` checks nothing."""
    if lineage is None:
        raise SeqencError(
            f"bundle {name!r} has no parent space: fit it with --compatible_with OLD_BUNDLE or "
            "run `seqenc align NEW OLD --events ...`"
        )
    want = space_id(parent) if isinstance(parent, BundleMeta) else parent
    if want is not None and want != lineage.parent_space:
        raise SeqencError(
            f"bundle {name!r} maps to the space of {lineage.parent_name!r} "
            f"({lineage.parent_space}), not to {want}: align it to that parent first"
        )


def select_space(
    meta: BundleMeta,
    lineage: tuple[Lineage, LinearMap] | None,
    space: str,
    parent: str | BundleMeta | None = None,
) -> tuple[LinearMap | None, dict[str, str]]:
    """The map that takes the bundle's embeddings into ``space`` (``None`` for its own) and the
    metadata naming the space written; refused in one line before any encoding: an unknown space,
    no lineage, or a map to another parent than ``parent``."""
    if space not in SPACES:
        raise SeqencError(f"space must be one of {SPACES}, got {space!r}")
    if space == "native":
        return None, {"seqenc.space": "native", "seqenc.space_id": space_id(meta)}
    check_parent(lineage and lineage[0], parent, meta.name)
    found, fitted = lineage
    metadata = {"seqenc.space": "parent", "seqenc.space_id": found.parent_space}
    return fitted, metadata | {"seqenc.dim": str(found.parent_dim)}


def tag_space(result: Any, metadata: dict[str, str]) -> Any:
    """Name the space of an :meth:`Encoder.encode` result: Arrow schema metadata (as the Parquet
    export writes it) or pandas attrs (``space``, ``space_id``)."""
    import pandas as pd
    import pyarrow as pa

    if isinstance(result, pa.Table):
        return result.replace_schema_metadata((result.schema.metadata or {}) | metadata)
    if isinstance(result, pd.DataFrame):
        result.attrs.update({k.removeprefix("seqenc."): v for k, v in metadata.items()})
    return result


def space_map(
    bundle: str | Path, meta: BundleMeta, space: str, parent: str | BundleMeta | None = None
) -> tuple[LinearMap | None, dict[str, str]]:
    """:func:`select_space` for the bundle at ``bundle`` (the export reads its lineage only for the
    parent space)."""
    lineage = load_lineage(bundle, meta) if space == "parent" else None
    return select_space(meta, lineage, space, parent)
