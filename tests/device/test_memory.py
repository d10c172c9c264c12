"""Device-memory lifetime (issue 7 item 2): every allocation a call makes is freed, tensor maps
are released, and ownership of returned device arrays is the caller's. Runs on the emulator,
counting live allocations in the backend."""
import os

import numpy as np
import pytest

from cutedsl import Gemm, GemmConfig
from cutedsl.runtime import arrays
from cutedsl.device.saxpy import saxpy
from cutedsl.errors import ArgumentError
from cutedsl.sim import SimBackend
from cutedsl.sim.engines import tensormap as sim_tma

CFG = GemmConfig(tile=(64, 64, 64), stages=2)


@pytest.fixture
def be():
    return SimBackend()            # a private backend: its counts are this test's alone


def _ints(rng, shape):
    return rng.integers(-3, 4, shape).astype(np.float16)


def test_repeated_numpy_calls_do_not_grow_device_memory(be, rng):
    g = Gemm(CFG, be)
    registry = len(sim_tma._REGISTRY)
    for i in range(8):
        a, b = _ints(rng, (70 + i, 72)), _ints(rng, (72, 65))
        d = g(a, b)
        np.testing.assert_array_equal(d, a.astype(np.float64) @ b.astype(np.float64),
                                      err_msg=f"call {i} (seed {rng.seed_value})")
        assert be.live_allocations() == 0, f"call {i} left {be.live_allocations()} allocations"
        assert be.live_tensor_maps() == 0 and len(sim_tma._REGISTRY) == registry


def test_b_k_major_and_global_epilogue_calls_free_everything(be, rng):
    for cfg in (GemmConfig(tile=(64, 64, 64), stages=1, b_major="K"),
                GemmConfig(tile=(64, 64, 64), stages=1, epilogue="global")):
        a, bt = _ints(rng, (33, 64)), _ints(rng, (40, 64))
        d = Gemm(cfg, be)(a, bt.T)
        np.testing.assert_array_equal(d, a.astype(np.float64) @ bt.T.astype(np.float64))
        assert be.live_allocations() == 0 and be.live_tensor_maps() == 0


def test_device_result_is_owned_by_the_caller(be, rng):
    a, b = _ints(rng, (70, 64)), _ints(rng, (64, 72))
    da, db = arrays.to_device(be, a), arrays.to_device(be, b)
    assert be.live_allocations() == 2
    d = Gemm(CFG, be)(da, db)
    assert isinstance(d, arrays.DeviceArray) and be.live_allocations() == 3
    np.testing.assert_array_equal(arrays.to_host(d), a.astype(np.float64) @ b.astype(np.float64))
    view = d.view(shape=(10, 72))
    del d
    assert be.live_allocations() == 3              # a view keeps its memory alive
    del view
    assert be.live_allocations() == 2 and be.live_tensor_maps() == 0
    da.free()
    da.free()                                       # idempotent
    assert be.live_allocations() == 1
    db.free()
    assert be.live_allocations() == 0


def test_prepared_call_keeps_memory_until_released(be, rng):
    g = Gemm(CFG, be)
    a, b = _ints(rng, (65, 64)), _ints(rng, (64, 65))
    launch, result = g.prepare(a, b)
    launch()
    launch()                                        # repeated launches (timing) reuse the buffers
    np.testing.assert_array_equal(result(), a.astype(np.float64) @ b.astype(np.float64))
    assert be.live_allocations() == 3 and be.live_tensor_maps() == 3
    del launch, result                              # garbage collected -> released
    assert be.live_allocations() == 0 and be.live_tensor_maps() == 0
    launch, result = g.prepare(a, b)
    launch.release()                                # or released at once
    launch.release()
    assert be.live_allocations() == 0 and be.live_tensor_maps() == 0


def test_failed_call_frees_what_it_allocated(be, rng):
    g = Gemm(CFG, be)
    db = arrays.to_device(be, _ints(rng, (64, 72)))
    bad = db.view(offset=2, shape=(63, 72))        # misaligned: refused after a's copy exists
    with pytest.raises(ArgumentError, match="b: global address"):
        g(_ints(rng, (70, 63)), bad)
    assert be.live_allocations() == 1 and be.live_tensor_maps() == 0    # only db remains


