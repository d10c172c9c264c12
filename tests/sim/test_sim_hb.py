"""Happens-before rules of the race detector on small kernels: the proxy-fence rule (a
fence.proxy.async acts on the generic writes the fencing thread has observed, its own and
other threads' ordered before it by a barrier) with cp.async data and a TMA store; mbarrier
init ordering; named-barrier counts."""
import numpy as np
import pytest

from cutedsl.sim import Emulator, RaceError, load_ptx
from simkit import HEADER, REGS, mbarrier_wait


@pytest.fixture(autouse=True)
def _modes_chosen_per_run(monkeypatch):
    # every launch here names its mode (chaos=None is eager): a process-wide CUTEDSL_SIM_CHAOS
    # must not turn the eager runs into adversarial ones
    monkeypatch.delenv("CUTEDSL_SIM_CHAOS", raising=False)


COPY = """
\tmov.u32 %r1, %tid.x;
\tld.param.u64 %rd1, [p_src];
\tmul.wide.u32 %rd2, %r1, 16;
\tadd.s64 %rd3, %rd1, %rd2;
\tmov.u32 %r2, dyn;
\tshl.b32 %r3, %r1, 4;
\tadd.u32 %r4, %r2, %r3;
\tsetp.eq.u32 %p1, %r1, 0;
{writer_fence}
\t@!%p1 cp.async.cg.shared.global [%r4], [%rd3], 16;
\t@%p1 st.shared.v4.u32 [%r4], {{%r1, %r1, %r1, %r1}};
\tcp.async.commit_group;
\tcp.async.wait_group 0;
{writer_fence2}
\tbar.sync 0;
{issuer_fence}
\tmov.u32 %r5, 0;
\t@%p1 cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group [p_tm, {{%r5, %r5}}], [dyn];
\t@%p1 cp.async.bulk.commit_group;
\t@%p1 cp.async.bulk.wait_group.read 0;
"""
FENCE = "\tfence.proxy.async.shared::cta;"


def copy_kernel(writer_fence="", writer_fence2="", issuer_fence=""):
    body = COPY.format(writer_fence=writer_fence, writer_fence2=writer_fence2, issuer_fence=issuer_fence)
    return (f"{HEADER}.visible .entry k(\n\t.param .u64 p_src,\n\t.param .align 64 .b8 p_tm[128]\n)\n{{\n{REGS}"
            f"\t.extern .shared .align 1024 .b8 dyn[];\n{body}\n\tret;\n}}\n")


def run_copy(ptx, seed=None):
    emu = Emulator(chaos=seed)
    src = np.arange(512, dtype=np.float32).reshape(8, 64) + 1
    dst = np.zeros_like(src)
    ds, dd = emu.to_device(src), emu.to_device(dst)
    tm = emu.tensor_map(dd, (8, 64), "f32", (8, 64))
    emu.launch(load_ptx(ptx), 1, 128, [ds, tm], smem=2048)
    got = emu.to_host(dd, (8, 64), np.float32)
    ref = src.copy()
    ref.reshape(-1)[:4] = 0          # thread 0 stores its tid (0) instead of copying
    return got, ref


@pytest.mark.parametrize("seed", [None, 1, 2, 3])
def test_fence_by_the_issuing_thread_after_the_barrier_is_enough(seed):
    # Triton's pattern: cp.async by other warps -> cp.async.wait_group -> bar.sync ->
    # fence.proxy.async by the thread that issues the async-proxy read
    got, ref = run_copy(copy_kernel(issuer_fence="\t@%p1 " + FENCE.strip()), seed)
    assert np.array_equal(got, ref)


@pytest.mark.parametrize("seed", [None, 5])
def test_fence_by_every_writer_before_the_barrier_is_enough(seed):
    # CUTLASS's pattern: each writer fences, then the barrier orders the fences before the store
    got, ref = run_copy(copy_kernel(writer_fence2=FENCE), seed)
    assert np.array_equal(got, ref)


def test_no_proxy_fence_is_a_race():
    with pytest.raises(RaceError, match=r"(?s)write by .*(cp\.async copies of warp|warp 0).*"
                                        r"read by .*bulk copies of warp 0.*TMA store source.*fence\.proxy\.async"):
        run_copy(copy_kernel())


def test_fence_before_the_generic_write_does_not_count():
    # a fence orders only the writes before it: fencing first and writing afterwards is a race
    with pytest.raises(RaceError, match="fence.proxy.async after the generic-proxy write"):
        run_copy(copy_kernel(writer_fence=FENCE))


def test_proxy_fence_on_global_memory_does_not_order_shared_memory():
    # fence.proxy.async.global acts on the global state space only (PTX ISA membar/fence: .space
    # restricts a proxy fence); the shared-memory source of the TMA store is still unfenced
    with pytest.raises(RaceError, match="fence.proxy.async after the generic-proxy write"):
        run_copy(copy_kernel(issuer_fence="\t@%p1 fence.proxy.async.global;"))


INIT = """
\tmov.u32 %r1, %tid.x;
\tsetp.eq.u32 %p1, %r1, 0;
\tsetp.eq.u32 %p2, %r1, 32;
\tmov.u32 %r2, bars;
\t@%p1 mbarrier.init.shared.b64 [%r2], 1;
{sync}
\t@%p2 mbarrier.arrive.shared.b64 %rd1, [%r2];
"""


