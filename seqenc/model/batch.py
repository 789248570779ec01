"""The batch format every model entry point consumes, and the special item ids.

Histories are **right-padded**: position 0 is the oldest kept event, ``lengths[b] - 1`` the newest, and
positions from ``lengths[b]`` on hold PAD (item id 0). With right padding a causal model needs no mask
at all (``is_causal=True`` never lets a real event see a later slot), so the FlashAttention kernel
can run on mixed-length batches; bidirectional attention uses :attr:`Batch.padding_mask`.

This module imports torch only, so the model package stands alone; the data layer builds batches
(:func:`seqenc.data.batches.collate`) and vocabularies with these ids.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace

import torch

PAD = 0  # padding after a history; also the PAD row of every embedding table
MASK = 1  # the cloze token of the masked objective
UNK = 2  # an item or category the vocabulary does not know
N_SPECIAL = 3  # real vocabulary ids start here


@dataclass
class Batch:
    """A padded batch of event histories.

    Attributes:
        items: ``[B, L]`` int64 item vocabulary ids, PAD (0) after ``lengths``.
        lengths: ``[B]`` int64 number of real events per row (0 for an empty history).
        dt_prev: ``[B, L]`` float32 seconds since the previous event (0 for the first and for PAD).
        dt_ref: ``[B, L]`` float64 (or float32) seconds from the event to the reference time; only
            differences between positions are model inputs (never the value itself: at position i
            it would tell how much later the window ends). Float64, because an ``as_of`` years
            ahead makes the values ~1e8 s, where float32 steps are 8 s and the differences the
            time values read would move (they are rounded to float32 only once taken).
        categorical: ``[B, L, C]`` int64 categorical feature ids (C may be 0).
        numeric: ``[B, L, N]`` float32 numeric features (N may be 0).
        index: ``[B]`` int64 position of each history in the samples it was collated from (for a
            whole-store view, its store row): results are scattered back by it.
        target: ``[B]`` int64 held-out next item (validation / test), or ``None``.
        seen: ``[2, S]`` int64 (batch row, item id) pairs of every item in each row's full history,
            for filtering already-seen items at evaluation, or ``None``.
        dt_query: ``[B]`` float32 seconds from the newest event to the time the prediction or
            embedding is for (the query time): a held-out target's time in evaluation, ``as_of`` at
            inference; ``None`` means the reference time (``dt_ref`` of the newest event).
        target_sets: ``[2, T]`` int64 (batch row, item id) pairs of each row's held-out target
            basket (the basket protocol, :mod:`seqenc.data.baskets`), or ``None``.
        next_gaps: ``[B, L]`` float32 gap from each event to the time its position predicts for,
            set by the basket rule (:func:`seqenc.model.baskets.basket_inputs`: the next basket's
            time); ``None``: the next event's, see :attr:`query_gaps`.
        aggregates: ``[B, n_wide]`` float32 hand-made aggregates of each row's events at its cut-off,
            the wide input of a fused label head (:mod:`seqenc.model.head`), or ``None``.
    """

    items: torch.Tensor
    lengths: torch.Tensor
    dt_prev: torch.Tensor
    dt_ref: torch.Tensor
    categorical: torch.Tensor
    numeric: torch.Tensor
    index: torch.Tensor
    target: torch.Tensor | None = None
    seen: torch.Tensor | None = None
    dt_query: torch.Tensor | None = None
    target_sets: torch.Tensor | None = None
    next_gaps: torch.Tensor | None = None
    aggregates: torch.Tensor | None = None

    @property
    def padding_mask(self) -> torch.Tensor:
        """``[B, L]`` bool, True on real events."""
        positions = torch.arange(self.items.shape[1], device=self.items.device)
        return positions[None, :] < self.lengths[:, None]

    @property
    def query_gaps(self) -> torch.Tensor:
        """``[B, L]`` the gap from each event to the time its position predicts for: the next
        event's ``dt_prev`` inside the history, :attr:`dt_query` at the newest event, 0 on PAD
        (:attr:`next_gaps` instead when set)."""
        if self.next_gaps is not None:
            return self.next_gaps * self.padding_mask
        positions = torch.arange(self.items.shape[1], device=self.items.device)[None, :]
        newest = positions == (self.lengths - 1)[:, None]
        following = torch.cat([self.dt_prev[:, 1:], torch.zeros_like(self.dt_prev[:, :1])], dim=1)
        gaps = torch.where(newest, self.query_gap[:, None], following)
        return gaps * self.padding_mask

    @property
    def query_gap(self) -> torch.Tensor:
        """``[B]`` :attr:`dt_query`, or where it is ``None`` the newest event's ``dt_ref`` (0 for an
        empty row)."""
        if self.dt_query is not None:
            return self.dt_query.to(self.dt_prev.dtype)
        rows = torch.arange(len(self), device=self.items.device)
        newest = self.dt_ref[rows, (self.lengths - 1).clamp(min=0)].to(self.dt_prev.dtype)
        return torch.where(self.lengths > 0, newest, torch.zeros_like(newest))

    def __len__(self) -> int:
        return self.items.shape[0]

    def to(self, device: torch.device | str, non_blocking: bool = False) -> Batch:
        """Move every tensor to ``device`` (Lightning calls this through ``transfer_batch_to_device``)."""
        moved = {
            f.name: None if v is None else v.to(device, non_blocking=non_blocking)
            for f in fields(self)
            for v in [getattr(self, f.name)]
        }
        return Batch(**moved)

    def pin_memory(self) -> Batch:
        """Pinned copy for fast host→GPU transfer (called by the DataLoader when ``pin_memory=True``)."""
        return replace(
            self,
            **{
                f.name: getattr(self, f.name).pin_memory()
                for f in fields(self)
                if getattr(self, f.name) is not None
            },
        )


def drop_events(batch: Batch, share: float) -> Batch:
    """``batch`` with each real event dropped with probability ``share`` (at least one kept per
    non-empty row), the kept ones moved left in their order: input dropout over events, a
    regulariser for small labelled sets. Gaps from the previous event are re-measured between the
    kept events (the first kept event keeps its own)."""
    real = batch.padding_mask
    positions = torch.arange(real.shape[1], device=real.device)[None, :]
    keep = real & (torch.rand(real.shape, device=real.device) >= share)
    newest = positions == (batch.lengths - 1)[:, None]
    keep |= newest & ~keep.any(1, keepdim=True)
    order = torch.argsort((~keep).to(torch.int8), dim=1, stable=True)
    lengths = keep.sum(1)
    kept = positions < lengths[:, None]

    def take(t: torch.Tensor) -> torch.Tensor:
        index = order.view(*order.shape, *[1] * (t.dim() - 2)).expand_as(t)
        out = t.gather(1, index)
        return out * kept.view(*kept.shape, *[1] * (t.dim() - 2)).to(out.dtype)

    dt_ref = take(batch.dt_ref)
    between = (dt_ref[:, :-1] - dt_ref[:, 1:]).clamp(min=0).to(batch.dt_prev.dtype)
    dt_prev = torch.cat([take(batch.dt_prev)[:, :1], between], dim=1) * kept
    return replace(
        batch,
        items=take(batch.items),
        lengths=lengths,
        dt_prev=dt_prev,
        dt_ref=dt_ref,
        categorical=take(batch.categorical),
        numeric=take(batch.numeric),
        next_gaps=None if batch.next_gaps is None else take(batch.next_gaps),
    )
