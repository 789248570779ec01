"""The export's own options (how it runs: partitions, row groups, devices, progress), beside the
:class:`~seqenc.encoding.EncodeOptions` of what it encodes; both checked once, when built."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from seqenc.encoding import EncodeOptions, encode_options
from seqenc.encoding.options import positive_int
from seqenc.errors import SeqencError


@dataclass(frozen=True)
class ExportOptions:
    """How an export runs.

    Attributes:
        chunk_events: events per temporary partition: bounds memory (about 1 KB per event).
        row_group_size: rows per Parquet row group.
        accelerator, devices, strategy: as for ``lightning.Trainer``; several devices need
            ``strategy="ddp"`` and launch one process per device (from a script or the CLI).
        progress: show progress bars.
    """

    chunk_events: int = 1_000_000
    row_group_size: int = 65536
    accelerator: str = "auto"
    devices: int | str | list[int] = 1
    strategy: str = "auto"
    progress: bool = True

    def __post_init__(self) -> None:
        for name in ("chunk_events", "row_group_size"):  # stored as Python ints
            object.__setattr__(self, name, positive_int(name, getattr(self, name)))


def export_options(
    options: EncodeOptions | None, export: ExportOptions | None, fields: dict[str, Any]
) -> tuple[EncodeOptions, ExportOptions]:
    """The options of one export: ``options`` (default: ``on_empty="skip"``) and ``export`` with
    the ``fields`` given by name replaced, each in the object that has it."""
    names = {f.name for f in dataclasses.fields(ExportOptions)}
    run = {k: v for k, v in fields.items() if k in names}
    if export is not None and not isinstance(export, ExportOptions):
        raise SeqencError(f"export must be an ExportOptions, got {export!r}")
    encode = encode_options(
        options, {k: v for k, v in fields.items() if k not in names}, on_empty="skip"
    )
    return encode, dataclasses.replace(export or ExportOptions(), **run)
