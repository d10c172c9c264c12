"""Thread safety (issue 7 item 1): one ``Gemm`` shared by many threads gives exact results,
with a cold and a warm compile cache, and concurrent first uses share one backend object."""
import threading
import time

import numpy as np
import pytest

from cutedsl import Gemm, GemmConfig
from cutedsl.compiler.cache import KernelCache
from cutedsl.runtime import selection as backends

THREADS = 6


def _run_threads(fn, n=THREADS):
    """Run ``fn(i)`` in ``n`` threads released together; returns the results (exceptions re-raised)."""
    barrier = threading.Barrier(n)
    out = [None] * n

    def body(i):
        barrier.wait()
        try:
            out[i] = fn(i)
        except BaseException as e:  # noqa: BLE001 - handed to the main thread
            out[i] = e

    ts = [threading.Thread(target=body, args=(i,)) for i in range(n)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(timeout=300)
    assert not any(t.is_alive() for t in ts), "a thread hung"
    for r in out:
        if isinstance(r, BaseException):
            raise r
    return out


def _operands(rng, m, n, k):
    a = rng.integers(-3, 4, (m, k)).astype(np.float16)
    b = rng.integers(-3, 4, (k, n)).astype(np.float16)
    return a, b, a.astype(np.float64) @ b.astype(np.float64)


def _slow(fn, calls, delay=0.05):
    """Wrap ``fn`` to record its calls and widen the window in which threads can race."""
    def wrapper(*args, **kwargs):
        calls.append(args)
        time.sleep(delay)
        return fn(*args, **kwargs)
    return wrapper


@pytest.mark.parametrize("cache_state", ["cold", "warm"])
def test_one_gemm_many_threads_is_exact(cache_state, tmp_path, rng, monkeypatch):
    """The threads race on the first call: backend creation, compile (or cache load) and module
    load each happen once, and every thread's result is exact."""
    monkeypatch.setattr(backends, "_instances", {})      # the backend too is created by the threads
    made = []
    monkeypatch.setattr(backends, "_construct", _slow(backends._construct, made))
    cache = KernelCache(tmp_path / "cache")
    cfg = GemmConfig(tile=(64, 64, 64), stages=2)
    if cache_state == "warm":
        Gemm(cfg, "none", cache=cache).compiled         # kernel in the cache; the Gemm below is fresh
    g = Gemm(cfg, "sim", cache=cache)
    compiles = []
    g.kernel.compile = _slow(g.kernel.compile, compiles)
    cases = [_operands(rng, 65 + 7 * i, 70 - 3 * i, 64 + 8 * (i % 2)) for i in range(THREADS)]
    got = _run_threads(lambda i: g(cases[i][0], cases[i][1]))
    for i, (d, (_, _, ref)) in enumerate(zip(got, cases)):
        np.testing.assert_array_equal(d, ref, err_msg=f"thread {i} (seed {rng.seed_value})")
    assert made == [("sim",)] and g.backend is backends._instances["sim"]   # one shared backend
    assert len(compiles) == 1                           # compiled (or loaded from the cache) once


def test_concurrent_compiles_of_different_kernels(tmp_path, rng):
    """Several threads building IR at once (cold cache): the process-wide compile lock
    serialises MLIR use; every kernel is right."""
    cache = KernelCache(tmp_path / "cache")
    cfgs = [GemmConfig(tile=(64, 64, 64), stages=1), GemmConfig(tile=(64, 64, 64), stages=2),
            GemmConfig(tile=(64, 64, 64), stages=1, epilogue="global")]
    gemms = [Gemm(c, "sim", cache=cache) for c in cfgs]
    kernels = _run_threads(lambda i: gemms[i].compiled, n=len(gemms))
    assert len({k.ptx for k in kernels}) == len(cfgs)
    a, b, ref = _operands(rng, 67, 65, 72)
    for g in gemms:
        np.testing.assert_array_equal(g(a, b), ref, err_msg=f"{g.config} (seed {rng.seed_value})")


def test_concurrent_backend_resolution_makes_one_object(monkeypatch):
    monkeypatch.setattr(backends, "_instances", {})
    made = []
    monkeypatch.setattr(backends, "_construct", _slow(backends._construct, made))
    got = _run_threads(lambda i: backends.get_backend("sim"), n=8)
    assert made == [("sim",)] and all(b is got[0] for b in got)


def test_one_kernel_object_compiled_from_many_threads(tmp_path):
    """``Kernel.compile`` on one kernel object from several threads (cold cache): IR building is
    serialised, so no thread sees another's half-built module; every thread gets the same PTX."""
    kern = GemmConfig(tile=(64, 64, 64), stages=2).kernel()
    caches = [KernelCache(tmp_path / f"c{i}") for i in range(4)]     # a miss in every thread
    got = _run_threads(lambda i: kern.compile(cache=caches[i]), n=4)
    assert len({k.ptx for k in got}) == 1
