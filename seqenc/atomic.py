"""Write a file or a directory so that readers see the old one or the complete new one, never a part.

Everything is written under a unique temporary name beside the target (same file system, so the
final rename is atomic) and renamed onto the target only on success; on failure the temporary is
removed. A directory is never replaced by a file nor a file by a directory, and a file target
written as ``'out/'`` (trailing slash) or naming an existing directory is refused with a message
saying so: seqenc does not guess a file name inside it.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from seqenc.errors import SeqencError


def file_target(target: str | Path) -> Path:
    """``target`` as a file path; refuses a trailing slash, an existing directory or a parent that
    cannot hold files, each with a message naming the path."""
    text = str(target)
    path = Path(text)
    if text.endswith(("/", os.sep)) or path.is_dir():
        raise SeqencError(
            f"output {text!r} names a directory; refusing to overwrite it with a file: give a "
            f"file path such as {str(path / 'embeddings.parquet')!r}"
        )
    _check_parent(path)
    return path


def directory_target(
    target: str | Path, replaceable: Callable[[Path], bool], what: str = "a seqenc output"
) -> Path:
    """``target`` as a directory path (a trailing slash is allowed); an existing one must pass
    ``replaceable`` (e.g. "holds a bundle"); an existing file is refused."""
    path = Path(target)
    if path.exists() and not path.is_dir():
        raise SeqencError(
            f"output {str(path)!r} is a file, not a directory; refusing to replace it by {what}"
        )
    if path.is_dir() and not replaceable(path):
        raise SeqencError(f"{str(path)!r} exists and is not {what}; refusing to overwrite")
    _check_parent(path)
    return path


def _check_parent(path: Path) -> None:
    """Create the parent folders; an ancestor that is a file or an unwritable place is a user error."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError) as e:
        raise SeqencError(f"cannot write {str(path)!r}: a parent is not a directory") from e
    except OSError as e:
        raise SeqencError(f"cannot write {str(path)!r}: {e.strerror or e}") from e
    try:  # a real write: access() says yes to root on a read-only place
        with tempfile.TemporaryFile(dir=path.parent):
            pass
    except OSError as e:
        raise SeqencError(
            f"cannot write {str(path)!r}: {str(path.parent)!r} is not writable ({e.strerror or e})"
        ) from e


def writable_directory(path: str | Path, what: str) -> Path:
    """Create the directory ``path`` (and its parents) and make sure a file can be written in it:
    checked before a long run that writes there, so a read-only place fails first, in one line."""
    path = Path(path)
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=path):
            pass
    except (FileExistsError, NotADirectoryError) as e:
        raise SeqencError(f"{what} {str(path)!r} is not writable: a file is in the way") from e
    except OSError as e:
        raise SeqencError(f"{what} {str(path)!r} is not writable: {e.strerror or e}") from e
    return path


def temporary_beside(target: Path, directory: bool) -> Path:
    """A new, uniquely named temporary file or directory in ``target``'s folder."""
    prefix, parent = f".{target.name}.", target.parent
    try:
        if directory:
            return Path(tempfile.mkdtemp(prefix=prefix, suffix=".tmp", dir=parent))
        fd, name = tempfile.mkstemp(prefix=prefix, suffix=".tmp", dir=parent)
        os.close(fd)
        return Path(name)
    except OSError as e:
        raise SeqencError(f"cannot write beside {str(target)!r}: {e.strerror or e}") from e


def move_into_place(src: Path, target: Path) -> None:
    """Rename the complete ``src`` onto ``target``, replacing a target of the same kind.

    A file replaces a file atomically (``os.replace``). A directory replaces a directory by two
    renames (old one aside, new one in), so a reader may briefly find no target but never a mix.
    """
    try:
        if not src.is_dir():
            if target.is_dir():
                raise SeqencError(f"{str(target)!r} became a directory; refusing to replace it")
            os.replace(src, target)
            return
        if target.exists() and not target.is_dir():
            raise SeqencError(f"{str(target)!r} became a file; refusing to replace it")
        if not target.exists():
            src.rename(target)
            return
        old = temporary_beside(target, directory=True)
        target.rename(old / target.name)
        src.rename(target)
        shutil.rmtree(old)
    except SeqencError:
        raise
    except OSError as e:  # e.g. another process created the target between the two renames
        raise SeqencError(f"cannot move the result into {str(target)!r}: {e}") from e


def remove(path: Path) -> None:
    """Delete a file or directory tree if it exists."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    elif path.exists() or path.is_symlink():
        path.unlink(missing_ok=True)


@contextmanager
def atomic_file(target: str | Path) -> Iterator[Path]:
    """Yield a temporary file path beside ``target``; it becomes ``target`` when the block succeeds.

    >>> with atomic_file("out/data.json") as tmp:     # doctest: +SKIP
    ...     tmp.write_text("{}")
    """
    path = file_target(target)
    tmp = temporary_beside(path, directory=False)
    try:
        yield tmp
        move_into_place(tmp, path)
    finally:
        remove(tmp)


def write_text(target: str | Path, text: str) -> Path:
    """``text`` into ``target`` through :func:`atomic_file`: a reader sees the old file or the new
    one, never a part. Returns the path."""
    with atomic_file(target) as tmp:
        tmp.write_text(text)
    return Path(target)


@contextmanager
def atomic_directory(
    target: str | Path,
    replaceable: Callable[[Path], bool] = lambda p: not any(p.iterdir()),
    what: str = "a seqenc output",
) -> Iterator[Path]:
    """Yield a fresh temporary directory beside ``target``; it becomes ``target`` on success.

    An existing ``target`` is replaced only if ``replaceable(target)`` (default: it is empty);
    otherwise, or if it is a file, :class:`SeqencError` is raised before anything is written.
    """
    path = directory_target(target, replaceable, what)
    tmp = temporary_beside(path, directory=True)
    try:
        yield tmp
        tmp.chmod(0o755)  # mkdtemp makes it private; the result is an ordinary folder
        move_into_place(tmp, path)
    finally:
        remove(tmp)
