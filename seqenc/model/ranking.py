"""Full ranking over the catalogue, one chunk of items at a time.

Evaluation and ``recommend`` score every item for every history, but never hold a ``[B, n_items]``
matrix: the items are scored in chunks of columns, and what a metric needs is kept as it goes (the
number of items scored at least as high as each target; the running top k). Memory then does not
depend on the catalogue. A target's rank reads the catalogue logits once (twice with the repeat
head, whose catalogue part needs the softmax's normaliser before any probability is known), each
pass doing little more per item than its matmul: one reused buffer, base-2 exponentials (the
cheaper kernel), comparisons into floats (into bools they take a slower, scalar kernel), and under
the mixture one threshold per row, so that only the few items of each history get their exact
score.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass

import torch
from torch import Tensor

from seqenc.model.batch import N_SPECIAL

CHUNK_ELEMENTS = 2**22  # scores held at once by scores() / top_k(): [B, chunk] float32
PASS_ELEMENTS = 2**19  # the rank's and the normaliser's reused buffer: small enough to stay cached
TIE_TOLERANCE = 1e-5
LOG2_E = 1.0 / math.log(2.0)


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
        banned: ``[n_items]`` bool, items scored ``-inf`` in every row (``recommend``'s allow /
            deny lists), or ``None``; read by :meth:`scores`, :meth:`top_k` and
            :meth:`pair_scores`.
    """

    state: Tensor
    weight: Tensor
    copy_items: Tensor | None = None
    copy_mass: Tensor | None = None
    log_gate: Tensor | None = None
    log_not_gate: Tensor | None = None
    seen: Tensor | None = None
    banned: Tensor | None = None

    def __post_init__(self) -> None:
        self._log_normaliser: Tensor | None = None
        self._copy_pairs: tuple[Tensor, Tensor, Tensor] | None = None

    @property
    def n_items(self) -> int:
        return self.weight.shape[0]

    def chunk_size(self, elements: int | None = None) -> int:
        """Items per chunk: ``elements`` (default :data:`CHUNK_ELEMENTS`) scores at once."""
        elements = CHUNK_ELEMENTS if elements is None else elements
        return max(256, elements // max(1, len(self.state)))

    def _logits(
        self, start: int, stop: int, state: Tensor | None = None, buffer: Tensor | None = None
    ) -> Tensor:
        """``[B, stop - start]`` catalogue logits of ``state`` (default :attr:`state`), written
        into the front of ``buffer`` (flat float32) when given, unless autograd is recording
        them (it cannot write into a buffer); special ids ``-inf``."""
        state = self.state if state is None else state
        with torch.autocast(state.device.type, enabled=False):  # scores stay float32
            weight = self.weight[start:stop].float()
            recording = torch.is_grad_enabled() and (state.requires_grad or weight.requires_grad)
            if buffer is None or recording:
                logits = state @ weight.T
            else:
                out = buffer[: len(state) * len(weight)].view(len(state), len(weight))
                logits = torch.mm(state, weight.T, out=out)
        if start < N_SPECIAL:
            logits[:, : N_SPECIAL - start] = -torch.inf
        return logits

    def _spans(self) -> tuple[list[int], Tensor]:
        """``(edges, buffer)`` of the rank's and the normaliser's passes: item spans
        ``edges[i] .. edges[i + 1]`` of :data:`PASS_ELEMENTS` scores, one flat buffer for all."""
        step = self.chunk_size(PASS_ELEMENTS)
        buffer = self.state.new_empty(len(self.state) * step, dtype=torch.float32)
        return [*range(0, self.n_items, step), self.n_items], buffer

    def log_normaliser(self) -> Tensor:
        """``[B]`` logsumexp of the catalogue logits over every item (one pass, kept): in base 2,
        of the logits scaled by log2(e) in the matmul itself."""
        if self._log_normaliser is None:
            state = self.state.float() * LOG2_E
            peaks, sums = [], []
            edges, buffer = self._spans()
            for start, stop in zip(edges[:-1], edges[1:], strict=True):
                logits = self._logits(start, stop, state, buffer)
                # a row of -inf (nothing to score) keeps a finite peak: its sum is then 0, not nan
                peak = logits.amax(1, keepdim=True).clamp(min=torch.finfo(torch.float32).min)
                sums.append(torch.exp2(logits - peak).sum(1))
                peaks.append(peak[:, 0])
            peak = torch.stack(peaks, 1)
            top = peak.amax(1, keepdim=True)
            total = (torch.stack(sums, 1) * torch.exp2(peak - top)).sum(1)
            self._log_normaliser = (top[:, 0] + torch.log2(total)) / LOG2_E
        return self._log_normaliser

    def shift(self) -> Tensor:
        """``[B]`` what turns a catalogue logit into its score outside the history: ``log(1 - g)
        - log Z`` with the repeat head, else 0."""
        if self.copy_mass is None:
            return self.state.new_zeros(len(self.state))
        return self.log_not_gate - self.log_normaliser()

    def scores(self, start: int, stop: int) -> Tensor:
        """``[B, stop - start]`` float32 scores of items ``start .. stop - 1``: the catalogue logits,
        or with the repeat head the mixture's log-probabilities; seen items ``-inf``."""
        logits = self._logits(start, stop)
        if self.copy_mass is not None:
            # an item outside the history scores log(1 - g) + its catalogue log-probability: one
            # shift of the logits; only the history's items get the exact mixture
            logits += self.shift()[:, None]
            rows, items, log_mass = self.copied()
            inside = (items >= start) & (items < stop)
            rows, columns = rows[inside], items[inside] - start
            logits[rows, columns] = torch.logaddexp(
                logits[rows, columns], self.log_gate[rows] + log_mass[inside]
            )
        if self.seen is not None:
            rows, items = self.seen
            inside = (items >= start) & (items < stop)
            logits[rows[inside], items[inside] - start] = -torch.inf
        if self.banned is not None:
            logits[:, self.banned[start:stop]] = -torch.inf
        return logits

    def copied(self) -> tuple[Tensor, Tensor, Tensor]:
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

    def _exceptions(self, target: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
        """``(rows, items, log_mass, seen, is_target)``, sorted by item: the (row, item) pairs
        whose score is not the row's shifted logit (the history's copied items, with their log
        copy mass, else ``-inf``; the seen items; each row's target)."""
        n_rows = len(target)
        rows = [torch.arange(n_rows, device=target.device)]
        items = [target]
        if self.copy_mass is not None:
            copy_rows, copy_items, log_mass = self.copied()
            rows.append(copy_rows)
            items.append(copy_items)
        if self.seen is not None:
            rows.append(self.seen[0])
            items.append(self.seen[1])
        keys = torch.cat(items) * n_rows + torch.cat(rows)  # item-major: sorted by item
        unique, inverse = torch.unique(keys, return_inverse=True)
        mass = torch.full((len(unique),), -torch.inf, device=target.device)
        flags = torch.zeros(len(unique), dtype=torch.bool, device=target.device)
        is_target = flags.index_fill(0, inverse[:n_rows], True)
        if self.copy_mass is not None:
            mass[inverse[n_rows : n_rows + len(log_mass)]] = log_mass
        seen = flags
        if self.seen is not None:
            seen = flags.index_fill(0, inverse[len(inverse) - self.seen.shape[1] :], True)
        return unique % n_rows, unique // n_rows, mass, seen, is_target

    def chunks(self, stop: int | None = None) -> Iterator[tuple[int, Tensor]]:
        """``(start, scores)`` for consecutive item chunks covering the catalogue (its ids below
        ``stop``, when given)."""
        stop = self.n_items if stop is None else stop
        step = self.chunk_size()
        for start in range(0, stop, step):
            yield start, self.scores(start, min(start + step, stop))

    def target_scores(self, target: Tensor) -> Tensor:
        """``[B]`` each row's score of its ``target`` item, by the rule of :meth:`scores`."""
        return self.pair_scores(torch.arange(len(target), device=target.device), target)

    def pair_scores(self, rows: Tensor, items: Tensor) -> Tensor:
        """``[P]`` the score of item ``items[p]`` as row ``rows[p]``'s next event, by the rule of
        :meth:`scores` (a logit shifted, then mixed with the copy mass of the row's history; seen
        and banned pairs ``-inf``), for any pairs: a candidate list, an index's retrieved items.
        Memory grows with the pairs, not with the catalogue."""
        score = (self.state[rows] * self.weight[items].float()).sum(-1)
        score = score.masked_fill(items < N_SPECIAL, -torch.inf)
        keys = rows * self.n_items + items
        if self.copy_mass is not None:
            copy_rows, copy_items, log_mass = self.copied()
            log_copied = _lookup(copy_rows * self.n_items + copy_items, log_mass, keys)
            score = torch.logaddexp(score + self.shift()[rows], self.log_gate[rows] + log_copied)
        if self.seen is not None:
            seen = self.seen[0] * self.n_items + self.seen[1]
            score = score.masked_fill(torch.isin(keys, seen), -torch.inf)
        if self.banned is not None:
            score = score.masked_fill(self.banned[items], -torch.inf)
        return score

    def target_ranks(self, target: Tensor) -> Tensor:
        """``[B]`` float64 0-based rank of each row's ``target`` among all items: the other items
        scored at least as high (ties count against the target, so a constant scorer ranks it
        last); ``inf`` where the target itself scores ``-inf`` (filtered).

        The target's own score comes from a dot product, the others' from a matmul, whose sums
        may round differently: scores within :data:`TIE_TOLERANCE` (relative) of the target's
        count as ties.

        One pass over the catalogue logits counts, per row, the items whose logit clears the
        threshold of :func:`least_clearing` (so exactly those an item outside the history would
        count by its shifted score); the exceptions (:meth:`_exceptions`) are then taken out of
        that count and counted by their exact score.
        """
        own = self.target_scores(target)
        floor = own - TIE_TOLERANCE * (1.0 + own.abs())
        shift = self.shift()
        threshold = floor if self.copy_mass is None else least_clearing(floor, shift)
        threshold = threshold[:, None]
        rows, items, log_mass, seen, is_target = self._exceptions(target)
        logit = torch.empty(len(items), device=target.device)
        ahead = torch.zeros(len(target), dtype=torch.int64, device=target.device)
        edges, buffer = self._spans()
        bounds = torch.searchsorted(items, items.new_tensor(edges)).tolist()
        for i, (start, stop) in enumerate(zip(edges[:-1], edges[1:], strict=True)):
            logits = self._logits(start, stop, buffer=buffer)
            here = slice(bounds[i], bounds[i + 1])
            logit[here] = logits[rows[here], items[here] - start]
            ahead += logits.ge_(threshold).sum(1).long()  # 1.0 / 0.0 per item: exact counts
        counted = logit >= threshold[rows, 0]  # what the pass counted, by its own comparison
        score = logit + shift[rows]  # the logit itself without the repeat head (a shift of 0)
        if self.copy_mass is not None:
            score = torch.logaddexp(score, self.log_gate[rows] + log_mass)
        score = score.masked_fill(seen, -torch.inf)
        exact = (score >= floor[rows]) & ~is_target  # the target is not ahead of itself
        ahead.index_add_(0, rows, exact.long() - counted.long())
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


def _lookup(keys: Tensor, values: Tensor, wanted: Tensor) -> Tensor:
    """``values`` at ``wanted`` among the sorted unique ``keys``; ``-inf`` where absent."""
    if not len(keys):
        return torch.full(wanted.shape, -torch.inf, device=wanted.device)
    at = torch.searchsorted(keys, wanted).clamp(max=len(keys) - 1)
    return values[at].masked_fill(keys[at] != wanted, -torch.inf)


def least_clearing(floor: Tensor, shift: Tensor) -> Tensor:
    """``[B]`` the least float32 ``z`` per row whose shifted score ``z + shift`` (rounded to
    float32, as :meth:`NextItemScorer.scores` computes it) is at least ``floor``; ``inf`` if none.

    ``floor - shift`` may round either way; a bisection over the floats in order finds the exact
    threshold, so counting the logits that clear it counts the same items as comparing every
    shifted score with the floor."""
    lo = torch.full_like(floor, _order_key(-torch.inf), dtype=torch.int64)
    hi = torch.full_like(floor, _order_key(torch.inf), dtype=torch.int64)
    for _ in range(33):  # the float32 keys span less than 2**33
        middle = torch.div(lo + hi, 2, rounding_mode="floor")
        clears = _from_order_key(middle) + shift >= floor
        hi = torch.where(clears, middle, hi)
        lo = torch.where(clears, lo, middle + 1)
    return _from_order_key(hi)


def _order_key(value: float) -> int:
    """The position of a float32 in the order of all float32 (as :func:`_from_order_key`)."""
    bits = int(torch.tensor(value, dtype=torch.float32).view(torch.int32))
    return bits if bits >= 0 else -(bits + 2**31) - 1


def _from_order_key(key: Tensor) -> Tensor:
    """The float32 at each int64 ``key`` of :func:`_order_key`'s order (monotone: keys in order
    are floats in order; -0.0 just below 0.0)."""
    bits = torch.where(key >= 0, key, -key - 1 - 2**31)
    return bits.to(torch.int32).view(torch.float32)