def init_kernel(sync):
    return (f"{HEADER}.visible .entry k(\n\t.param .u64 p_out\n)\n{{\n{REGS}\t.shared .align 8 .b8 bars[8];\n"
            f"{INIT.format(sync=sync)}\n\tret;\n}}\n")


def test_mbarrier_use_must_be_ordered_after_its_init():
    Emulator().launch(load_ptx(init_kernel("\tfence.mbarrier_init.release.cluster;\n\tbar.sync 0;")), 1, 64, [0])
    with pytest.raises(RaceError, match=r"(?s)data race on mbarrier bars.*mbarrier\.init by .*warp 0.*"
                                        r"use by .*warp 1.*fence\.mbarrier_init"):
        Emulator().launch(load_ptx(init_kernel("")), 1, 64, [0])


CPBAR = """
\tmov.u32 %r1, %tid.x;
\tmov.u32 %r2, bars;
\tsetp.eq.u32 %p1, %r1, 0;
\t@%p1 mbarrier.init.shared.b64 [%r2], 128;
\tfence.mbarrier_init.release.cluster;
\tbar.sync 0;
\tld.param.u64 %rd1, [p_src];
\tmul.wide.u32 %rd2, %r1, 16;
\tadd.s64 %rd3, %rd1, %rd2;
\tmov.u32 %r3, dyn;
\tshl.b32 %r4, %r1, 4;
\tadd.u32 %r5, %r3, %r4;
\tcp.async.cg.shared.global [%r5], [%rd3], 16;
\t@ARRIVE@
""" + mbarrier_wait("%r2", 0) + """
\tadd.u32 %r6, %r1, 32;
\tand.b32 %r6, %r6, 127;
\tshl.b32 %r6, %r6, 4;
\tadd.u32 %r7, %r3, %r6;
\tld.shared.v4.u32 {%r10, %r11, %r12, %r13}, [%r7];
\tld.param.u64 %rd4, [p_out];
\tadd.s64 %rd5, %rd4, %rd2;
\tst.global.v4.u32 [%rd5], {%r10, %r11, %r12, %r13};
"""


def run_cpbar(arrive, seed=None):
    ptx = (f"{HEADER}.visible .entry k(\n\t.param .u64 p_src,\n\t.param .u64 p_out\n)\n{{\n{REGS}"
           f"\t.shared .align 8 .b8 bars[8];\n\t.extern .shared .align 1024 .b8 dyn[];\n" +
           CPBAR.replace("@ARRIVE@", arrive) + "\n\tret;\n}\n")
    emu = Emulator(chaos=seed)
    src = np.arange(512, dtype=np.uint32)
    ds, do = emu.to_device(src), emu.to_device(np.zeros(512, np.uint32))
    emu.launch(load_ptx(ptx), 1, 128, [ds, do], smem=2048)
    got = emu.to_host(do, (128, 4), np.uint32)
    assert np.array_equal(got, np.roll(src.reshape(128, 4), -32, axis=0))


@pytest.mark.parametrize("seed", [None, 1])
def test_cp_async_mbarrier_arrive_orders_the_copies(seed):
    run_cpbar("cp.async.mbarrier.arrive.noinc.shared.b64 [%r2];", seed)


def test_plain_arrive_does_not_cover_cp_async():
    with pytest.raises(RaceError, match=r"(?s)cp\.async copies of warp.*ld\.shared.*cp\.async\.wait_group"):
        run_cpbar("mbarrier.arrive.shared.b64 %rd9, [%r2];")


def test_vector_clocks_grow_with_lazily_created_agents():
    # agents (one per warp and mbarrier for TMA loads, ...) appear during the run: clocks made
    # before must still compare and join correctly, and the shadow stays sized by shared memory
    from cutedsl.sim.checks.hb import HB, Shadow, words_of
    from cutedsl.sim.machine.machine import CTA, Cluster
    from cutedsl.sim.machine.scheduler import Launch
    from simkit import kernel
    ln = Launch(load_ptx(kernel("")), Emulator().backend.gmem, 1, 64, [bytes(8)], smem=4096)
    cl = Cluster(0)
    cl.ctas.append(CTA(ln, (0, 0, 0), cl, 0, (0, 0, 0)))
    hb = cl.hb = HB(cl)
    w0, w1 = cl.ctas[0].warps
    sh = Shadow(cl.ctas[0], hb)
    snap = hb.release(w0)                                  # made with the initial capacity
    cap0 = hb.cap
    late = [hb.agent(("tma", 0, 0, 0, 8 * i), "tma", cl.ctas[0], 0, f"unit {i}") for i in range(cap0 + 5)]
    assert hb.cap > cap0 and late[-1].idx >= cap0
    words = words_of(np.array([0, 64]), 16)
    op = hb.async_op([w0], late[-1].idx, 1)
    sh.write(words, late[-1].idx, 1, op[0], 0, True, "TMA load")
    with pytest.raises(RaceError):                         # w1 has not observed the load
        sh.read(words, w1.agent, 1, hb.warp_vc(w1), w1.pvc, 0, False, "ld.shared")
    hb.acquire(w1, hb.merge(snap, op))                     # short and long snapshots join
    sh.read(words, w1.agent, 1, hb.warp_vc(w1), w1.pvc, 0, False, "ld.shared")
    assert len(w1.vc) == hb.cap and sh.w_clock.size == 4096 // 4 + 4
