"""The export's scratch directory beside the output, owned by one run at a time.

``.<output name>.seqenc-tmp/`` holds the partitions and the output being written. The run that
owns it holds an exclusive ``flock`` on the directory (released by the kernel if the process is
killed), so a second export to the same output fails at once with one clear line instead of
sharing files, and a killed run's leftovers are recognised (unlocked) and removed by the next run.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from seqenc.atomic import remove
from seqenc.errors import SeqencError

try:
    import fcntl
except ImportError:  # not POSIX: no lock, so concurrent exports to one output are not detected
    fcntl = None


class Scratch:
    """The scratch directory of ``output``; :meth:`acquire` on the rank that writes (rank 0)."""

    def __init__(self, output: Path) -> None:
        self.output = output
        self.path = output.parent / f".{output.name}.seqenc-tmp"
        self._fd: int | None = None

    @property
    def owned(self) -> bool:
        return self._fd is not None

    def acquire(self) -> None:
        """Create and lock the directory, emptying a killed run's leftovers."""
        for _ in range(3):  # a finishing run may delete the directory between mkdir and lock
            try:
                self.path.mkdir(exist_ok=True)
                fd = os.open(self.path, os.O_RDONLY)
            except OSError as e:
                raise SeqencError(
                    f"cannot write beside output {str(self.output)!r}: {e.strerror or e}"
                ) from e
            if fcntl is not None:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    os.close(fd)
                    raise SeqencError(
                        f"another export is writing {str(self.output)!r} (it holds "
                        f"{str(self.path)!r}); wait for it to finish or choose another output"
                    ) from None
            try:
                same = os.stat(self.path).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                same = False
            if same:
                self._fd = fd
                for leftover in self.path.iterdir():
                    remove(leftover)
                return
            os.close(fd)
        raise SeqencError(f"could not lock {str(self.path)!r}; is another export running?")

    def release(self) -> None:
        """Delete the directory and drop the lock (only by the owner; a no-op otherwise)."""
        if self._fd is None:
            return
        shutil.rmtree(self.path, ignore_errors=True)
        os.close(self._fd)
        self._fd = None
