"""mbarrier phases/parity/tx, named barriers, cluster barrier, deadlock reports."""
import time

import numpy as np
import pytest

from cutedsl.sim import DeadlockError, Emulator, SimRuntimeError, load_ptx
from simkit import kernel, mbarrier_wait

DECL = "\t.shared .align 8 .b8 bars[16];\n"
PRE = """
\tld.param.u64 %rd1, [p_out];
\tmov.u32 %r1, %tid.x;
\tmul.wide.u32 %rd2, %r1, 4;
\tadd.s64 %rd3, %rd1, %rd2;
\tmov.u32 %r40, bars;
\tsetp.eq.u32 %p10, %r1, 0;
"""



def run(body, n=32, emu=None, **kw):
    emu = emu or Emulator()
    ptx = kernel(PRE + body, decls=DECL)
    prog = load_ptx(ptx)
    out = emu.to_device(np.zeros(n, np.uint32))
    emu.launch(prog, 1, n, [out], **kw)
    return emu.to_host(out, (n,), np.uint32), ptx


def test_mbarrier_phases_parity_and_tx():
    # warp 0 lane 0 inits (count 1); warp 1 arrives with expect_tx 64, then lane 0 of warp 1
    # completes the tx with mbarrier.complete_tx; everyone waits on parity 0, then tests parity 1
    body = """
\t@%p10 mbarrier.init.shared.b64 [%r40], 1;
\tbar.sync 0;
\tsetp.eq.u32 %p11, %r1, 32;
\t@%p11 mbarrier.arrive.expect_tx.shared.b64 %rd10, [%r40], 64;
\t@%p11 mbarrier.complete_tx.shared.b64 [%r40], 48;
\tmbarrier.test_wait.parity.shared.b64 %p12, [%r40], 0;
\t@%p11 mbarrier.complete_tx.shared.b64 [%r40], 16;
""" + mbarrier_wait("%r40", 0) + """
\tmbarrier.test_wait.parity.shared.b64 %p13, [%r40], 1;
\tselp.u32 %r2, 1, 0, %p13;
\tmbarrier.test_wait.parity.shared.b64 %p14, [%r40], 0;
\tselp.u32 %r3, 10, 0, %p14;
\tadd.s32 %r4, %r2, %r3;
\tst.global.u32 [%rd3], %r4;
"""
    out, _ = run(body, n=64)
    # one completed phase: waiting on parity 0 succeeds, parity 1 (the running phase) does not
    assert out.tolist() == [10] * 64


def test_mbarrier_arrival_count_and_token():
    body = """
\t@%p10 mbarrier.init.shared.b64 [%r40], 64;
\tbar.sync 0;
\tmbarrier.arrive.shared.b64 %rd10, [%r40];
\tmbarrier.test_wait.shared.b64 %p1, [%r40], %rd10;
""" + mbarrier_wait("%r40", 0) + """
\tmbarrier.test_wait.shared.b64 %p2, [%r40], %rd10;
\tselp.u32 %r2, 1, 0, %p2;
\tcvt.u32.u64 %r3, %rd10;
\tmad.lo.s32 %r4, %r3, 100, %r2;
\tst.global.u32 [%rd3], %r4;
"""
    out, _ = run(body, n=64)
    assert out.tolist() == [1] * 64


def test_planted_deadlock_wrong_parity_reported_fast():
    body = """
\t@%p10 mbarrier.init.shared.b64 [%r40], 2;
\tbar.sync 0;
\t@%p10 mbarrier.arrive.shared.b64 %rd10, [%r40];
""" + mbarrier_wait("%r40", 0)
    t = time.perf_counter()
    with pytest.raises(DeadlockError) as e:
        run(body, n=64)
    assert time.perf_counter() - t < 5
    msg = str(e.value)
    assert "mbarrier.try_wait.parity.shared.b64 P1, [%r40], 0" in msg
    assert "bars" in msg and "parity 0" in msg and "pending arrivals 1/2" in msg
    assert "warp 0 lanes 0-31" in msg and "warp 1 lanes 0-31" in msg
    assert "PTX line" in msg


def test_deadlock_missing_tx_bytes_hint():
    body = """
\t@%p10 mbarrier.init.shared.b64 [%r40], 1;
\tbar.sync 0;
\t@%p10 mbarrier.arrive.expect_tx.shared.b64 %rd10, [%r40], 16384;
""" + mbarrier_wait("%r40", 0)
    with pytest.raises(DeadlockError, match="16384 transaction bytes still expected"):
        run(body)


def test_named_barrier_with_count_and_deadlock():
    # warps 0 and 1 sync on barrier 1 (64 threads) while warp 2 skips it
    body = """
\tsetp.ge.u32 %p1, %r1, 64;
\t@%p1 bra $L_skip;
\tbar.sync 1, 64;
\tst.global.u32 [%rd3], 5;
$L_skip:
"""
    out, _ = run(body, n=96)
    assert out.tolist() == [5] * 64 + [0] * 32
    body = "\tbar.sync 1, 96;\n"
    with pytest.raises(DeadlockError, match=r"named barrier 1: 2 of 3 warps arrived"):
        run(body, n=64)


