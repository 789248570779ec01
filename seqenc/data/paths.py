"""Which files an event-log argument names: paths, globs and directories expanded, checked once.

One set of rules for every reader (``encode()``, training, ``seqenc embed``):

- a directory means the Parquet files below it, skipping every path with a component (below the
  directory) that starts with ``_`` or ``.``, as Spark, Hive and ``pyarrow.dataset`` do:
  ``_temporary/`` attempts, ``_SUCCESS``, ``.part-0.parquet.crc``, hidden copies;
- a glob skips such components too where a wildcard matched them (``logs/_*.parquet`` asks for
  them and gets them; ``logs/**/*.parquet`` does not reach into ``logs/_temporary/``);
- the same file reached twice (the same name twice, a glob and a file it matches, a link to
  another input, a hard link) is refused: its events would count twice;
- a CSV file must be UTF-8 text: a UTF-16/32 byte-order mark, NUL bytes or a header that is not
  UTF-8 is refused naming the file and the encoding, before anything is read.
"""

from __future__ import annotations

import codecs
import fnmatch
import glob
import gzip
import os
from collections.abc import Callable, Sequence
from pathlib import Path

from seqenc.atomic import file_target
from seqenc.errors import SeqencError

PARQUET_SUFFIXES = (".parquet", ".pq")
CSV_SUFFIXES = (".csv", ".csv.gz", ".tsv")
_HIDDEN = ("_", ".")
_BOMS = [  # longest first: the UTF-32 LE mark starts with the UTF-16 LE one
    (codecs.BOM_UTF32_LE, "UTF-32 LE"),
    (codecs.BOM_UTF32_BE, "UTF-32 BE"),
    (codecs.BOM_UTF16_LE, "UTF-16 LE"),
    (codecs.BOM_UTF16_BE, "UTF-16 BE"),
]
_SNIFF_BYTES = 1 << 16


def expand_paths(source: str | os.PathLike | Sequence[str | os.PathLike]) -> list[Path]:
    """The existing event files that ``source`` (a path, glob, directory or list of those) names,
    in a stable order; see the module docstring for what is skipped and refused."""
    files: list[Path] = []
    for text in _path_texts(source):
        if any(ch in text for ch in "*?["):
            files += _glob_files(text)
        elif Path(text).is_dir():
            files += _directory_files(Path(text))
        elif Path(text).is_file():
            files.append(Path(text))
        else:
            raise SeqencError(f"file not found: {text!r}")
    for f in files:
        if not f.name.endswith(PARQUET_SUFFIXES + CSV_SUFFIXES):
            raise SeqencError(
                f"unsupported file type: {str(f)!r}; expected one of "
                f"{', '.join(PARQUET_SUFFIXES + CSV_SUFFIXES)}"
            )
    _refuse_repeats(files)
    for f in files:
        if f.name.endswith(CSV_SUFFIXES):
            check_utf8(f)
    return files


def _path_texts(source: object) -> list[str]:
    """``source`` as a non-empty list of path strings; anything else is refused saying what is
    accepted (a dict, ``None`` or a list of DataFrames would otherwise be read as file names)."""
    accepted = (
        "events must be a pandas DataFrame, a pyarrow Table, or file(s): a path, a glob, a "
        "directory or a list of those"
    )
    if isinstance(source, (str, os.PathLike)):
        items = [source]
    elif isinstance(source, (list, tuple)):
        items = list(source)
    else:
        raise SeqencError(f"{accepted}; got {_kind(source)}")
    if not items:
        raise SeqencError("no input files given (empty list)")
    texts = []
    for i, item in enumerate(items):
        if not isinstance(item, (str, os.PathLike)):
            hint = " (to read several frames, pass pd.concat(frames))" if _is_frame(item) else ""
            raise SeqencError(f"{accepted}; got a list holding {_kind(item)} at [{i}]{hint}")
        text = os.fspath(item)
        if not isinstance(text, str) or not text.strip():
            raise SeqencError(f"{accepted}; got the path {text!r}")
        texts.append(text)
    return texts


def _kind(value: object) -> str:
    return "None" if value is None else f"a {type(value).__module__}.{type(value).__qualname__}"


def _is_frame(value: object) -> bool:
    return type(value).__name__ in ("DataFrame", "Table", "Series", "RecordBatch")


def _is_hidden(part: str) -> bool:
    return part.startswith(_HIDDEN) and part not in (".", "..")


def _directory_files(directory: Path) -> list[Path]:
    """Parquet files below ``directory``, not descending into ``_``/``.`` folders."""
    found = []
    for root, dirs, names in os.walk(directory):
        dirs[:] = sorted(d for d in dirs if not _is_hidden(d))
        found += [
            Path(root) / n for n in names if not _is_hidden(n) and n.endswith(PARQUET_SUFFIXES)
        ]
    if not found:
        raise SeqencError(
            f"directory {str(directory)!r} holds no Parquet files (*.parquet, *.pq; names "
            "starting with '_' or '.' are skipped)"
        )
    return sorted(found)


def _glob_files(pattern: str) -> list[Path]:
    """Files matching ``pattern``, less those with a ``_``/``.`` component that only a wildcard
    matched (a pattern component starting with the same character asks for it)."""
    asked = tuple(p for p in Path(pattern).parts if p.startswith(_HIDDEN))
    matches = [Path(m) for m in sorted(glob.glob(pattern, recursive=True))]
    if not matches:
        raise SeqencError(f"no file matches the pattern {pattern!r}")
    return [m for m in matches if m.is_file() and all(_visible(p, asked) for p in m.parts)]


