"""The probes, k-fold cross-validated: linear (logistic regression or ridge, scaled, strength searched
inside each training fold) or trees (histogram gradient boosting, what most feature pipelines
retrain: leaf count chosen on a held-out part of each training fold, trees by early stopping). The
estimators are in :mod:`seqenc.evaluate.estimators`, a stacked block's scores in
:mod:`seqenc.evaluate.stacking`."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import pandas as pd

from seqenc.data.labels import infer_task, label_rows, regression_targets
from seqenc.errors import SeqencError
from seqenc.evaluate.estimators import (
    Model,
    check_fold_sizes,
    estimator,
    fit_estimator,
    sklearn_modules,
)
from seqenc.evaluate.stacking import stacked_columns
from seqenc.scores import prediction_scores, r2, scored_kind

Task = Literal["auto", "binary", "multiclass", "regression"]


@dataclass
class ProbeResult:
    """Per-fold scores of one probe. ``folds[metric]`` has one value per fold; ``baseline`` holds
    what a constant predictor scores on the same folds (majority class accuracy, AUC 0.5, R² ≤ 0);
    ``label_rows`` what became of the label rows (:func:`~seqenc.data.labels.label_rows`)."""

    task: str
    n_rows: int
    n_features: int
    classes: list = field(default_factory=list)
    folds: dict[str, np.ndarray] = field(default_factory=dict)
    baseline: dict[str, float] = field(default_factory=dict)
    label_rows: dict[str, int] = field(default_factory=dict)  # given, dropped by cause, used
    task_reason: str = ""  # the task and why it was chosen (probe_task)

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
    stack: Sequence[str] = (),
) -> tuple[np.ndarray, np.ndarray | None, np.ndarray, dict[str, int]]:
    """Row-aligned ``X``, the ``stack`` columns' block (``None`` without), ``y`` and the counts
    of :func:`~seqenc.data.labels.label_rows`."""
    if not isinstance(labels, pd.DataFrame) and not stack:
        return _align_arrays(features, labels)
    if not isinstance(labels, pd.DataFrame) or not isinstance(features, pd.DataFrame):
        raise SeqencError(
            "labels given as a table need features as a table with key columns"
            if isinstance(labels, pd.DataFrame)
            else "stack names feature columns: give features and labels as tables"
        )
    absent = [c for c in stack if c not in features.columns]
    if absent:
        raise SeqencError(f"stack names {absent}, not columns of the features")
    keys = list(on) if on is not None else [c for c in features.columns if c in labels.columns]
    keys = [k for k in keys if k != label_column] if on is None else keys
    rows, counts = label_rows(labels, str(label_column), keys)
    missing = [k for k in keys if k not in features.columns]
    if not keys or missing:
        raise SeqencError(
            f"cannot join features and labels on {keys or 'no common column'}: "
            f"features have {list(features.columns)[:8]}, labels {list(labels.columns)}"
        )
    twice = features.duplicated(keys).to_numpy()
    if twice.any():
        key = features[keys][twice].iloc[0].to_dict()
        raise SeqencError(f"features have more than one row for {key}: one row per key")
    joined = rows.merge(features, on=keys, how="inner")
    if joined.empty:
        raise SeqencError(f"no label row matches a feature row on {keys}")
    counts |= {"no_features": len(rows) - len(joined), "used": len(joined)}
    x = feature_matrix(joined, exclude=[*keys, label_column, *stack])
    stacked = feature_matrix(joined[list(stack)]) if stack else None
    return x, stacked, joined[label_column].to_numpy(), counts


def _align_arrays(
    features: pd.DataFrame | np.ndarray, labels: pd.Series | np.ndarray
) -> tuple[np.ndarray, None, np.ndarray, dict[str, int]]:
    """:func:`_align` for labels given as an array aligned with the feature rows."""
    x = features if isinstance(features, np.ndarray) else feature_matrix(features)
    y = np.asarray(labels)
    if x.ndim != 2 or len(x) != len(y):
        raise SeqencError(f"features {x.shape} and labels ({len(y)},) do not align")
    rows, counts = label_rows(
        pd.DataFrame({"row": np.arange(len(y)), "label": y}), "label", ["row"]
    )
    kept = rows["row"].to_numpy()
    return x[kept].astype(float), None, y[kept], counts | {"no_features": 0, "used": len(kept)}


def probe_task(y: np.ndarray, task: Task = "auto") -> tuple[str, str]:
    """``(task, why)``: ``binary``, ``multiclass`` or ``regression``; ``"auto"`` by the one rule
    of a fit and a probe (:func:`~seqenc.data.labels.infer_task`)."""
    if task != "auto":
        if task not in ("binary", "multiclass", "regression"):
            raise SeqencError(f"task must be auto, binary, multiclass or regression, got {task!r}")
        return task, f"{task} (set with task)"
    task, why = infer_task(y)
    kind = scored_kind(task, len(pd.unique(y)))
    return kind, f"{kind} ({why})"


def probe(
    features: pd.DataFrame | np.ndarray,
    labels: pd.DataFrame | pd.Series | np.ndarray,
    *,
    label_column: str | None = None,
    on: Sequence[str] | None = None,
    task: Task = "auto",
    model: Model = "linear",
    n_splits: int = 5,
    seed: int = 0,
    stack: Sequence[str] = (),
) -> ProbeResult:
    """Cross-validated probe of ``labels`` from ``features``: linear or gradient-boosted trees.

    Args:
        features: ``[n, d]`` array aligned with ``labels``, or a table of key columns and numeric
            or array-valued feature columns (e.g. :func:`encode`'s ``entity_id`` + ``embedding``,
            or :func:`aggregate_features`).
        labels: an array aligned with ``features``, or a table joined to it on ``on`` (default:
            the columns both tables have) with the target in ``label_column``, checked by
            :func:`~seqenc.data.labels.label_rows`: rows with a null label, repeated rows
            and rows with no feature row are dropped and counted (``label_rows``); an infinite
            label or two labels for one key are refused.
        task: ``"binary"`` / ``"multiclass"`` (logistic regression, multinomial for more than two
            classes; ROC-AUC (one-vs-rest macro for multiclass) and accuracy) or ``"regression"``
            (ridge; R²). ``"auto"``: :func:`probe_task` (the one rule of a fit and a probe).
        model: ``"linear"`` or ``"trees"``, each with its search inside the training fold
            (:func:`~seqenc.evaluate.estimators.estimator`).
        n_splits: k of the k-fold cross-validation (stratified for classes, shuffled with
            ``seed``): the same folds for every model and feature set (paired differences).
        stack: columns of the table that enter as one block, through its own linear probe
            cross-fitted inside each training fold (:mod:`~seqenc.evaluate.stacking`): a score
            per class (or a number) beside the other columns, not a weight per column.
    """
    return probes(
        features,
        labels,
        label_column=label_column,
        on=on,
        task=task,
        models=(model,),
        n_splits=n_splits,
        seed=seed,
        stack=stack,
    )[model]


def probes(
    features: pd.DataFrame | np.ndarray,
    labels: pd.DataFrame | pd.Series | np.ndarray,
    *,
    label_column: str | None = None,
    on: Sequence[str] | None = None,
    task: Task = "auto",
    models: Sequence[Model] = ("linear",),
    n_splits: int = 5,
    seed: int = 0,
    stack: Sequence[str] = (),
) -> dict[Model, ProbeResult]:
    """:func:`probe` with each of ``models`` on the same rows and folds, model -> result; the
    ``stack`` block's cross-fitted columns are computed once per fold for all of them
    (:func:`~seqenc.evaluate.stacking.stacked_columns`)."""
    sklearn_modules()
    _check_splits(n_splits, seed)
    x, stacked, y, counts = _align(features, labels, label_column, on, stack)
    task, why = probe_task(y, task)
    task, y, classes, splits = cv_folds(y, task, n_splits, seed)
    for model in models:  # before any fit
        check_fold_sizes(y, task, model, splits, seed, stacked is not None)
    folds = {model: defaultdict(list) for model in models}  # metric -> one value per fold
    base = defaultdict(list)
    for train, test in splits:
        fold_x = _with_stacked(x, stacked, y, train, test, task, seed)
        for model in folds:  # each model once
            for name, value in probe_fold(
                fold_x, y, task, model, train, test, n_splits, seed
            ).items():
                folds[model][name].append(value)
        for name, value in _baseline(task, y[train], y[test]).items():
            base[name].append(value)
    n_features = x.shape[1] + (0 if stacked is None else stacked.shape[1])
    return {
        model: ProbeResult(
            task=task,
            n_rows=len(y),
            n_features=n_features,
            classes=list(classes),
            folds={k: np.asarray(v) for k, v in scored.items()},
            baseline={k: float(np.mean(v)) for k, v in base.items()},
            label_rows=dict(counts),
            task_reason=why,
        )
        for model, scored in folds.items()
    }


def _with_stacked(
    x: np.ndarray,
    stacked: np.ndarray | None,
    y: np.ndarray,
    train: np.ndarray,
    test: np.ndarray,
    task: str,
    seed: int,
) -> np.ndarray:
    """``x`` with the ``stacked`` block's columns of this fold appended (``x`` without one)."""
    if stacked is None:
        return x
    return np.hstack([x, stacked_columns(stacked, y, train, test, task, seed)])


