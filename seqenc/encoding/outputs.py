"""What every embedding output holds, declared once (:func:`output_schema`), and the last step of
every encode (:class:`LastStep`): the fine-tuned head's predictions on the bundle's own
embeddings, then the map into the space asked for. ``Encoder.encode`` / ``update``, the Parquet
export and Spark all write through here."""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import torch

from seqenc.bundle import BundleMeta
from seqenc.compat.lineage import Lineage, select_space
from seqenc.compat.parent_map import ParentMap
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
        predictions: a fine-tuned bundle's head on each embedding: ``[n, k]`` probabilities of
            its classes (``meta.head["classes"]`` order) or ``[n]`` numbers; ``None`` without a head.
    """

    entity_ids: np.ndarray
    embeddings: np.ndarray | torch.Tensor
    n_events_read: np.ndarray
    last_event_time: np.ndarray
    n_unknown_items: int
    n_skipped: int
    n_unknown_categorical: dict[str, int] = field(default_factory=dict)
    predictions: np.ndarray | None = None


def embedding_type(dim: int) -> pa.DataType:
    """``fixed_size_list<float32>[dim]``: one embedding per row."""
    return pa.list_(pa.float32(), dim)


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


def output_schema(
    entity_type: pa.DataType,
    dim: int,
    head: SupervisedHead | None = None,
    metadata: dict[str, str] | None = None,
) -> pa.Schema:
    """The columns of every embedding output, the one place they are declared: ``entity_id``,
    ``embedding``, ``n_events_read`` (events the model read), ``last_event_time`` (null without
    times), and a fine-tuned model's predictions last."""
    return pa.schema(
        [
            ("entity_id", entity_type),
            ("embedding", embedding_type(dim)),
            ("n_events_read", pa.int32()),
            ("last_event_time", pa.timestamp("us", tz="UTC")),
            *prediction_fields(head),
        ],
        metadata=metadata,
    )


def entity_table(
    entity_ids: pa.Array, n_events_read: np.ndarray, last: np.ndarray | None
) -> pa.Table:
    """The key columns of :func:`output_schema` (all but the embedding and predictions); ``last``
    (epoch seconds of each entity's newest event) is ``None`` for a log without times."""
    time_type = output_schema(pa.null(), 1).field("last_event_time").type
    if last is None:
        last_time = pa.nulls(len(entity_ids), time_type)
    else:
        micros = np.round(last * 1e6).astype(np.int64)
        last_time = pa.array(micros, type=pa.int64()).cast(time_type)
    n_read = pa.array(np.asarray(n_events_read).astype(np.int32))
    names = ["entity_id", "n_events_read", "last_event_time"]
    return pa.table([entity_ids, n_read, last_time], names=names)


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


@dataclass
class Chunk:
    """What the encoding core yields: the key columns (:func:`entity_table`) of some entities,
    their ``embeddings`` ``[n, d]`` float32 in the space asked for, the head's ``predictions``
    (``None`` without a head), and ``rows``: each entity's row in the store it was read into."""

    keys: pa.Table
    embeddings: np.ndarray
    predictions: np.ndarray | None = None
    rows: np.ndarray | None = None


