"""Reused float32 matrices for the logits a forward pass keeps for its backward pass (the exact
normaliser's exponentials, the sampled term's candidate logits:
:class:`~seqenc.model.sampled._SharedLogSumExp`).

Why: such a matrix (rows x a whole catalogue, or x thousands of candidates) is tens to a hundred
MB a step, and glibc serves requests that large with freshly mapped pages, so every step pays a
page fault per page again inside the matmul that writes it (benchmarks/results/rank8). A matrix
lent from here is memory already touched; it is lent again only once nothing can read it
(:func:`lending`). CPU only: a GPU's caching allocator reuses its memory itself.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch
from torch import Tensor

# Matrices of fewer elements (4 MB) are left to the allocator, whose own free lists reuse them.
MIN_ELEMENTS = 2**20
# Buffers kept between calls (the largest): a step's calls (the sampled term's candidates and its
# exact rows) and a few accumulated steps find theirs; more are dropped when they come back.
KEPT_BUFFERS = 4


class _Pool:
    """The free buffers (flat float32, CPU), largest first; thread-safe (a backward pass may
    release a buffer on another thread)."""

    def __init__(self) -> None:
        self.free: list[Tensor] = []
        self.lock = threading.Lock()

    def take(self, n: int) -> Tensor:
        """The smallest free buffer of at least ``n`` elements, else a new one, which replaces
        the largest free one (too small: the pool holds what one step's calls need at once)."""
        with self.lock:
            fits = [i for i, b in enumerate(self.free) if b.numel() >= n]
            if fits:
                return self.free.pop(fits[-1])
            del self.free[:1]
        return torch.empty(n)

    def give_back(self, buffer: Tensor) -> None:
        with self.lock:
            self.free.append(buffer)
            self.free.sort(key=Tensor.numel, reverse=True)
            del self.free[KEPT_BUFFERS:]

    def nbytes(self) -> int:
        """Bytes the free buffers hold."""
        with self.lock:
            return sum(b.numel() * b.element_size() for b in self.free)

    def clear(self) -> None:
        with self.lock:
            self.free.clear()


POOL = _Pool()


def release() -> int:
    """Free the pool's kept buffers (at most :data:`KEPT_BUFFERS`, the largest logit matrices of
    the last steps): call it when a fit ends, so the process does not keep them for its life.
    Returns the bytes released. Buffers still lent (a graph saves them) come back later and are
    kept again until the next call: the pool never holds more than ``KEPT_BUFFERS`` buffers."""
    held = POOL.nbytes()
    POOL.clear()
    return held


class _Lent:
    """A lent buffer while a graph saves it: given back when the last of its saved views (and the
    call that lent it) lets go of it."""

    __slots__ = ("buffer",)

    def __init__(self, buffer: Tensor) -> None:
        self.buffer = buffer

    def __del__(self) -> None:
        POOL.give_back(self.buffer)


class _Saved:
    """What autograd keeps of a saved view of a lent buffer: the view and its buffer's holder."""

    __slots__ = ("lent", "matrix")

    def __init__(self, lent: _Lent, matrix: Tensor) -> None:
        self.lent, self.matrix = lent, matrix


@contextmanager
def lending() -> Iterator[Callable[[int, int, torch.device], Tensor]]:
    """Within: ``matrix(rows, cols, device)``, a float32 ``[rows, cols]`` matrix to write (lent
    from :data:`POOL` on a CPU from :data:`MIN_ELEMENTS` elements, else new).

    A lent buffer comes back only when nothing can read it: when autograd releases the saved
    tensors of the calls inside (after their backward pass, unless the graph is retained; or with
    the graph, dropped unused), or on leaving where no graph saved it (``no_grad``, or no input
    asks for a gradient); after an error, never (it is dropped). Several calls before one
    backward pass (gradient accumulation, several terms) each hold their own buffer. The calls'
    tensors are saved through this function's ``saved_tensors_hooks``: an outer pair (activation
    offloading) does not see them."""
    lent: list[Tensor] = []
    saved: dict[int, _Lent] = {}  # one holder per buffer, however many of its views are saved

    def matrix(rows: int, cols: int, device: torch.device) -> Tensor:
        n = rows * cols
        if device.type != "cpu" or n < MIN_ELEMENTS:
            return torch.empty(rows, cols, device=device)
        lent.append(POOL.take(n))
        return lent[-1][:n].view(rows, cols)

    def pack(tensor: Tensor) -> Tensor | _Saved:
        where = tensor.untyped_storage().data_ptr()
        for buffer in lent:
            if buffer.untyped_storage().data_ptr() == where:
                if id(buffer) not in saved:
                    saved[id(buffer)] = _Lent(buffer)
                return _Saved(saved[id(buffer)], tensor)
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, _unpack):
        yield matrix
    for buffer in lent:
        if id(buffer) not in saved:
            POOL.give_back(buffer)


def _unpack(packed: Tensor | _Saved) -> Tensor:
    return packed.matrix if isinstance(packed, _Saved) else packed
