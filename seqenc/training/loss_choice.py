"""Which catalogue term a fit trains: ``model.loss: auto`` resolved by the catalogue's size, and the
line the fit prints saying which term it chose, why, and what the sampled term's options make of it."""

from __future__ import annotations

from typing import Any

from seqenc.model.sampled import EXACT_SHARE, ITEM_GRADIENT, N_NEGATIVES

# From this many real items on, ``loss: auto`` trains with the sampled term at its defaults (each
# row's window exact, N_NEGATIVES shared candidates, up to EXACT_SHARE of the rows exact and the item
# table trained from those: ITEM_GRADIENT). On every real catalogue measured from this size up it
# ranks as the exact softmax does, within the spread of the seeds, at a fraction of its step, a
# saving that grows with the catalogue; below it no catalogue was measured and the exact term is
# affordable (docs/scale.md; benchmarks/sampled_cost.py measures the step).
SAMPLED_FROM_ITEMS = 10_000


def resolve_loss(loss: str, n_real_items: int) -> tuple[str, str]:
    """``(loss, why)``: ``"auto"`` resolved by the catalogue's size (:data:`SAMPLED_FROM_ITEMS`),
    any other name kept; ``why`` is the reason the fit prints (:func:`loss_line`)."""
    if loss != "auto":
        return loss, "set by model.loss"
    if n_real_items >= SAMPLED_FROM_ITEMS:
        return "sampled_softmax", (
            f"auto: {n_real_items:,} items >= {SAMPLED_FROM_ITEMS:,}: from this size the sampled "
            "term ranks as the exact softmax does on the catalogues measured, at a fraction of its "
            "step; set model.loss ce to force the exact one"
        )
    return "ce", (
        f"auto: {n_real_items:,} items < {SAMPLED_FROM_ITEMS:,}: the exact softmax, affordable "
        "at this size; set model.loss sampled_softmax to force the sampled one"
    )


def describe_sampled(options: dict[str, Any] | None, n_real_items: int) -> str:
    """The sampled term that ``model.loss_options`` (checked) make, in words: its exact part, its
    candidates, its share of exact rows and which rows' normalisers train the item table."""
    options = options or {}
    k = options.get("n_negatives", N_NEGATIVES)
    share = options.get("exact_share")
    share = min(EXACT_SHARE, k / n_real_items) if share is None else share
    exact_rows = share > 0 and options.get("item_gradient", ITEM_GRADIENT) == "exact_rows"
    window = "each row's window exact" if options.get("own_items", True) else "each target exact"
    return (
        f"{window}, {k:,} shared candidates ({options.get('sampler', 'mixed')}), "
        f"{100 * share:.3g} % of the rows exact, the item table trained from "
        f"{'the exact rows' if exact_rows else 'every row'}"
    )


def loss_line(loss: str, why: str, options: dict[str, Any] | None, n_real_items: int) -> str:
    """What the fit prints first: the catalogue term, why it was chosen and, for the sampled
    term, what it is."""
    line = f"loss: {loss} ({why})"
    if loss == "sampled_softmax":
        line += f": {describe_sampled(options, n_real_items)}"
    return line
