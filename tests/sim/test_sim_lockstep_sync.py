"""Warp-uniform synchronisation instructions in lockstep batches (registry.each_warp, BATCH_EACH):
``mbarrier.try_wait`` on a phase already complete,
``wgmma.fence/commit_group/wait_group`` and ``fence.proxy.async`` run once per batch, each warp in
the scheduler's stepping order. Every result, warp-instruction count and report must be the one
of the warps run one by one (the decoder's BATCH_EACH switched off). ``bar.sync`` is not one (its
batched form lost a wake-up under an adversarial schedule; test_sm100_epilogue_replay.py)."""
import numpy as np
import pytest

from cutedsl.sim import Emulator, RaceError, load_ptx
from cutedsl.sim.frontend import program
from cutedsl.sim.machine import warpbatch
from simkit import kernel, mbarrier_wait, spy

SMEM = "\t.extern .shared .align 16 .b8 dyn[];\n"


@pytest.fixture(autouse=True)
def _eager(monkeypatch):
    monkeypatch.delenv("CUTEDSL_SIM_CHAOS", raising=False)


@pytest.fixture
def per_warp(monkeypatch):
    """Call it to decode every later kernel with BATCH_EACH off: the warps' own runs."""
    return lambda: monkeypatch.setattr(program, "BATCH_EACH", program.NO_BATCH)


@pytest.fixture
def each_runs(monkeypatch):
    """The (lo, hi) warp runs that executed a BATCH_EACH instruction as one batch."""
    return spy(monkeypatch, warpbatch.WarpBatch, "members", lambda args, _: (args[0].lo, args[0].hi))


# each thread stores its id, synchronises ({sync}), reads the word of thread tid ^ partner (another warp)
EXCHANGE = """
\tmov.u32 %r1, %tid.x;
\tmov.u32 %r2, dyn;
\tshl.b32 %r4, %r1, 2;
\tadd.u32 %r5, %r2, %r4;
\tst.shared.u32 [%r5], %r1;
{sync}
\txor.b32 %r7, %r1, {partner};
\tshl.b32 %r8, %r7, 2;
\tadd.u32 %r9, %r2, %r8;
\tld.shared.u32 %r10, [%r9];
\tld.param.u64 %rd1, [p_out];
\tmul.wide.u32 %rd2, %r1, 4;
\tadd.s64 %rd3, %rd1, %rd2;
\tst.global.u32 [%rd3], %r10;
"""

# an mbarrier of 128 arrivals (thread 0 initialises it at the end of shared memory)
MBAR_SYNC = """
\tadd.u32 %r40, %r2, 1024;
\tsetp.eq.u32 %p1, %r1, 0;
\tmov.u32 %r41, 128;
\t@%p1 mbarrier.init.shared.b64 [%r40], %r41;
\tfence.mbarrier_init.release.cluster;
\tbar.sync 0;
\tmbarrier.arrive.shared.b64 %rd9, [%r40];
""" + mbarrier_wait()

# warps 4..7 first spin through a loop (so they reach the barrier after warps 0..3)
LATE = """
\tshr.u32 %r20, %r1, 7;
\tmov.u32 %r21, 0;
\tsetp.eq.u32 %p5, %r20, 0;
\t@%p5 bra ARRIVE;
SPIN:
\tadd.u32 %r21, %r21, 1;
\tsetp.lt.u32 %p6, %r21, 20;
\t@%p6 bra SPIN;
ARRIVE:
\tbar.sync 1, 256;
"""


def run(sync, threads=128, tag="", partner=32):
    """``tag``: a comment that makes the PTX text new (decoded programs are cached by text)."""
    emu = Emulator()
    out = emu.to_device(np.zeros(threads, np.uint32))
    body = EXCHANGE.format(sync=sync, partner=partner) + tag
    info = emu.launch(load_ptx(kernel(body, decls=SMEM)), 1, threads, [out], smem=2048)
    return emu.to_host(out, (threads,), np.uint32), info["instructions"]


@pytest.mark.parametrize("sync, threads, batched", [
    # bar.sync is not a batch instruction (a lost wake-up under an adversarial schedule: sync.py);
    # its cases check the per-warp runs give the same results and counts
    ("\tbar.sync 1, 128;", 128, False),           # a warpgroup's named barrier
    ("\tbar.sync 0;", 128, False),                # every warp of the CTA
    (MBAR_SYNC, 128, True),                       # arrivals, then a wait on a complete phase
    (LATE, 256, False),                           # half the warps late
    ("\tfence.proxy.async.shared::cta;\n\tbar.sync 1, 128;", 128, True),
])
def test_synchronisation_in_a_batch_is_each_warps_own(sync, threads, batched, per_warp, each_runs):
    got, n = run(sync, threads)
    assert np.array_equal(got, np.arange(threads, dtype=np.uint32) ^ 32)
    assert bool(each_runs) == batched, each_runs
    if batched:
        assert (0, 4) in each_runs                # all four warps at once
    per_warp()
    each_runs.clear()
    want, n0 = run(sync, threads, "\t// per warp\n")
    assert not each_runs
    assert np.array_equal(got, want) and n == n0  # the same warp-instruction count


def test_a_barrier_too_small_for_the_batch_is_still_a_race(per_warp):
    """bar.sync 1, 64 with four warps: two generations of two warps each, so warp 0 may read warp 2's
    word before warp 2 stores it (not ordered) -- reported whether or not the warps run batched."""
    with pytest.raises(RaceError) as batched:
        run("\tbar.sync 1, 64;", partner=64)
    per_warp()
    with pytest.raises(RaceError) as alone:
        run("\tbar.sync 1, 64;", tag="\t// per warp\n", partner=64)
    assert str(batched.value) == str(alone.value)
