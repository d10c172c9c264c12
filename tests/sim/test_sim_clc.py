"""Cluster launch control (``clusterlaunchcontrol.try_cancel`` / ``query_cancel``, sm_100): a
work-stealing kernel written here, assembled by the pinned ptxas for sm_100a, run with
``sm_count`` SMs so that most CTAs wait to be launched -- or cancelled and their item done by a
running CTA. Every item exactly once, in eager mode (each request succeeds while a CTA waits)
and under adversarial seeds (random victims, failed requests)."""
import numpy as np
import pytest

from cutedsl.compiler.toolchain import ptxas
from cutedsl.sim import Emulator, PTXParseError, SimRuntimeError, UnsupportedInstruction, load_ptx
from tc05kit import PTXAS_SM100

#: each CTA: its own item (ctaid.x) then, while a try_cancel succeeds, the cancelled CTA's; one
#: atomic add per item done into out[item], the item count per CTA into done[ctaid]
KERNEL = """.version 8.8
.target sm_100a
.address_size 64

.visible .entry steal(.param .u64 p_out, .param .u64 p_done)
{
\t.reg .pred %p<8>;
\t.reg .b32 %r<32>;
\t.reg .b64 %rd<16>;
\t.shared .align 16 .b8 resp[16];
\t.shared .align 8 .b8 bar[8];
\tld.param.u64 %rd1, [p_out];
\tld.param.u64 %rd2, [p_done];
\tmov.u32 %r1, %tid.x;
\tmov.u32 %r2, %ctaid.x;
\tmov.u32 %r3, resp;
\tmov.u32 %r4, bar;
\tsetp.eq.u32 %p1, %r1, 0;
\t@%p1 mbarrier.init.shared::cta.b64 [%r4], 1;
\tbar.sync 0;
\tmov.u32 %r5, 0;
\tmov.u32 %r6, 0;
LOOP:
\tmul.wide.u32 %rd3, %r2, 4;
\tadd.s64 %rd4, %rd1, %rd3;
\t@%p1 red.global.add.u32 [%rd4], 1;
\tadd.u32 %r5, %r5, 1;
\t@%p1 mbarrier.arrive.expect_tx.shared::cta.b64 _, [%r4], 16;
\t@%p1 clusterlaunchcontrol.try_cancel.async.shared::cta.mbarrier::complete_tx::bytes.b128 [%r3], [%r4];
WAIT:
\tmbarrier.try_wait.parity.shared::cta.b64 %p2, [%r4], %r6;
\t@!%p2 bra WAIT;
\txor.b32 %r6, %r6, 1;
\tld.shared.v2.b64 {%rd5, %rd6}, [%r3];
\t{
\t.reg .b128 %h;
\tmov.b128 %h, {%rd5, %rd6};
\tclusterlaunchcontrol.query_cancel.is_canceled.pred.b128 %p3, %h;
\tclusterlaunchcontrol.query_cancel.get_first_ctaid::x.b32.b128 %r7, %h;
\t}
\tbar.sync 0;
\tmov.u32 %r2, %r7;
\t@%p3 bra LOOP;
\tmov.u32 %r8, %ctaid.x;
\tmul.wide.u32 %rd7, %r8, 4;
\tadd.s64 %rd8, %rd2, %rd7;
\t@%p1 st.global.u32 [%rd8], %r5;
\tret;
}
"""


#: dynamic shared memory per CTA: one CTA per SM, so ``sm_count`` CTAs run at once
ONE_PER_SM = 150_000


def steal(n, sm_count, ptx=KERNEL, **kw):
    emu = Emulator(sm_count=sm_count, **kw)
    out, done = emu.to_device(np.zeros(n, np.uint32)), emu.to_device(np.zeros(n, np.uint32))
    info = emu.launch(load_ptx(ptx), n, 64, [out, done], smem=ONE_PER_SM)
    return emu.to_host(out, (n,), np.uint32), emu.to_host(done, (n,), np.uint32), info


def test_kernel_assembles_for_sm100a():
    ptxas(KERNEL, arch=PTXAS_SM100)


@pytest.mark.sim_kernel
@pytest.mark.parametrize("sm_count", [1, 3, 132])
def test_every_item_once(sm_count, sim_seed):
    out, done, info = steal(12, sm_count)
    assert out.tolist() == [1] * 12
    assert info["clusters_started"] + info["clusters_cancelled"] == 12
    assert int(done.sum()) == 12 and int((done > 0).sum()) == info["clusters_started"]
    if sim_seed is None and sm_count < 12:   # eager: the resident CTAs take every waiting item
        assert info["clusters_started"] == sm_count
    if sm_count == 132:                  # all resident at once: nothing left to cancel
        assert info["clusters_cancelled"] == 0 and done.tolist() == [1] * 12


def test_eager_order_is_launch_order():
    # one SM: CTA 0 runs and cancels 1, 2, ... in launch order
    out, done, info = steal(5, 1)
    assert done.tolist() == [5, 0, 0, 0, 0] and info["clusters_cancelled"] == 4


def test_query_of_something_else_is_an_error():
    bad = KERNEL.replace("\tld.shared.v2.b64 {%rd5, %rd6}, [%r3];", "\tmov.b64 %rd5, 7;\n\tmov.b64 %rd6, 0;")
    with pytest.raises(SimRuntimeError, match=r"query_cancel of a value that is not a try_cancel response "
                                              r"\(first word 0x00000007\)"):
        steal(2, 1, bad)


def test_failed_response_first_ctaid_is_all_ones():
    # 1 CTA: its request fails (nothing to cancel); the undefined ctaid reads 0xFFFFFFFF
    ptx = KERNEL.replace("\t@%p3 bra LOOP;", "\t@%p3 bra LOOP;\n\tst.global.u32 [%rd2+4], %r7;")
    emu = Emulator(sm_count=1)
    out, done = emu.to_device(np.zeros(1, np.uint32)), emu.to_device(np.zeros(2, np.uint32))
    emu.launch(load_ptx(ptx), 1, 64, [out, done], smem=ONE_PER_SM)
    assert emu.to_host(done, (2,), np.uint32).tolist() == [1, 0xFFFFFFFF]


def test_malformed_forms_are_refused():
    with pytest.raises(UnsupportedInstruction, match=r"unsupported clusterlaunchcontrol.try_cancel modifier .gpu"):
        load_ptx(KERNEL.replace("try_cancel.async.shared::cta", "try_cancel.async.gpu.shared::cta"))
    with pytest.raises(PTXParseError, match=r"query_cancel's response is a .b128 register"):
        load_ptx(KERNEL.replace("is_canceled.pred.b128 %p3, %h;", "is_canceled.pred.b128 %p3, %rd5;"))


def test_reading_the_response_without_the_mbarrier_wait_is_a_race():
    from cutedsl.sim import RaceError
    bad = KERNEL.replace("\t@!%p2 bra WAIT;\n", "")      # one poll, no retry: may read before it lands
    bad = bad.replace("\tmbarrier.try_wait.parity.shared::cta.b64 %p2, [%r4], %r6;\n", "")
    with pytest.raises(RaceError, match=r"asynchronous stores \(try_cancel response of warp 0 completing on bar(.|\n)*"
                                        r"generic proxy(.|\n)*missing: an mbarrier try_wait/test_wait observing the "
                                        r"phase that this write's complete_tx completes"):
        steal(4, 1, bad)
