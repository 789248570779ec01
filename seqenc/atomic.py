"""Write a file or a directory so that readers see the old one or the complete new one, never a part.

Everything is written under a unique temporary name beside the target (same file system, so the
final rename is atomic) and renamed onto the target only on success; on failure the temporary is
removed. A directory is never replaced by a file nor a file by a directory, and a file target
written as ``'out/'`` (trailing slash) or naming an existing directory is refused with a message
saying so: seqenc does not guess a file name inside it. A target must be absent or a regular file
(a rename over ``/dev/null`` would replace the device node), never one of the command's inputs,
and its folder must take a first block; a full disk is one line (:func:`disk_full`).
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import stat
import tempfile
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

from seqenc.errors import SeqencError

try:  # POSIX: the per-process file size limit (RLIMIT_FSIZE)
    import resource
except ImportError:  # pragma: no cover (Windows)
    resource = None

# A write that fails for want of room: the disk (or quota) is full, or the file size limit hit.
FULL = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)
MAX_JSON_BYTES = 1 << 26  # a --json output seqenc writes is far smaller: a larger file is not ours
FIRST_WRITE = 1 << 16  # bytes a target's folder must take before any work (a first block or so)


def file_target(
    target: str | Path,
    inputs: Iterable[str | Path] = (),
    *,
    option: str = "output",
    example: str = "embeddings.parquet",
    ours: Callable[[Path], bool] | None = None,
    what: str = "",
) -> Path:
    """``target`` as a file path; refuses a trailing slash, an existing directory, anything but
    a regular file in the way (a device, pipe or socket), an existing file ``ours`` does not
    recognise as ``what`` the command writes (a file not ours), one of ``inputs`` and a parent
    that cannot take a first write, each with a message naming the command's ``option`` and the
    path (a directory: a file name such as ``example`` inside it)."""
    text = str(target)
    path = Path(text)
    if text.endswith(("/", os.sep)) or path.is_dir():
        raise SeqencError(
            f"{option} {text!r} names a directory; refusing to overwrite it with a file: give a "
            f"file path such as {str(path / example)!r}"
        )
    _regular_or_absent(path)
    if ours is not None and path.is_file() and path.stat().st_size and not ours(path):
        raise SeqencError(
            f"{option} {text!r} exists and is not {what}; refusing to replace a file this "
            "command did not write: choose another path"
        )
    not_an_input(path, inputs, option)
    _check_parent(path)
    return path


def is_json(path: Path) -> bool:
    """Whether ``path`` holds JSON text (what a ``--json`` output may replace)."""
    try:
        with path.open("rb") as f:
            text = f.read(MAX_JSON_BYTES + 1)
        json.loads(text)
    except (OSError, ValueError):
        return False
    return len(text) <= MAX_JSON_BYTES


def directory_target(
    target: str | Path,
    replaceable: Callable[[Path], bool],
    what: str = "a seqenc output",
    inputs: Iterable[str | Path] = (),
) -> Path:
    """``target`` as a directory path (a trailing slash is allowed); an existing one must pass
    ``replaceable`` (e.g. "holds a bundle") and hold none of ``inputs``; an existing file is
    refused."""
    path = Path(target)
    if path.exists() and not path.is_dir():
        raise SeqencError(
            f"output {str(path)!r} is a file, not a directory; refusing to replace it by {what}"
        )
    if path.is_dir() and not replaceable(path):
        raise SeqencError(f"{str(path)!r} exists and is not {what}; refusing to overwrite")
    not_an_input(path, inputs)
    _check_parent(path)
    return path


def _regular_or_absent(path: Path) -> None:
    """Refuse a ``path`` that exists (after links) as anything but a regular file or folder."""
    try:
        mode = path.stat().st_mode
    except (FileNotFoundError, NotADirectoryError):  # absent (a parent in the way: checked next)
        return
    except OSError as e:
        raise SeqencError(f"cannot write {str(path)!r}: {e.strerror or e}") from e
    if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
        raise SeqencError(
            f"output {str(path)!r} is a device, pipe or socket, not a regular file; refusing to "
            "replace it: give a file path"
        )


def not_an_input(output: Path, inputs: Iterable[str | Path], option: str = "output") -> None:
    """Refuse an ``output`` that is one of ``inputs`` (by resolved path, or by inode: links and
    hard links) or, as a folder, holds one: a command never replaces what it reads."""
    target = output.resolve()
    for source in map(Path, inputs):
        same = source.resolve().is_relative_to(target)
        try:
            same = same or os.path.samefile(source, output)
        except OSError:  # one of them does not exist
            pass
        if same:
            what = "holds the input" if output.is_dir() else "is the input"
            raise SeqencError(
                f"{option} {str(output)!r} {what} {str(source)!r}; refusing to replace what the "
                "command reads: choose another output"
            )


def _check_parent(path: Path) -> None:
    """Create the parent folders; an ancestor that is a file, an unwritable place or a full disk
    is a user error."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError) as e:
        raise SeqencError(f"cannot write {str(path)!r}: a parent is not a directory") from e
    except OSError as e:
        raise SeqencError(f"cannot write {str(path)!r}: {e.strerror or e}") from e
    try:
        _first_write(path.parent)
    except OSError as e:
        why = (
            _full(e)
            if e.errno in FULL
            else f"{str(path.parent)!r} is not writable ({e.strerror or e})"
        )
        raise SeqencError(f"cannot write {str(path)!r}: {why}") from e


