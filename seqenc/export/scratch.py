"""The export's scratch directory beside the output, owned by one run at a time.

``.<output name>.seqenc-tmp/`` holds the partitions and the output being written. The run that
owns it holds an exclusive ``flock`` on the directory (released by the kernel if the process is
killed), so a second export to the same output fails at once with one clear line instead of
sharing files, and a killed run's leftovers are recognised (unlocked) and removed by the next run.
The directory is created exclusively with mode 0o700 and opened without following links: a link,
a file or another user's directory at that name is refused, never cleaned through.
"""

from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path

from seqenc.atomic import remove
from seqenc.errors import SeqencError

try:
    import fcntl
except ImportError:  # not POSIX: no lock, so concurrent exports to one output are not detected
    fcntl = None

_NO_FOLLOW = getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_NOFOLLOW", 0)


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
        """Create (exclusively, mode 0o700) and lock the directory, or take over a killed run's
        directory and empty it. A link, a file, or a directory of another user at that name is
        refused and left alone: nothing outside the scratch directory is ever touched."""
        for _ in range(3):  # a finishing run may delete the directory between mkdir and lock
            try:
                os.mkdir(self.path, 0o700)
                created = True
            except FileExistsError:
                created = False
            except OSError as e:
                raise SeqencError(
                    f"cannot write beside output {str(self.output)!r}: {e.strerror or e}"
                ) from e
            fd = self._open()
            if fd is None:
                continue  # removed between mkdir and open
            if fcntl is not None:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    os.close(fd)
                    raise SeqencError(
                        f"another export is writing {str(self.output)!r} (it holds "
                        f"{str(self.path)!r}); wait for it to finish or choose another output"
                    ) from None
            if self._still_there(fd):
                self._fd = fd
                os.fchmod(fd, 0o700)
                if not created:
                    for leftover in self.path.iterdir():
                        remove(leftover)  # never follows a link
                return
            os.close(fd)
        raise SeqencError(f"could not lock {str(self.path)!r}; is another export running?")

    def _open(self) -> int | None:
        """A descriptor of the scratch directory itself (never through a link), or None when it
        vanished; refuses a link, a non-directory and a directory owned by another user."""
        try:
            fd = os.open(self.path, os.O_RDONLY | _NO_FOLLOW)
        except FileNotFoundError:
            return None
        except OSError as e:
            kind = "a symbolic link" if self.path.is_symlink() else "not a directory"
            if e.errno not in (errno.ELOOP, errno.ENOTDIR):
                kind = e.strerror or str(e)
            raise SeqencError(
                f"the scratch path {str(self.path)!r} of output {str(self.output)!r} is {kind}; "
                "refusing to use it (remove it, or choose another output)"
            ) from e
        if hasattr(os, "geteuid") and os.fstat(fd).st_uid != os.geteuid():
            os.close(fd)
            raise SeqencError(
                f"the scratch directory {str(self.path)!r} of output {str(self.output)!r} belongs "
                "to another user; refusing to use it"
            )
        return fd

    def _still_there(self, fd: int) -> bool:
        """Whether ``self.path`` still is the directory ``fd`` was opened on (not a link to it)."""
        try:
            st = os.lstat(self.path)
        except FileNotFoundError:
            return False
        held = os.fstat(fd)
        return (st.st_dev, st.st_ino) == (held.st_dev, held.st_ino)

    def release(self) -> None:
        """Delete the directory and drop the lock (only by the owner; a no-op otherwise). Nothing
        is deleted if the path no longer is the directory this run created."""
        if self._fd is None:
            return
        if self._still_there(self._fd):
            shutil.rmtree(self.path, ignore_errors=True)
        os.close(self._fd)
        self._fd = None
