"""What a trained model must agree on with the data it reads: one object, one owner."""

from __future__ import annotations

from typing import Any

from seqenc.data.schema import EventSchema
from seqenc.data.vocab import Vocabularies
from seqenc.errors import SeqencError
from seqenc.integers import integer


class DataSpec:
    """The data side of the model contract.

    The DataModule produces it (and saves / restores it through its ``state_dict``); the
    LightningModule builds its encoder from it; a bundle stores it beside the weights, so inference
    reads new events exactly as training did.

    Attributes:
        schema: the event-log columns.
        vocabs: item and categorical vocabularies.
        history_len: the newest ``history_len`` events of a history are fed to the model (the
            training window is one event longer, the model's position capacity too).
        repeat_share: share of the events whose item already occurred earlier in their entity's
            history (a statistic of the training log that picks defaults: repeat head, filter).
        baskets: events of an entity that share a time are a set, in training and evaluation
            (:mod:`seqenc.data.baskets`); a spec saved before it existed reads ``False``.
        labels: with a label table (fine-tuning), the label head's description (task, classes,
            scale: :func:`~seqenc.data.labels.read_labels`); ``None`` for a self-supervised fit.

    A plain class, not a dataclass: LightningCLI links the object itself into the model instead of
    expanding its fields into command-line options.
    """

    def __init__(
        self,
        schema: EventSchema,
        vocabs: Vocabularies,
        history_len: int,
        repeat_share: float = 0.0,
        baskets: bool = False,
        labels: dict[str, Any] | None = None,
    ) -> None:
        if integer(history_len) is None or history_len < 1:
            raise SeqencError(f"history_len must be a positive integer, got {history_len!r}")
        history_len = int(history_len)
        missing = [c for c in schema.categorical if c not in vocabs.categorical]
        if missing:
            raise SeqencError(f"no vocabulary for categorical column(s) {missing}")
        self.schema, self.vocabs, self.history_len = schema, vocabs, history_len
        self.repeat_share = float(repeat_share)
        self.baskets = bool(baskets)
        self.labels = labels

    def __eq__(self, other: object) -> bool:
        return isinstance(other, DataSpec) and self.to_dict() == other.to_dict()

    def __repr__(self) -> str:
        return f"DataSpec(schema={self.schema!r}, n_items={self.n_items}, history_len={self.history_len})"

    @property
    def has_time(self) -> bool:
        """Whether the log has real timestamps (time encodings can be used)."""
        return self.schema.timestamp is not None

    @property
    def n_items(self) -> int:
        """Item vocabulary size, the special ids included."""
        return len(self.vocabs.item)

    @property
    def categorical_sizes(self) -> tuple[int, ...]:
        """Vocabulary size of each categorical column, in schema order."""
        return tuple(len(self.vocabs.categorical[c]) for c in self.schema.categorical)

    @property
    def n_numeric(self) -> int:
        return len(self.schema.numeric)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able form (the DataModule's checkpoint state)."""
        return {
            "schema": self.schema.to_dict(),
            "history_len": self.history_len,
            "repeat_share": self.repeat_share,
            "baskets": self.baskets,
            "vocabs": self.vocabs.to_dict(),
        } | ({"labels": self.labels} if self.labels else {})

    @classmethod
    def from_dict(cls, d: Any) -> DataSpec:
        """Inverse of :meth:`to_dict`; also reads a spec saved before ``history_len`` had its
        name (``max_len``, in checkpoints of older versions)."""
        if not isinstance(d, dict):
            raise SeqencError(f"data spec: expected an object, got {type(d).__name__}")
        if "max_len" in d and "history_len" not in d:
            d = {k: v for k, v in d.items() if k != "max_len"} | {"history_len": d["max_len"]}
        missing = sorted({"schema", "history_len", "vocabs"} - set(d))
        if missing:
            raise SeqencError(f"data spec: missing key(s) {missing}")
        if not isinstance(d["schema"], dict):
            raise SeqencError("data spec: 'schema' must be an object of column names")
        try:
            schema = EventSchema(**d["schema"])
        except TypeError as e:
            raise SeqencError(f"data spec: invalid schema: {e}") from e
        vocabs = Vocabularies.from_dict(d["vocabs"])
        return cls(
            schema,
            vocabs,
            d["history_len"],
            d.get("repeat_share", 0.0),
            baskets=d.get("baskets", False),
            labels=d.get("labels"),
        )
