"""Sync/register atoms: setmaxnreg, named barriers, fence.proxy.async, elect.sync — emitted PTX,
SASS, and a producer/consumer hand-off through a named barrier on the emulator."""
import numpy as np
import pytest

from cutedsl.atom import sync
from cutedsl.testing import build_kernel, normalize_ptx, run_kernel


def _reconfigure(args, smem):
    from cutedsl.ir import If, thread_idx
    wg = thread_idx() // 128
    with If(wg.eq(0)):
        sync.warpgroup_reg_dealloc(40)
    with If(wg.eq(1)):
        sync.warpgroup_reg_alloc(232)


def test_setmaxnreg_ptx_and_sass():
    k = build_kernel(_reconfigure, block=(256, 1, 1), max_registers=168)
    ptx = normalize_ptx(k.ptx)
    assert "setmaxnreg.dec.sync.aligned.u32 40;" in ptx
    assert "setmaxnreg.inc.sync.aligned.u32 232;" in ptx
    assert k.resources.sass.get("USETMAXREG") == 2 and k.resources.registers == 168
    assert k.resources.ptxas_messages == ()


def test_setmaxnreg_needs_a_known_entry_budget():
    # without .maxnreg / .minnctapersm ptxas cannot know the register count at entry and drops
    # the instruction (C7508): kernels that reconfigure registers must set one of them
    k = build_kernel(_reconfigure, block=(256, 1, 1))
    assert "USETMAXREG" not in k.resources.sass
    assert any("C7508" in m and "setmaxnreg" in m for m in k.resources.ptxas_messages)


@pytest.mark.parametrize("bad", [16, 260, 41, 0])
def test_setmaxnreg_range(bad):
    with pytest.raises(ValueError, match=rf"register count {bad} must be a multiple of 8 in \[24, 256\]"):
        sync.setmaxnreg(bad, True)
    with pytest.raises(TypeError, match="must be a Python int"):
        sync.warpgroup_reg_alloc(232.0)


def test_named_barrier_rules():
    with pytest.raises(ValueError, match="named barrier id 16 outside 0..15"):
        sync.NamedBarrier(16, 128)
    with pytest.raises(ValueError, match="thread count 100 must be a multiple of 32"):
        sync.NamedBarrier(1, 100)
    with pytest.raises(ValueError, match="thread count 2048"):
        sync.NamedBarrier(1, 2048)


def _handoff(args, smem):
    """Warpgroup 1 (producer, 40 registers) writes tid*3+1 into shared memory and arrives on
    barrier 1; warpgroup 0 (consumer, 232 registers; the emulator runs it first, so a missing
    barrier reads unwritten data) syncs on barrier 1, loads the producer's values, syncs on
    its own barrier (id 2 + warpgroup, a run-time id) and stores them to global; elect.sync picks
    one lane per warp to count the warp in out[256 + warp]."""
    from mlir.dialects import memref
    import cutedsl.ir as cir
    tid = cir.thread_idx()
    wg = tid // 128
    buf = smem["x"].view()
    out = cir.GlobalPtr(args.out, "i32")
    handoff = sync.NamedBarrier(1, 256)
    prod = cir.If(wg.eq(1))
    with prod.then_():
        sync.warpgroup_reg_dealloc(40)
        t = tid - 128
        memref.store(cir.i32(t * 3 + 1), buf, [cir.index(t)])
        handoff.arrive()
    with prod.else_():
        sync.warpgroup_reg_alloc(232)
        handoff.sync()
        v = cir.Scalar(memref.load(buf, [cir.index(tid)]))
        sync.NamedBarrier(wg + 2, 128).sync()          # consumer-only barrier, id 2
        out.store(cir.i64(tid), v)
    with cir.If(sync.elect_one()):
        out.store(cir.i64(cir.warp_idx() + 256), cir.i32(1))


@pytest.mark.sim_kernel
def test_named_barrier_handoff_on_emulator():
    from cutedsl.ir import SmemPlan
    plan = SmemPlan()
    plan.buffer("x", (128,), "i32")
    k = build_kernel(_handoff, block=(256, 1, 1), plan=plan, max_registers=168)
    ptx = normalize_ptx(k.ptx)
    assert "bar.arrive" in ptx and "bar.sync" in ptx and "elect.sync" in ptx
    assert k.resources.sass.get("USETMAXREG") == 2 and k.resources.sass.get("ELECT", 0) >= 1
    out = np.full(264, -1, np.int32)
    run_kernel(k, [out])
    res = out
    assert np.array_equal(res[:128], np.arange(128) * 3 + 1)
    assert np.array_equal(res[256:], np.ones(8, np.int32))
    assert np.all(res[128:256] == -1)


def _fenced_tma_store_src(args, smem):
    from mlir.dialects import memref
    import cutedsl.ir as cir
    memref.store(cir.i32(cir.thread_idx()), smem["x"].view(), [cir.index(cir.thread_idx())])
    sync.fence_proxy_async()


def test_fence_proxy_async_ptx():
    from cutedsl.ir import SmemPlan
    plan = SmemPlan()
    plan.buffer("x", (128,), "i32")
    k = build_kernel(_fenced_tma_store_src, plan=plan)
    assert "fence.proxy.async.shared::cta;" in normalize_ptx(k.ptx)
    assert k.resources.sass.get("FENCE") == 1
