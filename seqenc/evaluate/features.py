"""Hand-made aggregate features of each entity, point-in-time correct: the practitioner's baseline
(per-category counts and shares, amount statistics per category, event rate, recency, inter-event
gaps), and embeddings at each label's own cut-off."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from seqenc.data.events import DEFAULT_SCHEMA, Source, epoch_seconds, read_events
from seqenc.data.schema import EventSchema
from seqenc.errors import SeqencError

if TYPE_CHECKING:
    from seqenc.inference import Encoder

DAY = 86400.0
QUANTILES = (0.25, 0.5, 0.75)


# ---------------------------------------------------------------------------------------------
# Aggregate features


def _cutoffs(
    df: pd.DataFrame, entity: str, as_of: object, as_of_column: str
) -> tuple[pd.DataFrame, list[str]]:
    """One row per requested output row: ``_row``, the entity, ``_ref`` (epoch seconds)."""
    if isinstance(as_of, pd.DataFrame):
        for column in (entity, as_of_column):
            if column not in as_of.columns:
                raise SeqencError(
                    f"as_of table has no column {column!r} (columns: {list(as_of.columns)})"
                )
        ref = _epoch_column(as_of[as_of_column], as_of_column)
        keys = pd.DataFrame({entity: as_of[entity].to_numpy(), "_ref": ref})
        out_keys = [entity, as_of_column]
    else:
        ref = df["_t"].max() if as_of is None else epoch_seconds(as_of)
        keys = pd.DataFrame({entity: pd.unique(df[entity]), "_ref": ref})
        out_keys = [entity]
    keys["_row"] = np.arange(len(keys))
    return keys, out_keys


def _epoch_column(values: pd.Series, name: str) -> np.ndarray:
    """A column of points in time → float epoch seconds (naive values are UTC)."""
    if pd.api.types.is_numeric_dtype(values):
        out = values.to_numpy(dtype=float)
    else:
        ts = pd.to_datetime(values, utc=True, errors="coerce")
        out = (ts - pd.Timestamp(0, tz="UTC")).dt.total_seconds().to_numpy()
    bad = ~np.isfinite(out)
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        raise SeqencError(f"column {name!r} row {row}: not a point in time: {values.iloc[row]!r}")
    return out


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


def aggregate_features(
    events: Source,
    schema: EventSchema = DEFAULT_SCHEMA,
    as_of: object = None,
    *,
    as_of_column: str = "as_of",
    max_categories: int = 20,
) -> pd.DataFrame:
    """Hand-made per-entity features from the same events the encoder reads.

    Args:
        events: anything :func:`~seqenc.read_events` reads, with ``schema``'s columns.
        schema: the event-log columns; the item and every categorical column are counted per value,
            numeric columns are summarised overall and per item.
        as_of: ``None`` (every event; recency measured from the log's last event), one point in
            time (events at or before it; recency from it), or a DataFrame with the entity column
            and ``as_of_column``: one output row per row of it, each with its own cut-off.
        max_categories: the most frequent values of each categorical column get their own
            features; the rest are pooled as ``<other>``.

    Returns:
        One row per entity (or per ``as_of`` row) with at least one event at or before its cut-off;
        key columns first (the entity, and ``as_of_column`` for a table), then float64 features:
        ``n_events``; with times ``tenure_days`` (cut-off − first event), ``recency_days``
        (cut-off − last event), ``events_per_day`` (``n_events / max(tenure_days, 1)``),
        ``gap_days_{mean,std,median,max}`` between consecutive events; per value of the item and
        categorical columns ``count[col=value]`` and ``share[col=value]``; per numeric column
        ``{col}_{sum,mean,std,q25,q50,q75}`` overall and ``...[item=value]`` per item (0 where the
        entity has no such event). Columnar (pandas group-bys), no Python loop over rows.
    """
    if as_of is not None and schema.timestamp is None:
        raise SeqencError("as_of needs a timestamp column, but the schema has timestamp=None")
    df = read_events(events, schema).to_pandas()
    entity = schema.entity
    df["_t"] = df[schema.timestamp] if schema.timestamp else 0.0
    df["_seq"] = np.arange(len(df))
    keys, out_keys = _cutoffs(df, entity, as_of, as_of_column)
    ev = df.merge(keys, on=entity, how="inner")
    ev = ev[ev["_t"] <= ev["_ref"]].sort_values(["_row", "_t", "_seq"], kind="stable")
    g = ev.groupby("_row", sort=True)
    n = g.size().astype(float)
    feats: dict[str, pd.Series] = {"n_events": n}
    if schema.timestamp:
        ref, first, last = g["_ref"].first(), g["_t"].min(), g["_t"].max()
        tenure = (ref - first) / DAY
        feats |= {
            "tenure_days": tenure,
            "recency_days": (ref - last) / DAY,
            "events_per_day": n / tenure.clip(lower=1.0),
        }
        same = ev["_row"].to_numpy()[1:] == ev["_row"].to_numpy()[:-1]
        gaps = np.where(same, np.diff(ev["_t"].to_numpy()) / DAY, np.nan)
        ev["_gap"] = np.concatenate([[np.nan], gaps])
        gap = ev.groupby("_row", sort=True)["_gap"].agg(["mean", "std", "median", "max"])
        feats |= {f"gap_days_{s}": gap[s] for s in gap.columns}
    out = pd.DataFrame(feats)
    blocks = [out]
    for column in [schema.item, *schema.categorical]:
        ev[f"_v_{column}"] = _top_values(ev[column], max_categories)
        counts = ev.groupby(["_row", f"_v_{column}"], sort=True).size().unstack(fill_value=0)
        blocks.append(counts.rename(columns=lambda v, c=column: f"count[{c}={v}]").astype(float))
        shares = counts.div(n, axis=0)
        blocks.append(shares.rename(columns=lambda v, c=column: f"share[{c}={v}]"))
    item = f"_v_{schema.item}"
    for column in schema.numeric:
        ev[column] = ev[column].astype(float)
        overall = _numeric_stats(ev, column, ["_row"])
        blocks.append(overall.rename(columns=lambda s, c=column: f"{c}_{s}"))
        per = _numeric_stats(ev, column, ["_row", item]).unstack(item)
        per.columns = [f"{column}_{s}[{schema.item}={v}]" for s, v in per.columns]
        blocks.append(per)
    features = pd.concat(blocks, axis=1).fillna(0.0).astype(float)
    rows = keys.set_index("_row").loc[features.index]
    head = pd.DataFrame({entity: rows[entity].to_numpy()})
    if len(out_keys) == 2:
        head[as_of_column] = as_of[as_of_column].to_numpy()[features.index.to_numpy()]
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
) -> pd.DataFrame:
    """Embed every row of ``cutoffs`` (entity, ``as_of_column``) from its events at or before its
    own cut-off: one :meth:`Encoder.encode` call per distinct cut-off, on that cut-off's entities.

    Returns the key columns (the entity under the name used in ``cutoffs``, and ``as_of_column``)
    and ``embedding``; rows without an event at or before their cut-off are left out.
    """
    schema = encoder.meta.schema
    entity = entity or schema.entity
    for column in (entity, as_of_column):
        if column not in cutoffs.columns:
            raise SeqencError(
                f"cutoffs have no column {column!r} (columns: {list(cutoffs.columns)})"
            )
    table = read_events(events, schema)
    ids = table[schema.entity].to_pandas()
    parts = []
    for when, group in cutoffs.groupby(as_of_column, sort=True):
        mine = table.filter(ids.isin(group[entity]).to_numpy())
        if mine.num_rows == 0:
            continue
        df = encoder.encode(mine, as_of=when, batch_size=batch_size, on_empty="skip")
        df = df.rename(columns={"entity_id": entity})[[entity, "embedding"]]
        parts.append(group[[entity, as_of_column]].merge(df, on=entity, how="inner"))
    if not parts:
        raise SeqencError("no row of cutoffs has an event at or before its as_of")
    return pd.concat(parts, ignore_index=True)