def _check_splits(n_splits: int, seed: int) -> None:
    """Refuse a fold count or a seed the splitters cannot take, in one line."""
    if isinstance(n_splits, bool) or not isinstance(n_splits, (int, np.integer)) or n_splits < 2:
        raise SeqencError(f"n_splits (folds) must be an integer >= 2, got {n_splits!r}")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or not 0 <= seed < 2**32:
        raise SeqencError(f"seed must be an integer in [0, 2**32), got {seed!r}")


def probe_fold(
    x: np.ndarray,
    y: np.ndarray,
    task: str,
    model: Model,
    train: np.ndarray,
    test: np.ndarray,
    n_splits: int = 5,
    seed: int = 0,
    stacked: np.ndarray | None = None,
) -> dict[str, float]:
    """One fold of :func:`probe`: the probe fitted on rows ``train`` of ``x`` and coded labels
    ``y`` (:func:`cv_folds`), scored on rows ``test`` (so one fold can run on its own);
    ``stacked``: a block of columns (row-aligned with ``x``) that enters through its
    cross-fitted scores (:func:`~seqenc.evaluate.stacking.stacked_columns`); several probes
    of one fold take those columns once, appended to ``x``, instead."""
    fold_x = _with_stacked(x, stacked, y, train, test, task, seed)
    search = estimator(task, model, n_splits, seed)[1]
    fit_estimator(search, fold_x[train], y[train])
    return _scores(task, search, fold_x[test], y[test])


