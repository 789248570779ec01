"""Shared test fixtures: the location of the licensed datasets in ``../shared/data``; hypothesis
without deadlines (tests never assert timings: a loaded CI machine must not fail one)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import settings

settings.register_profile("seqenc", deadline=None)
settings.load_profile("seqenc")


def shared_data_dir() -> Path:
    """``$SEQENC_SHARED_DATA`` or ``<repo>/../shared/data`` (never committed: licensed data)."""
    env = os.environ.get("SEQENC_SHARED_DATA")
    return Path(env) if env else Path(__file__).resolve().parents[1].parent / "shared" / "data"


@pytest.fixture
def shared_data() -> Path:
    """The shared data folder; skips the test when it is absent."""
    path = shared_data_dir()
    if not path.is_dir():
        pytest.skip(f"shared data folder not found: {path}")
    return path
