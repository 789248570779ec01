"""The self-supervised terms of :class:`~seqenc.training.module.SeqencModule`: the objective's
next-item (or cloze) loss, the contrastive loss over slices of one history, and masked values
(:mod:`seqenc.model.values`). Each reads a training batch and returns its mean loss."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from seqenc.errors import SeqencError
from seqenc.model.basket_loss import basket_nll
from seqenc.model.batch import N_SPECIAL, Batch
from seqenc.model.contrastive import embed_by_length, info_nce, slice_views
from seqenc.model.embeddings import signed_log
from seqenc.model.encoder import EncoderConfig
from seqenc.model.losses import compute_loss
from seqenc.model.repeat import mixture_nll
from seqenc.model.sampled import window_groups
from seqenc.model.values import ValueHead, hide_values, value_loss


def values_per_item(config: EncoderConfig) -> bool:
    """Whether the events carry numbers read per item: what the masked values' term needs."""
    return bool(config.n_numeric) and config.numeric_scaling == "per_item"


def resolve_value_weight(weight: float | None, config: EncoderConfig) -> float:
    """``model.value_weight``; ``None`` (auto): 1 where :func:`values_per_item`, else 0."""
    if weight is not None:
        return weight
    return 1.0 if values_per_item(config) else 0.0


@dataclass(frozen=True)
class Terms:
    """The self-supervised terms a next-event fit trains and their weights (``seqenc fit``'s
    ``model.*`` options of the same names).

    Attributes:
        next_item_weight: weight of the objective's next-item (or cloze) loss; 0 trains without it.
        contrastive_weight: weight of the entity-level contrastive loss
            (:mod:`seqenc.model.contrastive`: two random slices of each history are a positive
            pair, the other entities of the batch negatives, InfoNCE on the configured readout);
            0 (the default) is off and costs nothing.
        contrastive_temperature: InfoNCE temperature on cosine similarities.
        contrastive_min_share: the shortest slice, as a share of the history's length.
        value_weight: weight of the masked values' loss (:mod:`seqenc.model.values`: ``mask_prob``
            of the events have their numbers withheld and predicted from the rest; needs numeric
            features read per item); 0 (the default) is off; ``None``: 1 where the events carry
            numbers read per item, else 0 (printed at fit time, saved resolved).
    """

    next_item_weight: float = 1.0
    contrastive_weight: float = 0.0
    contrastive_temperature: float = 0.1
    contrastive_min_share: float = 0.5
    value_weight: float | None = 0.0


class SelfSupervised:
    """Mixed into the LightningModule (``self.encoder``, ``self.objective``, ``self.hparams``,
    ``self.log`` are the module's)."""

    def add_value_head(self) -> None:
        """The masked values' head (with ``value_weight > 0``): it needs numeric features read
        per item, whose statistics give each value its standardised units (else one line)."""
        self.value_head = None
        if self.hparams.get("value_weight", 0.0) <= 0:
            return
        if not values_per_item(self.config):
            raise SeqencError(
                "model.value_weight needs numeric features (data.schema.numeric) read per item "
                "(model.encoder.numeric_scaling: per_item), so each value has its item's units"
            )
        self.value_head = ValueHead(self.config.d_model, self.config.n_numeric)

    def next_item_loss(self, batch: Batch) -> torch.Tensor:
        """The objective's item-prediction loss on a training batch (mean over its targets)."""
        hp = self.hparams
        weight = self.encoder.item_embedding.weight
        options = dict(hp.loss_options or {})
        if self.loss == "sampled_softmax" and self.proposal is not None:
            options.setdefault("proposal", self.proposal)
        inputs, labels = self.objective.training_pair(batch, self.config.n_items)
        hidden = self.encoder(inputs)
        keep = labels >= N_SPECIAL
        all_positives = self.config.baskets and hp.get("basket_positives", "one") == "all"
        if self.loss == "sampled_softmax" and not all_positives:  # each row's window: exact
            options["groups"] = window_groups(inputs.items, labels)
        if all_positives:
            loss = basket_nll(hidden, inputs, weight, self.loss, self.encoder.repeat, **options)
        elif self.encoder.repeat is not None:
            loss = mixture_nll(
                self.encoder.repeat, hidden, inputs, weight, labels, self.loss, **options
            )
        else:
            loss = compute_loss(self.loss, hidden[keep], weight, labels[keep], **options)
        self.log("train/next_item", loss, batch_size=int(keep.sum()))
        return loss

    def contrastive_loss(self, batch: Batch) -> torch.Tensor:
        """InfoNCE over two random slices of each history (:mod:`seqenc.model.contrastive`)."""
        views = slice_views(batch, self.hparams.contrastive_min_share)
        embeddings = embed_by_length(self.encoder.entity_embedding, views)
        return info_nce(embeddings, self.hparams.contrastive_temperature)

    def masked_value_loss(self, batch: Batch) -> torch.Tensor:
        """Squared error of the withheld values (``mask_prob`` of the events), predicted from
        each one's state in its item's standardised units (:mod:`seqenc.model.values`)."""
        embed = self.encoder.embed
        inputs, hidden = hide_values(batch, self.hparams.mask_prob, embed.numeric_center)
        target = embed.standardised(signed_log(batch.numeric), batch.items)
        loss = value_loss(self.value_head(self.encoder(inputs)), target, hidden)
        counted = hidden[..., None] & ~torch.isnan(target)
        self.log("train/values", loss, batch_size=max(int(counted.any(-1).sum()), 1))
        return loss
