"""Hand-made aggregate features of each entity, point-in-time correct: the practitioner's baseline
(per-category counts and shares, amount statistics per category, event rate, recency, inter-event
gaps), and embeddings at each label's own cut-off."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from seqenc.data.cut import EXACT, NS, Cut, RowCuts, at_or_before, parse, parse_column
from seqenc.data.events import DEFAULT_SCHEMA, Events, Source, read_events
from seqenc.data.schema import EventSchema
from seqenc.errors import SeqencError

if TYPE_CHECKING:
    from seqenc.inference import Encoder

DAY = 86400.0
QUANTILES = (0.25, 0.5, 0.75)
VALUE_STATS = ("mean", "min", "max", "last")  # what value_stats may ask for


# ---------------------------------------------------------------------------------------------
# Aggregate features


def check_id_kinds(labels: pd.DataFrame, other: pd.DataFrame, entity: str, what: str) -> None:
    """Labels and a feature set are joined on ``entity``: integer ids never match text ids."""
    kinds = [
        "integers" if pd.api.types.is_numeric_dtype(f[entity]) else "text" for f in (labels, other)
    ]
    if kinds[0] != kinds[1]:
        raise SeqencError(
            f"the labels' {entity!r} ids are {kinds[0]} ({labels[entity].dtype}) but the {what} "
            f"ids are {kinds[1]} ({other[entity].dtype}): write both with the same id type"
        )


def _cutoffs(
    df: pd.DataFrame, entity: str, as_of: object, as_of_column: str
) -> tuple[pd.DataFrame, list[str], Cut | RowCuts | None]:
    """One row per requested output row: ``_row``, the entity, ``_ref`` (epoch seconds); the
    output keys, and the cut-off(s) parsed once (:mod:`seqenc.data.cut`)."""
    if isinstance(as_of, pd.DataFrame):
        for column in (entity, as_of_column):
            if column not in as_of.columns:
                raise SeqencError(
                    f"as_of table has no column {column!r} (columns: {list(as_of.columns)})"
                )
        check_id_kinds(as_of, df, entity, "events'")
        cut = parse_column(as_of[as_of_column], as_of_column)
        keys = pd.DataFrame({entity: as_of[entity].to_numpy(), "_ref": cut.seconds})
        out_keys = [entity, as_of_column]
    else:
        cut = parse(as_of)
        ref = df["_t"].max() if cut is None else cut.seconds
        keys = pd.DataFrame({entity: pd.unique(df[entity]), "_ref": ref})
        out_keys = [entity]
    keys["_row"] = np.arange(len(keys))
    return keys, out_keys, cut


def _top_values(values: pd.Series, max_categories: int) -> pd.Series:
    """Values as text; all but the ``max_categories`` most frequent become ``<other>``."""
    text = values.astype("string").fillna("<null>")
    counts = text.value_counts(sort=False).sort_index(kind="stable")
    top = counts.sort_values(ascending=False, kind="stable").index[:max_categories]
    return text.where(text.isin(top), "<other>")


def _numeric_stats(ev: pd.DataFrame, column: str, by: list[str]) -> pd.DataFrame:
    """Sum, mean, std, quartiles of ``column`` per group ``by`` (std of one value = 0)."""
    g = ev.groupby(by, sort=True)[column]
    stats = g.agg(["sum", "mean", "std"])
    stats["std"] = stats["std"].fillna(0.0)
    q = g.quantile(list(QUANTILES)).unstack(-1)
    q.columns = [f"q{int(p * 100)}" for p in QUANTILES]
    return stats.join(q)


def _gap_stats(ev: pd.DataFrame, prefix: str) -> pd.DataFrame:
    """Mean, std, median, max of the days between consecutive times ``_t`` of each ``_row``
    (``ev`` sorted by row then time)."""
    rows = ev["_row"].to_numpy()
    same = rows[1:] == rows[:-1]
    gaps = np.where(same, np.diff(ev["_t"].to_numpy()) / DAY, np.nan)
    frame = pd.DataFrame({"_row": rows, "_gap": np.concatenate([[np.nan], gaps])})
    gap = frame.groupby("_row", sort=True)["_gap"].agg(["mean", "std", "median", "max"])
    return gap.rename(columns=lambda s: f"{prefix}_{s}")


def _time_features(ev: pd.DataFrame, g, n: pd.Series) -> pd.DataFrame:
    """Tenure, recency, rate, gaps between events, and the same for *sessions*: the events of an
    entity that share one timestamp (a basket on a day-resolution log, a burst on a finer one)."""
    ref, first, last = g["_ref"].first(), g["_t"].min(), g["_t"].max()
    tenure = (ref - first) / DAY
    sessions = ev.drop_duplicates(["_row", "_t"])
    per_session = ev.groupby(["_row", "_t"], sort=True).size().groupby(level=0)
    size = per_session.agg(["size", "mean", "max"])
    n_sessions = size["size"].astype(float)
    out = pd.DataFrame(
        {
            "tenure_days": tenure,
            "recency_days": (ref - last) / DAY,
            "events_per_day": n / tenure.clip(lower=1.0),
            "n_sessions": n_sessions,
            "sessions_per_day": n_sessions / tenure.clip(lower=1.0),
            "session_size_mean": size["mean"].astype(float),
            "session_size_max": size["max"].astype(float),
        }
    )
    return out.join(_gap_stats(ev, "gap_days")).join(_gap_stats(sessions, "session_gap_days"))


def _value_features(
    ev: pd.DataFrame,
    column: str,
    schema: EventSchema,
    n: pd.Series,
    max_categories: int,
    value_stats: Sequence[str],
) -> list[pd.DataFrame]:
    """Per value of ``column`` (its most frequent ``max_categories``, the rest as ``<other>``):
    count, share of the entity's events and, per numeric column, share of the entity's total
    (e.g. spend share) and the ``value_stats`` of the numbers at that value; plus the number of
    distinct raw values."""
    values = _top_values(ev[column], max_categories)
    keyed = pd.DataFrame({"_row": ev["_row"].to_numpy(), "_v": values.to_numpy()})
    counts = keyed.groupby(["_row", "_v"], sort=True).size().unstack(fill_value=0).astype(float)
    distinct = ev.groupby("_row", sort=True)[column].nunique().astype(float)
    blocks = [
        distinct.rename(f"distinct[{column}]").to_frame(),
        counts.rename(columns=lambda v: f"count[{column}={v}]"),
        counts.div(n, axis=0).rename(columns=lambda v: f"share[{column}={v}]"),
    ]
    for num in schema.numeric:
        keyed[num] = ev[num].to_numpy(dtype=float)
        sums = keyed.groupby(["_row", "_v"], sort=True)[num].sum().unstack(fill_value=0.0)
        total = sums.abs().sum(axis=1).replace(0.0, 1.0)
        share = sums.div(total, axis=0)
        blocks.append(share.rename(columns=lambda v, m=num: f"{m}_share[{column}={v}]"))
        grouped = keyed.groupby(["_row", "_v"], sort=True)[num]
        for stat in value_stats:
            table = grouped.agg(stat).unstack()
            table = table.reindex(n.index).fillna(table.mean())  # never seen: the mean of others
            blocks.append(table.rename(columns=lambda v, m=num, s=stat: f"{m}_{s}[{column}={v}]"))
    return blocks


def _limit(max_categories: int | dict[str, int], column: str) -> int:
    """How many values of ``column`` get their own features (20 for a column a mapping omits)."""
    return max_categories.get(column, 20) if isinstance(max_categories, dict) else max_categories


def _events_at_cutoffs(
    events: Source, schema: EventSchema, as_of: object, as_of_column: str
) -> tuple[pd.DataFrame, pd.DataFrame, list[str]]:
    """``(events, keys, output keys)``: every event joined to each cut-off row (``_row``) of its
    entity that it is at or before (``_ref``), in (row, time, input order)."""
    if as_of is not None and schema.timestamp is None:
        raise SeqencError("as_of needs a timestamp column, but the schema has timestamp=None")
    df = read_events(events, schema, exact=as_of is not None).to_pandas()
    df["_t"] = df[schema.timestamp] if schema.timestamp else 0.0
    df["_seq"] = np.arange(len(df))
    keys, out_keys, cut = _cutoffs(df, schema.entity, as_of, as_of_column)
    ev = df.merge(keys, on=schema.entity, how="inner")
    if cut is not None:
        times = (ev[EXACT].to_numpy(), NS) if EXACT in ev else (ev["_t"].to_numpy(), None)
        row_cut = cut if isinstance(cut, Cut) else cut.take(ev["_row"].to_numpy())
        ev = ev[at_or_before(times, row_cut)]
        if ev.empty:
            raise SeqencError("no entity has an event at or before its as_of: no aggregate")
    ev = ev.sort_values(["_row", "_t", "_seq"], kind="stable")
    return ev, keys, out_keys


def aggregate_features(
    events: Source,
    schema: EventSchema = DEFAULT_SCHEMA,
    as_of: object = None,
    *,
    as_of_column: str = "as_of",
    max_categories: int | dict[str, int] = 20,
    value_stats: Sequence[str] = (),
) -> pd.DataFrame:
    """Hand-made per-entity features from the same events the encoder reads: what a practitioner
    writes before reaching for a sequence model (RFM, basket and gap statistics, category mix and
    spend mix). Columnar (pandas group-bys), no Python loop over rows.

    Args:
        events: anything :func:`~seqenc.read_events` reads, with ``schema``'s columns.
        schema: the event-log columns; the item and every categorical column are counted per value,
            numeric columns are summarised overall and as shares per value.
        as_of: ``None`` (every event; recency measured from the log's last event), one point in
            time (events at or before it; recency from it), or a DataFrame with the entity column
            and ``as_of_column``: one output row per row of it, each with its own cut-off.
        max_categories: how many of the most frequent values of the item and of each categorical
            column get their own features (the rest are pooled as ``<other>``); one number for
            every column or ``{column: number}`` (columns not named get 20).
        value_stats: per such value, these statistics (:data:`VALUE_STATS`) of each numeric
            column over the events with that value: a measurement log's per-parameter summary; an
            entity without the value gets the mean of those with it (its count says none).

    Returns:
        One row per entity (or per ``as_of`` row) with at least one event at or before its cut-off;
        key columns first (the entity, and ``as_of_column`` for a table), then float64 features:
        ``n_events``; with times ``tenure_days`` (cut-off − first event), ``recency_days``
        (cut-off − last event), ``events_per_day`` (``n_events / max(tenure_days, 1)``),
        ``gap_days_{mean,std,median,max}`` between consecutive events, and for sessions (events
        sharing a timestamp: a basket) ``n_sessions``, ``sessions_per_day``,
        ``session_size_{mean,max}``, ``session_gap_days_{mean,std,median,max}``; per item and
        categorical column ``distinct[col]`` and per value ``count[col=value]``,
        ``share[col=value]`` and per numeric column ``{num}_share[col=value]`` (the value's part of
        the entity's total of ``|num|``) and ``{num}_{stat}[col=value]`` per stat of
        ``value_stats``; per numeric column ``{num}_{sum,mean,std,q25,q50,q75}``.
    """
    unknown = [s for s in value_stats if s not in VALUE_STATS]
    if unknown:
        raise SeqencError(f"value_stats {unknown} unknown; known: {list(VALUE_STATS)}")
    ev, keys, out_keys = _events_at_cutoffs(events, schema, as_of, as_of_column)
    g = ev.groupby("_row", sort=True)
    n = g.size().astype(float)
    blocks = [pd.DataFrame({"n_events": n})]
    if schema.timestamp:
        blocks.append(_time_features(ev, g, n))
    for column in [schema.item, *schema.categorical]:
        blocks += _value_features(
            ev, column, schema, n, _limit(max_categories, column), value_stats
        )
    for column in schema.numeric:
        ev[column] = ev[column].astype(float)
        overall = _numeric_stats(ev, column, ["_row"])
        blocks.append(overall.rename(columns=lambda s, c=column: f"{c}_{s}"))
    features = pd.concat(blocks, axis=1).fillna(0.0).astype(float)
    cutoffs = as_of if len(out_keys) == 2 else None
    return _with_keys(features, keys, schema.entity, cutoffs, as_of_column)


def _with_keys(
    features: pd.DataFrame,
    keys: pd.DataFrame,
    entity: str,
    cutoffs: pd.DataFrame | None,
    as_of_column: str,
) -> pd.DataFrame:
    """``features`` (indexed by cut-off row) behind their key columns: the entity, and with a
    table of ``cutoffs`` its ``as_of_column``."""
    rows = keys.set_index("_row").loc[features.index]
    head = pd.DataFrame({entity: rows[entity].to_numpy()})
    if cutoffs is not None:
        head[as_of_column] = cutoffs[as_of_column].to_numpy()[features.index.to_numpy()]
    return pd.concat([head, features.reset_index(drop=True)], axis=1)


# ---------------------------------------------------------------------------------------------
# Embeddings at each label's cut-off


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
    ``prediction``); rows without an event at or before their cut-off are left out.
    """
    schema = encoder.meta.schema
    entity = entity or schema.entity
    for column in (entity, as_of_column):
        if column not in cutoffs.columns:
            raise SeqencError(
                f"cutoffs have no column {column!r} (columns: {list(cutoffs.columns)})"
            )
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
    head's classes, or ``[n]`` numbers."""
    head = encoder.model.head
    if head is None:
        raise SeqencError(f"bundle {encoder.meta.name!r} has no label head (not fine-tuned)")
    column = "prediction" if head.task == "regression" else "probabilities"
    table = embed_at(
        encoder, events, cutoffs, entity=entity, as_of_column=as_of_column,
        batch_size=batch_size, columns=(column,),
    )  # fmt: skip
    values = table.pop(column).to_numpy()
    return table, np.stack(values) if column == "probabilities" else values.astype(np.float32)
