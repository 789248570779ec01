"""The values of the options that steer an encode, and their checks: one line naming the option
and the value, before any work."""

from __future__ import annotations

from collections.abc import Sequence

from seqenc.errors import SeqencError

OUTPUTS = ("pandas", "numpy", "torch", "arrow")
# What to do with an entity whose events all lie after as_of: one meaning everywhere; the default
# is "raise" in Encoder.encode / update and "skip" in the bulk paths (seqenc embed, the export, Spark).
ON_EMPTY = ("raise", "skip")
# Padded positions per forward pass: batches whose activations stay near the CPU's caches run
# fastest.
MAX_TOKENS = 2048


def check_choice(name: str, value: object, choices: Sequence[str]) -> None:
    """Refuse ``value`` of option ``name`` unless it is one of ``choices``."""
    if value not in choices:
        raise SeqencError(f"{name} must be one of {tuple(choices)}, got {value!r}")


def positive_int(name: str, value: object) -> int:
    """``value`` if it is an int >= 1 (not a bool), else a one-line error naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise SeqencError(f"{name} must be a positive integer, got {value!r}")
    return value
