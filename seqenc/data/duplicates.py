"""Exact duplicate events where they matter most: an entity's newest event given twice.

Duplicate rows are kept as the data says (two identical purchases in the same second can be real),
but an at-least-once pipeline that delivered the newest event twice changes the embedding without
a word, so readers count the entities whose newest event appears more than once with every column
equal, and warn.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from seqenc.data.cut import Cut
from seqenc.data.events import Events, read_events
from seqenc.data.schema import EventSchema


def duplicated_newest(table: pa.Table, schema: EventSchema, as_of: Cut | object = None) -> int:
    """Entities whose newest event at or before ``as_of`` (``None``: all) appears
    twice or more with every column of ``schema`` equal. 0 without a timestamp column (the row
    order is then the only order, and repeats are part of it)."""
    time = schema.timestamp
    if time is None or table.num_rows == 0:
        return 0
    table = read_events(Events(table, schema), schema, until=as_of).select(schema.columns)
    newest = table.group_by(schema.entity).aggregate([(time, "max")])
    newest = newest.rename_columns([schema.entity, "__newest"])
    at_newest = table.join(newest, schema.entity)
    at_newest = at_newest.filter(pc.equal(at_newest[time], at_newest["__newest"]))
    counts = (
        at_newest.select(schema.columns).group_by(schema.columns).aggregate([([], "count_all")])
    )
    repeated = counts.filter(pc.greater(counts["count_all"], 1))
    return len(pc.unique(repeated[schema.entity]))
