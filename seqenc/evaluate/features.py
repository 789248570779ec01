"""Embeddings and a fine-tuned bundle's predictions at each label's own cut-off (the hand-made
aggregates beside them are :mod:`seqenc.data.aggregates`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from seqenc.data.cut import parse_column
from seqenc.data.events import Events, Source, read_events
from seqenc.errors import SeqencError

if TYPE_CHECKING:
    from seqenc.inference import Encoder


def embed_at(
    encoder: Encoder,
    events: Source,
    cutoffs: pd.DataFrame,
    *,
    entity: str | None = None,
    as_of_column: str = "as_of",
    batch_size: int = 256,
    columns: tuple[str, ...] = ("embedding",),
) -> pd.DataFrame:
    """Embed every row of ``cutoffs`` (entity, ``as_of_column``) from its events at or before its
    own cut-off: one :meth:`Encoder.encode` call per distinct cut-off, on that cut-off's entities.

    Returns the key columns (the entity under the name used in ``cutoffs``, and ``as_of_column``)
    and ``columns`` of the output (``embedding``; a fine-tuned bundle's ``probabilities`` or
    ``prediction``); rows without an event at or before their cut-off are left out. The cut-offs
    are read as a label table's (:func:`~seqenc.data.cut.parse_column`: a missing one refused).
    """
    schema = encoder.meta.schema
    entity = entity or schema.entity
    for column in (entity, as_of_column):
        if column not in cutoffs.columns:
            raise SeqencError(
                f"cutoffs have no column {column!r} (columns: {list(cutoffs.columns)})"
            )
    parse_column(cutoffs[as_of_column], as_of_column)  # a label table's rules, every row checked
    table = read_events(events, schema, exact=True)  # each call cuts on the events' ticks
    ids = table[schema.entity].to_pandas()
    parts = []
    for when, group in cutoffs.groupby(as_of_column, sort=True):
        mine = table.filter(ids.isin(group[entity]).to_numpy())
        if mine.num_rows == 0:
            continue
        df = encoder.encode(
            Events(mine, schema), as_of=when, batch_size=batch_size, on_empty="skip"
        )
        df = df.rename(columns={"entity_id": entity})[[entity, *columns]]
        parts.append(group[[entity, as_of_column]].merge(df, on=entity, how="inner"))
    if not parts:
        raise SeqencError("no row of cutoffs has an event at or before its as_of")
    return pd.concat(parts, ignore_index=True)


def predict_at(
    encoder: Encoder,
    events: Source,
    cutoffs: pd.DataFrame,
    *,
    entity: str | None = None,
    as_of_column: str = "as_of",
    batch_size: int = 256,
) -> tuple[pd.DataFrame, np.ndarray]:
    """A fine-tuned bundle's predictions at every row of ``cutoffs`` (:func:`embed_at`'s rows, the
    predictions ``encode`` gives with them): the key columns and ``[n, k]`` probabilities of the
    head's classes, or ``[n]`` numbers (no row with an event at or before its cut-off: 0 rows,
    as :func:`embed_at`)."""
    head = encoder.model.head
    if head is None:
        raise SeqencError(f"bundle {encoder.meta.name!r} has no label head (not fine-tuned)")
    column = "prediction" if head.task == "regression" else "probabilities"
    table = embed_at(
        encoder, events, cutoffs, entity=entity, as_of_column=as_of_column,
        batch_size=batch_size, columns=(column,),
    )  # fmt: skip
    values = table.pop(column).to_numpy()
    if column == "prediction":
        return table, values.astype(np.float32)
    width = len(head.classes)  # no row at or before its cut-off: [0, k]
    return table, np.stack(values) if len(values) else np.zeros((0, width), np.float32)
