"""Embeddings that survive a retrain: a bundle's lineage and its map to the parent's space.

A retrained encoder (version 2) starts a new, unrelated embedding space, so a downstream model
trained on version 1's embeddings gets noise from it. :func:`seqenc.evaluate.drift.align` fits a map from
version 2's space to version 1's (:mod:`seqenc.compat.parent_map`), and this module stores it in version
2's bundle with its lineage (``lineage.json``, ``parent_map.safetensors``: plain data, written
atomically), so ``encode(..., space="parent")`` returns what a version-1 downstream model reads.
Version 2's own space is untouched. :func:`load_lineage` refuses a lineage copied into another
bundle or an edited map.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from seqenc.atomic import atomic_file
from seqenc.bundle import BundleMeta, file_sha256, finite_tensors, read_json
from seqenc.compat.parent_map import ParentMap
from seqenc.errors import SeqencError

LINEAGE_FILE, MAP_FILE = "lineage.json", "parent_map.safetensors"
SPACES = ("native", "parent")


def space_id(meta: BundleMeta) -> str:
    """The id of a bundle's own embedding space: its config hash and the start of its weights'
    SHA-256 (two trainings of one config are two spaces)."""
    return f"{meta.config_hash}-{meta.weights_sha256[:16]}"


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


def save_lineage(bundle: str | Path, meta: BundleMeta, parent: BundleMeta, fitted: ParentMap,
                 stats: dict[str, Any]) -> Lineage:  # fmt: skip
    """Store ``fitted`` (this bundle's space -> ``parent``'s) and the lineage in ``bundle``."""
    bundle = Path(bundle)
    try:
        fitted.check_shape(meta.dim, parent.dim)
    except ValueError as e:
        raise SeqencError(f"the map does not go from dim {meta.dim} to {parent.dim}: {e}") from e
    with atomic_file(bundle / MAP_FILE) as tmp:
        save_file(fitted.tensors(), tmp)
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


def load_lineage(bundle: str | Path, meta: BundleMeta) -> tuple[Lineage, ParentMap] | None:
    """The lineage and map of the bundle at ``bundle`` (whose config is ``meta``), checked: the
    lineage must name this bundle's weights, the map file its recorded SHA-256 and shape.
    ``None`` when the bundle has no parent."""
    bundle = Path(bundle)
    path = bundle / LINEAGE_FILE
    if not path.is_file():
        return None
    try:
        lineage = Lineage(**read_json(path))
    except TypeError as e:
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
    if file_sha256(weights) != lineage.map_sha256:
        raise SeqencError(f"{str(weights)!r}: its SHA-256 differs from lineage.json's")
    try:
        tensors = load_file(weights)
        fitted = ParentMap.from_tensors(lineage.kind, tensors, meta.dim, lineage.parent_dim)
    except (SafetensorError, OSError, KeyError, ValueError) as e:
        raise SeqencError(f"cannot read {str(weights)!r} as a map from dim {meta.dim}: {e}") from e
    finite_tensors(tensors, repr(str(weights)))
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
    lineage: tuple[Lineage, ParentMap] | None,
    space: str,
    parent: str | BundleMeta | None = None,
) -> tuple[ParentMap | None, dict[str, str]]:
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
