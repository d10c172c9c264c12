"""Shared fixtures: an isolated kernel cache per test session, backends, GPU skipping; the
emulator fixtures (``sim``, ``sim_seed``, ``rng``, ``--sim-seeds``, the ``sim_kernel`` marker)
come from the plugin users enable the same way, ``cutedsl.testing.plugin``.

``--sim-seeds N`` (env ``CUTEDSL_TEST_SIM_SEEDS``, default 1): every test that runs kernels on
the emulator (it uses the ``sim`` fixture or is marked ``sim_kernel``) runs once in eager mode
and once per seed 1..N of the adversarial mode (``CUTEDSL_SIM_CHAOS`` set for the test, so it
reaches every launch, subprocesses included). ``--sim-seeds 0`` turns the reruns off; a fixed
``CUTEDSL_SIM_CHAOS`` in the environment is left alone. The emulator's wall-clock limit
defaults to 300 s per launch in tests (``CUTEDSL_SIM_TIME_LIMIT``), and its initcheck is on
(``CUTEDSL_SIM_INITCHECK``)."""
from __future__ import annotations

import os
import tempfile

import pytest

_CACHE = tempfile.mkdtemp(prefix="cutedsl-test-cache-")
os.environ.setdefault("CUTEDSL_CACHE_DIR", _CACHE)
os.environ.setdefault("CUTEDSL_SIM_TIME_LIMIT", "300")
os.environ.setdefault("CUTEDSL_SIM_INITCHECK", "1")     # reads of memory nothing wrote are errors

pytest_plugins = ["cutedsl.testing.plugin"]


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


@pytest.fixture(scope="session")
def cuda():
    if GPU_ON_SIM:                      # a dry run of the GPU tests (see GPU_ON_SIM)
        from cutedsl.sim import SimBackend
        return SimBackend()
    from cutedsl.runtime.cuda import CudaBackend
    return CudaBackend()
