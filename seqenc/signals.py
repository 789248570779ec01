"""SIGTERM as an exception, so ``timeout``, ``docker stop`` and Kubernetes stop a run cleanly.

Lightning installs a SIGTERM handler that only notes the signal (its predict loop never looks), so
an export would run to the end and exit 0. Within :func:`sigterm_raises` the signal raises
:class:`Terminated` instead: like Ctrl-C it unwinds through every ``finally`` and Lightning's
``on_exception`` hooks (scratch removed, no output), and the command exits with 143 (128 + 15).
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

EXIT_CODE = 128 + int(getattr(signal, "SIGTERM", 15))


class Terminated(BaseException):
    """SIGTERM was received (a ``BaseException``, as ``KeyboardInterrupt``: not a user error,
    never swallowed by ``except Exception``)."""


@contextmanager
def sigterm_raises() -> Iterator[None]:
    """Within the block SIGTERM raises :class:`Terminated` (after a handler already installed,
    which still runs). A no-op outside the main thread, where no handler can be set, and when
    SIGTERM is deliberately ignored."""
    if (
        not hasattr(signal, "SIGTERM")
        or threading.current_thread() is not threading.main_thread()
        or signal.getsignal(signal.SIGTERM) is signal.SIG_IGN
    ):
        yield
        return
    previous = signal.getsignal(signal.SIGTERM)

    def handler(signum: int, frame: FrameType | None) -> None:
        if callable(previous):
            previous(signum, frame)
        raise Terminated("stopped by SIGTERM")

    signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
