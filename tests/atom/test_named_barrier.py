"""Named barriers as an atom (issue 41): ids and thread counts checked while building (the
library's ConfigError, naming the argument), the PTX they emit, and two barriers of different
ids and thread counts working at the same time on the emulator."""
import numpy as np
import pytest

from cutedsl.atom.sync import NamedBarrier
from cutedsl.errors import ConfigError
from cutedsl.testing import build_kernel, normalize_ptx, run_kernel


@pytest.mark.parametrize("bad", [16, -1, 99])
def test_barrier_id_range(bad):
    with pytest.raises(ConfigError, match=rf"NamedBarrier barrier_id: named barrier id {bad} outside 0..15 .*"
                                          r"pick 1..15"):
        NamedBarrier(bad, 128)


@pytest.mark.parametrize("bad", [0, 100, 16, 1056, 2048, 64.0])
def test_thread_count_is_whole_warps(bad):
    with pytest.raises(ConfigError, match=rf"NamedBarrier threads: .*count {bad!r} must be a multiple of 32 "
                                          r"\(the warp size.*in 32..1024"):
        NamedBarrier(1, bad)


def test_more_threads_than_the_cta_is_refused_at_build_time():
    def body(args, smem):
        NamedBarrier(2, 256).sync()
    with pytest.raises(ConfigError, match=r"NamedBarrier\(2, 256\) waits for 256 threads but the kernel's CTA "
                                          r"has 128: it would never complete"):
        build_kernel(body, block=(128, 1, 1))


def _two_groups(args, smem):
    """Warps 0-1 (64 threads, barrier 3) and warps 2-7 (192 threads, barrier 5) each pass values
    between their warps through shared memory: thread t writes x[t] = 7t + 1, syncs on its
    group's barrier, then reads x of the thread 32 places further round its own group. Then
    warp 2 writes y and arrives on barrier 6 (96 threads) without waiting; warps 6-7 sync on it
    and read y."""
    from mlir.dialects import memref
    import cutedsl.ir as cir
    tid = cir.thread_idx()
    buf = smem["x"].view()
    out = cir.GlobalPtr(args.out, "i32")
    memref.store(cir.i32(tid * 7 + 1), buf, [cir.index(tid)])
    small = cir.If(tid < 64, results=["i32"])
    with small.then_():
        NamedBarrier(3, 64).sync()
        small.yield_(cir.Scalar(memref.load(buf, [cir.index((tid + 32) % 64)])))
    with small.else_():
        NamedBarrier(5, 192).sync()
        small.yield_(cir.Scalar(memref.load(buf, [cir.index((tid - 64 + 32) % 192 + 64)])))
    v, = small.results
    out.store(cir.i64(tid), v)
    w = cir.warp_idx()
    with cir.If(w.eq(2)):
        memref.store(cir.i32(tid * 11), buf, [cir.index(tid + 256)])
        NamedBarrier(6, 96).arrive()
    with cir.If(w >= 6):
        NamedBarrier(6, 96).sync()
        out.store(cir.i64(tid + 256), cir.Scalar(memref.load(buf, [cir.index(tid % 32 + 64 + 256)])))


@pytest.mark.sim_kernel
def test_concurrent_named_barriers_on_emulator():
    from cutedsl.ir import SmemPlan
    plan = SmemPlan()
    plan.buffer("x", (512,), "i32")
    k = build_kernel(_two_groups, block=(256, 1, 1), plan=plan)
    ptx = normalize_ptx(k.ptx)
    for form in ("bar.sync 3, 64;", "bar.sync 5, 192;", "bar.sync 6, 96;"):
        assert form in ptx, form
    assert ptx.count("bar.arrive") == 1 and k.resources.sass.get("BAR", 0) >= 4
    out = np.full(512, -1, np.int32)
    run_kernel(k, [out])
    got = out
    t = np.arange(256)
    src = np.where(t < 64, (t + 32) % 64, (t - 64 + 32) % 192 + 64)
    assert np.array_equal(got[:256], src * 7 + 1)
    # warps 6-7 read what warp 2 wrote before its arrive (thread 64 + j wrote (64 + j) * 11)
    assert np.array_equal(got[256 + 192:512], (np.arange(64) % 32 + 64) * 11)
    assert np.all(got[256:256 + 192] == -1)
