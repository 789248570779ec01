"""What a fit started from a bundle (``model.init_from``) takes from it before anything is built:
its vocabularies (``data.vocabs_from``) and its encoder's shape, so that the bundle's weights load
whichever configs are layered on the run (a fine-tuning config may set another architecture for
a start from scratch)."""

from __future__ import annotations

from typing import Any

from seqenc.bundle import read_meta
from seqenc.errors import SeqencError
from seqenc.training.run_options import ENCODER_FIELDS, SHAPE_OPTIONS

# The encoder body's shape options. The repeat head is an output head of a next-event model,
# which a label fit does not train: it is not taken.
BODY_OPTIONS = tuple(
    name
    for name in SHAPE_OPTIONS
    if name in ENCODER_FIELDS and name not in ("repeat_head", "repeat_counts")
)


def adopt_bundle(config: Any) -> str:
    """Set ``config`` (a run's parsed options) to read and build as the bundle at
    ``config.model.init_from`` does: its vocabularies, its encoder's shape options and, with a
    learned position table, its ``history_len``. Returns the line the fit prints: the options
    that differ from what the configs set (``""`` when none do)."""
    path = config.model.init_from
    config.data.vocabs_from = config.data.get("vocabs_from") or path
    try:
        meta = read_meta(path)
    except SeqencError as e:
        raise SeqencError(f"model.init_from: {e}") from e
    encoder, changed = config.model.encoder, []
    for name in BODY_OPTIONS:
        theirs, ours = getattr(meta.encoder, name), encoder.get(name)
        if ours is not None and ours != theirs:
            changed.append(f"model.encoder.{name} {_text(theirs)} (the configs': {_text(ours)})")
        encoder[name] = theirs
    history_len = config.data.get("history_len")
    if meta.encoder.positional == "learned" and history_len != meta.history_len:
        if history_len != "auto":
            changed.append(f"data.history_len {meta.history_len} (the configs': {history_len})")
        config.data.history_len = meta.history_len
    if not changed:
        return ""
    return f"model.init_from: the bundle's shape, not the configs': {'; '.join(changed)}"


def _text(value: Any) -> str:
    """An option's value as the command line writes it."""
    return str(value).lower() if isinstance(value, bool) else str(value)
