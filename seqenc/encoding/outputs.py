"""The columns every embedding output has (``Encoder.encode``, the Parquet export, incremental
updates): entity id, embedding, history length, newest event time, and the provenance metadata."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import torch

from seqenc.bundle import BundleMeta
from seqenc.errors import SeqencError
from seqenc.model.head import SupervisedHead


@dataclass
class Embeddings:
    """``encode(..., output="numpy" | "torch")``: row ``i`` of every field is one entity.

    Attributes:
        entity_ids: original ids (int64 or object array of str), ascending.
        embeddings: ``[n, d]`` float32 (numpy array or torch tensor).
        n_events_read: events of each history the model read (its newest, at most the
            bundle's ``history_len``; an entity may have more events up to ``as_of``).
        last_event_time: ``datetime64[us]`` UTC of each entity's last event (NaT without times).
        n_unknown_items: events whose item is not in the vocabulary (encoded as UNK or a bucket).
        n_skipped: entities left out for having no event at or before ``as_of``.
        n_unknown_categorical: per categorical column, events whose value the model never saw.
    """

    entity_ids: np.ndarray
    embeddings: np.ndarray | torch.Tensor
    n_events_read: np.ndarray
    last_event_time: np.ndarray
    n_unknown_items: int
    n_skipped: int
    n_unknown_categorical: dict[str, int] = field(default_factory=dict)


def entity_table(
    entity_ids: pa.Array, n_events_read: np.ndarray, last: np.ndarray | None
) -> pa.Table:
    """The entity columns of every embedding output; ``last`` (epoch seconds of each entity's
    newest event) is ``None`` for a log without times (null ``last_event_time``)."""
    time_type = pa.timestamp("us", tz="UTC")
    if last is None:
        last_time = pa.nulls(len(entity_ids), time_type)
    else:
        micros = np.round(last * 1e6).astype(np.int64)
        last_time = pa.array(micros, type=pa.int64()).cast(time_type)
    return pa.table(
        {
            "entity_id": entity_ids,
            "n_events_read": pa.array(np.asarray(n_events_read).astype(np.int32)),
            "last_event_time": last_time,
        }
    )


def check_finite(values: np.ndarray, what: str, model: str) -> np.ndarray:
    """``values`` (one row per entity), refused when one is NaN or infinite: finite weights can
    still overflow (huge ones, a regression head's scale), and a NaN passed on is a wrong result
    downstream; the message names the bundle ``model``."""
    if not values.size:  # no entity (all skipped)
        return values
    bad = ~np.isfinite(values).reshape(len(values), -1).all(axis=1)
    if bad.any():
        raise SeqencError(
            f"bundle {model!r} gave non-finite {what} for {int(bad.sum())} of {len(values)} "
            f"entities (first at row {int(np.argmax(bad))}): its weights overflow on these "
            "events; check or retrain the bundle"
        )
    return values


def with_embeddings(columns: pa.Table, embeddings: np.ndarray) -> pa.Table:
    """Insert ``embedding`` (``fixed_size_list<float32>[d]``) as the second column."""
    embeddings = np.ascontiguousarray(embeddings, dtype=np.float32)
    flat = pa.array(embeddings.reshape(-1), type=pa.float32())
    column = pa.FixedSizeListArray.from_arrays(flat, type=embedding_type(embeddings.shape[1]))
    return columns.add_column(1, "embedding", column)


def prediction_fields(head: SupervisedHead | None) -> list[tuple[str, pa.DataType]]:
    """The columns a fine-tuned model's output adds after the others: ``prediction`` (the most
    probable class, or the number) and, for classes, ``probabilities`` (one per class, in the order
    of the bundle's ``head.classes``)."""
    if head is None:
        return []
    if head.task == "regression":
        return [("prediction", pa.float64())]
    return [
        ("prediction", pa.array(head.classes).type),
        ("probabilities", pa.list_(pa.float32(), len(head.classes))),
    ]


@torch.inference_mode()
def with_predictions(
    columns: pa.Table, head: SupervisedHead | None, embeddings: np.ndarray, model: str
) -> pa.Table:
    """``columns`` with the :func:`prediction_fields` of ``head`` on the (native) ``embeddings``
    appended (finite: :func:`check_finite`, naming the bundle ``model``); unchanged without a
    head."""
    if head is None:
        return columns
    out = head.predict(head(torch.from_numpy(np.asarray(embeddings, dtype=np.float32)))).numpy()
    check_finite(out, "predictions", model)
    if head.task == "regression":
        return columns.append_column("prediction", pa.array(out.astype(np.float64)))
    best = pa.array(head.classes).take(pa.array(out.argmax(axis=1)))
    flat = pa.array(np.ascontiguousarray(out, dtype=np.float32).reshape(-1))
    probabilities = pa.FixedSizeListArray.from_arrays(flat, len(head.classes))
    return columns.append_column("prediction", best).append_column("probabilities", probabilities)


def embedding_type(dim: int) -> pa.DataType:
    """``fixed_size_list<float32>[dim]``: one embedding per row."""
    return pa.list_(pa.float32(), dim)


def file_metadata(meta: BundleMeta, as_of: object) -> dict[str, str]:
    """Key-value metadata written with every embedding table and Parquet file."""
    return {
        "seqenc.model": meta.name,
        "seqenc.version": meta.seqenc_version,
        "seqenc.config_hash": meta.config_hash,
        "seqenc.weights_sha256": meta.weights_sha256,
        "seqenc.dim": str(meta.dim),
        "seqenc.as_of": "" if as_of is None else str(as_of),
    }


def embedding_output(
    columns: pa.Table,
    embeddings: np.ndarray,
    counts: dict[str, Any],
    meta: BundleMeta,
    as_of: object,
    output: str,
) -> pd.DataFrame | pa.Table | Embeddings:
    """The ``output`` form of :meth:`Encoder.encode`: ``columns`` (:func:`entity_table`) with
    their ``embeddings``, and ``counts`` in the attrs, schema metadata or :class:`Embeddings`."""
    if output in ("numpy", "torch"):
        return Embeddings(
            entity_ids=columns["entity_id"].to_numpy(zero_copy_only=False),
            embeddings=torch.from_numpy(embeddings) if output == "torch" else embeddings,
            n_events_read=columns["n_events_read"].to_numpy(),
            last_event_time=columns["last_event_time"].cast(pa.timestamp("us")).to_numpy(False),
            **{k: counts[k] for k in ("n_unknown_items", "n_skipped", "n_unknown_categorical")},
        )
    table = with_embeddings(columns, embeddings)
    if output == "arrow":
        metadata = file_metadata(meta, as_of) | {
            f"seqenc.{k}": json.dumps(v) for k, v in counts.items()
        }
        return table.replace_schema_metadata(metadata)
    df = table.to_pandas()
    df.attrs.update(counts | {"model": meta.name, "config_hash": meta.config_hash})
    return df