def test_bar_arrive_producer_consumer():
    # warp 1 publishes through smem and bar.arrive; warp 0 bar.syncs and reads
    decl_body = """
\tsetp.ge.u32 %p1, %r1, 32;
\t@%p1 bra $L_prod;
\tbar.sync 2, 64;
\tld.shared.u32 %r5, [bars+8];
\tst.global.u32 [%rd3], %r5;
\tbra.uni $L_end;
$L_prod:
\tsetp.eq.u32 %p2, %r1, 32;
\t@%p2 st.shared.u32 [bars+8], 77;
\tbar.arrive 2, 64;
$L_end:
"""
    out, _ = run(decl_body, n=64)
    assert out.tolist() == [77] * 32 + [0] * 32


def test_over_arrival_is_an_error():
    body = """
\t@%p10 mbarrier.init.shared.b64 [%r40], 1;
\tbar.sync 0;
\tmbarrier.arrive.expect_tx.shared.b64 %rd10, [%r40], 4;
"""
    with pytest.raises(SimRuntimeError, match="over-arrival"):
        run(body, n=32)


def test_uninitialised_mbarrier():
    with pytest.raises(SimRuntimeError, match="before mbarrier.init"):
        run("\tmbarrier.arrive.shared.b64 %rd10, [%r40];\n")


def test_cluster_barrier_and_dsmem():
    # 2-CTA cluster: each CTA writes its rank into the peer's smem through mapa, then syncs
    body = """
\tmov.u32 %r5, %cluster_ctarank;
\txor.b32 %r6, %r5, 1;
\tmapa.shared::cluster.u32 %r7, %r40, %r6;
\tsetp.eq.u32 %p1, %r1, 0;
\t@%p1 st.shared::cluster.u32 [%r7+8], %r5;
\tbarrier.cluster.arrive.aligned;
\tbarrier.cluster.wait.aligned;
\tld.shared.u32 %r8, [bars+8];
\tmov.u32 %r9, %ctaid.x;
\tmul.wide.u32 %rd5, %r9, 128;
\tadd.s64 %rd6, %rd3, %rd5;
\tst.global.u32 [%rd6], %r8;
"""
    emu = Emulator()
    prog = load_ptx(kernel(PRE + body, decls=DECL, directives=".explicitcluster\n.reqnctapercluster 2, 1, 1"))
    out = emu.to_device(np.zeros(64, np.uint32))
    emu.launch(prog, 2, 32, [out])
    r = emu.to_host(out, (64,), np.uint32)
    assert r.tolist() == [1] * 32 + [0] * 32


#: warp 0's lane 0 waits on an mbarrier that warp 1 completes only after a long spin (so the
#: emulator runs lanes 1.. of warp 0 meanwhile); warp 1 stores 42 to shared memory first. The
#: lanes of the mask meet lane 0 at bar.warp.sync and read the word.
WARP_SYNC = """
\t@%p10 mbarrier.init.shared.b64 [%r40], 1;
\tbar.sync 0;
\tsetp.eq.u32 %p14, %r1, 32;
\t@!%p14 bra W0;
\tmov.u32 %r30, 0;
SPIN:
\tadd.u32 %r30, %r30, 1;
\tsetp.lt.u32 %p12, %r30, 200;
\t@%p12 bra SPIN;
\tst.shared.u32 [%r40+8], 42;
\tmbarrier.arrive.shared.b64 %rd10, [%r40];
\tbra.uni END;
W0:
\tsetp.ge.u32 %p15, %r1, 32;
\t@%p15 bra.uni END;
\tsetp.ne.u32 %p11, %r1, 0;
\t@%p11 bra JOIN;
""" + mbarrier_wait() + """
JOIN:
\t@%p13 bar.warp.sync MASK;
\t@%p13 ld.shared.u32 %r31, [%r40+8];
\t@%p13 st.global.u32 [%rd3], %r31;
END:
"""


@pytest.mark.parametrize("mask,members", [("-1", 32), ("0x0000ffff", 16)])
def test_bar_warp_sync_waits_for_the_lanes_of_its_mask(mask, members):
    """Lanes 1.. of warp 0 reach bar.warp.sync long before lane 0 (blocked on an mbarrier warp 1
    completes late); they resume only when every lane of the membermask is there, so each reads
    warp 1's store -- with no race reported (the mbarrier orders it for lane 0, bar.warp.sync
    for the others). Lanes outside a partial mask skip it."""
    body = (f"\tsetp.lt.u32 %p13, %r1, {members};\n" + WARP_SYNC).replace("MASK", mask)
    for chaos in (None, 1, 2):          # the adversarial schedules run lanes 1.. ahead of lane 0
        out, _ = run(body, n=64, emu=Emulator(chaos=chaos))
        assert out.tolist() == [42] * members + [0] * (64 - members), chaos


def test_bar_warp_sync_by_a_lane_outside_its_mask_is_an_error():
    body = ("\tsetp.lt.u32 %p13, %r1, 32;\n" + WARP_SYNC).replace("MASK", "0x0000ffff")
    with pytest.raises(SimRuntimeError, match=r"bar.warp.sync executed by lane 1., which is not in its membermask "
                                              r"0x0000ffff"):
        run(body, n=64)