@dataclass
class LastStep:
    """The last step of every encode, resolved once per call: the head (a CPU copy) predicts on
    the bundle's own embeddings, then ``to_parent`` maps them into the space asked for;
    ``metadata`` names the model, ``as_of`` and the space written (``space``: the part of it
    that names the space), ``dim`` its size; ``model`` (the bundle's name) is named when an
    embedding or a prediction is not finite (:func:`check_finite`)."""

    head: SupervisedHead | None
    to_parent: ParentMap | None
    metadata: dict[str, str]
    space: dict[str, str]
    dim: int
    model: str = ""

    @classmethod
    def of(
        cls,
        meta: BundleMeta,
        head: SupervisedHead | None,
        lineage: tuple[Lineage, ParentMap] | None,
        space: str,
        parent: str | BundleMeta | None,
        as_of: object,
    ) -> LastStep:
        """Refused in one line, before any encoding, for a space the bundle has no map to."""
        to_parent, space_metadata = select_space(meta, lineage, space, parent)
        metadata = file_metadata(meta, as_of) | space_metadata
        head = None if head is None else copy.deepcopy(head).cpu().eval()
        dim = int(metadata["seqenc.dim"])
        return cls(head, to_parent, metadata, space_metadata, dim, meta.name)

    @torch.inference_mode()
    def __call__(
        self,
        keys: pa.Table,
        native: np.ndarray,
        rows: np.ndarray | None = None,
        wide: np.ndarray | None = None,
    ) -> Chunk:
        """The chunk of the entities ``keys`` whose own embeddings are ``native`` (and, for a
        fused head, aggregates ``wide``)."""
        check_finite(native, "embeddings", self.model)
        predictions = None
        if self.head is not None:
            aggregates = None if wide is None else torch.from_numpy(wide)
            scores = self.head(torch.from_numpy(np.asarray(native, dtype=np.float32)), aggregates)
            predictions = check_finite(self.head.predict(scores).numpy(), "predictions", self.model)
        out = native if self.to_parent is None else self.to_parent.apply(native)
        return Chunk(keys, np.asarray(out, dtype=np.float32), predictions, rows)

    def schema(self, entity_type: pa.DataType) -> pa.Schema:
        """The :func:`output_schema` of this call's outputs."""
        return output_schema(entity_type, self.dim, self.head, self.metadata)

    def table(self, chunk: Chunk) -> pa.Table:
        """``chunk`` as a table of :meth:`schema`."""
        embeddings = np.ascontiguousarray(chunk.embeddings, dtype=np.float32)
        flat = pa.array(embeddings.reshape(-1), type=pa.float32())
        columns = {name: chunk.keys[name] for name in chunk.keys.column_names}
        columns["embedding"] = pa.FixedSizeListArray.from_arrays(flat, self.dim)
        columns |= self._prediction_columns(chunk.predictions)
        schema = self.schema(chunk.keys.schema.field("entity_id").type)
        return pa.table([columns[name] for name in schema.names], schema=schema)

    def _prediction_columns(self, predictions: np.ndarray | None) -> dict[str, pa.Array]:
        if self.head is None:
            return {}
        if self.head.task == "regression":
            return {"prediction": pa.array(predictions.astype(np.float64))}
        classes = pa.array(self.head.classes)
        flat = pa.array(np.ascontiguousarray(predictions, dtype=np.float32).reshape(-1))
        return {
            "prediction": classes.take(pa.array(predictions.argmax(axis=1))),
            "probabilities": pa.FixedSizeListArray.from_arrays(flat, len(classes)),
        }

    def output(
        self, chunk: Chunk, counts: dict[str, Any], output: str, extra: pa.Table | None = None
    ) -> Any:
        """``chunk`` in the ``output`` form of :meth:`Encoder.encode`: a pandas DataFrame (counts
        and space in ``attrs``), an Arrow table (in the schema metadata) or :class:`Embeddings`;
        ``extra`` (a table form only): columns added after the others, row for row."""
        if output in ("numpy", "torch"):
            keys = chunk.keys
            return Embeddings(
                entity_ids=keys["entity_id"].to_numpy(zero_copy_only=False),
                embeddings=torch.from_numpy(chunk.embeddings)
                if output == "torch"
                else chunk.embeddings,
                n_events_read=keys["n_events_read"].to_numpy(),
                last_event_time=keys["last_event_time"].cast(pa.timestamp("us")).to_numpy(False),
                **{k: counts[k] for k in ("n_unknown_items", "n_skipped", "n_unknown_categorical")},
                predictions=chunk.predictions,
            )
        table = self.table(chunk)
        for name in [] if extra is None else extra.column_names:
            table = table.append_column(name, extra[name])
        if output == "arrow":
            extra = {f"seqenc.{k}": json.dumps(v) for k, v in counts.items()}
            return table.replace_schema_metadata(self.metadata | extra)
        df = table.to_pandas()
        names = {k.removeprefix("seqenc."): v for k, v in self.space.items()}
        model = {k: self.metadata[f"seqenc.{k}"] for k in ("model", "config_hash")}
        df.attrs.update(counts | model | names)
        return df
