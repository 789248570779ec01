"""How many events of a history the model reads: ``data.history_len``'s checks and ``"auto"``,
chosen from the log's lengths so entity tasks (labels, account embeddings) read whole histories."""

from __future__ import annotations

import numpy as np

from seqenc.errors import SeqencError
from seqenc.integers import integer

MAX_AUTO_HISTORY = 512  # the longest history "auto" chooses: attention a 2-core machine trains
AUTO_QUANTILE = 0.95  # "auto" covers this share of the entities' whole histories


def check_history_len(setting: object, sharded: bool) -> None:
    """A ``history_len`` setting is a positive integer or ``"auto"`` (which reads every entity's
    length, so not with sharded reading)."""
    if not (isinstance(setting, str) and setting == "auto") and not (
        integer(setting) is not None and setting >= 1
    ):
        raise SeqencError(f"data.history_len must be a positive integer or 'auto', got {setting!r}")
    if setting == "auto" and sharded:
        raise SeqencError("data.history_len 'auto' reads every entity's length: set a number")


def auto_history_len(lengths: np.ndarray) -> tuple[int, str]:
    """``(history_len, why)``: the 95th percentile of the entities' event counts, rounded up to
    a multiple of 32, between 32 and :data:`MAX_AUTO_HISTORY`; so most entities are read whole."""
    lengths = np.asarray(lengths)
    quantile = float(np.quantile(lengths, AUTO_QUANTILE)) if len(lengths) else 0.0
    length = int(min(MAX_AUTO_HISTORY, max(32, -(-int(np.ceil(quantile)) // 32) * 32)))
    whole = float(np.mean(lengths <= length)) if len(lengths) else 1.0
    return length, (
        f"auto: {AUTO_QUANTILE:.0%} of entities have at most {quantile:,.0f} events, at most "
        f"{MAX_AUTO_HISTORY}; {whole:.1%} of entities are read whole"
    )
