"""What a table of vectors is, read from its metadata: the model and space it comes from and the
role of its vectors (``items``: the model's item vectors; ``queries``: accounts' query vectors,
scored against the items; ``accounts``: account embeddings). A query is refused, in one line, by
an index of another model, space or role."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from seqenc.errors import SeqencError

# role of a table → (id column, vector column)
COLUMNS = {
    "items": ("item_id", "vector"),
    "queries": ("entity_id", "query"),
    "accounts": ("entity_id", "embedding"),
}
ASKS = {"items": ("items", "queries"), "accounts": ("accounts",)}  # index role → query roles


@dataclass(frozen=True)
class Space:
    """Where vectors live: the bundle's ``model`` name, its ``space_id`` (the native space's, or
    the parent's after a map) and the ``vectors``' role (:data:`COLUMNS`)."""

    model: str
    space_id: str
    vectors: str

    def to_dict(self) -> dict[str, str]:
        return asdict(self)

    def admits(self, query: Space) -> None:
        """Refuse, in one line, ``query`` vectors this index (of this space) cannot answer."""
        if query.space_id != self.space_id:
            raise SeqencError(
                f"the query comes from model {query.model!r} (space {query.space_id}), the index "
                f"from model {self.model!r} (space {self.space_id}): build the index from the "
                "same model and space as the query"
            )
        if query.vectors not in ASKS.get(self.vectors, ()):
            raise SeqencError(
                f"an index of {self.vectors} answers {' or '.join(ASKS[self.vectors])} vectors, "
                f"not {query.vectors}"
            )


def table_metadata(table: pa.Table | pd.DataFrame) -> dict[str, str]:
    """The ``seqenc.*`` metadata of an Arrow table (schema) or a DataFrame (``attrs``), without
    the prefix."""
    if isinstance(table, pd.DataFrame):
        return {str(k): str(v) for k, v in table.attrs.items()}
    raw = table.schema.metadata or {}
    return {
        k.decode().removeprefix("seqenc."): v.decode()
        for k, v in raw.items()
        if k.startswith(b"seqenc.")
    }


def read_vectors(
    table: pa.Table | pd.DataFrame,
    roles: tuple[str, ...] = ("items", "accounts"),
    where: str = "the table",
) -> tuple[pa.Array, np.ndarray, Space]:
    """``(ids, vectors [n, d] float32, space)`` of a table seqenc wrote: ``Encoder.items`` /
    ``seqenc items`` (items: its metadata says so), else the first of ``roles`` whose columns it
    has: an embedding table of ``encode`` / ``seqenc embed`` (accounts), ``encode(...,
    query=True)``'s ``query`` column (queries)."""
    found = table_metadata(table)
    if "space_id" not in found or "model" not in found:
        raise SeqencError(f"{where} names no seqenc model and space: not written by seqenc")
    names = list(table.columns) if isinstance(table, pd.DataFrame) else table.column_names
    usable = [r for r in roles if set(COLUMNS[r]) <= set(names) and r != "items"]
    role = found.get("vectors") or (usable[0] if usable else roles[-1])
    id_column, vector_column = COLUMNS.get(role, ("item_id", "vector"))
    if id_column not in names or vector_column not in names:
        raise SeqencError(f"{where} has no {id_column!r} and {vector_column!r} columns")
    space = Space(found["model"], found["space_id"], role)
    if isinstance(table, pd.DataFrame):
        ids = pa.array(table[id_column])
        column = table[vector_column].to_numpy()
        vectors = np.stack(column).astype(np.float32) if len(column) else np.zeros((0, 0))
    else:
        ids = table[id_column].combine_chunks()
        column = table[vector_column].combine_chunks()
        width = column.type.list_size
        vectors = column.flatten().to_numpy(zero_copy_only=False).reshape(-1, width)
    return ids, np.ascontiguousarray(vectors, dtype=np.float32), space


def metadata_of(space: Space, extra: dict[str, Any] | None = None) -> dict[str, str]:
    """Arrow schema metadata naming ``space`` (and ``extra``), prefixed ``seqenc.``."""
    fields = space.to_dict() | (extra or {})
    return {f"seqenc.{k}": str(v) for k, v in fields.items()}
