"""pytest plugin: emulator fixtures and adversarial-mode reruns for kernel tests.

Enable it in a project's top-level ``conftest.py``::

    pytest_plugins = ["cutedsl.testing.plugin"]

(or ``pytest -p cutedsl.testing.plugin``). It gives

* ``sim`` (session): a :class:`cutedsl.sim.SimBackend` to pass as ``backend=`` to
  ``cutedsl.runtime.launch`` or a front end;
* ``sim_seed``: the adversarial-mode seed of this run (``None``: eager). Every test that
  uses ``sim`` or is marked ``@pytest.mark.sim_kernel`` runs once eagerly and once per seed
  1..N (ids ``[eager]``, ``[chaos1]``, ...), with ``CUTEDSL_SIM_CHAOS`` set for the test so it
  reaches every launch, subprocesses included. N is ``--sim-seeds N`` (env
  ``CUTEDSL_TEST_SIM_SEEDS``, default 1; 0: eager only). A ``CUTEDSL_SIM_CHAOS`` already set
  in the environment is a fixed choice and is left alone (no reruns);
* ``rng``: a :class:`cutedsl.testing.seeds.SeededRng` with a fresh seed per test (or
  ``--rng-seed S`` / env ``CUTEDSL_TEST_RNG_SEED`` to replay one); a failing test's report
  gets a ``cutedsl seeds`` section naming the rng seed and the adversarial seed to replay;
* the ``sim_kernel`` marker.

This is the only module of ``cutedsl.testing`` that imports pytest.
"""
from __future__ import annotations

import os

import pytest

from .seeds import CHAOS_ENV, SeededRng, chaos_fixed_by_environment, seed_id, sim_seeds


def _env_int(name, default):
    v = os.environ.get(name, "").strip()
    return int(v) if v else default


def pytest_addoption(parser):
    group = parser.getgroup("cutedsl", "cutedsl emulator tests")
    group.addoption("--sim-seeds", type=int, default=_env_int("CUTEDSL_TEST_SIM_SEEDS", 1),
                    help="rerun emulator kernel tests under adversarial-mode seeds 1..N (0: eager only; "
                         "env CUTEDSL_TEST_SIM_SEEDS, default 1)")
    group.addoption("--rng-seed", type=int, default=_env_int("CUTEDSL_TEST_RNG_SEED", None),
                    help="seed of every test's `rng` fixture, to replay a failure (default: fresh per test)")


def pytest_configure(config):
    config.addinivalue_line("markers", "sim_kernel: runs kernels on the emulator; rerun under --sim-seeds")
    n = config.getoption("--sim-seeds")
    if n < 0:
        raise pytest.UsageError(f"--sim-seeds must be >= 0 (0: eager only), got {n}")


def pytest_generate_tests(metafunc):
    n = metafunc.config.getoption("--sim-seeds")
    if n <= 0 or chaos_fixed_by_environment():
        return
    if "sim" in metafunc.fixturenames or metafunc.definition.get_closest_marker("sim_kernel"):
        if "sim_seed" not in metafunc.fixturenames:
            metafunc.fixturenames.append("sim_seed")
        # indirect: the seed goes through the fixture, which sets CUTEDSL_SIM_CHAOS (a direct
        # parametrization would hand the test the number and skip the fixture)
        metafunc.parametrize("sim_seed", sim_seeds(n), ids=seed_id, indirect=True)


@pytest.fixture
def sim_seed(request, monkeypatch):
    """The adversarial-mode seed of this run (``None``: eager), set in ``CUTEDSL_SIM_CHAOS``
    for the test's duration."""
    seed = getattr(request, "param", None)
    if seed is not None:
        monkeypatch.setenv(CHAOS_ENV, str(seed))
    return seed


@pytest.fixture
def rng(request):
    """Fresh random inputs every run (``numpy.random.Generator``); the seed is reported when
    the test fails and is ``rng.seed_value`` for assertion messages."""
    return SeededRng(request.config.getoption("--rng-seed"))


@pytest.fixture(scope="session")
def sim():
    """The emulator backend, one per session (its adversarial seed is read at each launch)."""
    from ..sim import SimBackend
    return SimBackend()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    rep = yield
    if rep.failed:
        args = getattr(item, "funcargs", {})
        lines = []
        if isinstance(args.get("rng"), SeededRng):
            s = args["rng"].seed_value
            lines.append(f"rng seed {s} (replay: --rng-seed {s})")
        chaos = args.get("sim_seed") if "sim_seed" in args else os.environ.get(CHAOS_ENV) or None
        if chaos is not None:
            lines.append(f"emulator adversarial seed {chaos} ({CHAOS_ENV}={chaos})")
        if lines:
            rep.sections.append(("cutedsl seeds", "\n".join(lines)))
    return rep
