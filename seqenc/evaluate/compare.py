"""Feature sets side by side: every probe on every feature table and pair of tables, on the same
rows and folds, each beside its paired difference from a reference table (the aggregates)."""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import numpy as np
import pandas as pd

from seqenc.data.labels import label_rows
from seqenc.evaluate.probe import Model, Task, probes


def compare(
    labels: pd.DataFrame,
    label_column: str,
    feature_sets: dict[str, pd.DataFrame],
    on: Sequence[str],
    *,
    task: Task = "auto",
    models: Sequence[Model] = ("linear",),
    n_splits: int = 5,
    seed: int = 0,
    reference: str | None = None,
    stack: bool = True,
) -> pd.DataFrame:
    """:func:`~seqenc.evaluate.probe.probe` with each of ``models`` on each named feature table
    and on every pair joined (``a+b``), on the rows all of them cover, so the scores compare like
    with like. In a pair with ``reference``, the other table enters stacked (its columns as one
    block through its own cross-fitted linear probe: :func:`~seqenc.evaluate.probe.probe`'s
    ``stack``, its columns computed once per fold for every model), so a wide weak table does
    not cost the reference's probe the variance of one weight per column; ``stack=False``
    concatenates every pair's columns. One row per
    model and feature set; ``attrs["label_rows"]`` counts the label rows given, dropped (by
    cause: ``null_label``, ``duplicate``, ``no_features``) and used; ``attrs["task_reason"]`` the
    task and why it was chosen.

    Every row is scored on the same folds. ``reference`` (a name of ``feature_sets``, e.g.
    ``"aggregates"``): each other row of the same model also gets ``paired_{metric}`` and
    ``paired_{metric}_std``, the mean and spread over folds of its score minus the reference's on
    the same fold."""
    labelled, counts = label_rows(labels, label_column, list(on))
    given = len(labelled)
    for frame in feature_sets.values():
        labelled = labelled.merge(frame[list(on)].drop_duplicates(), on=list(on), how="inner")
    counts |= {"no_features": given - len(labelled), "used": len(labelled)}
    sets = _with_pairs(feature_sets, on, reference if stack else None)
    results = {}  # (model, name) -> ProbeResult, a stacked block's columns once per fold
    for name, (frame, block) in sets.items():
        kw = {"label_column": label_column, "on": on, "task": task, "n_splits": n_splits}
        scored = probes(frame, labelled, models=models, seed=seed, stack=block, **kw)
        results |= {(model, name): result for model, result in scored.items()}
    rows, folds = [], {}
    for model, name in itertools.product(models, sets):
        result = results[model, name]
        folds[model, name] = result.folds
        rows.append(
            {"model": model, "features": name, "task": result.task, "n_rows": result.n_rows}
            | {"n_features": result.n_features}
            | result.summary()
            | {f"{k}_constant": v for k, v in result.baseline.items()}
            | _paired(result.folds, folds.get((model, reference)), name == reference)
        )
    table = pd.DataFrame(rows)
    table.attrs["label_rows"] = counts
    table.attrs["task_reason"] = result.task_reason  # the same labels, the same task, every row
    return table


def _with_pairs(
    feature_sets: dict[str, pd.DataFrame], on: Sequence[str], stacked_beside: str | None
) -> dict[str, tuple[pd.DataFrame, tuple[str, ...]]]:
    """Name -> (table, the columns :func:`probe` stacks) for each table and each pair ``a+b``
    joined on ``on``; in a pair with ``stacked_beside``, the other table's columns are stacked."""
    sets = {name: (frame, ()) for name, frame in feature_sets.items()}
    names = list(feature_sets)
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            joined = feature_sets[a].merge(feature_sets[b], on=list(on), how="inner")
            other = {a: b, b: a}.get(stacked_beside)
            block = [c for c in feature_sets[other].columns if c not in on] if other else []
            sets[f"{a}+{b}"] = (joined, tuple(block))
    return sets


def _paired(
    folds: dict[str, np.ndarray], reference: dict[str, np.ndarray] | None, is_reference: bool
) -> dict[str, float]:
    """Mean and spread over folds of ``folds`` minus ``reference`` (the same folds), per metric;
    none for the reference itself or without one."""
    if reference is None or is_reference:
        return {}
    out: dict[str, float] = {}
    for metric, values in folds.items():
        diff = values - reference[metric]
        out |= {f"paired_{metric}": float(diff.mean()), f"paired_{metric}_std": float(diff.std())}
    return out