def cv_folds(
    y: np.ndarray, task: Task = "auto", n_splits: int = 5, seed: int = 0
) -> tuple[str, np.ndarray, list, list[tuple[np.ndarray, np.ndarray]]]:
    """The folds :func:`probe` scores on, for labels ``y`` in row order: ``(task, coded y, classes,
    [(train rows, test rows)] per fold)``. A model trained outside the probe (a fine-tuned
    encoder) is scored on the same held-out rows by :func:`prediction_scores`."""
    if len(y) < n_splits:
        raise SeqencError(f"{len(y)} labelled row(s) cannot make {n_splits} folds")
    task = probe_task(y, task)[0]
    codes, classes = _label_codes(task, y, n_splits)
    splitter = estimator(task, "linear", n_splits, seed)[0]
    return task, codes, classes, list(splitter.split(np.zeros((len(codes), 1)), codes))


def _label_codes(task: str, y: np.ndarray, n_splits: int) -> tuple[np.ndarray, list]:
    """Regression targets as floats; classes as codes 0..k-1 (sorted) with the class list, each
    class needing a row in every fold."""
    if task == "regression":
        return regression_targets(y), []
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
    return codes, classes


def _scores(task: str, model, x: np.ndarray, y: np.ndarray) -> dict[str, float]:
    """The fitted probe's scores on a test fold (:func:`~seqenc.scores.prediction_scores`)."""
    if task == "regression":
        return prediction_scores(task, y, model.predict(x))
    return prediction_scores(task, y, model.predict_proba(x), model.classes_)


def _baseline(task: str, train: np.ndarray, test: np.ndarray) -> dict[str, float]:
    """A constant predictor fitted on the training fold."""
    if task == "regression":
        return {"r2": r2(test, np.full(len(test), train.mean()))}
    majority = np.bincount(train).argmax()
    return {"roc_auc": 0.5, "accuracy": float(np.mean(test == majority))}
