"""Helpers of the ``seqenc`` command that stand apart from the LightningCLI wiring: user errors and
SIGTERM as one line, and the loggers a base install can run."""

from __future__ import annotations

import importlib.util
import io
import logging
import os
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
    the disk full (:func:`~seqenc.atomic.disk_full`: a checkpoint, a log), else None."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, SeqencError):
            return exc
        if (full := disk_full(exc)) is not None:
            return full
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return None


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
