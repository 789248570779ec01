"""The per-item readout of ``pooling="items"``: what each of the history's most frequent items says.

Beside the attention pooling over every event, the events of each of the :data:`ITEM_SLOTS` most
frequent items of the vocabulary (ids are most frequent first; rarer items share the last slot)
are pooled on their own, by the softmax of the same learned score within that item's events (so a
slot can read its item's newest event, or a mean of them), and :data:`SLOT_WIDTH` numbers are read
from each slot: a learned summary per item, as a per-item table of count, mean and last is by
hand. An item absent from the history reads a learned vector of its own. The slots' numbers are
mapped to the embedding's width and added to the attention pooling.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from seqenc.model.batch import N_SPECIAL

ITEM_SLOTS = 64  # the most frequent items with a slot of their own
SLOT_WIDTH = 8  # numbers read from each slot


class ItemSummaries(nn.Module):
    """``[B, L, d]`` final states, the readout's scores and item ids → ``[B, d]``."""

    def __init__(self, d_model: int, n_items: int) -> None:
        super().__init__()
        self.n_slots = max(1, min(ITEM_SLOTS, n_items - N_SPECIAL))
        self.read = nn.Linear(d_model, SLOT_WIDTH)
        self.absent = nn.Parameter(torch.zeros(self.n_slots, SLOT_WIDTH))
        self.out = nn.Linear(self.n_slots * SLOT_WIDTH, d_model)

    def forward(self, hidden: Tensor, lengths: Tensor, scores: Tensor, items: Tensor) -> Tensor:
        """``hidden`` ``[B, L, d]``, ``lengths`` real positions per row, ``scores`` ``[B, L]``
        the attention pooling's, ``items`` ``[B, L]`` ids (specials belong to no slot)."""
        positions = torch.arange(hidden.shape[1], device=hidden.device)
        real = (positions[None, :] < lengths[:, None]) & (items >= N_SPECIAL)
        slot = (items - N_SPECIAL).clamp(min=0, max=self.n_slots - 1)
        slots = torch.arange(self.n_slots, device=hidden.device)
        member = (slot[..., None] == slots) & real[..., None]  # [B, L, K]
        logits = scores.float()[..., None].masked_fill(~member, -torch.inf)
        top = logits.amax(1, keepdim=True)
        present = torch.isfinite(top)  # [B, 1, K]
        weights = torch.exp(logits - torch.where(present, top, torch.zeros_like(top)))
        weights = weights / weights.sum(1, keepdim=True).clamp(min=1e-30)
        pooled = torch.einsum("blk,bld->bkd", weights.to(hidden.dtype), hidden)
        read = torch.where(present[:, 0, :, None], self.read(pooled), self.absent.to(hidden.dtype))
        return self.out(read.flatten(1))