def test_foreign_memory_is_never_freed_by_cutedsl(be):
    buf = be.alloc(256)
    view = arrays.DeviceArray(buf.ptr, (8, 8), (32, 4), arrays._dtype("f32"), be, owner=buf)
    with pytest.raises(ArgumentError, match="did not allocate"):
        view.free()
    assert be.live_allocations() == 1
    be.free(buf)


def test_saxpy_calls_free_everything(be, rng):
    x = rng.standard_normal(100).astype(np.float32)
    y = rng.standard_normal(100).astype(np.float32)
    for tma in (False, True):
        np.testing.assert_allclose(saxpy(2.0, x, y, tma=tma, backend=be), 2.0 * x + y, rtol=1e-6)
        assert be.live_allocations() == 0 and be.live_tensor_maps() == 0


def test_finalizers_do_nothing_in_a_forked_child(be, rng):
    """The compiler forks a lowering worker; garbage collected there must not touch the
    parent's backend (its lock may be held by another parent thread at the fork)."""
    import os
    arr = arrays.to_device(be, _ints(rng, (4, 8)))
    pid = os.fork()
    if pid == 0:                                   # child: drop the array, report the count
        del arr
        os._exit(0 if be.live_allocations() == 1 else 1)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
    assert be.live_allocations() == 1
    arr.free()
    assert be.live_allocations() == 0


def _libc_trim():
    """glibc's ``malloc_trim`` (None elsewhere), looked up once: calling it makes no objects."""
    import ctypes
    import ctypes.util
    name = ctypes.util.find_library("c")
    fn = getattr(ctypes.CDLL(name), "malloc_trim", None) if name else None
    return fn


_TRIM = _libc_trim()


def _rss_kib() -> int:
    """Resident set size after glibc returned its free heap pages (``malloc_trim``): what the
    process holds, not what the allocator keeps cached for it (that varied by 25+ MiB from run
    to run and made the leak check flaky)."""
    if _TRIM is not None:
        _TRIM(0)
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * (os.sysconf("SC_PAGE_SIZE") // 1024)


@pytest.mark.parametrize("cfg", [CFG, GemmConfig(tile=(128, 128, 64), schedule="cooperative", cluster=(2, 1))],
                         ids=["multistage", "cooperative-2x1"])
def test_nothing_of_a_call_outlives_it(be, rng, cfg, monkeypatch):
    """Issue 29 item 3: with the cyclic collector off, 50 calls leave the live-object count and the
    RSS flat (each call used to leave ~660 objects in cycles holding its arrays), and the
    emulator's launch state is gone when the call returns."""
    import gc
    import weakref

    from cutedsl.sim.machine import scheduler
    launches = []
    real_run = scheduler.Launch.run
    monkeypatch.setattr(scheduler.Launch, "run", lambda self: (launches.append(weakref.ref(self)), real_run(self))[1])
    g = Gemm(cfg, be)
    a, b = _ints(rng, (150, 64)), _ints(rng, (64, 130))
    ref = a.astype(np.float64) @ b.astype(np.float64)
    for _ in range(3):                          # warm: compile, module load, first-call caches
        np.testing.assert_array_equal(g(a, b), ref)     # (its first use makes importlib cycles)
    gc.collect()
    gc.disable()
    try:
        objs0, rss0 = len(gc.get_objects()), _rss_kib()
        for i in range(50):
            np.testing.assert_array_equal(g(a, b), ref)
            assert launches[-1]() is None, f"call {i}: the emulator's launch state outlived the call"
        objs1, rss1 = len(gc.get_objects()), _rss_kib()
        assert gc.collect() == 0, "the calls left reference cycles"
    finally:
        gc.enable()
    assert objs1 - objs0 < 100, (objs0, objs1)
    assert rss1 - rss0 < 8 * 1024, f"RSS grew {rss1 - rss0} KiB over 50 calls"
    assert be.live_allocations() == 0
