"""Downstream evaluation: do the embeddings add to the aggregate features a practitioner has?

:func:`probe` fits a linear model (logistic / multinomial logistic regression for classes, ridge for
numbers) or gradient-boosted trees on a feature table with k-fold cross-validation and reports
ROC-AUC / accuracy or R² with their spread over folds (:mod:`seqenc.scores`).
:func:`aggregate_features` (:mod:`seqenc.data.aggregates`) computes the hand-made baseline from
the same events, point-in-time correct like :func:`~seqenc.inference.encode`, and
:func:`embed_at` embeds each labelled entity at its own cut-off; :func:`predict_at` gives a
fine-tuned bundle's predictions there, scored on the probe's folds (:func:`cv_folds`) by
:func:`prediction_scores`. ``seqenc probe`` (:mod:`seqenc.commands.probe`) runs the three
comparisons (aggregates, embeddings, both) from Parquet files.

scikit-learn is an optional dependency (``pip install 'seqenc[eval]'``), imported when a probe runs.
"""

from __future__ import annotations

from seqenc.data.aggregates import aggregate_features
from seqenc.evaluate.compare import compare
from seqenc.evaluate.features import embed_at, predict_at
from seqenc.evaluate.probe import (
    ProbeResult,
    cv_folds,
    feature_matrix,
    probe,
    probe_fold,
    probes,
)
from seqenc.scores import prediction_scores

__all__ = [
    "ProbeResult",
    "aggregate_features",
    "compare",
    "cv_folds",
    "embed_at",
    "feature_matrix",
    "predict_at",
    "prediction_scores",
    "probe",
    "probe_fold",
    "probes",
]
