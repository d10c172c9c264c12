"""Named barriers as PTX ISA 9.7.13.1 defines them (issue #39 item 3): arrivals are counted per
warp against the barrier's thread count, and a warp that ``bar.arrive``-s and then ``bar.sync``-s
the same barrier before it completes arrives twice (the ISA: "care must be taken to keep a warp
from executing more barrier instructions than intended (barrier.arrive followed by any other
barrier instruction to the same barrier) prior to the reset of the barrier" -- counted, not an
error). FlashAttention-3 relies on it; different thread counts for one barrier and divergent
lanes at ``bar.sync`` (= ``barrier.sync.aligned``) remain errors. Race checks on, eager and
adversarial."""
import numpy as np
import pytest

from cutedsl.sim import DeadlockError, Emulator, RaceError, SimRuntimeError, load_ptx
from simkit import kernel

SEEDS = [None, 1, 2]
PRE = """
\tld.param.u64 %rd1, [p_out];
\tmov.u32 %r1, %tid.x;
\tshr.u32 %r2, %r1, 5;
\tmov.u32 %r10, smem;
\tshl.b32 %r3, %r1, 2;
\tadd.u32 %r4, %r10, %r3;
"""
DECL = "\t.shared .align 16 .b8 smem[2048];"


def run(body, n, seed=None):
    emu = Emulator(chaos=seed)
    out = emu.to_device(np.zeros(n, np.uint32))
    emu.launch(load_ptx(kernel(PRE + body, decls=DECL)), 1, n, [out])
    return emu.to_host(out, (n,), np.uint32)


# FA3's epilogue: the 256 MMA threads store their tile to shared memory and bar.arrive at
# (1, 288); the last MMA warp then bar.sync-s (1, 288) -- its second arrival, the ninth -- and
# alone reads the whole tile (there it issues the TMA store).
EPILOGUE = """
\tmad.lo.u32 %r5, %r1, 3, 1;
\tst.shared.u32 [%r4], %r5;
\t{arrive}
\tsetp.ne.u32 %p1, %r2, 7;
\t@%p1 bra $L_end;
\t{sync}
\tand.b32 %r6, %r1, 31;
\tmov.u32 %r7, 0;
$L_copy:
\tshl.b32 %r8, %r7, 5;
\tadd.u32 %r8, %r8, %r6;
\tshl.b32 %r9, %r8, 2;
\tadd.u32 %r11, %r10, %r9;
\tld.shared.u32 %r12, [%r11];
\tmul.wide.u32 %rd2, %r8, 4;
\tadd.s64 %rd3, %rd1, %rd2;
\tst.global.u32 [%rd3], %r12;
\tadd.u32 %r7, %r7, 1;
\tsetp.lt.u32 %p2, %r7, 8;
\t@%p2 bra $L_copy;
$L_end:
"""


@pytest.mark.parametrize("seed", SEEDS)
def test_fa3_epilogue_arrive_then_sync_by_one_warp(seed):
    got = run(EPILOGUE.format(arrive="bar.arrive 1, 288;", sync="bar.sync 1, 288;"), 256, seed)
    assert got.tolist() == [3 * i + 1 for i in range(256)]


def test_fa3_epilogue_without_the_sync_is_a_race():
    """The control: the reading warp only arrives, so nothing orders the other warps' stores before
    its loads -- reported (the barrier then never completes either; the race comes first)."""
    with pytest.raises(RaceError, match=r"(?s)write by CTA .*warp [0-6] .*read by CTA .*warp 7"):
        run(EPILOGUE.format(arrive="bar.arrive 1, 288;", sync=""), 256)


# FA3's warp scheduler (two MMA warpgroups): warpgroup 0 arrives at its own scheduler barrier
# (1, 256) in mma_init and bar.sync-s it before its first GEMM -- arrive and sync of one
# generation by the same warps -- then publishes through shared memory and arrives at
# warpgroup 1's barrier (2, 256), which warpgroup 1 bar.sync-s before reading.
SCHEDULER = """
\tsetp.ge.u32 %p1, %r2, 4;
\t@%p1 bra $L_wg1;
\tbar.arrive 1, 256;
\tbar.sync 1, 256;
\tmad.lo.u32 %r5, %r1, 5, 2;
\tst.shared.u32 [%r4], %r5;
\tbar.arrive 2, 256;
\tbra.uni $L_end;
$L_wg1:
\tbar.sync 2, 256;
\tsub.u32 %r6, %r4, 512;
\tld.shared.u32 %r7, [%r6];
\tmul.wide.u32 %rd2, %r1, 4;
\tadd.s64 %rd3, %rd1, %rd2;
\tst.global.u32 [%rd3], %r7;
$L_end:
"""


@pytest.mark.parametrize("seed", SEEDS)
def test_fa3_scheduler_barrier_arrive_then_sync_by_one_warpgroup(seed):
    got = run(SCHEDULER, 256, seed)
    assert got[128:].tolist() == [5 * i + 2 for i in range(128)] and not got[:128].any()


def test_thread_count_mismatch_is_reported():
    body = """
\tsetp.ne.u32 %p1, %r2, 0;
\t@%p1 bra $L_other;
\tbar.arrive 1, 64;
\tbra.uni $L_end;
$L_other:
\tbar.sync 1, 96;
$L_end:
"""
    with pytest.raises(SimRuntimeError, match=r"barrier 1: thread count (96 differs from 64|64 differs from 96) "
                                              r"used by other warps in this generation"):
        run(body, 64)


def test_divergent_lanes_at_an_aligned_barrier_deadlock():
    """``bar.sync`` is ``barrier.sync.aligned``: half a warp at one barrier instruction and the
    other half at another never converge -- reported, not silently counted."""
    body = """
\tand.b32 %r5, %r1, 31;
\tsetp.lt.u32 %p1, %r5, 16;
\t@%p1 bra $L_a;
\tbar.sync 1, 64;
\tbra.uni $L_end;
$L_a:
\tbar.sync 1, 64;
$L_end:
"""
    with pytest.raises(DeadlockError, match="bar.sync 1, 64"):
        run(body, 64)
