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
    """

    entity: str = "entity_id"
    item: str = "item_id"
    timestamp: str | None = "timestamp"
    categorical: tuple[str, ...] = field(default_factory=tuple)
    numeric: tuple[str, ...] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        # Accept lists from YAML / jsonargparse while keeping the object hashable.
        object.__setattr__(self, "categorical", tuple(self.categorical))
        object.__setattr__(self, "numeric", tuple(self.numeric))

    @property
    def columns(self) -> list[str]:
        """Every column this schema reads, in a fixed order."""
        base = [self.entity, self.item] + ([self.timestamp] if self.timestamp else [])
        return base + list(self.categorical) + list(self.numeric)