def _first_write(directory: Path) -> None:
    """Write (and sync) :data:`FIRST_WRITE` bytes into a nameless file in ``directory``: a real
    write, since access() says yes to root on a read-only place and a full disk still makes
    empty files."""
    with tempfile.TemporaryFile(dir=directory) as f:
        f.write(bytes(FIRST_WRITE))
        f.flush()
        os.fsync(f.fileno())


def writable_directory(path: str | Path, what: str) -> Path:
    """Create the directory ``path`` (and its parents) and make sure a file can be written in it:
    checked before a long run that writes there, so a read-only place fails first, in one line."""
    path = Path(path)
    try:
        path.mkdir(parents=True, exist_ok=True)
        _first_write(path)
    except (FileExistsError, NotADirectoryError) as e:
        raise SeqencError(f"{what} {str(path)!r} is not writable: a file is in the way") from e
    except OSError as e:
        why = _full(e) if e.errno in FULL else (e.strerror or str(e))
        raise SeqencError(f"{what} {str(path)!r} is not writable: {why}") from e
    return path


def check_room(directory: str | Path, need: int, largest: int, what: str) -> None:
    """One line when ``directory``'s file system has fewer than ``need`` bytes free, or the
    process's file size limit is under ``largest`` bytes (the biggest file a run writes there):
    a run that could not write its checkpoints fails before it starts, not after its banner."""
    free = shutil.disk_usage(directory).free
    if free < need:
        raise SeqencError(
            f"{what} {str(directory)!r} has {_mib(free)} free, the run writes about {_mib(need)} "
            "there (checkpoints and bundle): the disk is too full"
        )
    limit = resource.getrlimit(resource.RLIMIT_FSIZE)[0] if resource else -1
    if limit not in (-1, getattr(resource, "RLIM_INFINITY", -1)) and limit < largest:
        raise SeqencError(
            f"{what} {str(directory)!r}: the file size limit ({_mib(limit)}) is below a "
            f"checkpoint of this model (about {_mib(largest)})"
        )


def _mib(size: int) -> str:
    """``size`` bytes in MiB, for a message."""
    return f"{size / 2**20:,.2f} MiB"


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
            _regular_or_absent(target)
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
def atomic_file(target: str | Path, inputs: Iterable[str | Path] = ()) -> Iterator[Path]:
    """Yield a temporary file path beside ``target``; it becomes ``target`` when the block succeeds
    (``target`` checked by :func:`file_target` against ``inputs``; a full disk is one line).

    >>> with atomic_file("out/data.json") as tmp:     # doctest: +SKIP
    ...     tmp.write_text("{}")
    """
    path = file_target(target, inputs)
    tmp = temporary_beside(path, directory=False)
    try:
        with written(path):
            yield tmp
        move_into_place(tmp, path)
    finally:
        remove(tmp)


@contextmanager
def written(target: Path) -> Iterator[None]:
    """Within the block, a write that fails for want of room is one line naming ``target``."""
    try:
        yield
    except OSError as e:
        if e.errno not in FULL:
            raise
        raise SeqencError(f"cannot write {str(target)!r}: {_full(e)}") from e


def disk_full(exc: BaseException) -> SeqencError | None:
    """A :class:`SeqencError` for an ``OSError`` that failed for want of room (in any writer:
    a checkpoint, a log, a library's file), else None."""
    if isinstance(exc, OSError) and exc.errno in FULL:
        where = f"cannot write {exc.filename!r}" if exc.filename else "a write failed"
        return SeqencError(f"{where}: {_full(exc)}")
    return None


def _full(e: OSError) -> str:
    """What a write error that :data:`FULL` names means."""
    if e.errno == errno.EFBIG:
        return "the file size limit is reached (File too large)"
    return f"the disk is full ({e.strerror or os.strerror(e.errno)})"


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
    inputs: Iterable[str | Path] = (),
) -> Iterator[Path]:
    """Yield a fresh temporary directory beside ``target``; it becomes ``target`` on success.

    An existing ``target`` is replaced only if ``replaceable(target)`` (default: it is empty)
    and holds none of ``inputs``; otherwise, or if it is a file, :class:`SeqencError` is raised
    before anything is written.
    """
    path = directory_target(target, replaceable, what, inputs)
    tmp = temporary_beside(path, directory=True)
    try:
        with written(path):
            yield tmp
        tmp.chmod(0o755)  # mkdtemp makes it private; the result is an ordinary folder
        move_into_place(tmp, path)
    finally:
        remove(tmp)
