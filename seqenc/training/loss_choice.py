"""Which catalogue term a fit trains: ``model.loss: auto`` resolved by the catalogue's size, and
the line the fit prints saying which term it chose, why, and what the sampled term's options make
of it."""

from __future__ import annotations

from typing import Any

from seqenc.model.sampled import EXACT_SHARE, ITEM_GRADIENT, N_NEGATIVES

# From this many real items on, ``loss: auto`` trains with the sampled term at its defaults (each
# row's window exact, N_NEGATIVES shared candidates, up to EXACT_SHARE of the rows exact and the
# item table trained from those: ITEM_GRADIENT). On every real catalogue measured from this size
# up it ranks as the exact softmax does, within the spread of the seeds, at a fraction of its step,
# a saving that grows with the catalogue; below it no catalogue was measured and the exact term is
# affordable (docs/scale.md; benchmarks/sampled_cost.py measures the step).
SAMPLED_FROM_ITEMS = 10_000
# Next baskets trained on every item of the basket (``basket_positives: all``): the exact term
# computes its normaliser once per basket, the sampled one once per item, so below about this size
# the sampled step is barely cheaper (benchmarks/sampled_cost.py) and its quality is unmeasured.
SAMPLED_FROM_ITEMS_PER_BASKET = 50_000


def resolve_loss(loss: str, n_real_items: int, per_basket: bool = False) -> tuple[str, str]:
    """``(loss, why)``: ``"auto"`` resolved by the catalogue's size (:data:`SAMPLED_FROM_ITEMS`;
    :data:`SAMPLED_FROM_ITEMS_PER_BASKET` when ``per_basket``: every item of the next basket a
    target), any other name kept; ``why`` is the reason the fit prints (:func:`loss_line`)."""
    if loss != "auto":
        return loss, "set by model.loss"
    threshold = SAMPLED_FROM_ITEMS_PER_BASKET if per_basket else SAMPLED_FROM_ITEMS
    size = (
        f"auto: {n_real_items:,} items {'>=' if n_real_items >= threshold else '<'} {threshold:,}"
    )
    if n_real_items >= threshold:
        why = (
            "the exact softmax's step grows with the catalogue, the sampled term's does not"
            if per_basket
            else "from this size the sampled term ranks as the exact softmax does on the "
            "catalogues measured, at a fraction of its step"
        )
        return "sampled_softmax", f"{size}: {why}; set model.loss ce to force the exact one"
    why = (
        "next baskets: the exact normaliser is computed once per basket, the sampled one once "
        "per item, which saves little at this size"
        if per_basket
        else "the exact softmax, affordable at this size"
    )
    return "ce", f"{size}: {why}; set model.loss sampled_softmax to force the sampled one"


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
