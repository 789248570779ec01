"""Which catalogue term a fit trains: ``model.loss: auto`` resolved by the catalogue's size, the
line the fit prints saying which term it chose, why, and what the sampled term's options make of
it, and the term a run resumed from a checkpoint goes on with."""

from __future__ import annotations

from typing import Any

from seqenc.model.losses import LOSSES, RUN_OWN_OPTIONS, loss_options
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
# A loss's options that are not what it learns: the run's own (drawn or built per run) and how it
# is computed (chunks, the matmuls' precision).
NOT_LEARNED = RUN_OWN_OPTIONS | {"chunk_size", "matmul_dtype"}
# The sampled term's defaults before they moved: what a checkpoint that does not record its
# options may have trained with.
EARLIER_DEFAULTS = {"n_negatives": 1024, "item_gradient": "all_rows"}
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


def loss_defaults(loss: str) -> dict[str, Any]:
    """The defaults of the options that set what ``loss`` learns (for the sampled term its
    candidates, their draw and which rows train the item table; none for ``ce``)."""
    if loss not in LOSSES:  # "auto", as a checkpoint of an older version may hold
        return {}
    return {name: d for name, d in loss_options(loss).items() if name not in NOT_LEARNED}


def recorded_options(loss: str, options: dict[str, Any] | None) -> dict[str, Any] | None:
    """``model.loss_options`` as a checkpoint saves them: the given ones beside the defaults of
    the others (:func:`loss_defaults`), so a default that moves later does not change what a
    resumed run trains. Without exact rows every row trains the item table: ``all_rows``."""
    defaults = loss_defaults(loss)
    if (options or {}).get("exact_share") == 0 and "item_gradient" in defaults:
        defaults["item_gradient"] = "all_rows"
    return defaults | (options or {}) if defaults else options


def resume_loss(given: dict[str, Any], saved: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """``({"loss", "loss_options"}, line)``: the catalogue term of a run resumed from a checkpoint
    trained with the model options ``saved``, and the line saying what differs from it (empty when
    nothing does). The checkpoint's term goes on as it trained: its loss is saved resolved and
    ``auto`` given (a config file's) is the rule that chose it, so it is kept, as are its options,
    except those ``given`` (the saved ones equal to today's defaults are left to them); a loss
    given other than ``auto`` replaces it, with the given options alone. Options a checkpoint does
    not record (written before they were saved) take today's defaults, and the line names them
    beside :data:`EARLIER_DEFAULTS`."""
    loss, options = saved.get("loss", "auto"), dict(saved.get("loss_options") or {})
    new, new_options = given.get("loss", "auto"), given.get("loss_options") or {}
    notes = []
    if new not in ("auto", loss):
        notes.append(f"model.loss {new} replaces the checkpoint's {loss}")
        loss, options = new, {}
    notes += [
        f"model.loss_options.{name} {value} replaces the checkpoint's {options[name]}"
        for name, value in new_options.items()
        if name in options and options[name] != value
    ]
    defaults = loss_defaults(loss)
    unknown = {k: v for k, v in defaults.items() if k not in options | new_options}
    if unknown and new in ("auto", saved.get("loss", "auto")):
        notes.append(_unrecorded(loss, unknown))
    # a saved value that is today's default is left to it (checked as a default, not as given)
    options = {k: v for k, v in options.items() if k not in defaults or defaults[k] != v}
    options |= new_options
    line = f"resume: {'; '.join(notes)}" if notes else ""
    return {"loss": loss, "loss_options": options or None}, line


def _unrecorded(loss: str, unknown: dict[str, Any]) -> str:
    """What a resumed run says of the options of its term the checkpoint does not record."""
    earlier = ", ".join(f"{k} {v}" for k, v in EARLIER_DEFAULTS.items() if k in unknown)
    return (
        f"the checkpoint's {loss} does not record model.loss_options {', '.join(unknown)} "
        f"(written before they were saved): today's defaults apply, "
        + ", ".join(f"{k} {'auto' if v is None else v}" for k, v in unknown.items())
        + (f" (earlier defaults: {earlier}; set them to go on with those)" if earlier else "")
    )
