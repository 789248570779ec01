"""The ``model`` section of ``seqenc fit|validate|test``: one set of options, two modules.

Without a label table the options build the next-event (or next-basket) module,
:class:`~seqenc.training.module.SeqencModule`; with one (``data.labels``) the fine-tuning module,
:class:`~seqenc.finetune.module.LabelModule` (:func:`~seqenc.finetune.build.label_module`). An
option the module built would not read is refused in one line, naming it. The CLI links the
data's spec, its labelled rows and its splits into the hidden arguments ``spec``, ``labelled`` and
``splits``.
"""

from __future__ import annotations

import inspect
from typing import Any, Literal

from seqenc.data.labels import LabelledRows
from seqenc.data.spec import DataSpec
from seqenc.data.split import FitSplits
from seqenc.errors import ignored
from seqenc.finetune.build import Fusion, label_module
from seqenc.finetune.plan import ClassWeights
from seqenc.model.encoder import EncoderConfig
from seqenc.model.objectives import Masked
from seqenc.training.basket_plan import BasketOptions
from seqenc.training.encoder_module import EncoderModule
from seqenc.training.metrics import Ranking
from seqenc.training.module import SeqencModule
from seqenc.training.self_supervised import Terms

# The options that only fine-tuning reads, and those it does not (the self-supervised terms, the
# catalogue term, ranking evaluation, baskets): each refused where the other module is built.
LABEL_ONLY = ("class_weights", "label_steps", "fusion")
NEXT_EVENT_ONLY = (
    "loss", "loss_options", "mask_prob", "replace_rule", "mask_last_prob", "next_item_weight",
    "contrastive_weight", "contrastive_temperature", "contrastive_min_share", "value_weight",
    "filter_seen", "basket_positives", "basket_steps", "ks",
)  # fmt: skip


def fit_model(
    spec: DataSpec,
    objective: Literal["causal", "masked"] = "causal",
    encoder: EncoderConfig = EncoderConfig(),  # noqa: B008 (never mutated)
    loss: Literal["auto", "ce", "sampled_softmax", "bce", "gbce"] = "auto",
    loss_options: dict[str, Any] | None = None,
    mask_prob: float = Masked.mask_prob,
    replace_rule: bool = Masked.replace_rule,
    mask_last_prob: float = Masked.mask_last_prob,
    next_item_weight: float = 1.0,
    contrastive_weight: float = 0.0,
    contrastive_temperature: float = 0.1,
    contrastive_min_share: float = 0.5,
    value_weight: float | None = 0.0,
    lr: float = 1e-3,
    weight_decay: float = 0.01,
    warmup_steps: int = 100,
    filter_seen: bool | None = None,
    basket_positives: Literal["one", "all", "auto"] = "auto",
    basket_steps: int | None = None,
    ks: tuple[int, ...] = (10, 20),
    init_from: str | None = None,
    class_weights: ClassWeights = "auto",
    label_steps: int | None = None,
    fusion: Fusion = "none",
    labelled: LabelledRows | None = None,
    splits: FitSplits | None = None,
) -> EncoderModule:
    """The module of a fit (see the module docstring). Each option is documented where it is
    read: :class:`~seqenc.training.module.SeqencModule` and
    :func:`~seqenc.finetune.build.label_module` (``class_weights``, ``label_steps``,
    ``fusion``); the label head's loss alone trains a fine-tuning fit (its self-supervised start
    is a fit of its own: ``configs/entity_pretrain.yaml``, then ``model.init_from``)."""
    given = dict(locals())
    defaults = {n: p.default for n, p in inspect.signature(fit_model).parameters.items()}
    label = bool(spec.labels)
    for name in NEXT_EVENT_ONLY if label else LABEL_ONLY:
        if given[name] != defaults[name] and not (label and _off(name, given[name])):
            raise ignored(f"model.{name}", given[name], _why(label))
    shared = dict(objective=objective, encoder=encoder, lr=lr, weight_decay=weight_decay)
    shared |= dict(warmup_steps=warmup_steps, init_from=init_from, splits=splits)
    if label:
        return label_module(spec, labelled, fusion=fusion, class_weights_option=class_weights,
                            label_steps=label_steps, **shared)  # fmt: skip
    return SeqencModule(
        spec,
        loss=loss,
        loss_options=loss_options,
        masking=Masked(mask_prob, replace_rule, mask_last_prob),
        terms=Terms(
            next_item_weight,
            contrastive_weight,
            contrastive_temperature,
            contrastive_min_share,
            value_weight,
        ),
        ranking=Ranking(ks, filter_seen),
        baskets=BasketOptions(basket_positives, basket_steps),
        **shared,
    )


def _off(name: str, value: object) -> bool:
    """A self-supervised term's weight set to 0 (or automatic values, ``None``): what a
    fine-tuning config layered on a pre-training one says, and what a fine-tuning fit does."""
    return name in ("next_item_weight", "contrastive_weight", "value_weight") and value in (0, None)


def _why(label: bool) -> str:
    """Why an option of the other module would be ignored."""
    if not label:
        return "it sets how a label head trains, and there is no label table (data.labels)"
    return (
        "a fine-tuning fit (data.labels) trains the label head's loss alone; self-supervised "
        "terms, the catalogue term and ranking are a next-event fit's (configs/entity_pretrain.yaml "
        "trains a start, model.init_from fine-tunes from it)"
    )
