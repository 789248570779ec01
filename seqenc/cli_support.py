"""Helpers of the ``seqenc`` command that stand apart from the LightningCLI wiring: user errors as
one line, and the loggers a base install can run."""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Callable
from typing import Any

from seqenc.errors import SeqencError

DEBUG_ENV = "SEQENC_DEBUG"


def user_error(exc: BaseException) -> SeqencError | None:
    """The :class:`SeqencError` behind ``exc`` (itself, or one it wraps: jsonargparse and
    Lightning re-raise errors from inside the classes they build), else None."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, SeqencError):
            return exc
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return None


def run_user_command(run: Callable[[], Any], prog: str) -> Any:
    """``run()``; a user error (bad data, path, column, value) becomes one line on stderr and exit
    code 1. Set ``SEQENC_DEBUG=1`` for the full traceback."""
    try:
        return run()
    except Exception as e:
        error = user_error(e)
        if error is None or os.environ.get(DEBUG_ENV, "") not in ("", "0"):
            raise
        print(f"{prog}: error: {error} (set {DEBUG_ENV}=1 for the traceback)", file=sys.stderr)
        raise SystemExit(1) from None


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
