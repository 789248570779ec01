"""The one place a device or a Lightning accelerator is resolved: what the machine has, and a
one-line refusal of one it has not (``load_encoder(device=...)``, ``seqenc embed --accelerator``,
``seqenc fit --trainer.accelerator``), before torch or Lightning fail on it with a traceback."""

from __future__ import annotations

import importlib.util
import logging
from collections.abc import Iterator
from contextlib import contextmanager

import torch
from lightning.fabric.utilities.exceptions import MisconfigurationException

from seqenc.errors import SeqencError
from seqenc.integers import integer

KINDS = ("cpu", "cuda", "mps")  # the torch devices seqenc runs on
# Lightning's accelerator names → the torch device kinds that serve them ("auto": any).
ACCELERATORS = {"auto": KINDS, "cpu": ("cpu",), "gpu": ("cuda", "mps"), "cuda": ("cuda",)}
ACCELERATORS |= {"mps": ("mps",), "tpu": ("xla",)}


def device_count(kind: str) -> int:
    """How many devices of ``kind`` this machine has (torch's view)."""
    if kind == "cpu":
        return 1
    if kind == "cuda":
        return torch.cuda.device_count() if torch.cuda.is_available() else 0
    if kind == "mps":
        return int(torch.backends.mps.is_available())
    if kind == "xla":
        return int(importlib.util.find_spec("torch_xla") is not None)
    return 0


def machine() -> str:
    """What this machine has, for the messages: ``"cpu only"`` or ``"cpu, cuda x2"``."""
    extra = [k if n == 1 else f"{k} x{n}" for k in KINDS[1:] if (n := device_count(k))]
    return ", ".join(["cpu", *extra]) if extra else "cpu only"


def torch_device(device: str | torch.device | None) -> torch.device:
    """``device`` as a torch device this machine has (``None``: CUDA when available, else the
    CPU); refused in one line naming what the machine has."""
    if device is None:
        return torch.device("cuda" if device_count("cuda") else "cpu")
    try:
        found = torch.device(device)
    except (RuntimeError, TypeError, ValueError) as e:
        raise SeqencError(f"unknown device {device!r} (seqenc runs on {KINDS})") from e
    if found.type not in KINDS:
        raise SeqencError(f"device {device!r}: seqenc runs on {KINDS}, not {found.type!r}")
    index = 0 if found.index is None else found.index
    if index >= device_count(found.type):
        raise SeqencError(f"device {device!r} is not available: this machine has {machine()}")
    return found


def check_accelerator(accelerator: object, devices: object = None) -> None:
    """Refuse, in one line, a Lightning ``accelerator`` name this machine cannot serve, or more
    ``devices`` of it than it has (an ``Accelerator`` object, or ``devices`` Lightning parses
    itself, e.g. ``"0,1"`` or ``"auto"``, pass through)."""
    if not isinstance(accelerator, str):
        return
    name = accelerator.lower()
    if name not in ACCELERATORS:
        raise SeqencError(f"unknown accelerator {accelerator!r}: one of {list(ACCELERATORS)}")
    have = max(device_count(kind) for kind in ACCELERATORS[name])
    if not have:
        raise SeqencError(
            f"accelerator {accelerator!r} is not available: this machine has {machine()}"
        )
    wanted = _count(devices)
    if name != "cpu" and wanted is not None and wanted > have:
        raise SeqencError(
            f"devices={devices!r} asks for {wanted} {name} device(s): this machine has {machine()}"
        )


def _count(devices: object) -> int | None:
    """How many devices ``devices`` asks for when it is a count (``2``, ``"2"``), ``None`` for
    the other forms Lightning takes (``"auto"``, ``-1``, indices ``"0,1"`` or ``[0, 1]``); any
    other value is refused."""
    text = devices.strip() if isinstance(devices, str) else None
    if devices is None or text == "auto" or devices == -1 or text == "-1":
        return None
    if integer(devices) is not None and devices > 0:
        return int(devices)
    if text and text.isdigit() and int(text) > 0:
        return int(text)
    indices = text.strip(",").split(",") if text else devices
    if isinstance(indices, (list, tuple)) and indices and all(_index(i) for i in indices):
        return None
    raise SeqencError(
        f"devices must be a count > 0, -1, 'auto' or device indices such as '0,1', got {devices!r}"
    )


def _index(value: object) -> bool:
    """Whether ``value`` is a device index (``0``, ``"1"``)."""
    if isinstance(value, str):
        return value.strip().isdigit()
    return integer(value) is not None and value >= 0


@contextmanager
def trainer_options(quiet: bool = False) -> Iterator[None]:
    """Within the block (a Lightning ``Trainer`` being built), Lightning's refusal of its
    accelerator, devices or strategy is one line; ``quiet`` leaves out its banner (devices found,
    tips) for a trainer the user never configured (the export's), so an error stays one line."""
    banner = logging.getLogger("lightning.pytorch.utilities.rank_zero")
    level = banner.level
    if quiet:
        banner.setLevel(logging.WARNING)
    try:
        yield
    except (MisconfigurationException, TypeError, ValueError) as e:
        raise SeqencError(f"trainer options: {' '.join(str(e).split())}") from e
    finally:
        banner.setLevel(level)
