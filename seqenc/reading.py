"""Bounded reads of the files seqenc loads (a bundle's, an ONNX graph's checksum): a file must be
a regular file of at most a given size, so a link to ``/dev/zero``, a FIFO or a runaway file is
refused in one line instead of being read until memory runs out."""

from __future__ import annotations

import stat
from pathlib import Path

from seqenc.errors import SeqencError


def regular_file(path: Path) -> int:
    """The size of ``path``, which must be a regular file (after links): a link to ``/dev/zero``,
    a FIFO or a directory would be read without end or fail later; refused in one line."""
    try:
        info = path.stat()
    except FileNotFoundError as e:
        raise SeqencError(f"bundle file missing: {str(path)!r}") from e
    except OSError as e:
        raise SeqencError(f"cannot read {str(path)!r}: {e.strerror or e}") from e
    if not stat.S_ISREG(info.st_mode):
        raise SeqencError(f"{str(path)!r} is not a regular file (a device, pipe or directory)")
    return info.st_size


def read_bounded(path: Path, limit: int) -> bytes:
    """The bytes of the regular file ``path``, refused when over ``limit`` bytes (before reading
    it, and if it grows while read)."""
    if regular_file(path) > limit:
        raise SeqencError(f"{str(path)!r} is larger than the {limit} bytes a {path.name} may hold")
    try:
        with path.open("rb") as f:
            data = f.read(limit + 1)
    except OSError as e:
        raise SeqencError(f"cannot read {str(path)!r}: {e.strerror or e}") from e
    if len(data) > limit:
        raise SeqencError(f"{str(path)!r} is larger than the {limit} bytes a {path.name} may hold")
    return data