def _refuse_repeats(files: list[Path]) -> None:
    """Refuse a file reached twice (by name, glob, link or hard link): its events would double."""
    seen: dict[tuple[int, int], Path] = {}
    for f in files:
        st = f.stat()
        first = seen.setdefault((st.st_dev, st.st_ino), f)
        if first is not f:
            also = "" if str(first) == str(f) else f" (also as {str(first)!r})"
            raise SeqencError(
                f"the file {str(f)!r} is given twice{also}: its events would count twice; "
                "give each file once"
            )


def check_utf8(path: Path) -> None:
    """Refuse a CSV that is not UTF-8 text (a UTF-16/32 byte-order mark, NUL bytes, or a header
    line that does not decode), naming the file and the problem. A UTF-8 byte-order mark is fine."""
    try:
        opener = gzip.open if path.name.endswith(".gz") else open
        with opener(path, "rb") as f:
            head = f.read(_SNIFF_BYTES)
    except (OSError, EOFError) as e:
        raise SeqencError(f"cannot read {str(path)!r}: {e}") from e
    convert = f"seqenc reads CSV as UTF-8: convert it first, e.g. iconv -t UTF-8 {str(path)!r}"
    for bom, name in _BOMS:
        if head.startswith(bom):
            raise SeqencError(f"{str(path)!r} is {name} text (byte-order mark); {convert}")
    if b"\x00" in head:
        raise SeqencError(
            f"{str(path)!r} holds NUL bytes: not UTF-8 text (UTF-16 without a byte-order mark?); "
            f"{convert}"
        )
    header = head.split(b"\n", 1)[0]
    try:
        header.decode("utf-8")
    except UnicodeDecodeError as e:
        if len(header) < _SNIFF_BYTES or e.end < len(header) - 3:  # not a cut-off character
            raise SeqencError(
                f"{str(path)!r}: the header line is not UTF-8 (byte {header[e.start]:#04x} at "
                f"offset {e.start}); {convert}"
            ) from None


def would_read(source: str | os.PathLike | Sequence[str | os.PathLike], path: Path) -> bool:
    """Whether ``source`` would name ``path`` once it exists: ``path`` lies below a given directory
    (through links too) or matches a given glob, and is not skipped as hidden."""
    target = Path(os.path.abspath(path))
    for text in _path_texts(source):
        given = Path(os.path.abspath(text))
        if any(ch in text for ch in "*?["):
            asked = tuple(p for p in given.parts if p.startswith(_HIDDEN))
            if _glob_matches(given.parts, target.parts, asked):
                return True
        elif given.is_dir():
            for candidate in (target, target.parent.resolve() / target.name):
                for root in (given, given.resolve()):
                    below = candidate.parts[len(root.parts) :]
                    if (
                        candidate.is_relative_to(root)
                        and below
                        and not any(map(_is_hidden, below))
                        and target.name.endswith(PARQUET_SUFFIXES)
                    ):
                        return True
    return False


def not_read_next(output: Path, sources: Sequence[object], option: str = "output") -> None:
    """Refuse an ``output`` that one of ``sources`` (event-log arguments: a directory or a glob)
    would read next time (:func:`would_read`): the next read would take it for events."""
    for source in sources:
        if would_read(source, output):
            raise SeqencError(
                f"{option} {str(output)!r} lies where the input {source!r} reads events: the "
                "next read would take it for events; choose a path outside it (or a name "
                "starting with '_' or '.')"
            )


def output_file(
    target: str | Path,
    inputs: Sequence[str | os.PathLike],
    sources: Sequence[object],
    option: str,
    example: str,
    ours: Callable[[Path], bool] | None = None,
    what: str = "",
) -> Path:
    """The one rule of a command's output file, checked before any work: :func:`file_target`'s
    (no directory, no input, no file the command did not write, a writable folder) and
    :func:`not_read_next` (not where an event-log argument would read it next); every message
    names the command's ``option``."""
    path = file_target(target, inputs, option=option, example=example, ours=ours, what=what)
    not_read_next(path, sources, option)
    return path


def _glob_matches(pattern: tuple[str, ...], parts: tuple[str, ...], asked: tuple[str, ...]) -> bool:
    """``parts`` matches the glob ``pattern`` (components; ``**`` spans any number of them), with
    the hidden-name rule of :func:`_glob_files`."""
    if not pattern:
        return not parts
    if pattern[0] == "**":
        return any(
            _glob_matches(pattern[1:], parts[k:], asked)
            for k in range(len(parts) + 1)
            if all(_visible(p, asked) for p in parts[:k])
        )
    return (
        bool(parts)
        and fnmatch.fnmatchcase(parts[0], pattern[0])
        and _visible(parts[0], asked)
        and _glob_matches(pattern[1:], parts[1:], asked)
    )


def _visible(part: str, asked: tuple[str, ...]) -> bool:
    """Not hidden, or a ``_``/``.`` name that a pattern component starting so asks for."""
    return not _is_hidden(part) or any(fnmatch.fnmatchcase(part, a) for a in asked)
