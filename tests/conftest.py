"""Shared fixtures: an isolated kernel cache per test session, backends, GPU skipping, and the
emulator's adversarial-mode reruns.

``--sim-seeds N`` (env ``CUTEDSL_TEST_SIM_SEEDS``, default 1): every test that runs kernels on
the emulator (it uses the ``sim`` fixture or is marked ``sim_kernel``) runs once in eager mode
and once per seed 1..N of the adversarial mode (``CUTEDSL_SIM_CHAOS`` set for the test, so it
reaches every launch, subprocesses included). ``--sim-seeds 0`` turns the reruns off; a fixed
``CUTEDSL_SIM_CHAOS`` in the environment is left alone. The emulator's wall-clock limit
defaults to 300 s per launch in tests (``CUTEDSL_SIM_TIME_LIMIT``)."""
from __future__ import annotations

import os
import tempfile

import numpy as np
import pytest

_CACHE = tempfile.mkdtemp(prefix="cutedsl-test-cache-")
os.environ.setdefault("CUTEDSL_CACHE_DIR", _CACHE)
os.environ.setdefault("CUTEDSL_SIM_TIME_LIMIT", "300")


def pytest_addoption(parser):
    parser.addoption("--sim-seeds", type=int, default=int(os.environ.get("CUTEDSL_TEST_SIM_SEEDS", "1")),
                     help="rerun emulator kernel tests under adversarial-mode seeds 1..N (0: eager only)")


def pytest_configure(config):
    config.addinivalue_line("markers", "sim_kernel: runs kernels on the emulator; rerun under --sim-seeds")


#: modules whose every test runs kernels on the emulator (examples run as subprocesses)
_SEEDED_MODULES = {"test_examples"}


def pytest_generate_tests(metafunc):
    n = metafunc.config.getoption("--sim-seeds")
    if n <= 0 or os.environ.get("CUTEDSL_SIM_CHAOS", "").strip():
        return
    if ("sim" in metafunc.fixturenames or metafunc.definition.get_closest_marker("sim_kernel")
            or metafunc.module.__name__.rpartition(".")[2] in _SEEDED_MODULES):
        metafunc.fixturenames.append("sim_seed")
        metafunc.parametrize("sim_seed", [None] + list(range(1, n + 1)),
                             ids=lambda s: "eager" if s is None else f"chaos{s}")


@pytest.fixture
def sim_seed(request, monkeypatch):
    """The adversarial-mode seed of this rerun (None: eager), set in ``CUTEDSL_SIM_CHAOS``."""
    seed = getattr(request, "param", None)
    if seed is not None:
        monkeypatch.setenv("CUTEDSL_SIM_CHAOS", str(seed))
    return seed


def _gpu_reason():
    from cutedsl.runtime.cuda import CudaBackend
    ok, why = CudaBackend.available()
    return None if ok else why


#: the dry run of scripts/gpu_run.sh sets this: the ``gpu`` tests run with the emulator as the
#: ``cuda`` fixture, from the bundle (no MLIR), which proves the bundle holds their kernels
GPU_ON_SIM = os.environ.get("CUTEDSL_TEST_GPU_ON_SIM", "") == "1"


def pytest_collection_modifyitems(config, items):
    if GPU_ON_SIM:
        return
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
    if GPU_ON_SIM:                      # a dry run of the GPU tests (see GPU_ON_SIM)
        from cutedsl.sim import SimBackend
        return SimBackend()
    from cutedsl.runtime.cuda import CudaBackend
    return CudaBackend()
