"""Which columns of an event log mean what."""

from __future__ import annotations

from dataclasses import dataclass, field


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
    """

    entity: str = "entity_id"
    item: str = "item_id"
    timestamp: str | None = "timestamp"
    categorical: tuple[str, ...] = field(default_factory=tuple)
    numeric: tuple[str, ...] = field(default_factory=tuple)
    tie_breakers: tuple[str, ...] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        # Accept lists from YAML / jsonargparse while keeping the object hashable.
        object.__setattr__(self, "categorical", tuple(self.categorical))
        object.__setattr__(self, "numeric", tuple(self.numeric))
        object.__setattr__(self, "tie_breakers", tuple(self.tie_breakers))

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
        """JSON form; ``tie_breakers`` only when set, so configurations written before it existed
        keep their hash."""
        d = {
            "entity": self.entity,
            "item": self.item,
            "timestamp": self.timestamp,
            "categorical": list(self.categorical),
            "numeric": list(self.numeric),
        }
        return d | ({"tie_breakers": list(self.tie_breakers)} if self.tie_breakers else {})
