"""The map from a retrained model's embedding space to its parent's: kinds, fitting, scoring.

A map is fitted on paired rows: the embeddings both models give the same entities at the same
times. Kinds: ``"ridge"`` (a general linear map, its strength chosen on held-out pairs), ``"mlp"``
(the ridge map plus a small residual network, early-stopped on held-out pairs: closer to the parent,
but a tree probe can lose more where the network bends values), ``"blend"`` (default: the mean of
the two, which hedges between their failure modes; the ridge map alone below ``MLP_MIN_ROWS``
pairs) and ``"orthogonal"`` (a rotation with one scale and a shift: keeps version 2's geometry
exactly). :meth:`ParentMap.apply` is plain numpy, so every output path applies the same map.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from seqenc.errors import SeqencError

KINDS = ("ridge", "mlp", "blend", "orthogonal")
RESIDUAL_SHARE = {"mlp": 1.0, "blend": 0.5}  # how much of the residual network a kind adds
DEFAULT_KIND = "blend"  # the smallest worst-case downstream loss of the kinds
ALPHAS = (1e-4, 1e-3, 1e-2, 1e-1)  # ridge strengths tried, relative to the mean feature variance
HELD_OUT = 0.2  # share of the pairs that scores a map (strength, early stop, statistics)
MLP_MIN_ROWS = 200  # fewer pairs: the residual network is left out (the ridge map alone)
# residual training: rounds of at least ROUND_STEPS steps (or an epoch), held-out checked after each
MLP_ROUNDS, ROUND_STEPS, MLP_PATIENCE, MLP_BATCH, MLP_LR, MLP_DECAY = 40, 100, 4, 512, 1e-3, 1e-4
RESIDUAL = ("shift", "scale", "w1", "b1", "w2", "b2")  # the residual network's tensors, in order


@dataclass(frozen=True)
class ParentMap:
    """``x @ weight + bias`` (``weight [d, d_parent]``), plus, for the ``mlp`` and ``blend`` kinds,
    the residual ``relu(((x - shift) / scale) @ w1 + b1) @ w2 + b2`` (``blend`` stores it halved;
    ``None`` when too few pairs, or when it did not beat the linear part on held-out pairs);
    float32 throughout."""

    kind: str
    weight: np.ndarray
    bias: np.ndarray
    residual: dict[str, np.ndarray] | None = None

    def apply(self, x: np.ndarray) -> np.ndarray:
        x = np.asarray(x, dtype=np.float32)
        out = x @ self.weight + self.bias
        if self.residual is not None:
            r = self.residual
            hidden = np.maximum(((x - r["shift"]) / r["scale"]) @ r["w1"] + r["b1"], 0)
            out = out + hidden @ r["w2"] + r["b2"]
        return out.astype(np.float32)

    def tensors(self) -> dict[str, torch.Tensor]:
        """The arrays to store (safetensors names)."""
        out = {"weight": self.weight, "bias": self.bias}
        out |= {f"residual.{k}": v for k, v in (self.residual or {}).items()}
        return {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in out.items()}

    @classmethod
    def from_tensors(cls, kind: str, tensors: dict[str, torch.Tensor], d: int, d_parent: int):
        """The map stored by :meth:`tensors`; a missing tensor or a wrong shape raises
        ``KeyError``/``ValueError``."""
        arrays = {k: v.numpy() for k, v in tensors.items()}
        stored = kind in RESIDUAL_SHARE and "residual.w1" in arrays  # absent when it did not pay
        residual = {k: arrays[f"residual.{k}"] for k in RESIDUAL} if stored else None
        fitted = cls(kind, arrays["weight"], arrays["bias"], residual)
        fitted.check_shape(d, d_parent)
        return fitted

    def check_shape(self, d: int, d_parent: int) -> None:
        """Raise ``ValueError`` unless the map takes dim ``d`` to ``d_parent``."""
        want = {"weight": (d, d_parent), "bias": (d_parent,)}
        if self.residual is not None:
            h = self.residual["b1"].shape[0]
            want |= {"shift": (d,), "scale": (d,), "w1": (d, h), "w2": (h, d_parent)}
            want |= {"b2": (d_parent,)}
        arrays = {"weight": self.weight, "bias": self.bias} | (self.residual or {})
        for name, shape in want.items():
            if arrays[name].shape != shape:
                raise ValueError(f"{name} has shape {arrays[name].shape}, not {shape}")


def split(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Seeded (train, held-out) row indices; the held-out part is ``HELD_OUT`` of ``n``."""
    order = np.random.default_rng(seed).permutation(n)
    n_test = int(n * HELD_OUT)
    return order[n_test:], order[:n_test]


def ridge(x: np.ndarray, y: np.ndarray, alpha: float) -> tuple[np.ndarray, np.ndarray]:
    """Ridge regression of ``y`` on ``x`` after centring, strength ``alpha`` times the mean
    feature variance: ``(weight, bias)``."""
    mx, my = x.mean(0), y.mean(0)
    xc = x - mx
    gram = xc.T @ xc
    scale = alpha * np.trace(gram) / x.shape[1]
    weight = np.linalg.solve(gram + scale * np.eye(x.shape[1]), xc.T @ (y - my))
    return weight, my - mx @ weight


