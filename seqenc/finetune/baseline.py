"""The hand-made aggregates' score beside a fine-tuned model's, on the same held-out entities.

After a fine-tuning fit tests its checkpoint on the held-out labelled entities, a logistic (or
ridge) regression on the aggregates a fused head reads (:mod:`seqenc.data.label_aggregates`, each
row read up to its label's ``as_of``) is fitted on the fit's labelled training rows and scored on
the same held-out rows with the same score (ROC-AUC or R²): a user sees at once whether the
encoder earns its place.
Seconds on thousands of labelled rows; scikit-learn (``seqenc[eval]``) missing is one line.
"""

from __future__ import annotations

import lightning.pytorch as pl
from lightning.pytorch.callbacks import Callback

from seqenc.data.labels import LabelledRows
from seqenc.errors import SeqencError
from seqenc.evaluate.estimators import estimator, fit_estimator
from seqenc.finetune.module import LabelModule
from seqenc.scores import prediction_scores, score_name, scored_kind


def aggregates_score(rows: LabelledRows, task: str, n_classes: int) -> tuple[float, int, int]:
    """``(score, n_features, n_rows)`` of the aggregates' linear model, fitted on the labelled
    training ``rows`` and scored on the held-out ones."""
    kind = scored_kind(task, n_classes)
    model = estimator(kind, "linear")[1]  # first: without scikit-learn, nothing else is computed
    train, held = rows.train, rows.held  # each with its aggregates at its cut-off
    fit_estimator(model, train.aggregates, train.targets)
    if kind == "regression":
        scores = prediction_scores(kind, held.targets, model.predict(held.aggregates))
    else:
        probabilities = model.predict_proba(held.aggregates)
        scores = prediction_scores(kind, held.targets, probabilities, model[-1].classes_)
    return scores[score_name(task)], train.aggregates.shape[1], len(train.targets)


class LabelBaselines(Callback):
    """After a fine-tuning fit's test: the aggregates' score on the same held-out labelled
    entities (the rows the module was handed), printed under the model's and logged as
    ``baseline/aggregates/<score>``."""

    def on_test_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if not isinstance(pl_module, LabelModule) or pl_module.rows is None:
            return
        if not trainer.is_global_zero:
            return
        head, rows = pl_module.head, pl_module.rows
        name = score_name(head.task)
        model = trainer.callback_metrics.get("test/score")
        n_held = len(rows.held.rows)
        print(f"held-out labelled entities ({n_held:,} rows, never trained on): {name}")
        if model is not None:
            print(f"  {'model':<34} {float(model):.4f}")
        try:
            score, n_features, n_train = aggregates_score(rows, head.task, len(head.classes))
        except SeqencError as e:  # scikit-learn missing, or no aggregate could be computed
            print(f"  aggregates baseline: not computed: {e}")
            return
        what = "ridge" if head.task == "regression" else "logistic"
        when = "as_of" if rows.as_of else "whole histories"
        print(
            f"  {f'aggregates, {what} regression':<34} {score:.4f} ({n_features} hand-made "
            f"features, {when}, fitted on the {n_train:,} training rows)"
        )
        for logger in trainer.loggers:
            logger.log_metrics({f"baseline/aggregates/{name}": score})
