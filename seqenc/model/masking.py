"""Training targets of the two objectives: next-item targets (causal) and cloze masking (BERT4Rec).

Both return labels shaped like ``items`` with ``IGNORE`` (-100) where there is nothing to predict,
ready to flatten and feed to a loss in :mod:`seqenc.model.losses`.
"""

from __future__ import annotations

import torch
from torch import Tensor

from seqenc.model.batch import MASK, N_SPECIAL

IGNORE = -100


def _source(generator: torch.Generator | None, device: torch.device) -> torch.device:
    """Where to draw random numbers: on the generator's own device, else on ``device``."""
    return generator.device if generator is not None else device


def uniform(
    shape: tuple[int, ...], generator: torch.Generator | None, device: torch.device
) -> Tensor:
    """Uniform [0, 1) draws from ``generator``, returned on ``device``."""
    return torch.rand(shape, generator=generator, device=_source(generator, device)).to(device)


def randint(
    low: int,
    high: int,
    shape: tuple[int, ...],
    generator: torch.Generator | None,
    device: torch.device,
) -> Tensor:
    """Uniform integers in ``[low, high)`` from ``generator``, returned on ``device``."""
    source = _source(generator, device)
    return torch.randint(low, high, shape, generator=generator, device=source).to(device)


def next_item_targets(items: Tensor, lengths: Tensor, last_target: Tensor | None = None) -> Tensor:
    """``[B, L]`` label at position t = the item at t + 1 (causal objective), IGNORE elsewhere.

    The last real position is labelled with ``last_target`` when given (e.g. a held-out next item),
    otherwise ignored.
    """
    positions = torch.arange(items.shape[1], device=items.device)[None, :]
    shifted = torch.cat([items[:, 1:], torch.zeros_like(items[:, :1])], dim=1)
    labels = torch.where(positions < lengths[:, None] - 1, shifted, IGNORE)
    if last_target is not None:
        rows = torch.arange(items.shape[0], device=items.device)
        has_events = lengths > 0
        last = (lengths - 1).clamp(min=0)
        labels[rows[has_events], last[has_events]] = last_target[has_events]
    return labels


def at_least_one(
    chosen: Tensor, lengths: Tensor, generator: torch.Generator | None = None
) -> Tensor:
    """``chosen`` (``[B, L]`` bool, changed in place) with one uniformly drawn real position set
    in each row that has events but none chosen: every history gets at least one target."""
    batch, width = chosen.shape
    forced = (lengths > 0) & ~chosen.any(dim=1)
    pick = (uniform((batch,), generator, chosen.device) * lengths).long().clamp(max=width - 1)
    chosen[torch.arange(batch, device=chosen.device)[forced], pick[forced]] = True
    return chosen


def mask_items(
    items: Tensor,
    lengths: Tensor,
    prob: float,
    generator: torch.Generator | None,
    n_items: int,
    replace_rule: bool = False,
    mask_last_prob: float = 0.0,
) -> tuple[Tensor, Tensor]:
    """Cloze masking: ``(masked items, labels)``, labels IGNORE where a position was not masked.

    Each real position is masked with probability ``prob``; a row with at least one event always
    gets at least one mask (one uniformly chosen position when the coin flips chose none). The masked
    input is [MASK], or with ``replace_rule`` the BERT 80/10/10 rule: [MASK] / a uniformly random
    real item (id >= 3) / unchanged. Labels hold the original item ids.

    With probability ``mask_last_prob`` a row instead gets a single [MASK] on its newest event:
    the very task of evaluation and inference (a [MASK] after the history, nothing to its right),
    which BERT4Rec's authors also mix into training.
    """
    batch, width = items.shape
    device = items.device
    positions = torch.arange(width, device=device)[None, :]
    real = positions < lengths[:, None]
    masked = (uniform((batch, width), generator, device) < prob) & real
    last_only = (uniform((batch,), generator, device) < mask_last_prob)[:, None]
    newest = last_only & (positions == (lengths - 1)[:, None])
    masked = torch.where(last_only, newest, masked)
    masked = at_least_one(masked, lengths, generator)

    labels = torch.where(masked, items, IGNORE)
    replacement = torch.full_like(items, MASK)
    if replace_rule:
        rule = uniform((batch, width), generator, device)
        random_items = randint(N_SPECIAL, n_items, (batch, width), generator, device)
        replacement = torch.where(
            rule < 0.8, replacement, torch.where(rule < 0.9, random_items, items)
        )
        replacement = torch.where(last_only, MASK, replacement)
    return torch.where(masked, replacement, items), labels
