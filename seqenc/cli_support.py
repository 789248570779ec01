"""Helpers of the ``seqenc`` command that stand apart from the LightningCLI wiring: user errors and
SIGTERM as one line, and the loggers a base install can run."""

from __future__ import annotations

import importlib.util
import io
import logging
import os
import re
import sys
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from lightning.pytorch.utilities.exceptions import SIGTERMException

from seqenc.atomic import disk_full
from seqenc.errors import SeqencError
from seqenc.signals import EXIT_CODE as TERMINATED_EXIT
from seqenc.signals import Terminated

DEBUG_ENV = "SEQENC_DEBUG"
_OFF = ("", "0", "false", "no", "off")


def user_error(exc: BaseException) -> SeqencError | None:
    """The :class:`SeqencError` behind ``exc`` (itself, or one it wraps: jsonargparse and
    Lightning re-raise errors from inside the classes they build), or one for a write that found
    the disk full (:func:`~seqenc.atomic.disk_full`: a checkpoint, a log) or an allocation that
    found no memory (:func:`out_of_memory`), else None."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, SeqencError):
            return exc
        if (full := disk_full(exc)) is not None:
            return full
        if (short := out_of_memory(exc)) is not None:
            return short
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return None


def out_of_memory(exc: BaseException) -> SeqencError | None:
    """A :class:`SeqencError` for an allocation that failed for want of memory (a model or batch
    too large for the machine: ``data.history_len 1000000000``), else None."""
    text = str(exc)
    if not (
        isinstance(exc, MemoryError)
        or (isinstance(exc, RuntimeError) and re.search(r"(?i)out of memory|can't allocate", text))
    ):
        return None
    wanted = re.search(r"(?i)tried to allocate ([\d.]+) ?(bytes|[KMGT]iB)", text)
    size = f": {wanted.group(1)} {wanted.group(2)} asked for" if wanted else ""
    return SeqencError(
        f"out of memory{size}; a smaller model or batch needs less (model.encoder.d_model, "
        "data.history_len, data.batch_size)"
    )


def debug_enabled() -> bool:
    """Whether ``SEQENC_DEBUG`` asks for tracebacks: any value but unset, empty, ``0``,
    ``false``, ``no`` or ``off`` (any case, spaces ignored)."""
    return os.environ.get(DEBUG_ENV, "").strip().lower() not in _OFF


@contextmanager
def one_line_errors(prog: str) -> Iterator[None]:
    """Within the block a user error (bad data, path, column, value) becomes ``<prog>: error:
    <message>`` on stderr and exit code 1; a run stopped by SIGTERM (seqenc's
    :class:`~seqenc.signals.Terminated`, or Lightning's ``SIGTERMException`` after a training step,
    which would exit 0) ``<prog>: stopped by SIGTERM`` and exit code 143. With ``SEQENC_DEBUG``
    on (:func:`debug_enabled`) the traceback is shown too."""
    try:
        yield
    except (Terminated, SIGTERMException):
        if debug_enabled():
            traceback.print_exc()
        print(f"{prog}: stopped by SIGTERM", file=sys.stderr)
        raise SystemExit(TERMINATED_EXIT) from None
    except Exception as e:
        error = user_error(e)
        if error is None or debug_enabled():
            raise
        print(f"{prog}: error: {error}", file=sys.stderr)
        raise SystemExit(1) from None


@contextmanager
def held_output() -> Iterator[Callable[[], None]]:
    """Hold what the block prints (stdout, stderr, warnings, and the log lines of handlers that
    write there: Lightning's banner, "Seed set to") until it calls the yielded ``release``, so a
    command that fails its checks prints its one line alone. Held output is dropped when the block
    raises a user error (:func:`user_error`; kept with ``SEQENC_DEBUG``), else written out."""
    streams = {"stdout": sys.stdout, "stderr": sys.stderr}
    held = {name: io.StringIO() for name in streams}
    kinds = {id(sys.__stdout__): "stdout", id(sys.__stderr__): "stderr"}
    kinds |= {id(stream): name for name, stream in streams.items()}
    handlers = [  # (handler, its stream, the held stream it writes to meanwhile)
        (h, h.stream, held[kinds[id(h.stream)]])
        for logger in [logging.getLogger(), *logging.Logger.manager.loggerDict.values()]
        for h in getattr(logger, "handlers", [])
        if type(h) is logging.StreamHandler and id(h.stream) in kinds
    ]
    released = False

    def restore(write: bool) -> None:
        nonlocal released
        if released:
            return
        released = True
        sys.stdout, sys.stderr = streams["stdout"], streams["stderr"]
        for handler, stream, _ in handlers:
            handler.setStream(stream)
        for name, stream in streams.items():
            if write and held[name].getvalue():
                stream.write(held[name].getvalue())
                stream.flush()

    sys.stdout, sys.stderr = held["stdout"], held["stderr"]
    for handler, _, stream in handlers:
        handler.setStream(stream)
    try:
        yield lambda: restore(write=True)
    except BaseException as e:
        restore(write=user_error(e) is None or debug_enabled())
        raise
    restore(write=True)


def run_user_command(run: Callable[[], Any], prog: str) -> Any:
    """``run()`` within :func:`one_line_errors`."""
    with one_line_errors(prog):
        return run()


def default_logger_classes() -> list[str]:
    """``CSVLogger``, plus ``TensorBoardLogger`` when TensorBoard is installed (``tensorboard`` or
    ``tensorboardX``: Lightning does not depend on either); otherwise a one-line notice."""
    if any(_installed(name) for name in ("tensorboard", "tensorboardX")):
        return ["CSVLogger", "TensorBoardLogger"]
    print(
        "seqenc: TensorBoard is not installed, logging to CSV only "
        "(pip install 'seqenc[tensorboard]' for TensorBoard logs)",
        file=sys.stderr,
    )
    return ["CSVLogger"]


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a module set to None in sys.modules, or without a spec
        return False


# What a type jsonargparse names in its messages accepts, in the user's words.
_ACCEPTS = {
    "int": "a whole number",
    "float": "a number",
    "bool": "true or false",
    "str": "text",
    "NoneType": "null",
    "list": "a list",
    "tuple": "a list",
    "dict": "a mapping",
}


def option_error(message: str, argv: list[str]) -> str:
    """jsonargparse's many-line rejection of an option value (``Parser key "model.label_steps":
    ... Given value: 1e9``) as one line naming the option, the value and what it takes; a message
    of another shape (an unknown option) with its lines joined. The ``--config`` files of ``argv``
    are named when the option is not on the command line."""
    configs = config_paths(argv)
    keys = re.findall(r'Parser key "([^"]+)":', message)
    unknown = re.search(r"does not accept option '([^']+)'", message)
    if unknown:  # a key of a config file that is no option
        where = f" (in --config {', '.join(configs)})" if configs else ""
        return f"{unknown.group(1)}{where}: not an option of this command"
    if not keys:
        return " ".join(line.strip() for line in message.splitlines() if line.strip())
    key = keys[0] + "".join(f".{k}" for k in keys[1:] if "." not in k)
    innermost = message.rsplit(f'Parser key "{keys[-1]}":', 1)[1]
    given = re.findall(r"^\s*Given value: (.*)$", message, re.M)
    got = re.findall(r"Got value: (.*)$", innermost, re.M)
    value = given[-1] if given and not given[-1].startswith("NestedArg(") else (got or ["?"])[0]
    subtypes = re.search(r"^\s*Subtypes: \[(.*)\]$", message, re.M)
    expected = re.findall(r"Expected an? (.*?)(?:\. Got value: .*)?$", innermost, re.M)
    names = _split_types(subtypes.group(1)) if subtypes and len(keys) == 1 else expected[:1]
    accepted = _either([a for name in names for a in _accepts(name)])
    given_here = any(a.split("=", 1)[0] == f"--{keys[0]}" for a in argv)
    where = f" (in --config {', '.join(configs)})" if configs and not given_here else ""
    if not accepted:  # another rejection of the key (a file it names cannot be read)
        lines = [line.strip() for line in innermost.splitlines() if line.strip()]
        return f"{key}{where}: {lines[0] if lines else 'rejected'}"
    return f"{key}{where}: {value} is not accepted; it takes {accepted}"


def config_paths(argv: list[str]) -> list[str]:
    """The ``--config`` files of ``argv`` (``--config FILE`` or ``--config=FILE``), in order."""
    paths = [b for a, b in zip(argv, argv[1:], strict=False) if a == "--config"]
    return paths + [a.split("=", 1)[1] for a in argv if a.startswith("--config=")]


def _split_types(text: str) -> list[str]:
    """``[<class 'int'>, typing.Literal['a', 'b']]``'s inside split at its top-level commas."""
    parts, depth, start = [], 0, 0
    for i, char in enumerate(text):
        depth += (char in "[(") - (char in "])")
        if char == "," and depth == 0:
            parts.append(text[start:i].strip())
            start = i + 1
    return [*parts, text[start:].strip()]


def _either(alternatives: list[str]) -> str:
    """``a, b or c`` (each once)."""
    unique = list(dict.fromkeys(alternatives))
    return " or ".join(filter(None, [", ".join(unique[:-1]), *unique[-1:]]))


def _accepts(name: str) -> list[str]:
    """What the type ``name`` (as jsonargparse writes it) accepts: ``typing.Literal['a', 'b']``
    its values, ``list[float]`` a list of numbers, ``<class 'int'>`` a whole number."""
    name = name.strip()
    literal = re.fullmatch(r"typing\.Literal\[(.*)\]", name)
    if literal:
        return [v.strip().strip("'\"") for v in _split_types(literal.group(1))]
    plain = re.fullmatch(r"<class '(?:[\w.]+\.)?(\w+)'>", name)
    base = plain.group(1) if plain else name.split("[", 1)[0].rsplit(".", 1)[-1]
    if base == "list" and "[" in name:
        inner = _either(_accepts(name[name.index("[") + 1 : name.rindex("]")]))
        return [f"a list of {inner.removeprefix('a ').removeprefix('an ')}s"]
    return [_ACCEPTS.get(base, "a mapping" if plain and base[:1].isupper() else base)]
