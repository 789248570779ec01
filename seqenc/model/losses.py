"""Item-prediction losses over the tied item table.

Every loss takes ``hidden [N, d]``, the item table ``weight [n_items, d]`` and ``targets [N]`` item ids;
rows whose target is IGNORE (-100) or a special id (< 3: PAD, MASK, UNK) are ignored, and the result
is the mean over the remaining rows (0, still differentiable, when none remain). Specials are never
candidates: the softmax runs over the real items ``weight[3:]`` only.

- ``ce``: exact full softmax, fused with the output matmul and chunked over rows so the ``[N, n_items]``
  logit matrix never exists at once (gradients are computed during the forward pass).
- ``sampled_softmax``: each row's window scored exactly, the rest of the catalogue from K shared
  candidates (half the batch's targets, half the item frequency), logQ-corrected: its cost does
  not grow with the catalogue. :func:`target_log_softmax` gives either term per row (the repeat head's).
- ``bce``: SASRec's binary cross-entropy with one uniform negative per position.
- ``gbce``: gSASRec's generalised BCE (Petrov & Macdonald, RecSys 2023) with k negatives per position.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.linalg import vector_norm

from seqenc.errors import SeqencError
from seqenc.model.batch import N_SPECIAL
from seqenc.model.masking import randint
from seqenc.model.normaliser import CHUNK_ELEMENTS, MIN_CHUNK_ROWS, exact_logsumexp
from seqenc.model.sampled import (
    EXACT_SHARE,
    ITEM_GRADIENT,
    ITEM_GRADIENTS,
    sampled_log_softmax,
    scale_gradient,
    shared_logsumexp,
)

MATMUL_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}
# A loss's arguments that are its inputs, not options.
LOSS_INPUTS = ("hidden", "weight", "targets")


def _valid_rows(hidden: Tensor, targets: Tensor) -> tuple[Tensor, Tensor]:
    keep = targets >= N_SPECIAL
    return hidden[keep], targets[keep]


def _no_rows(hidden: Tensor) -> Tensor:
    """A zero loss that still belongs to the graph (for batches with nothing to predict)."""
    return hidden.float().sum() * 0.0


# ---------------------------------------------------------------------------------------------------
# Full softmax: fused linear + cross-entropy


def _compute_dtype(hidden: Tensor) -> torch.dtype:
    device = hidden.device.type
    return torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else hidden.dtype


def _chunked_ce(
    hidden: Tensor,
    weight: Tensor,
    targets: Tensor,
    chunk_size: int,
    dtype: torch.dtype,
    with_grad: bool,
) -> tuple[Tensor, Tensor | None, Tensor | None]:
    """Mean CE of ``hidden @ weight.T`` against ``targets`` and, if asked, its gradients.

    Logits are computed in ``dtype`` (the autocast dtype), softmax and sums in float32. Each chunk's
    logits are laid out item-major, ``[n_items, chunk]`` (= ``weight @ h.T``): with K = d as small as
    64, that GEMM runs faster on a CPU than the row-major one, and the softmax reductions run down
    contiguous columns. The gradient of the mean loss w.r.t. the logits, ``(softmax - onehot) / N``,
    is never formed: the softmax's per-row ``1 / sum`` goes onto ``h`` and onto ``exp.T @ w``, the
    one-hot part is a gather/scatter of single rows, and ``1 / N`` is applied once at the end. So the
    only passes over a chunk's logits are ``exp`` and its column sums (plus a max and a subtraction
    when the logits could overflow ``exp``).
    """
    n_rows = hidden.shape[0]
    with torch.autocast(hidden.device.type, enabled=False):
        h_all, w = hidden.to(dtype), weight.to(dtype)
        # |logit| <= |h| |w| (Cauchy-Schwarz). While that bound stays below 80 - ln(n_items), exp and
        # its column sums neither overflow nor underflow in float32, so the usual max subtraction
        # (two more passes over every chunk) is not needed. One decision (one sync) per call.
        bound = vector_norm(h_all.float(), dim=1).max() * vector_norm(w.float(), dim=1).max()
        shift = bool(bound > 80.0 - math.log(w.shape[0]))
        total = torch.zeros((), dtype=torch.float32, device=hidden.device)
        grad_h = torch.empty_like(hidden, dtype=torch.float32) if with_grad else None
        grad_w = torch.zeros_like(weight, dtype=torch.float32) if with_grad else None
        for start in range(0, n_rows, chunk_size):
            h, t = h_all[start : start + chunk_size], targets[start : start + chunk_size]
            logits = (w @ h.T).float()  # [n_items, chunk]
            total -= logits[t, torch.arange(len(t), device=t.device)].sum()
            if shift:
                col_max = logits.amax(dim=0, keepdim=True)
                total += col_max.sum()
                logits.sub_(col_max)
            exp = logits.exp_()  # in place: one [n_items, chunk] buffer in all
            sums = exp.sum(dim=0)
            total += sums.log().sum()
            if with_grad:  # N * gradient: softmax - onehot, folded into h and w row by row
                inverse = (1.0 / sums)[:, None]
                exp = exp.to(dtype)
                grad_h[start : start + chunk_size] = (exp.T @ w).float() * inverse - w[t].float()
                h32 = h.float()
                scaled_h = (h32 * inverse).to(dtype)
                if dtype == torch.float32:
                    grad_w.addmm_(exp, scaled_h)
                else:
                    grad_w += (exp @ scaled_h).float()
                grad_w.index_add_(0, t, h32, alpha=-1.0)
    if not with_grad:
        return total / n_rows, None, None
    return total / n_rows, (grad_h / n_rows).to(hidden.dtype), (grad_w / n_rows).to(weight.dtype)


class _FusedLinearCE(torch.autograd.Function):
    """Autograd wrapper of :func:`_chunked_ce`: gradients are made in forward, scaled in backward."""

    @staticmethod
    def forward(ctx, hidden, weight, targets, chunk_size, dtype):
        loss, grad_h, grad_w = _chunked_ce(
            hidden, weight, targets, chunk_size, dtype, with_grad=True
        )
        ctx.save_for_backward(grad_h, grad_w)
        return loss

    @staticmethod
    def backward(ctx, grad_output):
        grad_h, grad_w = ctx.saved_tensors
        return (
            grad_h * grad_output.to(grad_h.dtype),
            grad_w * grad_output.to(grad_w.dtype),
            None,
            None,
            None,
        )


def full_softmax_ce(
    hidden: Tensor,
    weight: Tensor,
    targets: Tensor,
    chunk_size: int | None = None,
    matmul_dtype: str | None = None,
) -> Tensor:
    """Exact cross-entropy over all real items, never materialising the full logit matrix.

    ``chunk_size`` rows are scored at a time (default: :data:`CHUNK_ELEMENTS` logits per chunk). Equals
    ``F.cross_entropy(hidden @ weight[3:].T, targets - 3)`` over the kept rows.
    ``matmul_dtype``: ``"bfloat16"`` runs the output layer's three matmuls in bfloat16 (softmax and
    sums stay float32), as bf16 autocast would, without casting the rest of the model: on CPUs
    with AMX / AVX-512 BF16 that is most of a SASRec step's FLOPs at a higher rate than float32.
    Default: the autocast dtype when autocast is on, else the dtype of ``hidden``.
    """
    h, t = _valid_rows(hidden, targets)
    if h.shape[0] == 0:
        return _no_rows(h)
    real = weight[N_SPECIAL:]
    t = t - N_SPECIAL
    budget = CHUNK_ELEMENTS["cuda" if h.is_cuda else "cpu"]
    chunk = chunk_size or max(MIN_CHUNK_ROWS, budget // real.shape[0])
    dtype = _compute_dtype(hidden) if matmul_dtype is None else MATMUL_DTYPES.get(matmul_dtype)
    if dtype is None:
        raise SeqencError(
            f"ce: matmul_dtype={matmul_dtype!r}; choose one of {sorted(MATMUL_DTYPES)} or leave it unset"
        )
    if torch.is_grad_enabled() and (h.requires_grad or real.requires_grad):
        return _FusedLinearCE.apply(h, real, t, chunk, dtype)
    return _chunked_ce(h, real, t, chunk, dtype, with_grad=False)[0]


# ---------------------------------------------------------------------------------------------------
# Sampled catalogue term: its cost depends on the number of candidates, not of items


def sampled_softmax(
    hidden: Tensor, weight: Tensor, targets: Tensor, *args: object, **kwargs: object
) -> Tensor:
    """Cross-entropy against the sampled, logQ-corrected softmax (:func:`sampled_log_softmax`,
    :func:`partly_exact_log_softmax`); ``groups`` index the kept rows (those with a real target,
    in order). Its options, by position or name: :data:`SAMPLED_SIGNATURE`."""
    bound = SAMPLED_SIGNATURE.bind(hidden, weight, targets, *args, **kwargs).arguments
    options = {key: value for key, value in bound.items() if key not in LOSS_INPUTS}
    h, t = _valid_rows(hidden, targets)
    if h.shape[0] == 0:
        return _no_rows(h)
    return -partly_exact_log_softmax(h, weight, t, **options).mean()


def partly_exact_log_softmax(
    hidden: Tensor,
    weight: Tensor,
    targets: Tensor,
    exact_share: float | None = None,
    item_gradient: str = ITEM_GRADIENT,
    **options: object,
) -> Tensor:
    """``[N]``: the sampled estimate of each row's log-softmax at its target
    (:func:`sampled_log_softmax` with its ``options``), except on a random
    ``exact_share`` of the rows, whose normaliser is exact. Those rows give every item of the table
    a gradient at every step, as the exact term does, at ``exact_share`` of its cost. ``None``:
    :data:`EXACT_SHARE`, or fewer rows where the catalogue is large (at most ``n_negatives / n_items``
    of them: their cost stays the candidates' own).

    ``item_gradient`` (:data:`~seqenc.model.sampled.ITEM_GRADIENTS`): the rows whose normalisers
    train the item table. ``"all_rows"``: every row's, a sampled row's through candidates weighted
    by ``1 / E[count]`` (a rare item drawn now and then gets a large gradient, which inflates
    Adam's second moment for its row and shrinks its steps). ``"exact_rows"`` (the default,
    :data:`~seqenc.model.sampled.ITEM_GRADIENT`): the exact rows' alone, times rows / exact rows,
    an unbiased estimate of the exact term's; without exact rows every row's. Either way the
    targets' scores train it from every row and ``hidden``'s gradient is the same."""
    if item_gradient not in ITEM_GRADIENTS:
        raise SeqencError(f"item_gradient={item_gradient!r} is not one of {ITEM_GRADIENTS}")
    options = _defaults(sampled_log_softmax) | options  # the sampled term's, with its defaults
    generator, groups = options["generator"], options.pop("groups")
    if exact_share is None:
        exact_share = min(EXACT_SHARE, options["n_negatives"] / (weight.shape[0] - N_SPECIAL))
    n_exact = math.ceil(exact_share * len(targets))
    if n_exact == 0:
        return sampled_log_softmax(hidden, weight, targets, groups=groups, **options)
    source = generator.device if generator is not None else hidden.device
    order = torch.randperm(len(targets), generator=generator, device=source).to(hidden.device)
    pick, rest = order[:n_exact], order[n_exact:]
    h, table = hidden[pick], weight[N_SPECIAL:]
    if item_gradient == "exact_rows":
        table = scale_gradient(table, len(targets) / n_exact)
        options["table_gradient"] = False
    parts = [(h * weight[targets[pick]]).sum(-1).float() - shared_logsumexp(h, table)]
    if len(rest):
        rows = None if groups is None else (groups[0][rest], groups[1])
        parts.append(
            sampled_log_softmax(hidden[rest], weight, targets[rest], groups=rows, **options)
        )
    return torch.cat(parts)[torch.argsort(order)]


def _defaults(function: Callable[..., Tensor]) -> dict[str, object]:
    """The options of ``function`` (its arguments after :data:`LOSS_INPUTS`) and their defaults."""
    parameters = inspect.signature(function).parameters.items()
    return {
        key: p.default
        for key, p in parameters
        if key not in LOSS_INPUTS and p.kind is not inspect.Parameter.VAR_KEYWORD
    }


def _sampled_signature() -> inspect.Signature:
    """:func:`sampled_softmax`'s parameters: :func:`~seqenc.model.sampled.sampled_log_softmax`'s
    (the one list of the sampled term's options), but ``table_gradient`` (the exact rows' to
    set), then :func:`partly_exact_log_softmax`'s own."""
    sampled = inspect.signature(sampled_log_softmax).parameters.values()
    exact = list(inspect.signature(partly_exact_log_softmax).parameters.values())
    kept = [p for p in sampled if p.name != "table_gradient"]
    own = [p for p in exact if p.name not in LOSS_INPUTS and p.kind is p.POSITIONAL_OR_KEYWORD]
    return inspect.signature(sampled_softmax).replace(parameters=kept + own)


def target_log_softmax(
    hidden: Tensor, weight: Tensor, targets: Tensor, loss: str, **opts: object
) -> Tensor:
    """``[N]`` catalogue log-probability of each (kept) row's target: exact for ``"ce"``, estimated
    for ``"sampled_softmax"``. The repeat head's mixture reads its catalogue term from here."""
    if loss == "ce":
        exact = (hidden * weight[targets]).sum(-1).float()
        return exact - exact_logsumexp(hidden, weight[N_SPECIAL:])
    if loss == "sampled_softmax":
        accepted = set(loss_options(loss))
        if set(opts) - accepted:
            raise SeqencError(
                f"loss 'sampled_softmax' got unknown options {sorted(set(opts) - accepted)}; "
                f"it accepts {sorted(accepted)}"
            )
        return partly_exact_log_softmax(hidden, weight, targets, **opts)
    raise SeqencError(
        f"the repeat head's mixture needs a normalised catalogue term: model.loss ce or "
        f"sampled_softmax, got {loss!r}"
    )


SAMPLED_SIGNATURE = _sampled_signature()
sampled_softmax.__signature__ = SAMPLED_SIGNATURE  # what loss_options reads


# ---------------------------------------------------------------------------------------------------
# Binary losses


def _negatives_excluding(
    targets: Tensor, n_items: int, k: int, generator: torch.Generator | None
) -> Tensor:
    """``[N, k]`` items drawn uniformly from the real items other than each row's target."""
    draws = randint(N_SPECIAL, n_items - 1, (len(targets), k), generator, targets.device)
    return draws + (draws >= targets[:, None]).long()


def _binary_loss(
    hidden: Tensor,
    weight: Tensor,
    targets: Tensor,
    n_negatives: int,
    beta: float,
    generator: torch.Generator | None,
) -> Tensor:
    """Mean over rows of ``-beta * log σ(s+) - Σ_j log(1 - σ(s_j-))`` with per-row uniform negatives."""
    h, t = _valid_rows(hidden, targets)
    if h.shape[0] == 0:
        return _no_rows(h)
    negatives = _negatives_excluding(t, weight.shape[0], n_negatives, generator)
    positive = (h * weight[t]).sum(-1).float()
    negative = torch.einsum("nd,nkd->nk", h, weight[negatives]).float()
    return (beta * F.softplus(-positive) + F.softplus(negative).sum(-1)).mean()


def bce_one_negative(
    hidden: Tensor, weight: Tensor, targets: Tensor, generator: torch.Generator | None = None
) -> Tensor:
    """SASRec's loss: ``-log σ(s+) - log(1 - σ(s-))`` with one uniform negative (≠ target) per row."""
    return _binary_loss(hidden, weight, targets, 1, 1.0, generator)


def gbce(
    hidden: Tensor,
    weight: Tensor,
    targets: Tensor,
    n_negatives: int = 256,
    t: float = 0.75,
    generator: torch.Generator | None = None,
) -> Tensor:
    """gSASRec's generalised BCE: the positive term raised to ``beta``, which counters the
    overconfidence negative sampling causes.

    ``alpha = k / (n_real - 1)`` is the sampling rate and ``beta = alpha * (t * (1 - 1/alpha) + 1/alpha)``;
    ``t = 0`` gives plain BCE with k negatives, ``t = 1`` gives ``beta = alpha`` (fully calibrated).
    """
    if not 0.0 <= t <= 1.0:
        raise SeqencError(f"gbce: calibration t={t} not in [0, 1]")
    alpha = n_negatives / (weight.shape[0] - N_SPECIAL - 1)
    beta = alpha * (t * (1.0 - 1.0 / alpha) + 1.0 / alpha)
    return _binary_loss(hidden, weight, targets, n_negatives, beta, generator)


LOSSES: dict[str, Callable[..., Tensor]] = {
    "ce": full_softmax_ce,
    "sampled_softmax": sampled_softmax,
    "bce": bce_one_negative,
    "gbce": gbce,
}

# The options a run supplies itself (drawn or built per run), never a user's ``model.loss_options``.
RUN_OWN_OPTIONS = frozenset(("generator", "proposal", "groups"))


def loss_options(name: str) -> dict[str, object]:
    """The options of the loss called ``name`` (a key of :data:`LOSSES`), each with its default:
    its arguments after the inputs (:data:`LOSS_INPUTS`). The one place a loss's options are
    read from its signature."""
    return _defaults(LOSSES[name])


def compute_loss(
    name: str, hidden: Tensor, weight: Tensor, targets: Tensor, **opts: object
) -> Tensor:
    """The loss called ``name`` (a key of :data:`LOSSES`) with its options ``opts``."""
    if name not in LOSSES:
        raise SeqencError(f"unknown loss {name!r}; choose one of {sorted(LOSSES)}")
    accepted = set(loss_options(name))
    unknown = set(opts) - accepted
    if unknown:
        raise SeqencError(
            f"loss {name!r} got unknown options {sorted(unknown)}; it accepts {sorted(accepted)}"
        )
    return LOSSES[name](hidden, weight, targets, **opts)
