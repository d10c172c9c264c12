"""Lockstep execution (cutedsl/sim/machine/lockstep.py): warps of a CTA at the same PC run a batch
instruction once for all of them. The results, race reports and errors must be exactly those of
running the warps one by one -- with guards that differ between warps, divergent branches,
warps that fall behind, shared-memory stores that collide, and stores over an mbarrier."""
import numpy as np
import pytest

from cutedsl.sim import Emulator, RaceError, SimRuntimeError, load_ptx
from cutedsl.sim.machine import machine
from simkit import kernel, spy


@pytest.fixture(autouse=True)
def _eager(monkeypatch):
    monkeypatch.delenv("CUTEDSL_SIM_CHAOS", raising=False)


@pytest.fixture
def batches(monkeypatch):
    """Record the (lo, hi) warp runs that executed an instruction as one batch."""
    return spy(monkeypatch, machine.CTA, "batch", lambda args, _: args[1:])


ARITH = """
\tmov.u32 %r1, %tid.x;
\tshr.u32 %r3, %r1, 5;
\tmul.lo.u32 %r4, %r1, 3;
\tsetp.lt.u32 %p1, %r1, 80;
\t@%p1 add.u32 %r4, %r4, 1000;
\tsetp.eq.u32 %p2, %r3, 5;
\t@%p2 bra SKIP;
\txor.b32 %r4, %r4, 85;
SKIP:
\tand.b32 %r5, %r1, 1;
\tsetp.eq.u32 %p3, %r5, 1;
\t@%p3 bra ODD;
\tadd.u32 %r4, %r4, 7;
\tbra.uni JOIN;
ODD:
\tsub.u32 %r4, %r4, 7;
JOIN:
\tmov.u32 %r6, %warpid;
\tmad.lo.u32 %r4, %r6, 100000, %r4;
\tmov.u32 %r7, %ctaid.x;
\tmad.lo.u32 %r4, %r7, 1000000, %r4;
\tld.param.u64 %rd1, [p_out];
\tmov.u32 %r8, %ntid.x;
\tmad.lo.u32 %r9, %r7, %r8, %r1;
\tmul.wide.u32 %rd2, %r9, 4;
\tadd.s64 %rd3, %rd1, %rd2;
\tst.global.u32 [%rd3], %r4;
"""


