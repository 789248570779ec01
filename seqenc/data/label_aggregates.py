"""The wide input of a fused label head: each label row's hand-made aggregates
(:mod:`seqenc.data.aggregates`), from its entity's events at or before the row's cut-off, and the
layout a bundle stores so that every encode computes the same columns.

The layout is plain JSON data: the fitted :class:`~seqenc.data.aggregates.AggregateSpec`, the
column ``names`` and the training rows' ``center`` and ``scale`` of each column after a signed log
(counts and amounts are heavy-tailed), which the head standardises with
(:class:`~seqenc.model.head.SupervisedHead`). The spec gives the :data:`LIMIT` most frequent items
and values of each categorical column their own columns, with the per-value mean, min, max and
last of each numeric column. The fit's printed baseline (:mod:`seqenc.finetune.baseline`)
reads these very columns.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import torch

from seqenc.data.aggregates import VALUE_STATS, AggregateSpec, RowCutoffs
from seqenc.data.events import Events, Source, read_events
from seqenc.data.labels import Labels
from seqenc.data.schema import EventSchema
from seqenc.model.embeddings import signed_log

LIMIT = 64  # values of the item and of each categorical column with columns of their own


def label_aggregates(
    events: Source, schema: EventSchema, labels: Labels, train_rows: np.ndarray
) -> tuple[dict[str, Any], np.ndarray]:
    """``(layout, values)``: the layout fitted on the events at the training rows' cut-offs and
    ``[len(labels), n]`` float32 aggregates of every label row (0 for a row without events), each
    cut at the label table's parsed cut-off (``labels.cut``, on the events' ticks)."""
    events = Events(read_events(events, schema, exact=True), schema)  # read once, for both
    cutoffs = None if labels.cut is None else RowCutoffs(labels.entity, labels.cut)
    stats = VALUE_STATS if schema.numeric else ()
    if cutoffs is None:  # whole histories: the columns of the training entities' events
        ids = events.table[schema.entity].to_pandas().isin(labels.entity[train_rows])
        fitted_on, train = Events(events.table.filter(ids.to_numpy()), schema), None
    else:
        fitted_on, train = events, cutoffs.take(train_rows)
    spec = AggregateSpec.fit(fitted_on, schema, train, max_categories=LIMIT, value_stats=stats)
    table = spec.transform(events, schema, cutoffs)
    if cutoffs is None:  # whole histories: one row per entity, each label row reads its entity's
        at = pd.Index(table.keys[schema.entity].to_numpy()).get_indexer(labels.entity)
    else:
        at = np.full(len(labels), -1)
        at[table.keys.index.to_numpy()] = np.arange(len(table.keys))
    values = np.zeros((len(labels), len(table.names)), dtype=np.float32)
    values[at >= 0] = table.values[at[at >= 0]]
    logs = signed_log(torch.from_numpy(values[train_rows])).double().numpy()
    center, scale = logs.mean(0), logs.std(0)
    scale = np.where(scale > 1e-6 * (1.0 + np.abs(center)), scale, 1.0)
    layout = {
        "spec": spec.to_dict(),
        "names": table.names,
        "center": center.tolist(),
        "scale": scale.tolist(),
    }
    return layout, values
