"""Shared fixtures: an isolated kernel cache per test session, backends, GPU skipping."""
from __future__ import annotations

import os
import tempfile

import numpy as np
import pytest

_CACHE = tempfile.mkdtemp(prefix="cutedsl-test-cache-")
os.environ.setdefault("CUTEDSL_CACHE_DIR", _CACHE)


def _gpu_reason():
    from cutedsl.device.cuda import CudaBackend
    ok, why = CudaBackend.available()
    return None if ok else why


def pytest_collection_modifyitems(config, items):
    why = None
    checked = False
    for item in items:
        if "gpu" in item.keywords:
            if not checked:
                why, checked = _gpu_reason(), True
            if why:
                item.add_marker(pytest.mark.skip(reason=f"needs a Hopper GPU: {why}"))


class _Rng:
    """numpy Generator with a fresh OS-drawn seed each test; ``seed_value`` for messages."""

    def __init__(self):
        self.seed_value = int.from_bytes(os.urandom(4), "little")
        self._g = np.random.default_rng(self.seed_value)

    def __getattr__(self, name):
        return getattr(self._g, name)


@pytest.fixture
def rng():
    """Fresh random inputs every run; the seed is reported in assertion messages."""
    return _Rng()


@pytest.fixture(scope="session")
def sim():
    from cutedsl.sim import SimBackend
    return SimBackend()


@pytest.fixture(scope="session")
def cuda():
    from cutedsl.device.cuda import CudaBackend
    return CudaBackend()
