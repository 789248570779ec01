"""The hand-made aggregates' score beside a fine-tuned model's, on the same held-out entities.

After a fine-tuning fit tests its checkpoint on the held-out labelled entities, a logistic (or
ridge) regression on :func:`~seqenc.data.aggregates.aggregate_features`, each row read up to its
label's ``as_of``, is fitted on the fit's labelled training rows and scored on the same held-out
rows with the same score (ROC-AUC or R²): a user sees at once whether the encoder earns its place.
Seconds on thousands of labelled rows; scikit-learn (``seqenc[eval]``) missing is one line.
"""

from __future__ import annotations

import warnings

import lightning.pytorch as pl
import numpy as np
import pandas as pd
from lightning.pytorch.callbacks import Callback

from seqenc.data.aggregates import aggregate_features
from seqenc.data.labels import LabelledView, Labels
from seqenc.errors import SeqencError
from seqenc.evaluate.probe import estimator, feature_matrix, prediction_scores
from seqenc.training.label_score import score_name

# The aggregates of the baseline: the most frequent values of each categorical column get their
# own counts, shares and numeric summaries (a measurement log's per-parameter mean, min, max, last).
MAX_CATEGORIES = 50
VALUE_STATS = ("mean", "min", "max", "last")
AS_OF = "_as_of"


def aggregates_at(
    datamodule: object, labels: Labels, samples: LabelledView
) -> tuple[np.ndarray, np.ndarray]:
    """``(X, kept)``: the aggregates of each labelled sample at its label's cut-off, and the
    positions of the samples that have them (an event at or before the cut-off)."""
    source, schema = datamodule._events  # the log as the fit read it, and its schema
    entity = labels.entity[samples.rows]
    keys = [schema.entity]
    if labels.as_of is None:  # whole histories: one row per entity
        table = aggregate_features(source, schema, None, max_categories=MAX_CATEGORIES,
                                   value_stats=VALUE_STATS)  # fmt: skip
        rows = pd.DataFrame({schema.entity: entity})
    else:
        when = pd.to_datetime(labels.as_of[samples.rows], unit="s", utc=True)
        rows = pd.DataFrame({schema.entity: entity, AS_OF: when})
        table = aggregate_features(
            source, schema, rows, as_of_column=AS_OF, max_categories=MAX_CATEGORIES,
            value_stats=VALUE_STATS,
        )  # fmt: skip
        keys.append(AS_OF)
    joined = rows.reset_index().merge(table, on=keys, how="inner")
    return feature_matrix(joined, exclude=["index", *keys]), joined["index"].to_numpy()


def aggregates_score(datamodule: object, task: str, n_classes: int) -> tuple[float, int, int]:
    """``(score, n_features, n_rows)`` of the aggregates' linear model, fitted on the
    datamodule's labelled training rows and scored on its held-out ones."""
    kind = "regression" if task == "regression" else "binary" if n_classes == 2 else "multiclass"
    model = estimator(kind, "linear")[1]  # first: without scikit-learn, nothing else is computed
    labels = datamodule.label_table
    train, held = datamodule.labelled_splits
    x, kept = aggregates_at(datamodule, labels, _union(train, held))
    n_train = len(train.rows)
    is_train = kept < n_train
    targets = np.concatenate([train.targets, held.targets])[kept]
    with warnings.catch_warnings():  # LogisticRegressionCV's API-transition notices (1.8+)
        warnings.simplefilter("ignore", FutureWarning)
        model.fit(x[is_train], targets[is_train])
    x_held, y_held = x[~is_train], targets[~is_train]
    if kind == "regression":
        scores = prediction_scores(kind, y_held, model.predict(x_held))
    else:
        classes = model[-1].classes_
        scores = prediction_scores(kind, y_held, model.predict_proba(x_held), classes)
    return scores[score_name(task)], x.shape[1], int(is_train.sum())


def _union(train: LabelledView, held: LabelledView) -> LabelledView:
    """Both sample sets, training rows first (only ``rows`` is read)."""
    rows = np.concatenate([train.rows, held.rows])
    return LabelledView(train.view, rows, np.empty(0), np.empty(0))


class LabelBaselines(Callback):
    """After a fine-tuning fit's test: the aggregates' score on the same held-out labelled
    entities, printed under the model's and logged as ``baseline/aggregates/<score>``."""

    def on_test_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        head = pl_module.encoder.head
        if head is None or trainer.datamodule is None or not trainer.is_global_zero:
            return
        name = score_name(head.task)
        model = trainer.callback_metrics.get("test/score")
        n_held = len(trainer.datamodule.labelled_splits[1].rows)
        print(f"held-out labelled entities ({n_held:,} rows, never trained on): {name}")
        if model is not None:
            print(f"  {'model':<34} {float(model):.4f}")
        try:
            score, n_features, n_train = aggregates_score(
                trainer.datamodule, head.task, len(head.classes)
            )
        except SeqencError as e:  # scikit-learn missing, or no aggregate could be computed
            print(f"  aggregates baseline: not computed: {e}")
            return
        what = "ridge" if head.task == "regression" else "logistic"
        when = "whole histories" if trainer.datamodule.label_table.as_of is None else "as_of"
        print(
            f"  {f'aggregates, {what} regression':<34} {score:.4f} ({n_features} hand-made "
            f"features, {when}, fitted on the {n_train:,} training rows)"
        )
        for logger in trainer.loggers:
            logger.log_metrics({f"baseline/aggregates/{name}": score})
