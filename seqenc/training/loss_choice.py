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
# Where the lower threshold was not measured, the rule of before: next baskets trained on every
# item of the basket (``basket_positives: all``), whose exact normaliser is computed once per basket
# and the sampled one once per item (so below about this size the sampled step is barely cheaper:
# benchmarks/sampled_cost.py), and the masked (cloze) objective, whose sampled term is unmeasured.
SAMPLED_FROM_ITEMS_UNMEASURED = 50_000
# Why ``auto`` keeps the exact softmax below SAMPLED_FROM_ITEMS_UNMEASURED, by what is trained.
UNMEASURED = {
    "next_basket": "next baskets: the exact normaliser is computed once per basket, the sampled "
    "one once per item, which saves little at this size",
    "masked": "the masked objective: the sampled term is not measured on it at this size",
}


def what_trains(objective: str, baskets: bool, basket_positives: str) -> str:
    """What the catalogue term trains, as ``auto`` sizes it: ``"next_basket"`` (every item of the
    next basket, the resolved ``basket_positives`` ``"all"``), ``"masked"`` or ``"next_item"``."""
    if baskets and basket_positives == "all":
        return "next_basket"
    return "masked" if objective == "masked" else "next_item"


def resolve_loss(loss: str, n_real_items: int, trains: str = "next_item") -> tuple[str, str]:
    """``(loss, why)``: ``"auto"`` resolved by the catalogue's size: from
    :data:`SAMPLED_FROM_ITEMS` items for the next item (``trains``), from
    :data:`SAMPLED_FROM_ITEMS_UNMEASURED` for the keys of :data:`UNMEASURED`; any other name
    kept. ``why`` is the reason the fit prints (:func:`loss_line`)."""
    if loss != "auto":
        return loss, "set by model.loss"
    threshold = SAMPLED_FROM_ITEMS if trains == "next_item" else SAMPLED_FROM_ITEMS_UNMEASURED
    sampled = n_real_items >= threshold
    size = f"auto: {n_real_items:,} items {'>=' if sampled else '<'} {threshold:,}"
    if sampled and trains == "next_item":
        why = (
            "from this size the sampled term ranks as the exact softmax does on the catalogues "
            "measured, at a fraction of its step"
        )
    elif sampled:
        why = "the exact softmax's step grows with the catalogue, the sampled term's does not"
    else:
        why = UNMEASURED.get(trains, "the exact softmax, affordable at this size")
    if sampled:
        return "sampled_softmax", f"{size}: {why}; set model.loss ce to force the exact one"
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