def choose_alpha(x: np.ndarray, y: np.ndarray, seed: int) -> float:
    """The strength of ``ALPHAS`` whose map, fitted on the training pairs, has the smallest
    squared error on the held-out ones (the largest, the safest, when too few pairs to tell)."""
    train, test = split(len(x), seed)
    if len(test) < 2 or len(train) < 2:
        return ALPHAS[-1]

    def error(alpha: float) -> float:
        weight, bias = ridge(x[train], y[train], alpha)
        return float(((x[test] @ weight + bias - y[test]) ** 2).sum())

    return min(ALPHAS, key=error)


def fit_residual(x: np.ndarray, target: np.ndarray, seed: int) -> tuple[dict | None, int]:
    """The residual network fitted to ``target`` (what the linear part leaves), early-stopped on
    held-out pairs: its arrays (``None`` when it never beats zero) and the epochs kept."""
    train, test = split(len(x), seed)
    shift, scale = x[train].mean(0), x[train].std(0) + 1e-6
    z = torch.from_numpy(((x - shift) / scale).astype(np.float32))
    t = torch.from_numpy(target.astype(np.float32))
    hidden = max(64, 4 * x.shape[1])
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        net = torch.nn.Sequential(
            torch.nn.Linear(x.shape[1], hidden),
            torch.nn.ReLU(),
            torch.nn.Linear(hidden, t.shape[1]),
        )
    torch.nn.init.zeros_(net[2].weight)
    torch.nn.init.zeros_(net[2].bias)
    opt = torch.optim.AdamW(net.parameters(), MLP_LR, weight_decay=MLP_DECAY)
    rng = np.random.default_rng(seed)
    n_batches = max(1, len(train) // MLP_BATCH)
    epochs_per_round = -(-ROUND_STEPS // n_batches)
    best, best_state, kept = float((t[test] ** 2).sum()), None, 0
    for round_ in range(1, MLP_ROUNDS + 1):
        for rows in np.array_split(rng.permutation(np.tile(train, epochs_per_round)),
                                   n_batches * epochs_per_round):  # fmt: skip
            loss = ((net(z[rows]) - t[rows]) ** 2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
        with torch.no_grad():
            held = float(((net(z[test]) - t[test]) ** 2).sum())
        if held < best:
            best, kept = held, round_
            best_state = {k: v.detach().clone() for k, v in net.state_dict().items()}
        elif round_ - kept >= MLP_PATIENCE:
            break
    if best_state is None:
        return None, 0
    arrays = {"shift": shift, "scale": scale, "w1": best_state["0.weight"].T,
              "b1": best_state["0.bias"], "w2": best_state["2.weight"].T, "b2": best_state["2.bias"]}  # fmt: skip
    return {k: np.asarray(v, dtype=np.float32) for k, v in arrays.items()}, kept


def fit_map(x: np.ndarray, y: np.ndarray, kind: str = DEFAULT_KIND, seed: int = 0) -> ParentMap:
    """The map of ``kind`` taking rows of ``x`` (this model's embeddings) to the same entities'
    rows of ``y`` (the parent's)."""
    return fit_map_with_notes(x, y, kind, seed)[0]


def fit_map_with_notes(
    x: np.ndarray, y: np.ndarray, kind: str = DEFAULT_KIND, seed: int = 0
) -> tuple[ParentMap, dict[str, Any]]:
    """:func:`fit_map` and what it chose (ridge strength, residual epochs)."""
    if kind not in KINDS:
        raise SeqencError(f"map kind must be one of {KINDS}, got {kind!r}")
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    if x.ndim != 2 or y.ndim != 2 or len(x) != len(y) or len(x) < 2:
        raise SeqencError(f"a map needs paired rows of two matrices, got {x.shape} and {y.shape}")
    if kind == "orthogonal":
        mx, my = x.mean(0), y.mean(0)
        xc, yc = x - mx, y - my
        u, s, vt = np.linalg.svd(xc.T @ yc, full_matrices=False)
        weight = (s.sum() / max((xc**2).sum(), 1e-30)) * (u @ vt)
        bias, notes = my - mx @ weight, {}
    else:
        alpha = choose_alpha(x, y, seed)
        weight, bias = ridge(x, y, alpha)
        notes = {"alpha": alpha}
    residual = None
    if kind in RESIDUAL_SHARE and len(x) >= MLP_MIN_ROWS:
        residual, notes["residual_rounds"] = fit_residual(x, y - (x @ weight + bias), seed)
        if residual is not None:  # a share of the last layer is that share of the residual
            share = np.float32(RESIDUAL_SHARE[kind])
            residual |= {"w2": residual["w2"] * share, "b2": residual["b2"] * share}
    f32 = np.float32
    return ParentMap(kind, weight.astype(f32), bias.astype(f32), residual), notes


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
) -> tuple[ParentMap, dict[str, Any]]:
    """:func:`fit_map` on all rows, with statistics: on the fitting rows, and on a held-out
    ``HELD_OUT`` share of them scored by a map fitted on the rest (how the map generalises)."""
    train, test = split(len(x), seed + 1)  # another split than the fit's own choices use
    stats: dict[str, Any] = {"n_pairs": len(x)}
    if len(test) >= 2 and len(train) >= 2:
        held = fit_map(x[train], y[train], kind, seed)
        stats["held_out"] = map_stats(held.apply(x[test]), y[test]) | {"n": len(test)}
    final, notes = fit_map_with_notes(x, y, kind, seed)
    stats["fit"] = map_stats(final.apply(x), y) | notes
    return final, stats
