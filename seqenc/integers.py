"""What an integer option is: a Python or numpy integer (``np.int64(4096)`` as ``4096``), never a
bool. The one reading of every count, size and index an API takes."""

from __future__ import annotations

import numbers


def integer(value: object) -> int | None:
    """``value`` as a Python ``int`` when it is an integer of any integer type but bool; else
    ``None`` (so ``3.0``, ``"3"`` and ``True`` are not integers)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        return None
    return int(value)
