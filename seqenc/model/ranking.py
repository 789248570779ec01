"""Full ranking over the catalogue, one chunk of items at a time.

Evaluation and ``recommend`` score every item for every history, but never hold a ``[B, n_items]``
matrix: the items are scored in chunks of columns, and what a metric needs is kept as it goes (the
number of items scored at least as high as each target; the running top k). Memory then does not
depend on the catalogue, and time is the one matmul over it (two with the repeat head, whose
catalogue part needs the softmax's normaliser before any probability is known).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import torch
from torch import Tensor

from seqenc.model.batch import N_SPECIAL

CHUNK_ELEMENTS = 2**22  # scores held at once: [B, chunk] float32
TIE_TOLERANCE = 1e-5


@dataclass
class NextItemScorer:
    """Scores of every item as each history's next event, computed a column chunk at a time.

    Attributes:
        state: ``[B, d]`` float32 state the catalogue is scored against (``state @ weight.T``).
        weight: ``[n_items, d]`` item table; the special ids score ``-inf``.
        copy_items, copy_mass: ``[B, L]`` the repeat head's copy distribution (the item of each
            history event, its copy weight), or ``None`` without the head.
        log_gate, log_not_gate: ``[B]`` the head's ``log g`` and ``log(1 - g)``.
        seen: ``[2, S]`` (row, item) pairs scored ``-inf`` (the seen-item filter), or ``None``.
    """

    state: Tensor
    weight: Tensor
    copy_items: Tensor | None = None
    copy_mass: Tensor | None = None
    log_gate: Tensor | None = None
    log_not_gate: Tensor | None = None
    seen: Tensor | None = None

    def __post_init__(self) -> None:
        self._log_normaliser: Tensor | None = None
        self._copy_pairs: tuple[Tensor, Tensor, Tensor] | None = None

    @property
    def n_items(self) -> int:
        return self.weight.shape[0]

    def chunk_size(self) -> int:
        return max(256, CHUNK_ELEMENTS // max(1, len(self.state)))

    def _logits(self, start: int, stop: int) -> Tensor:
        with torch.autocast(self.state.device.type, enabled=False):  # scores stay float32
            logits = self.state @ self.weight[start:stop].float().T
        if start < N_SPECIAL:
            logits[:, : N_SPECIAL - start] = -torch.inf
        return logits

    def log_normaliser(self) -> Tensor:
        """``[B]`` logsumexp of the catalogue logits over every item (one pass, kept)."""
        if self._log_normaliser is None:
            step = self.chunk_size()
            parts = [
                torch.logsumexp(self._logits(start, min(start + step, self.n_items)), dim=1)
                for start in range(0, self.n_items, step)
            ]
            self._log_normaliser = torch.logsumexp(torch.stack(parts, dim=1), dim=1)
        return self._log_normaliser

    def scores(self, start: int, stop: int) -> Tensor:
        """``[B, stop - start]`` float32 scores of items ``start .. stop - 1``: the catalogue logits,
        or with the repeat head the mixture's log-probabilities; seen items ``-inf``."""
        logits = self._logits(start, stop)
        if self.copy_mass is not None:
            # an item outside the history scores log(1 - g) + its catalogue log-probability: one
            # shift of the logits; only the history's items get the exact mixture
            logits += (self.log_not_gate - self.log_normaliser())[:, None]
            rows, items, log_mass = self._copied()
            inside = (items >= start) & (items < stop)
            rows, columns = rows[inside], items[inside] - start
            logits[rows, columns] = torch.logaddexp(
                logits[rows, columns], self.log_gate[rows] + log_mass[inside]
            )
        if self.seen is not None:
            rows, items = self.seen
            inside = (items >= start) & (items < stop)
            logits[rows[inside], items[inside] - start] = -torch.inf
        return logits

    def _copied(self) -> tuple[Tensor, Tensor, Tensor]:
        """``(rows, items, log_mass)``: each history's distinct items and the log of their copy
        mass (an item's occurrences summed), computed once."""
        if self._copy_pairs is None:
            n = self.n_items
            pairs = torch.arange(len(self.copy_items), device=self.copy_items.device)[:, None] * n
            pairs = (pairs + self.copy_items).ravel()
            mass = self.copy_mass.float().ravel()
            keep = mass > 0
            unique, inverse = torch.unique(pairs[keep], return_inverse=True)
            summed = torch.zeros(len(unique), device=mass.device).index_add_(0, inverse, mass[keep])
            self._copy_pairs = (unique // n, unique % n, summed.log())
        return self._copy_pairs

    def chunks(self, stop: int | None = None) -> Iterator[tuple[int, Tensor]]:
        """``(start, scores)`` for consecutive item chunks covering the catalogue (its ids below
        ``stop``, when given)."""
        stop = self.n_items if stop is None else stop
        step = self.chunk_size()
        for start in range(0, stop, step):
            yield start, self.scores(start, min(start + step, stop))

    def target_scores(self, target: Tensor) -> Tensor:
        """``[B]`` each row's score of its ``target`` item, by the rule of :meth:`scores`."""
        score = (self.state * self.weight[target].float()).sum(-1)
        score = score.masked_fill(target < N_SPECIAL, -torch.inf)
        if self.copy_mass is not None:
            copied = (self.copy_mass.float() * (self.copy_items == target[:, None])).sum(1)
            log_copied = torch.log(copied.clamp(min=1e-30)).where(copied > 0, -torch.inf)
            score = torch.logaddexp(
                self.log_not_gate + score - self.log_normaliser(), self.log_gate + log_copied
            )
        if self.seen is not None:
            rows, items = self.seen
            hit = rows[items == target[rows]]
            score = score.index_fill(0, hit, -torch.inf)
        return score

    def target_ranks(self, target: Tensor) -> Tensor:
        """``[B]`` float64 0-based rank of each row's ``target`` among all items: the other items
        scored at least as high (ties count against the target, so a constant scorer ranks it
        last); ``inf`` where the target itself scores ``-inf`` (filtered).

        The target's own score comes from a dot product, the others' from a matmul, whose sums
        may round differently: scores within :data:`TIE_TOLERANCE` (relative) of the target's
        count as ties."""
        own = self.target_scores(target)
        floor = (own - TIE_TOLERANCE * (1.0 + own.abs()))[:, None]
        ahead = torch.zeros(len(target), dtype=torch.int64, device=target.device)
        rows = torch.arange(len(target), device=target.device)
        for start, scores in self.chunks():
            ahead += (scores >= floor).sum(1)
            here = (target >= start) & (target < start + scores.shape[1])
            own_column = scores[rows[here], target[here] - start] >= floor[here, 0]
            ahead[here] -= own_column.long()  # the target is not ahead of itself
        return ahead.double().masked_fill(own == -torch.inf, torch.inf)

    def top_k(self, k: int, stop: int | None = None) -> tuple[Tensor, Tensor]:
        """``(scores, items)``, each ``[B, k]``: the best ``k`` items per row, best first, among
        the ids below ``stop`` (default: all; ``recommend`` leaves out-of-vocabulary buckets out)."""
        best_scores = best_items = None
        for start, scores in self.chunks(stop):
            top = scores.topk(min(k, scores.shape[1]), dim=1)
            items = top.indices + start
            if best_scores is not None:
                merged = torch.cat([best_scores, top.values], dim=1)
                order = merged.topk(min(k, merged.shape[1]), dim=1).indices
                items = torch.cat([best_items, items], dim=1).gather(1, order)
                top_values = merged.gather(1, order)
            else:
                top_values = top.values
            best_scores, best_items = top_values, items
        return best_scores, best_items
