"""Downstream evaluation: do the embeddings add to the aggregate features a practitioner has?

:func:`probe` fits a linear model (logistic / multinomial logistic regression for classes, ridge for
numbers) on a feature table with k-fold cross-validation and reports ROC-AUC / accuracy or R² with
their spread over folds. :func:`aggregate_features` computes the hand-made baseline from the same
events (per-category counts and shares, amount statistics per category, event rate, recency,
inter-event gaps), point-in-time correct like :func:`~seqenc.inference.encode`, and
:func:`embed_at` embeds each labelled entity at its own cut-off. ``seqenc probe`` (:func:`main`) runs
the three comparisons (aggregates, embeddings, both) from Parquet files.

scikit-learn is an optional dependency (``pip install 'seqenc[eval]'``), imported when a probe runs.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

import numpy as np
import pandas as pd

from seqenc.data.events import DEFAULT_SCHEMA, Source, epoch_seconds, read_events
from seqenc.data.schema import EventSchema
from seqenc.errors import SeqencError

if TYPE_CHECKING:
    from seqenc.inference import Encoder

Task = Literal["auto", "binary", "multiclass", "regression"]
DAY = 86400.0
QUANTILES = (0.25, 0.5, 0.75)
# Regularisation grids searched inside each training fold (never on its test fold).
C_GRID = (1e-3, 1e-2, 1e-1, 1.0, 10.0)
ALPHA_GRID = (1e-1, 1.0, 10.0, 100.0, 1000.0)


def _sklearn():
    try:
        import sklearn  # noqa: F401
    except ImportError as e:
        raise SeqencError(
            "seqenc.evaluate.probe needs scikit-learn: pip install 'seqenc[eval]'"
        ) from e
    from sklearn import linear_model, metrics, model_selection, pipeline, preprocessing

    return linear_model, metrics, model_selection, pipeline, preprocessing


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


# ---------------------------------------------------------------------------------------------
# Linear probe


@dataclass
class ProbeResult:
    """Per-fold scores of one probe. ``folds[metric]`` has one value per fold; ``baseline`` holds
    what a constant predictor scores on the same folds (majority class accuracy, AUC 0.5, R² ≤ 0)."""

    task: str
    n_rows: int
    n_features: int
    classes: list = field(default_factory=list)
    folds: dict[str, np.ndarray] = field(default_factory=dict)
    baseline: dict[str, float] = field(default_factory=dict)

    def mean(self, metric: str) -> float:
        return float(np.mean(self.folds[metric]))

    def std(self, metric: str) -> float:
        return float(np.std(self.folds[metric]))

    def summary(self) -> dict[str, float]:
        """``{metric}_mean`` and ``{metric}_std`` over folds, for every metric."""
        out: dict[str, float] = {}
        for metric in self.folds:
            out |= {f"{metric}_mean": self.mean(metric), f"{metric}_std": self.std(metric)}
        return out


def feature_matrix(frame: pd.DataFrame, exclude: Sequence[str] = ()) -> np.ndarray:
    """The numeric columns of ``frame`` (all but ``exclude``) as float64 ``[n, d]``; a column of
    arrays (e.g. ``embedding``) expands into one column per component."""
    blocks = []
    for column in frame.columns:
        if column in exclude:
            continue
        values = frame[column]
        if values.dtype == object or isinstance(values.dtype, pd.ArrowDtype):
            try:
                block = np.stack(values.to_numpy()).astype(float)
            except (TypeError, ValueError) as e:
                raise SeqencError(f"feature column {column!r} is neither numeric nor arrays") from e
            blocks.append(block.reshape(len(frame), -1))
        elif pd.api.types.is_numeric_dtype(values) or pd.api.types.is_bool_dtype(values):
            blocks.append(values.to_numpy(dtype=float)[:, None])
        else:
            raise SeqencError(f"feature column {column!r} has dtype {values.dtype}, not numeric")
    if not blocks:
        raise SeqencError("no feature columns")
    x = np.concatenate(blocks, axis=1)
    bad = ~np.isfinite(x)
    if bad.any():
        row = int(np.flatnonzero(bad.any(axis=1))[0])
        raise SeqencError(f"features are NaN or infinite (first at row {row})")
    return x


def _align(
    features: pd.DataFrame | np.ndarray,
    labels: pd.DataFrame | pd.Series | np.ndarray,
    label_column: str | None,
    on: Sequence[str] | None,
) -> tuple[np.ndarray, np.ndarray]:
    """Features and labels as row-aligned ``X``, ``y``; rows with a null label are dropped."""
    if isinstance(labels, pd.DataFrame):
        if label_column is None or label_column not in labels.columns:
            raise SeqencError(
                f"label_column {label_column!r} is not a column of labels: {list(labels.columns)}"
            )
        labels = labels[labels[label_column].notna()]
        if not isinstance(features, pd.DataFrame):
            raise SeqencError("labels given as a table need features as a table with key columns")
        keys = list(on) if on is not None else [c for c in features.columns if c in labels.columns]
        keys = [k for k in keys if k != label_column]
        missing = [k for k in keys if k not in labels.columns or k not in features.columns]
        if not keys or missing:
            raise SeqencError(
                f"cannot join features and labels on {keys or 'no common column'}: "
                f"features have {list(features.columns)[:8]}, labels {list(labels.columns)}"
            )
        joined = labels[keys + [label_column]].merge(features, on=keys, how="inner")
        if joined.empty:
            raise SeqencError(f"no label row matches a feature row on {keys}")
        return feature_matrix(joined, exclude=[*keys, label_column]), joined[
            label_column
        ].to_numpy()
    x = features if isinstance(features, np.ndarray) else feature_matrix(features)
    y = np.asarray(labels)
    if x.ndim != 2 or len(x) != len(y):
        raise SeqencError(f"features {x.shape} and labels ({len(y)},) do not align")
    keep = ~pd.isna(y)
    return x[keep].astype(float), y[keep]


def _infer_task(y: np.ndarray) -> str:
    if pd.api.types.is_float_dtype(y) and not np.all(np.equal(np.mod(y, 1), 0)):
        return "regression"
    return "binary" if len(pd.unique(y)) == 2 else "multiclass"


def probe(
    features: pd.DataFrame | np.ndarray,
    labels: pd.DataFrame | pd.Series | np.ndarray,
    *,
    label_column: str | None = None,
    on: Sequence[str] | None = None,
    task: Task = "auto",
    n_splits: int = 5,
    seed: int = 0,
) -> ProbeResult:
    """Cross-validated linear probe of ``labels`` from ``features``.

    Args:
        features: ``[n, d]`` array aligned with ``labels``, or a table of key columns and numeric
            or array-valued feature columns (e.g. :func:`encode`'s ``entity_id`` + ``embedding``,
            or :func:`aggregate_features`).
        labels: an array aligned with ``features``, or a table joined to it on ``on`` (default:
            the columns both tables have) with the target in ``label_column``. Rows with a null
            label or no feature row are dropped.
        task: ``"binary"`` / ``"multiclass"`` (logistic regression, multinomial for more than two
            classes; ROC-AUC (one-vs-rest macro for multiclass) and accuracy) or ``"regression"``
            (ridge; R²). ``"auto"``: regression for non-integral floats, else classes.
        n_splits: k of the k-fold cross-validation (stratified for classes, shuffled with ``seed``).

    Standardisation and the regularisation strength (a grid, chosen by an inner 3-fold search on
    the training folds) are fitted on each training fold only.
    """
    linear_model, metrics, model_selection, pipeline, preprocessing = _sklearn()
    x, y = _align(features, labels, label_column, on)
    task = _infer_task(y) if task == "auto" else task
    if task not in ("binary", "multiclass", "regression"):
        raise SeqencError(f"task must be auto, binary, multiclass or regression, got {task!r}")
    classes: list = []
    if task == "regression":
        y = y.astype(float)
        splitter = model_selection.KFold(n_splits, shuffle=True, random_state=seed)
        inner = model_selection.KFold(3, shuffle=True, random_state=seed)
        model = pipeline.make_pipeline(preprocessing.StandardScaler(), linear_model.Ridge())
        grid = {"ridge__alpha": list(ALPHA_GRID)}
        scoring = "r2"
    else:
        codes, uniques = pd.factorize(y, sort=True)
        classes = list(uniques)
        counts = np.bincount(codes)
        if len(classes) < 2:
            raise SeqencError(f"labels have a single class {classes!r}: nothing to probe")
        if counts.min() < n_splits:
            small = classes[int(np.argmin(counts))]
            raise SeqencError(
                f"class {small!r} has {counts.min()} row(s), fewer than n_splits={n_splits}"
            )
        y = codes
        splitter = model_selection.StratifiedKFold(n_splits, shuffle=True, random_state=seed)
        inner = model_selection.StratifiedKFold(3, shuffle=True, random_state=seed)
        model = pipeline.make_pipeline(
            preprocessing.StandardScaler(), linear_model.LogisticRegression(max_iter=2000)
        )
        grid = {"logisticregression__C": list(C_GRID)}
        scoring = "neg_log_loss"
    search = model_selection.GridSearchCV(model, grid, scoring=scoring, cv=inner)
    folds: dict[str, list[float]] = {}
    base: dict[str, list[float]] = {}
    for train, test in splitter.split(x, y):
        search.fit(x[train], y[train])
        for name, value in _scores(metrics, task, search, x[test], y[test]).items():
            folds.setdefault(name, []).append(value)
        for name, value in _baseline(metrics, task, y[train], y[test]).items():
            base.setdefault(name, []).append(value)
    return ProbeResult(
        task=task,
        n_rows=len(y),
        n_features=x.shape[1],
        classes=classes,
        folds={k: np.asarray(v) for k, v in folds.items()},
        baseline={k: float(np.mean(v)) for k, v in base.items()},
    )


def _scores(metrics, task: str, model, x: np.ndarray, y: np.ndarray) -> dict[str, float]:
    if task == "regression":
        return {"r2": float(metrics.r2_score(y, model.predict(x)))}
    proba = model.predict_proba(x)
    if task == "binary":
        auc = metrics.roc_auc_score(y, proba[:, 1])
    else:
        auc = metrics.roc_auc_score(y, proba, multi_class="ovr", labels=model.classes_)
    accuracy = metrics.accuracy_score(y, model.classes_[proba.argmax(axis=1)])
    return {"roc_auc": float(auc), "accuracy": float(accuracy)}


def _baseline(metrics, task: str, train: np.ndarray, test: np.ndarray) -> dict[str, float]:
    """A constant predictor fitted on the training fold."""
    if task == "regression":
        return {"r2": float(metrics.r2_score(test, np.full(len(test), train.mean())))}
    majority = np.bincount(train).argmax()
    return {"roc_auc": 0.5, "accuracy": float(np.mean(test == majority))}


# ---------------------------------------------------------------------------------------------
# Command line: seqenc probe


def compare(
    labels: pd.DataFrame,
    label_column: str,
    feature_sets: dict[str, pd.DataFrame],
    on: Sequence[str],
    *,
    task: Task = "auto",
    n_splits: int = 5,
    seed: int = 0,
) -> pd.DataFrame:
    """:func:`probe` on each named feature table and on every pair joined (``a+b``), on the rows
    all of them cover, so the scores compare like with like. One row per feature set."""
    labelled = labels[labels[label_column].notna()][[*on, label_column]]
    for frame in feature_sets.values():
        labelled = labelled.merge(frame[list(on)], on=list(on), how="inner")
    sets = dict(feature_sets)
    names = list(feature_sets)
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            sets[f"{a}+{b}"] = feature_sets[a].merge(feature_sets[b], on=list(on), how="inner")
    rows = []
    for name, frame in sets.items():
        result = probe(
            frame,
            labelled,
            label_column=label_column,
            on=on,
            task=task,
            n_splits=n_splits,
            seed=seed,
        )
        rows.append(
            {"features": name, "task": result.task, "n_rows": result.n_rows}
            | {"n_features": result.n_features}
            | result.summary()
            | {f"{k}_constant": v for k, v in result.baseline.items()}
        )
    return pd.DataFrame(rows)


def _read_table(path: str, what: str) -> pd.DataFrame:
    try:
        return pd.read_parquet(path) if not path.endswith(".csv") else pd.read_csv(path)
    except (OSError, ValueError) as e:
        raise SeqencError(f"cannot read {what} {path!r}: {e}") from e


def main(argv: list[str]) -> None:
    """``seqenc probe --labels L.parquet --label-column C [--embeddings E.parquet] [--events ...]``."""
    parser = argparse.ArgumentParser(
        prog="seqenc probe",
        description="Cross-validated linear probe of per-entity labels from embeddings and/or "
        "aggregate features of the same events (aggregates alone, embeddings alone, both).",
    )
    parser.add_argument("--labels", required=True, help="Parquet/CSV: entity column + label(s)")
    parser.add_argument("--label-column", required=True, help="the label to predict")
    parser.add_argument("--embeddings", help="Parquet from `seqenc embed` (entity_id, embedding)")
    parser.add_argument("--events", nargs="+", help="event log(s): adds aggregate features")
    parser.add_argument("--entity", default="entity_id", help="entity column of labels and events")
    parser.add_argument("--item", default="item_id", help="item column of the events")
    parser.add_argument("--timestamp", default="timestamp", help="time column of the events")
    parser.add_argument("--categorical", nargs="*", default=[], help="categorical event columns")
    parser.add_argument("--numeric", nargs="*", default=[], help="numeric event columns")
    parser.add_argument(
        "--as-of-column",
        default="as_of",
        help="per-label cut-off column of labels, used for the aggregates when present",
    )
    parser.add_argument(
        "--as-of", default=None, help="one cut-off for the aggregates (without --as-of-column)"
    )
    parser.add_argument(
        "--task", default="auto", choices=("auto", "binary", "multiclass", "regression")
    )
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", help="also write the results here (JSON records)")
    args = parser.parse_args(argv)
    try:
        table = _run(args)
    except SeqencError as e:
        parser.exit(1, f"seqenc probe: error: {e}\n")
    print(format_table(table))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(table.to_dict(orient="records"), f, indent=1)


def _run(args: argparse.Namespace) -> pd.DataFrame:
    if not args.embeddings and not args.events:
        raise SeqencError("give --embeddings, --events or both")
    labels = _read_table(args.labels, "labels")
    for column in (args.entity, args.label_column):
        if column not in labels.columns:
            raise SeqencError(f"labels {args.labels!r} have no column {column!r}")
    per_row = args.as_of_column in labels.columns
    on = [args.entity, args.as_of_column] if per_row else [args.entity]
    sets: dict[str, pd.DataFrame] = {}
    if args.events:
        schema = EventSchema(
            entity=args.entity,
            item=args.item,
            timestamp=args.timestamp or None,
            categorical=args.categorical,
            numeric=args.numeric,
        )
        cut = labels[on].drop_duplicates() if per_row else args.as_of
        sets["aggregates"] = aggregate_features(
            args.events, schema, cut, as_of_column=args.as_of_column
        )
    if args.embeddings:
        emb = _read_table(args.embeddings, "embeddings").rename(columns={"entity_id": args.entity})
        if "embedding" not in emb.columns or args.entity not in emb.columns:
            raise SeqencError(
                f"embeddings {args.embeddings!r} need {args.entity!r} and 'embedding'"
            )
        if per_row and args.as_of_column not in emb.columns:
            # One embedding per entity (one cut-off): it serves every label row of the entity.
            emb = (
                labels[on].drop_duplicates().merge(emb[[args.entity, "embedding"]], on=args.entity)
            )
        sets["embeddings"] = emb[[*on, "embedding"]]
    return compare(
        labels, args.label_column, sets, on, task=args.task, n_splits=args.folds, seed=args.seed
    )


def format_table(table: pd.DataFrame) -> str:
    """Feature sets × metrics as ``mean ± std`` over folds."""
    metrics = [c[: -len("_mean")] for c in table.columns if c.endswith("_mean")]
    lines = []
    for row in table.itertuples(index=False):
        d = row._asdict()
        cells = [f"{m} {d[m + '_mean']:.4f} ± {d[m + '_std']:.4f}" for m in metrics]
        lines.append(
            f"{d['features']:<22} n={d['n_rows']:<6} d={d['n_features']:<5} " + "  ".join(cells)
        )
    constant = [f"{m} {table[m + '_constant'].iloc[0]:.4f}" for m in metrics]
    lines.append(f"{'constant predictor':<22} " + "  ".join(constant))
    return "\n".join(lines)


if __name__ == "__main__":
    main(sys.argv[1:])
