"""Which columns of an event log mean what."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from seqenc.errors import SeqencError

ID_TYPES = ("auto", "int", "string")


@dataclass(frozen=True)
class EventSchema:
    """Column names of an event log.

    Args:
        entity: the account / user id column (int or string).
        item: the item or event-token column (int or string).
        timestamp: the event time column, or ``None`` when the log has no times (events are then
            ordered as given and every time delta is 0).
        categorical: extra per-event categorical columns (e.g. ``event_type``, ``channel``).
        numeric: extra per-event numeric columns (e.g. ``amount``), carried as float32.
        tie_breakers: columns that order an entity's events with equal timestamps, first to last
            (e.g. an event sequence number). After them, ties are always broken by the item, then
            the categorical and numeric columns, so the order of the input rows never changes a
            history (rows equal in every column are interchangeable). Ignored without timestamps.
        id_types: how to type the id columns (entity, item, categorical): a mapping from column to
            ``"int"`` (int64; integer text such as ``"007"`` is read as 7), ``"string"`` (text kept
            as written, so ``"007"`` and ``"7"`` differ; integers become their decimal text) or
            ``"auto"`` (the default, see :func:`~seqenc.data.events.read_events`); or one of those
            names for every id column. A bundle records the types it was trained with.
    """

    entity: str = "entity_id"
    item: str = "item_id"
    timestamp: str | None = "timestamp"
    categorical: tuple[str, ...] = field(default_factory=tuple)
    numeric: tuple[str, ...] = field(default_factory=tuple)
    tie_breakers: tuple[str, ...] = field(default_factory=tuple)
    id_types: dict[str, str] | str = field(default_factory=dict, hash=False)

    def __post_init__(self) -> None:
        # Accept lists from YAML / jsonargparse while keeping the object hashable.
        object.__setattr__(self, "categorical", tuple(self.categorical))
        object.__setattr__(self, "numeric", tuple(self.numeric))
        object.__setattr__(self, "tie_breakers", tuple(self.tie_breakers))
        object.__setattr__(self, "id_types", self._checked_id_types(self.id_types))

    @property
    def id_columns(self) -> list[str]:
        """The columns holding ids (typed by ``id_types``): entity, item, categorical."""
        return list(dict.fromkeys([self.entity, self.item, *self.categorical]))

    def _checked_id_types(self, types: object) -> dict[str, str]:
        """``id_types`` as a dict of explicit types (``"auto"`` entries dropped), validated."""
        if isinstance(types, str):
            types = dict.fromkeys(self.id_columns, types)
        if not isinstance(types, dict):
            raise SeqencError(f"id_types must be a mapping or one of {ID_TYPES}, got {types!r}")
        for column, kind in types.items():
            if column not in self.id_columns:
                raise SeqencError(
                    f"id_types names {column!r}, which is not an id column {self.id_columns}"
                )
            if kind not in ID_TYPES:
                raise SeqencError(f"id_types[{column!r}] must be one of {ID_TYPES}, got {kind!r}")
        return {c: k for c, k in types.items() if k != "auto"}

    def id_type(self, column: str) -> str:
        """``"int"``, ``"string"`` or ``"auto"``: how the id column ``column`` is typed."""
        return self.id_types.get(column, "auto")

    def with_id_types(self, defaults: dict[str, str]) -> EventSchema:
        """This schema with ``defaults`` for the id columns it leaves ``"auto"``."""
        return replace(self, id_types=defaults | self.id_types)

    @property
    def columns(self) -> list[str]:
        """Every column this schema reads, in a fixed order."""
        base = [self.entity, self.item] + ([self.timestamp] if self.timestamp else [])
        features = base + list(self.categorical) + list(self.numeric)
        return features + [c for c in self.tie_breakers if c not in features]

    @property
    def tie_order(self) -> list[str]:
        """Columns that order events with equal (entity, timestamp), first to last."""
        fallback = [self.item, *self.categorical, *self.numeric]
        return list(dict.fromkeys([*self.tie_breakers, *fallback]))

    def to_dict(self) -> dict:
        """JSON form; ``tie_breakers`` and ``id_types`` only when set, so configurations written
        before they existed keep their hash."""
        d = {
            "entity": self.entity,
            "item": self.item,
            "timestamp": self.timestamp,
            "categorical": list(self.categorical),
            "numeric": list(self.numeric),
        }
        d |= {"tie_breakers": list(self.tie_breakers)} if self.tie_breakers else {}
        return d | ({"id_types": dict(self.id_types)} if self.id_types else {})