def arith_ref(ctas, threads):
    t = np.arange(threads, dtype=np.int64)
    v = 3 * t + np.where(t < 80, 1000, 0)
    v = np.where(t // 32 == 5, v, v ^ 85)
    v = np.where(t % 2 == 1, v - 7, v + 7) + 100000 * (t // 32)
    return np.concatenate([v + 1000000 * c for c in range(ctas)]).astype(np.uint32)


@pytest.mark.parametrize("seed", [None, 1, 2])
def test_register_instructions_of_several_warps_run_as_one(batches, seed):
    """Guards true for some warps only (tid < 80), a branch one warp takes, a branch half of every
    warp takes, and lane-dependent special registers: each thread's value is its own."""
    emu = Emulator(chaos=seed)
    out = emu.to_device(np.zeros(2 * 256, np.uint32))
    emu.launch(load_ptx(kernel(ARITH)), 2, 256, [out])
    assert np.array_equal(emu.to_host(out, (512,), np.uint32), arith_ref(2, 256))
    if seed is None:
        assert max(hi - lo for lo, hi in batches) == 8      # all 8 warps of a CTA together


STORE = """
\tmov.u32 %r1, %tid.x;
\tmov.u32 %r2, dyn;
\tand.b32 %r3, %r1, {mask};
\tshl.b32 %r4, %r3, 3;
\tadd.u32 %r5, %r2, %r4;
\tshr.u32 %r6, %r1, {shift};
\tst.shared.v2.u32 [%r5], {{%r6, %r3}};
{sync}
\txor.b32 %r7, %r1, 32;
\tand.b32 %r7, %r7, {mask};
\tshl.b32 %r8, %r7, 3;
\tadd.u32 %r9, %r2, %r8;
\tld.shared.v2.u32 {{%r10, %r11}}, [%r9];
\tld.param.u64 %rd1, [p_out];
\tmul.wide.u32 %rd2, %r1, 8;
\tadd.s64 %rd3, %rd1, %rd2;
\tst.global.v2.u32 [%rd3], {{%r10, %r11}};
"""


def run_store(mask=127, shift=0, sync="\tbar.sync 0;", race_check=True):
    body = STORE.format(mask=mask, shift=shift, sync=sync)
    emu = Emulator(race_check=race_check)
    out = emu.to_device(np.zeros(2 * 128, np.uint32))
    emu.launch(load_ptx(kernel(body, decls="\t.extern .shared .align 16 .b8 dyn[];\n")), 1, 128, [out], smem=2048)
    return emu.to_host(out, (128, 2), np.uint32)


def test_batched_shared_stores_then_barrier_read_by_another_warp(batches):
    got = run_store()
    t = np.arange(128)
    partner = t ^ 32
    assert np.array_equal(got, np.stack([partner, partner], axis=1))
    assert (0, 4) in batches


def test_read_of_another_warps_store_without_barrier_is_a_race():
    with pytest.raises(RaceError, match=r"(?s)write by CTA \(0, 0, 0\) warp 1 .*st\.shared.*"
                                        r"read by CTA \(0, 0, 0\) warp 0 .*ld\.shared"):
        run_store(sync="")


def test_two_warps_storing_different_values_to_one_word_is_a_race():
    # tid & 63: warps 0 and 2 (and 1 and 3) store to the same words, values tid >> 6 differ
    with pytest.raises(RaceError, match=r"(?s)write by CTA \(0, 0, 0\) warp 0 .*st\.shared.*"
                                        r"write by CTA \(0, 0, 0\) warp 2 .*st\.shared"):
        run_store(mask=63, shift=6)


def test_two_warps_storing_equal_values_to_one_word_is_benign():
    # tid & 63 with values every colliding pair shares (tid >> 7 == 0, tid & 63): unordered
    # but equal, as for the one-warp detector
    got = run_store(mask=63, shift=7)
    t = np.arange(128)
    assert np.array_equal(got, np.stack([np.zeros(128), (t ^ 32) & 63], axis=1))


def test_batched_store_over_an_mbarrier_names_the_warp():
    body = ("\tmov.u32 %r1, %tid.x;\n\tmov.u32 %r2, bars;\n\tsetp.eq.u32 %p1, %r1, 0;\n"
            "\t@%p1 mbarrier.init.shared.b64 [%r2+64], 1;\n\tbar.sync 0;\n"
            "\tand.b32 %r3, %r1, 31;\n\tshl.b32 %r4, %r3, 2;\n\tshr.u32 %r5, %r1, 5;\n"
            "\tshl.b32 %r6, %r5, 7;\n\tadd.u32 %r7, %r4, %r6;\n\tadd.u32 %r8, %r2, %r7;\n"
            "\tst.shared.u32 [%r8], %r1;\n")
    emu = Emulator()
    with pytest.raises(SimRuntimeError, match=r"generic store over the initialised mbarrier at bars\+64 "
                                              r"\(CTA \(0, 0, 0\)\)[\s\S]*by warp 0"):
        emu.launch(load_ptx(kernel(body, params=(), decls="\t.shared .align 8 .b8 bars[512];\n")), 1, 128, [])


TWO_STORES = """
\tmov.u32 %r1, %tid.x;
\tmov.u32 %r2, dyn;
\tshl.b32 %r3, %r1, 2;
\tadd.u32 %r4, %r2, %r3;
\tst.shared.u32 [%r4], %r1;
\txor.b32 %r5, %r1, 32;
\tshl.b32 %r6, %r5, 2;
\tadd.u32 %r7, %r2, %r6;
\tadd.u32 %r7, %r7, {off};
\tadd.u32 %r8, %r1, 1000;
\tst.shared.u32 [%r7], %r8;
\tbar.sync 0;
\tld.shared.u32 %r9, [%r4+{off}];
\tld.param.u64 %rd1, [p_out];
\tmul.wide.u32 %rd2, %r1, 4;
\tadd.s64 %rd3, %rd1, %rd2;
\tst.global.u32 [%rd3], %r9;
"""


def run_two_stores(off):
    emu = Emulator()
    out = emu.to_device(np.zeros(128, np.uint32))
    prog = load_ptx(kernel(TWO_STORES.format(off=off), decls="\t.extern .shared .align 16 .b8 dyn[];\n"))
    emu.launch(prog, 1, 128, [out], smem=2048)
    return emu.to_host(out, (128,), np.uint32)


def test_consecutive_batched_stores_are_checked_together(batches):
    """Two stores in one lockstep run, the second to words no one stored before: their race
    check is deferred to the end of the run and done once; the values are the stored ones."""
    got = run_two_stores(512)
    assert np.array_equal(got, (np.arange(128) ^ 32) + 1000)
    assert (0, 4) in batches


def test_a_later_store_of_the_run_racing_an_earlier_one_is_reported():
    """The second store of warp w writes the words warp w ^ 1 stored in the first one, with no
    barrier between: the deferred check fails, the run is replayed warp by warp and the race is
    reported as per-warp execution reports it (a store of warp 0 or 1 against the other's)."""
    with pytest.raises(RaceError, match=r"(?s)write by CTA \(0, 0, 0\) warp [01] .*st\.shared\.u32.*"
                                        r"write by CTA \(0, 0, 0\) warp [01] .*st\.shared\.u32"):
        run_two_stores(0)


def test_a_store_over_the_runs_own_earlier_store_settles_it_first(batches):
    """Each warp's second store of the run rewrites the words its first one wrote (no race: the
    same warp): the deferred first store is checked before the second is deferred, and memory
    holds the second store's values."""
    text = TWO_STORES.replace("\txor.b32 %r5, %r1, 32;\n", "\tmov.u32 %r5, %r1;\n")
    emu = Emulator()
    out = emu.to_device(np.zeros(128, np.uint32))
    emu.launch(load_ptx(kernel(text.format(off=0), decls="\t.extern .shared .align 16 .b8 dyn[];\n")),
               1, 128, [out], smem=2048)
    assert np.array_equal(emu.to_host(out, (128,), np.uint32), np.arange(128) + 1000)
    assert (0, 4) in batches


def test_overlap_of_store_plans_is_cached_by_identity():
    from cutedsl.sim.machine.warpbatch import _overlap
    a, b, c = np.arange(0, 64, 2), np.arange(1, 65, 2), np.array([7, 40, 90])
    cache = {}
    run = lambda *ws: [(w,) for w in ws]        # deferred entries: their word array first
    assert not _overlap(cache, (id(a),), run(a), b) and _overlap(cache, (id(a),), run(a), c)
    assert _overlap(cache, (id(a), id(b)), run(a, b), c) and not _overlap(cache, (id(c),), run(c), np.array([8]))
    assert len(cache) == 4 and not _overlap(cache, (id(a),), run(a), b)
