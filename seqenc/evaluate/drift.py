"""Two model versions on the same events: the map between them (:func:`align`) and the drift
report (:func:`drift`), the check a pipeline runs before switching.

`drift` encodes the same events with both bundles and compares, per shared entity, the old
embedding with the new one as a downstream model would get it (through the new bundle's map when
its lineage leads to the old one, else raw): the per-entity cosine, the overlap of the k nearest
neighbours, each dimension's mean shift and spread ratio, the share of events whose item each
model knows (and both), and a verdict: ``same``, ``compatible`` (mean cosine >= ``MIN_COSINE`` and
mean shift <= ``MAX_SHIFT`` old stds: a downstream model keeps working) or ``incompatible``
(retrain the downstream models, or align the new version), always when fewer than ``MIN_KNOWN``
of the events have an item both models know; ``why`` says what made it incompatible.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from seqenc.compat.lineage import Lineage, save_lineage, space_id
from seqenc.compat.parent_map import DEFAULT_KIND, fit_with_stats
from seqenc.data.cut import at_or_before, parse
from seqenc.data.events import read_events
from seqenc.encoding import EncodeOptions
from seqenc.encoding.options import positive_int
from seqenc.errors import SeqencError
from seqenc.inference import Encoder, load_encoder
from seqenc.model.batch import UNK

MIN_COSINE, MAX_SHIFT = 0.5, 0.5
# The least share of the events whose item both models know for a comparison (drift) or a parent
# (align) to mean anything: an event unknown to a model is UNK to it, whatever the item was.
MIN_KNOWN = 0.5
CUTOFFS = 3  # align: quantiles of the event times at which entities are also paired
SAME = 0.999
CHUNK = 256  # sampled rows per similarity block


@dataclass
class DriftReport:
    """The figures of :func:`drift`; ``dimensions`` holds one row per dimension."""

    old: str
    new: str
    mapped: bool
    n_entities: int
    cosine: dict[str, float]
    overlap: float
    k: int
    n_sample: int
    mean_shift: float
    max_shift: float
    std_ratio: tuple[float, float]
    verdict: str
    why: str = ""  # what made the verdict incompatible
    known: dict[str, float] = field(default_factory=dict)  # shares of events with a known item
    dimensions: list[dict[str, float]] = field(default_factory=list)

    def table(self) -> str:
        """The report as a short text table (``seqenc drift`` prints it)."""
        c = self.cosine
        rows = [
            ("old", self.old),
            ("new", f"{self.new} ({'mapped to old' if self.mapped else 'raw: no map to old'})"),
            ("entities compared", str(self.n_entities)),
            ("cosine mean", f"{c['mean']:.4f}"),
            ("cosine p5 / p50 / p95", f"{c['p5']:.4f} / {c['p50']:.4f} / {c['p95']:.4f}"),
            (f"neighbour overlap @{self.k}", f"{self.overlap:.4f} ({self.n_sample} sampled)"),
            ("mean |mean shift| (old std)", f"{self.mean_shift:.4f} (max {self.max_shift:.4f})"),
            ("std ratio new/old", f"{self.std_ratio[0]:.3f} .. {self.std_ratio[1]:.3f}"),
            ("events with a known item", _known_text(self.known)),
        ]
        width = max(len(k) for k, _ in rows)
        lines = [f"{k:<{width}}  {v}" for k, v in rows]
        why = f" ({self.why})" if self.why else ""
        return "\n".join([*lines, f"verdict: {self.verdict}{why}"])

    def to_dict(self) -> dict[str, Any]:
        from dataclasses import asdict

        return asdict(self)


def _known_text(known: dict[str, float]) -> str:
    return " / ".join(f"{k} {v:.1%}" for k, v in known.items())


def known_items(
    encoders: dict[str, Encoder], events: Any, as_of: object = None
) -> dict[str, float]:
    """Per encoder (and ``both``): the share of the events at or before ``as_of`` whose item it
    knows (each reads the events with its own schema)."""
    masks = {}
    for name, encoder in encoders.items():
        schema = encoder.meta.schema
        table = read_events(events, schema, until=as_of if schema.timestamp else None)
        ids, _ = encoder.vocabs.item.encode(table[schema.item])
        masks[name] = ids != UNK
    masks["both"] = np.logical_and.reduce(list(masks.values()))  # the same rows, each schema
    return {name: float(m.mean()) if len(m) else 0.0 for name, m in masks.items()}


def verdict_of(
    cosine: float, overlap: float, mean_shift: float, known: dict[str, float]
) -> tuple[str, str]:
    """``(verdict, why)``: ``same``, ``compatible`` or ``incompatible`` (see the module
    docstring); embeddings of events one model cannot read are never compatible, whatever their
    cosine."""
    if known["both"] < MIN_KNOWN:
        why = f"{known['both']:.1%} of the events have an item both models know (< {MIN_KNOWN:.0%})"
        return "incompatible", why
    if cosine >= SAME and overlap >= SAME:
        return "same", ""
    if cosine >= MIN_COSINE and mean_shift <= MAX_SHIFT:
        return "compatible", ""
    return (
        "incompatible",
        f"cosine {cosine:.4f} (< {MIN_COSINE}) or mean shift {mean_shift:.4f} (> {MAX_SHIFT})",
    )


def paired(
    a: Encoder, b: Encoder, events: Any, options: EncodeOptions | None = None
) -> tuple[np.ndarray, ...]:
    """``(entity_ids, x_a, x_b)``: the embeddings by encoders ``a`` (its own space) and ``b`` (in
    ``options.space``: ``"parent"`` goes through ``b``'s map, which must lead to ``a``'s space)
    of the entities of ``events`` both can encode (default options: ``on_empty="skip"``)."""
    options = options or EncodeOptions(on_empty="skip")
    sizes = {"batch_size": options.batch_size, "max_tokens": options.max_tokens}
    common = {"as_of": options.as_of, "on_empty": options.on_empty, "output": "numpy", **sizes}
    parent = a.meta if options.space == "parent" else None
    ea = a.encode(events, **common)
    eb = b.encode(events, space=options.space, parent=parent, **common)
    ids, ia, ib = np.intersect1d(ea.entity_ids, eb.entity_ids, return_indices=True)
    if len(ids) < 2:
        raise SeqencError(f"the two models share {len(ids)} entit(ies) of the events: need >= 2")
    return ids, ea.embeddings[ia], eb.embeddings[ib]


def cutoffs(times: np.ndarray, n: int, as_of: object = None) -> list[object]:
    """When :func:`align` pairs entities: ``as_of`` (``None``: each entity's newest event), then
    the ``k / n`` quantiles (k = 1..n) of the event ``times`` (epoch seconds) up to ``as_of``,
    each point once."""
    times, cut = np.asarray(times, dtype=np.float64), parse(as_of)
    if cut is not None:
        times = times[at_or_before((times, None), cut)]
    if n < 1 or len(times) == 0:
        return [as_of]
    points = np.quantile(times, np.arange(1, n + 1) / n)
    later = {float(t) for t in points} - ({cut.seconds} if cut is not None else set())
    return [as_of, *sorted(later)]


def history_pairs(
    child: Encoder, parent: Encoder, events: Any, as_of: object = None, n_cutoffs: int = CUTOFFS
) -> tuple[np.ndarray, np.ndarray, dict[str, int]]:
    """The rows a map is fitted on: ``(x, y, counts)``, the embeddings ``child`` and ``parent``
    give the entities of ``events`` both encode, each at several points of its history
    (:func:`cutoffs`): downstream models read entities at many points in time, and the map must
    hold at all of them."""
    schema = child.meta.schema
    until = as_of if schema.timestamp else None
    times = read_events(events, schema, until=until)[schema.timestamp] if schema.timestamp else []
    at = [EncodeOptions(as_of=when, on_empty="skip") for when in cutoffs(times, n_cutoffs, as_of)]
    parts = [paired(child, parent, events, options) for options in at]
    x, y = np.vstack([p[1] for p in parts]), np.vstack([p[2] for p in parts])
    return x, y, {"n_entities": len(parts[0][0]), "n_cutoffs": len(parts)}


def align(
    new: str | Path,
    old: str | Path,
    events: Any,
    kind: str = DEFAULT_KIND,
    as_of: object = None,
    n_cutoffs: int = CUTOFFS,
) -> Lineage:
    """Fit the map from bundle ``new``'s space to bundle ``old``'s on :func:`history_pairs` and
    store it with the lineage in ``new`` (replacing an earlier one)."""
    child, parent = load_encoder(new, "cpu"), load_encoder(old, "cpu")
    check_parent(child, parent, events, as_of, (repr(str(new)), repr(str(old))))
    x, y, counts = history_pairs(child, parent, events, as_of, n_cutoffs)
    fitted, stats = fit_with_stats(x, y, kind)
    return save_lineage(new, child.meta, parent.meta, fitted, stats | counts)


def check_parent(
    child: Encoder, parent: Encoder, events: Any, as_of: object, names: tuple[str, str]
) -> None:
    """Refuse a parent that cannot serve ``child`` (their bundles' ``names``): itself (or another
    copy of its weights), a bundle already aligned to ``child`` (a circle), or events whose items
    either of them knows for fewer than ``MIN_KNOWN`` of them (its embeddings of them would be
    UNK's)."""
    space = space_id(child.meta)
    if space_id(parent.meta) == space:
        raise SeqencError(
            f"{names[0]} and {names[1]} are the same model: a bundle cannot be its own parent"
        )
    if parent.lineage is not None and parent.lineage[0].parent_space == space:
        raise SeqencError(
            f"{names[1]} is already aligned to {names[0]}: aligning back would make a circle"
        )
    known = known_items({"child": child, "parent": parent}, events, as_of)
    for role, name in zip(("child", "parent"), names, strict=True):
        if known[role] < MIN_KNOWN:
            raise SeqencError(
                f"the {role} {name} knows the item of {known[role]:.1%} of the events "
                f"(< {MIN_KNOWN:.0%}): a map fitted on them would map UNK's"
            )


def neighbour_overlap(a: np.ndarray, b: np.ndarray, rows: np.ndarray, k: int) -> float:
    """Mean share of the ``k`` nearest neighbours (cosine, self excluded) of each of ``rows`` in
    ``a`` that are also among its ``k`` nearest in ``b`` (exact search over all rows)."""
    k = min(k, len(a) - 1)
    if k < 1:
        return 1.0
    units = [
        (x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)).astype(np.float32)
        for x in (a, b)
    ]
    common = 0
    for start in range(0, len(rows), CHUNK):  # CHUNK x n similarities at a time
        part = rows[start : start + CHUNK]
        found = []
        for unit in units:
            sims = unit[part] @ unit.T
            sims[np.arange(len(part)), part] = -np.inf
            found.append(np.argpartition(-sims, k - 1, axis=1)[:, :k])
        common += sum(len(np.intersect1d(p, q)) for p, q in zip(*found, strict=True))
    return common / (len(rows) * k)


def drift(
    old: Encoder,
    new: Encoder,
    events: Any,
    options: EncodeOptions | None = None,
    k: int = 10,
    sample: int = 2000,
    seed: int = 0,
) -> DriftReport:
    """Compare bundle ``new`` with ``old`` on ``events`` (see the module docstring), both encoded
    with ``options`` (default ``on_empty="skip"``; ``new`` in ``old``'s space when its map leads
    there); the overlap uses ``sample`` entities drawn with ``seed`` (all of them when fewer)."""
    positive_int("k", k)
    positive_int("sample", sample)
    options = options or EncodeOptions(on_empty="skip")
    lineage = new.lineage
    mapped = lineage is not None and lineage[0].parent_space == space_id(old.meta)
    _, y, x = paired(old, new, events, options.but(space="parent" if mapped else "native"))
    if x.shape[1] != y.shape[1]:
        raise SeqencError(
            f"{new.meta.name!r} (dim {x.shape[1]}) has no map to {old.meta.name!r} (dim "
            f"{y.shape[1]}): embeddings of different sizes cannot be compared; run seqenc align"
        )
    x, y = x.astype(np.float64), y.astype(np.float64)
    norms = np.linalg.norm(x, axis=1) * np.linalg.norm(y, axis=1)
    cos = (x * y).sum(1) / np.maximum(norms, 1e-30)
    rng = np.random.default_rng(seed)
    rows = np.sort(rng.choice(len(y), size=min(sample, len(y)), replace=False))
    overlap = neighbour_overlap(y, x, rows, k)
    std_old, std_new = y.std(0), x.std(0)
    shift = (x.mean(0) - y.mean(0)) / np.maximum(std_old, 1e-12)
    ratio = std_new / np.maximum(std_old, 1e-12)
    cosine = {"mean": float(cos.mean())} | {
        f"p{q}": float(np.quantile(cos, q / 100)) for q in (5, 50, 95)
    }
    mean_shift = float(np.abs(shift).mean())
    known = known_items({"old": old, "new": new}, events, options.as_of)
    verdict, why = verdict_of(cosine["mean"], overlap, mean_shift, known)
    return DriftReport(
        old=old.meta.name,
        new=new.meta.name,
        mapped=mapped,
        n_entities=len(y),
        cosine=cosine,
        overlap=overlap,
        k=k,
        n_sample=len(rows),
        mean_shift=mean_shift,
        max_shift=float(np.abs(shift).max()),
        std_ratio=(float(ratio.min()), float(ratio.max())),
        verdict=verdict,
        why=why,
        known=known,
        dimensions=[
            {"mean_old": float(a), "mean_new": float(b), "std_old": float(c), "std_new": float(d)}
            for a, b, c, d in zip(y.mean(0), x.mean(0), std_old, std_new, strict=True)
        ],
    )
