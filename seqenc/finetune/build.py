"""A :class:`~seqenc.finetune.module.LabelModule` from a fit's options: the encoder resolved from
the data (the entity model's options), its head (fused with the aggregates or not), the loss with
the class weights of the training labels, and the start from a bundle. The options are checked
here, in one line, before anything is built."""

from __future__ import annotations

from dataclasses import asdict
from typing import Literal

import numpy as np

from seqenc.data.labels import LabelledRows
from seqenc.data.spec import DataSpec
from seqenc.data.split import FitSplits
from seqenc.errors import SeqencError
from seqenc.finetune.loss import LabelLoss
from seqenc.finetune.module import LabelModule
from seqenc.finetune.plan import ClassWeights, check_label_options, class_weights
from seqenc.model.encoder import EncoderConfig, SequenceEncoder
from seqenc.model.head import SupervisedHead
from seqenc.model.objectives import Causal, Masked
from seqenc.training.run_options import check_optimiser, resolve_encoder

Fusion = Literal["aggregates", "none"]


def label_module(
    spec: DataSpec,
    rows: LabelledRows | None,
    objective: Literal["causal", "masked"] = "masked",
    encoder: EncoderConfig | dict = EncoderConfig(),  # noqa: B008 (never mutated)
    fusion: Fusion = "none",
    class_weights_option: ClassWeights = "auto",
    label_steps: int | None = None,
    lr: float = 1e-3,
    weight_decay: float = 0.01,
    warmup_steps: int = 100,
    init_from: str | None = None,
    splits: FitSplits | None = None,
) -> LabelModule:
    """The label module of ``spec.labels`` (``rows``: the labelled rows the datamodule holds;
    ``None`` when only a checkpoint's weights are tested), each option as the ``seqenc fit``
    option of the same name documents it (``class_weights_option`` is ``model.class_weights``)."""
    labels = spec.labels
    if not labels:
        raise SeqencError("a label module needs a label table (data.labels)")
    if fusion not in ("aggregates", "none"):
        raise SeqencError(f"model.fusion must be aggregates or none, got {fusion!r}")
    check_label_options(class_weights_option, label_steps, labels)
    check_optimiser(lr, weight_decay, warmup_steps)
    if rows is not None and labels["task"] == "regression" and np.ptp(rows.train.targets) == 0:
        raise SeqencError(
            f"data.labels: the label is one value on all {len(rows.train.targets)} training rows "
            "(after the hold-out): a regression has nothing to learn from them"
        )
    kind = Causal(spec.baskets) if objective == "causal" else Masked()
    config = resolve_encoder(encoder, spec, kind)
    body = SequenceEncoder(config)  # before the head: a seed draws the weights as it always has
    head = SupervisedHead.of(config.d_model, labels, fusion)
    weights, notes = None, ()
    if head.task == "classification" and rows is not None:
        weights, why = class_weights(rows.train.targets, head.classes, class_weights_option)
        notes = (why,)
    options = {"class_weights": class_weights_option, "label_steps": label_steps}
    options |= {"encoder": asdict(config)}
    return LabelModule(
        body,
        head,
        LabelLoss(weights),
        spec,
        rows,
        splits,
        lr,
        weight_decay,
        warmup_steps,
        init_from,
        notes,
        options,
    )
