"""The training objectives: what a batch means for training, and where an entity is read out.

An objective owns the two ends of the model contract that differ between SASRec and BERT4Rec:

- ``training_pair``: a training window (``window_len = history_len + 1`` events, see
  :mod:`seqenc.data.datamodule`) → ``(inputs, labels)``;
- ``query``: a history → the batch whose last real position holds the entity's embedding.

``causal`` (SASRec): inputs are the window but its newest event, the label at position i is event
i + 1; the entity is read at its newest event. ``masked`` (BERT4Rec): random positions become [MASK]
and are the labels; the entity is read at one [MASK] appended after its history ("the next event").
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch
from torch import Tensor

from seqenc.model.baskets import basket_inputs, next_basket_labels
from seqenc.model.batch import MASK, Batch
from seqenc.model.masking import mask_items, next_item_targets


@dataclass(frozen=True)
class Causal:
    """Next item at every position (SASRec); attention sees only the past.

    Attributes:
        baskets: the basket rule (:mod:`seqenc.model.baskets`): events that share a time are a
            set; a position's targets are the next basket's items.
    """

    baskets: bool = False
    name = "causal"
    causal = True

    def training_pair(self, batch: Batch, n_items: int) -> tuple[Batch, Tensor]:
        """Input = each window but its newest event; target at position i = event i + 1.

        With ``baskets``: input = the whole window with the basket's time inputs, target at
        position i = an item of the next basket (none for the window's newest basket).

        Position i is conditioned on the time of event i + 1 (the time the prediction is for, see
        :attr:`~seqenc.model.batch.Batch.query_gaps`); the newest input's query gap is the target's
        ``dt_prev``. ``dt_ref`` is re-measured from the newest *input* event, as at evaluation and
        inference (the legacy ``recency`` input of old bundles reads it).
        """
        if self.baskets:
            return basket_inputs(batch), next_basket_labels(batch)
        labels = next_item_targets(batch.items, batch.lengths)
        inputs = replace(batch, lengths=(batch.lengths - 1).clamp(min=0))
        last_input = (inputs.lengths - 1).clamp(min=0)[:, None]
        dt_ref = (batch.dt_ref - batch.dt_ref.gather(1, last_input)).clamp(min=0)
        target_gap = batch.dt_prev.gather(
            1, inputs.lengths.clamp(max=batch.items.shape[1] - 1)[:, None]
        )
        return replace(
            inputs, dt_ref=dt_ref * inputs.padding_mask, dt_query=target_gap[:, 0]
        ), labels

    def query(self, batch: Batch, widen: bool | None = None) -> Batch:
        """The history itself: its newest event (with ``baskets``, its newest basket, with the
        basket's time inputs) is read out (``widen`` is the masked query's)."""
        return basket_inputs(batch) if self.baskets else batch


@dataclass(frozen=True)
class Masked:
    """Cloze (BERT4Rec); attention is bidirectional. See :func:`~seqenc.model.masking.mask_items`.

    Attributes:
        mask_prob: share of positions masked in training.
        replace_rule: BERT's 80/10/10 rule instead of always [MASK].
        mask_last_prob: share of training rows that get a single [MASK] on their newest event only.
    """

    mask_prob: float = 0.2
    replace_rule: bool = False
    mask_last_prob: float = 0.0
    name = "masked"
    causal = False

    def training_pair(self, batch: Batch, n_items: int) -> tuple[Batch, Tensor]:
        items, labels = mask_items(
            batch.items,
            batch.lengths,
            self.mask_prob,
            None,
            n_items,
            self.replace_rule,
            self.mask_last_prob,
        )
        return replace(batch, items=items), labels

    def query(self, batch: Batch, widen: bool | None = None) -> Batch:
        """The batch with one [MASK] token right after each history (lengths + 1).

        The width grows by one when ``widen``; by default only when some row is full (a trace
        passes ``True``: an extra padding column is masked out of every softmax and positions do
        not depend on the width, so the values are the same). The MASK token's ``dt_prev`` is the
        query gap (from the last event to the time the embedding is for, :attr:`Batch.query_gap`)
        and its ``dt_ref`` places it at the query time (the newest event's less the query gap; 0
        when the reference is the query time): it stands for "the next event, at the query time".
        Its categorical ids and numeric values are 0. Written with ``scatter``, so a trace keeps
        the batch size.
        """
        lengths, gap = batch.lengths, batch.query_gap
        if widen is None:
            widen = bool((lengths >= batch.items.shape[1]).any())
        newest = batch.dt_ref.gather(1, (lengths - 1).clamp(min=0)[:, None])[:, 0]
        at_query = torch.where(lengths > 0, newest, torch.zeros_like(newest)) - gap
        values = {
            "items": MASK,
            "dt_prev": gap,
            "dt_ref": at_query,
            "categorical": 0,
            "numeric": 0.0,
        }
        fields = {name: _put(getattr(batch, name), lengths, v, widen) for name, v in values.items()}
        return replace(batch, **fields, lengths=lengths + 1, dt_query=torch.zeros_like(gap))


def _put(t: Tensor, at: Tensor, value: Tensor | float, widen: bool) -> Tensor:
    """A copy of ``t`` (``[B, L, ...]``; one zero column more when ``widen``) holding ``value``
    (a scalar or ``[B]``) at position ``at[b]`` of each row."""
    t = torch.cat([t, torch.zeros_like(t[:, :1])], dim=1) if widen else t.clone()
    if t.dim() == 3 and not t.shape[-1]:  # no such feature columns
        return t
    index = at.view(-1, *[1] * (t.dim() - 1)).expand(-1, 1, *t.shape[2:])
    src = value.view(-1, *[1] * (t.dim() - 1)) if isinstance(value, Tensor) else value
    return t.scatter(1, index, torch.zeros_like(index, dtype=t.dtype) + src)


Objective = Causal | Masked
OBJECTIVES = {"causal": Causal, "masked": Masked}


def readout_objective(causal: bool, baskets: bool = False) -> Objective:
    """The objective whose readout fits an encoder with (``causal``) or without causal attention,
    and with or without the basket rule."""
    return Causal(baskets) if causal else Masked()
