"""Hand-made aggregate features of each entity, point-in-time correct: the practitioner's baseline
(per-value counts and shares, numeric statistics per value, event rate, recency, gaps between
events and sessions), one implementation for the probe, a fine-tuning fit's printed baseline and a
model that reads them beside its encoder.

:class:`AggregateSpec` is the fitted layout: which values of the item and of each categorical
column get their own columns (the most frequent, up to a limit; every other value, and a value
first met after the fit, is pooled as ``<other>``), which numeric columns are summarised and how.
It is frozen plain data (:meth:`~AggregateSpec.to_dict` / :meth:`~AggregateSpec.from_dict`), so a
model stores it and computes the very same columns at fit time and at encode time
(:meth:`~AggregateSpec.transform`). :func:`aggregate_features` is the one-call form: fit on the
events at the cut-offs, then transform them, as a DataFrame. A value an entity never had is 0 in
every column of it, its count saying it was absent (:class:`AggregateSpec`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
import pandas as pd

from seqenc.data.cut import EXACT, NS, Cut, RowCuts, at_or_before, parse, parse_column
from seqenc.data.events import DEFAULT_SCHEMA, Source, read_events
from seqenc.data.schema import EventSchema
from seqenc.data.time_aggregates import time_features
from seqenc.errors import SeqencError

QUANTILES = (0.25, 0.5, 0.75)
VALUE_STATS = ("mean", "min", "max", "last")  # what value_stats may ask for
OTHER = "<other>"  # the pooled column: values beyond the limit, and values unseen at fit
NULL = "<null>"  # a missing item or category is a value of its own
DEFAULT_LIMIT = 20  # values with their own columns, per column a mapping does not name


class RowCutoffs(NamedTuple):
    """Cut-off rows already parsed (a label table's, :class:`~seqenc.data.labels.Labels`): each
    row's ``entity`` and its cut-off in ``cut``."""

    entity: np.ndarray
    cut: RowCuts

    def take(self, rows: np.ndarray) -> RowCutoffs:
        """The cut-off rows at positions ``rows``."""
        return RowCutoffs(self.entity[rows], self.cut.take(rows))


# None, one point in time, a table of (entity, as_of) rows, or such rows already parsed.
Cutoffs = pd.DataFrame | RowCutoffs | object


class AggregateTable(NamedTuple):
    """:meth:`AggregateSpec.transform`'s result. ``keys``: one row per cut-off row with an event at
    or before its cut-off, indexed by that row's position in the cut-off table (or among the
    entities, in order of first appearance, without one): the entity and, for a table, its
    ``as_of`` column. ``values``: ``[len(keys), len(names)]`` float32. ``names``: the columns."""

    keys: pd.DataFrame
    values: np.ndarray
    names: list[str]


def check_value_stats(value_stats: Sequence[str]) -> None:
    """Each of ``value_stats`` must be one of :data:`VALUE_STATS`."""
    unknown = [s for s in value_stats if s not in VALUE_STATS]
    if unknown:
        raise SeqencError(f"value_stats {unknown} unknown; known: {list(VALUE_STATS)}")


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


@dataclass(frozen=True)
class AggregateSpec:
    """The fitted layout of the aggregate columns (plain data; see the module's docstring).

    Attributes:
        values: per item / categorical column (in the schema's order), the values (as text) that
            get their own columns; the rest share ``<other>``.
        numeric: the numeric columns summarised overall and per value.
        value_stats: the per-value statistics of each numeric column (:data:`VALUE_STATS`).
        time: whether the log has times (tenure, recency, rates, gaps).

    **A value an entity never had** (no event of it at or before the cut-off): its ``count`` and
    ``share`` are 0, and so are its numeric statistics (``{num}_{stat}[col=value]``) and its
    numeric share: the count says the value was absent, the statistics carry no made-up number.
    Statistics of one event: ``std`` 0. **A number not recorded** (NaN) is left out of every
    statistic; one of no recorded number is 0 as well. ``recorded``: the numeric columns with a
    number not recorded at fit, each with ``{num}_recorded``, the share of events that have it.
    """

    values: tuple[tuple[str, tuple[str, ...]], ...]
    numeric: tuple[str, ...]
    value_stats: tuple[str, ...] = ()
    time: bool = True
    recorded: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        check_value_stats(self.value_stats)

    @classmethod
    def fit(
        cls,
        events: Source,
        schema: EventSchema = DEFAULT_SCHEMA,
        cutoffs: Cutoffs = None,
        *,
        as_of_column: str = "as_of",
        max_categories: int | Mapping[str, int] = DEFAULT_LIMIT,
        value_stats: Sequence[str] = (),
    ) -> AggregateSpec:
        """The layout of ``events`` read at ``cutoffs`` (:meth:`transform`'s): per item and
        categorical column its ``max_categories`` most frequent values (one number, or
        ``{column: number}`` with :data:`DEFAULT_LIMIT` for the others; ties by text order)."""
        ev, _ = events_at_cutoffs(events, schema, cutoffs, as_of_column)
        return cls.from_events(ev, schema, max_categories, value_stats)

    @classmethod
    def from_events(
        cls,
        ev: pd.DataFrame,
        schema: EventSchema,
        max_categories: int | Mapping[str, int] = DEFAULT_LIMIT,
        value_stats: Sequence[str] = (),
    ) -> AggregateSpec:
        """:meth:`fit` on events already read at their cut-offs (:func:`events_at_cutoffs`)."""
        values = tuple(
            (column, _top_values(ev[column], _limit(max_categories, column)))
            for column in [schema.item, *schema.categorical]
        )
        time = schema.timestamp is not None
        recorded = tuple(c for c in schema.numeric if ev[c].isna().any())  # some not recorded
        return cls(values, tuple(schema.numeric), tuple(value_stats), time, recorded)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON data (:meth:`from_dict` reads it back)."""
        return {
            "values": [[column, list(kept)] for column, kept in self.values],
            "numeric": list(self.numeric),
            "value_stats": list(self.value_stats),
            "time": self.time,
            "recorded": list(self.recorded),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> AggregateSpec:
        """The spec :meth:`to_dict` wrote; a malformed one is refused in one line."""
        try:
            values = tuple((str(c), tuple(str(v) for v in kept)) for c, kept in data["values"])
            numeric = tuple(str(c) for c in data["numeric"])
            stats = tuple(str(s) for s in data["value_stats"])
            recorded = tuple(str(c) for c in data.get("recorded", ()))  # not in older layouts
            return cls(values, numeric, stats, bool(data["time"]), recorded)
        except (KeyError, TypeError, ValueError) as e:
            raise SeqencError(f"aggregate spec is malformed ({type(e).__name__}: {e})") from e

    @property
    def columns(self) -> list[str]:
        """The item and categorical columns counted per value."""
        return [column for column, _ in self.values]

    def transform(
        self,
        events: Source,
        schema: EventSchema = DEFAULT_SCHEMA,
        cutoffs: Cutoffs = None,
        *,
        as_of_column: str = "as_of",
    ) -> AggregateTable:
        """The aggregates of every cut-off row from its entity's events at or before its cut-off.

        ``cutoffs``: ``None`` (every event; tenure and recency from each entity's own newest
        event, :func:`~seqenc.data.cut.reference_seconds`), one point in time
        (every entity at it), or a DataFrame with the entity column and ``as_of_column`` (or
        :class:`RowCutoffs`), one output row per row of it that has an event at or before its
        cut-off. The cut is :func:`seqenc.data.cut.at_or_before`'s; no event at or before any
        cut-off is refused in one line.
        """
        ev, keys = events_at_cutoffs(events, schema, cutoffs, as_of_column)
        features = self.frame(ev, schema)
        return AggregateTable(
            keys.loc[features.index],
            features.to_numpy(dtype=np.float32),
            list(features.columns),
        )

    def frame(self, ev: pd.DataFrame, schema: EventSchema) -> pd.DataFrame:
        """float64 features indexed by cut-off row, from :func:`events_at_cutoffs`' events."""
        self._check_schema(schema)
        g = ev.groupby("_row", sort=True)
        n = g.size().astype(float)
        blocks = [pd.DataFrame({"n_events": n})]
        if self.time:
            blocks.append(time_features(ev, g, n))
        for column, kept in self.values:
            blocks += _value_features(ev, column, kept, self.numeric, n, self.value_stats)
        for column in self.numeric:
            overall = _numeric_stats(ev, column, column in self.recorded)
            blocks.append(overall.rename(columns=lambda s, c=column: f"{c}_{s}"))
        return pd.concat(blocks, axis=1).fillna(0.0).astype(float)

    def _check_schema(self, schema: EventSchema) -> None:
        """The log must have the columns the spec was fitted on."""
        given = ([schema.item, *schema.categorical], list(schema.numeric), bool(schema.timestamp))
        if given != (self.columns, list(self.numeric), self.time):
            raise SeqencError(
                f"aggregate spec was fitted on columns {self.columns} and numeric "
                f"{list(self.numeric)} (times: {self.time}), but this log has {given[0]} and "
                f"{given[1]} (times: {given[2]})"
            )


def events_at_cutoffs(
    events: Source, schema: EventSchema, cutoffs: Cutoffs, as_of_column: str
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``(events, keys)``: every event joined to each cut-off row (``_row``) of its entity that it
    is at or before (:func:`~seqenc.data.cut.at_or_before`, on the events' ticks when they are
    instants; ``_ref``: the row's cut-off in epoch seconds), in (row, time, input order); and the
    key columns of every cut-off row, indexed by ``_row``."""
    if cutoffs is not None and schema.timestamp is None:
        raise SeqencError("as_of needs a timestamp column, but the schema has timestamp=None")
    df = read_events(events, schema, exact=True).to_pandas()
    df["_t"] = df[schema.timestamp] if schema.timestamp else 0.0
    df["_seq"] = np.arange(len(df))
    rows, keys, cut = _cutoff_rows(df, schema.entity, cutoffs, as_of_column)
    ev = df.merge(rows, on=schema.entity, how="inner")
    if cut is not None:
        times = (ev[EXACT].to_numpy(), NS) if EXACT in ev else (ev["_t"].to_numpy(), None)
        row_cut = cut if isinstance(cut, Cut) else cut.take(ev["_row"].to_numpy())
        ev = ev[at_or_before(times, row_cut)]
    if ev.empty:
        where = f"as_of={cut.value!r}" if isinstance(cut, Cut) else f"any row's {as_of_column!r}"
        raise SeqencError(f"no event at or before {where}: no aggregate to compute")
    order = ["_row", EXACT if EXACT in ev else "_t", "_seq"]  # to the tick
    return ev.sort_values(order, kind="stable"), keys


def _cutoff_rows(
    df: pd.DataFrame, entity: str, cutoffs: Cutoffs, as_of_column: str
) -> tuple[pd.DataFrame, pd.DataFrame, Cut | RowCuts | None]:
    """``(rows, keys, cut)``: one row per requested output row (``_row``, the entity, ``_ref``: its
    cut-off in epoch seconds), the key columns of each (the entity, and a table's
    ``as_of_column``) indexed by ``_row``, and the cut-off(s) parsed (:mod:`seqenc.data.cut`)."""
    if isinstance(cutoffs, RowCutoffs):
        cut = cutoffs.cut
        keys = pd.DataFrame({entity: cutoffs.entity, as_of_column: cut.as_column()})
    elif isinstance(cutoffs, pd.DataFrame):
        for column in (entity, as_of_column):
            if column not in cutoffs.columns:
                raise SeqencError(
                    f"as_of table has no column {column!r} (columns: {list(cutoffs.columns)})"
                )
        keys = cutoffs[[entity, as_of_column]].reset_index(drop=True)
        cut = parse_column(keys[as_of_column], as_of_column)
    else:
        cut = parse(cutoffs)
        keys = pd.DataFrame({entity: pd.unique(df[entity])})
    check_id_kinds(keys, df, entity, "events'")
    keys.index.name = "_row"
    ref = np.nan if cut is None else cut.seconds  # none given: each row's newest event
    rows = pd.DataFrame({entity: keys[entity].to_numpy(), "_ref": ref, "_row": keys.index})
    return rows, keys, cut


def _as_text(values: pd.Series) -> pd.Series:
    return values.astype("string").fillna(NULL)


def _top_values(values: pd.Series, limit: int) -> tuple[str, ...]:
    """The ``limit`` most frequent values as text (ties by text order), sorted by text."""
    counts = _as_text(values).value_counts(sort=False).sort_index(kind="stable")
    top = counts.sort_values(ascending=False, kind="stable").index[:limit]
    return tuple(sorted(str(v) for v in top))


def _limit(max_categories: int | Mapping[str, int], column: str) -> int:
    """How many values of ``column`` get their own features."""
    if isinstance(max_categories, Mapping):
        return max_categories.get(column, DEFAULT_LIMIT)
    return max_categories


def _numeric_stats(ev: pd.DataFrame, column: str, recorded: bool) -> pd.DataFrame:
    """Sum, mean, std (of one value: 0), with ``recorded`` the share of events that have a number,
    and quartiles of the recorded numbers of ``column`` per cut-off row."""
    g = ev.assign(**{column: ev[column].astype(float)}).groupby("_row", sort=True)[column]
    stats = g.agg(["sum", "mean", "std", *(["count", "size"] if recorded else [])])
    stats["std"] = stats["std"].fillna(0.0)
    if recorded:
        stats["recorded"] = stats.pop("count") / stats.pop("size")
    q = g.quantile(list(QUANTILES)).unstack(-1)
    q.columns = [f"q{int(p * 100)}" for p in QUANTILES]
    return stats.join(q)


def _value_features(
    ev: pd.DataFrame,
    column: str,
    kept: tuple[str, ...],
    numeric: Sequence[str],
    n: pd.Series,
    value_stats: Sequence[str],
) -> list[pd.DataFrame]:
    """Per value of ``column`` (each of ``kept``, the rest as ``<other>``): count, share of the
    entity's events and, per numeric column, share of the entity's total of ``|num|`` (e.g. spend
    share) and the ``value_stats`` of the numbers at that value (0 where the entity has none of
    it); plus the number of distinct raw values."""
    layout = sorted({*kept, OTHER})
    text = _as_text(ev[column])
    values = text.where(text.isin(kept), OTHER).to_numpy()
    keyed = pd.DataFrame({"_row": ev["_row"].to_numpy(), "_v": values})
    grouped = keyed.groupby(["_row", "_v"], sort=True)
    counts = _spread(grouped.size(), n.index, layout)
    blocks = [
        ev.groupby("_row", sort=True)[column].nunique().astype(float).rename(f"distinct[{column}]"),
        counts.rename(columns=lambda v: f"count[{column}={v}]"),
        counts.div(n, axis=0).rename(columns=lambda v: f"share[{column}={v}]"),
    ]
    for num in numeric:
        keyed[num] = ev[num].to_numpy(dtype=float)
        grouped = keyed.groupby(["_row", "_v"], sort=True)[num]
        sums = _spread(grouped.sum(), n.index, layout)
        share = sums.div(sums.abs().sum(axis=1).replace(0.0, 1.0), axis=0)
        blocks.append(share.rename(columns=lambda v, m=num: f"{m}_share[{column}={v}]"))
        for stat in value_stats:
            table = _spread(grouped.agg(stat), n.index, layout)
            names = {v: value_stat_name(num, stat, column, v) for v in layout}
            blocks.append(table.rename(columns=names))
    return blocks


def value_stat_name(num: str, stat: str, column: str, value: str) -> str:
    """The name of the column holding the ``stat`` of ``num`` at ``column``'s ``value``."""
    return f"{num}_{stat}[{column}={value}]"


def is_value_stat(name: str, numeric: Sequence[str], value_stats: Sequence[str]) -> bool:
    """Whether column ``name`` is one of the per-value statistics (:func:`value_stat_name`) of
    ``numeric`` columns."""
    return any(name.startswith(f"{num}_{stat}[") for num in numeric for stat in value_stats)


def _spread(per_value: pd.Series, rows: pd.Index, layout: list[str]) -> pd.DataFrame:
    """A ``(_row, _v)`` series as one row per cut-off row and one column per value of
    ``layout``, 0 where the row has no event of the value."""
    table = per_value.astype(float).unstack(fill_value=0.0)
    return table.reindex(index=rows, columns=layout, fill_value=0.0)


def aggregate_features(
    events: Source,
    schema: EventSchema = DEFAULT_SCHEMA,
    as_of: Cutoffs = None,
    *,
    as_of_column: str = "as_of",
    max_categories: int | Mapping[str, int] = DEFAULT_LIMIT,
    value_stats: Sequence[str] = (),
) -> pd.DataFrame:
    """The aggregates of ``events`` at ``as_of`` (:meth:`AggregateSpec.transform`'s cut-offs) by
    a spec fitted on the same events (:meth:`AggregateSpec.fit`), as a DataFrame: key columns
    first (the entity, and ``as_of_column`` for a table), then float64 features: ``n_events``;
    with times ``tenure_days`` (cut-off − first event), ``recency_days`` (cut-off − last event;
    without a cut-off, each entity's own newest event is its cut-off, so recency is 0),
    ``events_per_day`` (``n_events / max(tenure_days, 1)``), ``gap_days_{mean,std,median,max}``
    between consecutive events, and for sessions (events sharing a timestamp: a basket)
    ``n_sessions``, ``sessions_per_day``, ``session_size_{mean,max}``,
    ``session_gap_days_{mean,std,median,max}``; per item and categorical column
    ``distinct[col]`` and per value ``count[col=value]``, ``share[col=value]``, per numeric column
    ``{num}_share[col=value]`` and ``{num}_{stat}[col=value]`` per stat of ``value_stats``
    (:data:`VALUE_STATS`); per numeric column ``{num}_{sum,mean,std,q25,q50,q75}`` of its recorded
    numbers, and ``{num}_recorded`` where some are not recorded (NaN).
    """
    check_value_stats(value_stats)  # before the events are read
    ev, keys = events_at_cutoffs(events, schema, as_of, as_of_column)
    spec = AggregateSpec.from_events(ev, schema, max_categories, value_stats)
    features = spec.frame(ev, schema)
    head = keys.loc[features.index].reset_index(drop=True)
    return pd.concat([head, features.reset_index(drop=True)], axis=1)
