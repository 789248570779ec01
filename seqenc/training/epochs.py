"""How many whole epochs a schedule sized from the data runs (a label head's labelled rows, a
next-basket fit's training windows): one rule, so both fits read their bounds alike."""

from __future__ import annotations

import math


def whole_epochs(batches: int, epochs: int, low: int, high: int) -> int:
    """``epochs`` passes of ``batches`` batches moved into ``[low, high]`` steps in whole epochs:
    the fewest that reach ``low``, the most that stay within ``high`` (``high`` wins where no whole
    number lies between), at least one (longer than ``high`` where one epoch already is). Whole
    epochs, as each ends with the validation that picks the checkpoint and stops the run."""
    batches = max(1, batches)
    fewest, most = math.ceil(low / batches), high // batches
    return max(1, min(max(epochs, fewest), most))
