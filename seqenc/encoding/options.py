"""The options of an encode, in one frozen object checked once when it is built: every entry point
(``Encoder.encode`` / ``update`` / ``recommend``, the export, Spark, the commands) builds one, and
the encoding core reads nothing else. A new option is one field here and one check in
:meth:`EncodeOptions.__post_init__`."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from seqenc.bundle import BundleMeta
from seqenc.compat.lineage import SPACES
from seqenc.data.cut import Cut, parse
from seqenc.encoding.backends import BACKENDS
from seqenc.errors import SeqencError, ignored
from seqenc.integers import integer

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
    """``value`` as an ``int`` if it is an integer >= 1 (:func:`~seqenc.integers.integer`: numpy's
    too, never a bool), else a one-line error naming ``name``."""
    number = integer(value)
    if number is None or number < 1:
        raise SeqencError(f"{name} must be a positive integer, got {value!r}")
    return number


@dataclass(frozen=True)
class EncodeOptions:
    """What steers an encode; each field is checked once, when the object is built.

    Attributes:
        as_of: only events at or before this time are read, and it is the query time: a
            time-aware model embeds each entity as of that moment. ``None``: each entity's newest
            event (an embedding then never depends on the other entities of the call).
        on_empty: an entity whose events all lie after ``as_of``: ``"raise"`` or ``"skip"``
            (left out, counted in ``n_skipped``).
        batch_size, max_tokens: at most this many histories and padded positions per forward
            pass (neither changes the result).
        space: ``"native"`` (the bundle's own space) or ``"parent"``: through the map that
            ``seqenc align`` / ``fit --compatible_with`` stored (:mod:`seqenc.compat.lineage`).
        parent: with ``space="parent"``, refuse a map to another space than this one (a
            bundle's meta, or a space id as an export's ``seqenc.space_id`` metadata gives it).
        backend, onnx: what runs the forward pass, chosen when a bundle is loaded
            (:func:`seqenc.encoding.load_on`): ``"torch"``, or ``"onnxruntime"`` on the graph
            ``onnx`` (default ``<bundle>/model.onnx``, written by ``seqenc onnx``).
        cut: ``as_of`` parsed once (:class:`~seqenc.data.cut.Cut`, exact ticks), what every
            reader of the encode applies; set from ``as_of``, never given.
    """

    as_of: object = None
    on_empty: str = "raise"
    batch_size: int = 256
    max_tokens: int = MAX_TOKENS
    space: str = "native"
    parent: str | BundleMeta | None = None
    backend: str = "torch"
    onnx: str | Path | None = None
    cut: Cut | None = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "cut", parse(self.as_of))
        check_choice("on_empty", self.on_empty, ON_EMPTY)
        for name in ("batch_size", "max_tokens"):  # stored as Python ints (numpy's accepted)
            object.__setattr__(self, name, positive_int(name, getattr(self, name)))
        check_choice("space", self.space, SPACES)
        if self.parent is not None and self.space != "parent":
            raise ignored(
                "parent", self.parent, f"it checks space='parent', and space={self.space!r}"
            )
        check_choice("backend", self.backend, BACKENDS)
        if self.onnx is not None and self.backend != "onnxruntime":
            why = f"the graph runs with backend='onnxruntime', and the backend is {self.backend!r}"
            raise ignored("onnx", str(self.onnx), why)

    def but(self, **fields: Any) -> EncodeOptions:
        """These options with ``fields`` replaced (checked again); an unknown name is refused in
        one line."""
        known = {f.name for f in dataclasses.fields(self) if f.init}
        unknown = sorted(set(fields) - known)
        if unknown:
            raise SeqencError(
                f"unknown encode option(s) {unknown}; the options are {sorted(known)}"
            )
        return dataclasses.replace(self, **fields) if fields else self


def encode_options(
    options: EncodeOptions | None, fields: dict[str, Any], **defaults: Any
) -> EncodeOptions:
    """The options of one call: ``options`` (default ``EncodeOptions(**defaults)``) with the
    ``fields`` given by name replaced."""
    if options is not None and not isinstance(options, EncodeOptions):
        raise SeqencError(
            f"options must be an EncodeOptions, got {options!r}; pass single options by name "
            "(as_of=..., on_empty=...)"
        )
    return (options or EncodeOptions().but(**defaults)).but(**fields)
