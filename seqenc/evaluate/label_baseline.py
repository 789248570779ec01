"""The hand-made aggregates' score beside a fine-tuned model's, on the same held-out entities.

After a fine-tuning fit tests its checkpoint on the held-out labelled entities, a logistic (or
ridge) regression on :class:`~seqenc.data.aggregates.AggregateSpec`, each row read up to its
label's ``as_of``, is fitted on the fit's labelled training rows and scored on the same held-out
rows with the same score (ROC-AUC or R²): a user sees at once whether the encoder earns its place.
Seconds on thousands of labelled rows; scikit-learn (``seqenc[eval]``) missing is one line.
"""

from __future__ import annotations

import lightning.pytorch as pl
import numpy as np
import pandas as pd
from lightning.pytorch.callbacks import Callback

from seqenc.data.aggregates import AggregateSpec, RowCutoffs
from seqenc.data.datamodule import SequenceDataModule
from seqenc.data.events import Events, read_events
from seqenc.data.labels import LabelledView, Labels
from seqenc.data.schema import EventSchema
from seqenc.errors import SeqencError
from seqenc.evaluate.probe import estimator, fit_estimator
from seqenc.scores import prediction_scores, score_name

# The aggregates of the baseline: the most frequent values of each categorical column get their
# own counts, shares and numeric summaries (a measurement log's per-parameter mean, min, max, last).
MAX_CATEGORIES = 50
VALUE_STATS = ("mean", "min", "max", "last")


def aggregates_at(
    datamodule: SequenceDataModule, train: LabelledView, held: LabelledView
) -> tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]:
    """``((X, kept) of the training samples, (X, kept) of the held-out ones)``: the aggregates
    (:class:`~seqenc.data.aggregates.AggregateSpec`, its columns fitted on the training rows at
    their cut-offs, as a model fits them) of each sample at its label's cut-off, and the positions
    of the samples that have them (an event at or before the cut-off)."""
    source, schema = datamodule.events
    labels = datamodule.label_table
    events = Events(read_events(source, schema, exact=True), schema)  # read once, cut on ticks
    options = dict(max_categories=MAX_CATEGORIES, value_stats=VALUE_STATS)
    if labels.cut is None:  # whole histories: the columns of the training entities' events
        table = events.table
        ids = table[schema.entity].to_pandas().isin(labels.entity[train.rows]).to_numpy()
        spec = AggregateSpec.fit(Events(table.filter(ids), schema), schema, **options)
    else:
        spec = AggregateSpec.fit(events, schema, _cutoffs(labels, train), **options)
    return tuple(_rows(spec, events, schema, labels, samples) for samples in (train, held))


def _cutoffs(labels: Labels, samples: LabelledView) -> RowCutoffs:
    """The samples' entities and cut-offs (the label table's, parsed once)."""
    return RowCutoffs(labels.entity, labels.cut).take(samples.rows)


def _rows(
    spec: AggregateSpec, events: Events, schema: EventSchema, labels: Labels, samples: LabelledView
) -> tuple[np.ndarray, np.ndarray]:
    """``(X, kept)``: the aggregates of the samples that have an event at their cut-off."""
    if labels.cut is not None:
        out = spec.transform(events, schema, _cutoffs(labels, samples))
        return out.values, out.keys.index.to_numpy()
    out = spec.transform(events, schema)
    position = pd.Index(out.keys[schema.entity]).get_indexer(labels.entity[samples.rows])
    kept = np.flatnonzero(position >= 0)
    return out.values[position[kept]], kept


def aggregates_score(
    datamodule: SequenceDataModule, task: str, n_classes: int
) -> tuple[float, int, int]:
    """``(score, n_features, n_rows)`` of the aggregates' linear model, fitted on the
    datamodule's labelled training rows and scored on its held-out ones."""
    kind = "regression" if task == "regression" else "binary" if n_classes == 2 else "multiclass"
    model = estimator(kind, "linear")[1]  # first: without scikit-learn, nothing else is computed
    train, held = datamodule.labelled_splits
    (x, kept), (x_held, kept_held) = aggregates_at(datamodule, train, held)
    fit_estimator(model, x, train.targets[kept])
    y_held = held.targets[kept_held]
    if kind == "regression":
        scores = prediction_scores(kind, y_held, model.predict(x_held))
    else:
        scores = prediction_scores(kind, y_held, model.predict_proba(x_held), model[-1].classes_)
    return scores[score_name(task)], x.shape[1], len(kept)


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
