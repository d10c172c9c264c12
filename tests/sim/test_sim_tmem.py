"""Blackwell tensor memory in the emulator (issue 23, first slice): sm_100a PTX that allocates
TMEM, stores registers into it and loads them back (tcgen05.alloc / st / ld / wait / dealloc /
relinquish_alloc_permit), checked against what the PTX ISA says -- the lane-quarter rule, the
column-count rule, double free, allocation after relinquish, a leak at exit, an allocation
that waits for another warp's dealloc and one that never can. Every kernel here is assembled by
the pinned ptxas for sm_100a first, so the emulator is held to PTX that really exists."""
from types import SimpleNamespace

import numpy as np
import pytest

from cutedsl.compiler.toolchain import ptxas
from cutedsl.sim import DeadlockError, Emulator, SimRuntimeError, load_ptx
from simkit import kernel

SM100 = ".version 8.7\n.target sm_100a\n.address_size 64\n\n"
#: ptxas's target (the library's Arch object for sm_100a comes with the Blackwell kernels, issue 24)
PTXAS_SM100 = SimpleNamespace(chip="sm_100a")

# every warp of 4: warp 0 allocates {COLS} columns (a count ptxas cannot fold: {COLS} x the grid
# size 1, so the emulator's own check is what refuses a bad one; address to smem), all warps store
# 100 * warp + lane + column j into their lane quarter (columns 0..3), wait, load back,
# write to out[tid * 4 + j]; warp 0 deallocates and relinquishes
ROUNDTRIP = """
\t.shared .align 16 .b32 taddr_slot;
\tld.param.u64 %rd1, [p_out];
\tcvta.to.global.u64 %rd1, %rd1;
\tmov.u32 %r21, %nctaid.x;
\tmul.lo.u32 %r20, %r21, {COLS};
\tmov.u32 %r1, %tid.x;
\tshr.u32 %r2, %r1, 5;
\tmov.u32 %r3, taddr_slot;
\tsetp.eq.u32 %p1, %r2, 0;
\t@!%p1 bra ALLOCATED;
\ttcgen05.alloc.cta_group::1.sync.aligned.shared::cta.b32 [%r3], %r20;
ALLOCATED:
\tbar.sync 0;
\ttcgen05.fence::after_thread_sync;
\tld.shared.u32 %r4, [%r3];
\tand.b32 %r5, %r2, 3;
{LANE}
\tadd.u32 %r7, %r4, %r6;
\tand.b32 %r8, %r1, 31;
\tmad.lo.u32 %r9, %r2, 100, %r8;
\tadd.u32 %r10, %r9, 1;
\tadd.u32 %r11, %r9, 2;
\tadd.u32 %r12, %r9, 3;
\ttcgen05.st.sync.aligned.32x32b.x4.b32 [%r7], {%r9, %r10, %r11, %r12};
\ttcgen05.wait::st.sync.aligned;
\ttcgen05.ld.sync.aligned.32x32b.x4.b32 {%r13, %r14, %r15, %r16}, [%r7];
\ttcgen05.wait::ld.sync.aligned;
\tmul.wide.u32 %rd2, %r1, 16;
\tadd.s64 %rd3, %rd1, %rd2;
\tst.global.v4.u32 [%rd3], {%r13, %r14, %r15, %r16};
\ttcgen05.fence::before_thread_sync;
\tbar.sync 0;
\t@!%p1 bra END;
{FREE}
END:
"""
FREE = ("\ttcgen05.dealloc.cta_group::1.sync.aligned.b32 %r4, %r20;\n"
        "\ttcgen05.relinquish_alloc_permit.cta_group::1.sync.aligned;")


#: the lane field (bits 31..16) of this warp's TMEM address: its quarter, 32 * (warp % 4)
QUARTER_LANE = "\tshl.b32 %r6, %r5, 21;"


def build(cols=32, lane=QUARTER_LANE, free=FREE, extra=""):
    body = ROUNDTRIP.replace("{FREE}", free + extra).replace("{COLS}", str(cols)).replace("{LANE}", lane)
    text = kernel(body).replace(kernel("").split("\n.visible")[0], SM100.rstrip("\n"), 1)
    ptxas(text, arch=PTXAS_SM100)           # the pinned ptxas takes it for sm_100a
    return load_ptx(text)


def run(prog, threads=128):
    emu = Emulator()
    out = emu.to_device(np.zeros(threads * 4, np.uint32))
    emu.launch(prog, 1, threads, [out])
    return emu.to_host(out, (threads, 4), np.uint32)


def test_roundtrip_through_each_warps_lane_quarter():
    """lane << 16: warp w addresses lanes 32 (w % 4) + lane; every value comes back."""
    r = run(build())
    t = np.arange(128)
    want = (100 * (t // 32) + t % 32)[:, None] + np.arange(4)
    assert np.array_equal(r, want)


def test_lane_quarter_rule():
    """A warp addressing another warp's quarter (lane base 0 for every warp: warps 1..3 are
    outside their own) is refused."""
    with pytest.raises(SimRuntimeError, match=r"tcgen05\.st\.32x32b by warp ([123]) at lane 0: a warp reaches "
                                              r"only lanes (32|64|96)\.\.(63|95|127) \(warp id % 4 = \1"):
        run(build(lane="\tmov.u32 %r6, 0;"))


@pytest.mark.parametrize("free,extra,match", [
    ("", "", r"CTA \(0, 0, 0\) exits with tensor memory still allocated \(32 at column 0\)"),
    (FREE, "\n\ttcgen05.dealloc.cta_group::1.sync.aligned.b32 %r4, 32;",
     r"tcgen05\.dealloc of 32 columns at column 0, which is not allocated \(double free\?\)"),
    (FREE, "\n\ttcgen05.alloc.cta_group::1.sync.aligned.shared::cta.b32 [%r3], 32;",
     r"tcgen05\.alloc after tcgen05\.relinquish_alloc_permit"),
])
def test_allocation_errors(free, extra, match):
    with pytest.raises(SimRuntimeError, match=match):
        run(build(free=free, extra=extra))


def test_column_count_rule():
    with pytest.raises(SimRuntimeError, match=r"column count 48 must be a power of two in 32\.\.512"):
        run(build(cols=48))


# two warps each allocate 512 columns: the second waits until the first deallocates; with
# {HOLD} the first never does and the wait is a deadlock
CONTENDED = """
\t.shared .align 16 .b32 slot[2];
\tmov.u32 %r1, %tid.x;
\tshr.u32 %r2, %r1, 5;
\tmov.u32 %r3, slot;
\tshl.b32 %r4, %r2, 2;
\tadd.u32 %r5, %r3, %r4;
\ttcgen05.alloc.cta_group::1.sync.aligned.shared::cta.b32 [%r5], 512;
\tld.shared.u32 %r6, [%r5];
{HOLD}
\ttcgen05.dealloc.cta_group::1.sync.aligned.b32 %r6, 512;
"""


@pytest.mark.parametrize("hold", [False, True])
def test_allocation_blocks_until_columns_are_free(hold):
    body = CONTENDED.replace("{HOLD}", "\tbar.sync 0;" if hold else "")
    text = kernel(body, params=("out",)).replace(kernel("").split("\n.visible")[0], SM100.rstrip("\n"), 1)
    ptxas(text, arch=PTXAS_SM100)
    emu = Emulator()
    out = emu.to_device(np.zeros(1, np.uint32))
    if hold:        # warp 0 waits at the barrier for warp 1, which waits for warp 0's columns
        with pytest.raises(DeadlockError, match=r"tcgen05\.alloc of 512 columns waiting for free tensor memory"):
            emu.launch(load_ptx(text), 1, 64, [out])
    else:
        emu.launch(load_ptx(text), 1, 64, [out])


# thread 0 of CTA rank 0 initialises the barrier of each CTA (count 1), the cluster syncs, one
# thread commits ({COMMIT}), every thread of {WAITERS} waits for phase 0 and writes its flag
COMMIT = """
\t.shared .align 8 .b64 bar;
\tld.param.u64 %rd1, [p_out];
\tcvta.to.global.u64 %rd1, %rd1;
\tmov.u32 %r1, %tid.x;
\tmov.u32 %r2, %cluster_ctarank;
\tmov.u32 %r40, bar;
\tsetp.eq.u32 %p1, %r1, 0;
\t@%p1 mbarrier.init.shared::cta.b64 [%r40], 1;
\tfence.mbarrier_init.release.cluster;
\tbarrier.cluster.arrive.release.aligned;
\tbarrier.cluster.wait.acquire.aligned;
\tsetp.eq.u32 %p2, %r2, 0;
\tand.pred %p3, %p1, %p2;
\tmov.u16 %rs1, 3;
\t@%p3 {COMMIT}
{WAIT}
\tmad.lo.u32 %r3, %r2, 32, %r1;
\tmul.wide.u32 %rd2, %r3, 4;
\tadd.s64 %rd3, %rd1, %rd2;
\tst.global.u32 [%rd3], 1;
"""


@pytest.mark.parametrize("commit,cluster", [
    ("mov.u32 %r5, 0;", 1),                 # no commit: nothing completes the phase
    ("tcgen05.commit.cta_group::1.mbarrier::arrive::one.shared::cluster.b64 [%r40];", 1),
    ("tcgen05.commit.cta_group::1.mbarrier::arrive::one.shared::cluster.multicast::cluster.b64 [%r40], %rs1;", 2),
])
def test_commit_arrives_on_the_mbarrier(commit, cluster):
    """tcgen05.commit completes phase 0 of the barrier (of both CTAs with the multicast form);
    without it the waiters deadlock."""
    from simkit import mbarrier_wait
    body = COMMIT.replace("{COMMIT}", commit).replace("{WAIT}", mbarrier_wait("%r40", 0))
    text = kernel(body).replace(kernel("").split("\n.visible")[0], SM100.rstrip("\n"), 1)
    ptxas(text, arch=PTXAS_SM100)
    emu = Emulator()
    out = emu.to_device(np.zeros(64, np.uint32))
    if "tcgen05" not in commit:
        with pytest.raises(DeadlockError, match="mbarrier.try_wait"):
            emu.launch(load_ptx(text), cluster, 32, [out], cluster=(cluster, 1, 1))
        return
    emu.launch(load_ptx(text), cluster, 32, [out], cluster=(cluster, 1, 1))
    assert (emu.to_host(out, (64,), np.uint32)[:32 * cluster] == 1).all()


# -- the 16-lane data-movement shapes ---------------------------------------------------------

# every warp stores lane-major values with 32x32b (thread t: lane quarter + t, column c holds
# 1000 * lane + c), waits, then loads its quarter back with {SHAPE}.x2 ({REGS} registers) and
# writes them to out[tid * REGS + r]
SHAPED = """
\t.shared .align 16 .b32 slot;
\tld.param.u64 %rd1, [p_out];
\tcvta.to.global.u64 %rd1, %rd1;
\tmov.u32 %r1, %tid.x;
\tshr.u32 %r2, %r1, 5;
\tand.b32 %r3, %r1, 31;
\tmov.u32 %r40, slot;
\tsetp.eq.u32 %p1, %r2, 0;
\t@!%p1 bra ALLOC_DONE;
\ttcgen05.alloc.cta_group::1.sync.aligned.shared::cta.b32 [%r40], 32;
ALLOC_DONE:
\tbar.sync 0;
\tld.shared.u32 %r4, [%r40];
\tand.b32 %r5, %r2, 3;
\tshl.b32 %r6, %r5, 21;
\tadd.u32 %r7, %r4, %r6;
\tshl.b32 %r8, %r5, 5;
\tadd.u32 %r9, %r8, %r3;
\tmul.lo.u32 %r9, %r9, 1000;
{STORE}
\ttcgen05.wait::st.sync.aligned;
\t{LOAD}
\ttcgen05.wait::ld.sync.aligned;
{OUT}
\tbar.sync 0;
\t@!%p1 bra END;
\ttcgen05.dealloc.cta_group::1.sync.aligned.b32 %r4, 32;
\ttcgen05.relinquish_alloc_permit.cta_group::1.sync.aligned;
END:
"""


@pytest.mark.parametrize("shape,regs,tail", [("16x64b", 2, ""), ("16x128b", 4, ""), ("16x256b", 8, ""),
                                             ("16x32bx2", 2, ", 4"), ("32x32b", 2, "")])
def test_16_lane_shapes_read_the_lanes_and_columns_of_their_layout(shape, regs, tail):
    """Each register of each thread holds 1000 * lane + column of the TMEM cell the layout (CuTe's
    Copy_Traits of CUTLASS's SM100_TMEM_LOAD_*) names -- the lanes of the warp's quarter's first
    half for the 16-lane shapes."""
    from cutedsl.sim.instructions.tmem import ldst_layout
    store = "\n".join(f"\tadd.u32 %r{20 + c}, %r9, {c};" for c in range(16)) + \
        "\n\ttcgen05.st.sync.aligned.32x32b.x16.b32 [%r7], {" + ", ".join(f"%r{20 + c}" for c in range(16)) + "};"
    dst = ", ".join(f"%r{50 + r}" for r in range(regs))
    load = f"tcgen05.ld.sync.aligned.{shape}.x2.b32 {{{dst}}}, [%r7]{tail};"
    out = (f"\tmul.lo.u32 %r11, %r1, {4 * regs};\n\tcvt.u64.u32 %rd2, %r11;\n\tadd.s64 %rd3, %rd1, %rd2;\n"
           + "\n".join(f"\tst.global.u32 [%rd3+{4 * r}], %r{50 + r};" for r in range(regs)))
    body = SHAPED.replace("{STORE}", store).replace("{LOAD}", load).replace("{OUT}", out)
    text = kernel(body).replace(kernel("").split("\n.visible")[0], SM100.rstrip("\n"), 1)
    ptxas(text, arch=PTXAS_SM100)
    emu = Emulator()
    o = emu.to_device(np.zeros(128 * regs, np.uint32))
    emu.launch(load_ptx(text), 1, 128, [o])
    got = emu.to_host(o, (128, regs), np.uint32)
    lanes, cols = ldst_layout(shape, 2, 4)
    t = np.arange(128)
    want = 1000 * (32 * (t // 32)[:, None] + lanes[t % 32]) + cols[t % 32]
    assert np.array_equal(got, want)
    assert (lanes < (16 if shape != "32x32b" else 32)).all()


def _run_shaped(store, load, regs):
    out = (f"\tmul.lo.u32 %r11, %r1, {4 * regs};\n\tcvt.u64.u32 %rd2, %r11;\n\tadd.s64 %rd3, %rd1, %rd2;\n"
           + "\n".join(f"\tst.global.u32 [%rd3+{4 * r}], %r{50 + r};" for r in range(regs)))
    body = SHAPED.replace("{STORE}", store).replace("{LOAD}", load).replace("{OUT}", out)
    text = kernel(body).replace(kernel("").split("\n.visible")[0], SM100.rstrip("\n"), 1)
    ptxas(text, arch=PTXAS_SM100)
    emu = Emulator()
    o = emu.to_device(np.zeros(128 * regs, np.uint32))
    emu.launch(load_ptx(text), 1, 128, [o])
    return emu.to_host(o, (128, regs), np.uint32).astype(np.int64)


def test_pack_16b_load_joins_the_low_halves_of_adjacent_columns():
    """ld.16x128b.x1.pack::16b: register k holds the low 16 bits of columns 2c and 2c + 1 (low,
    high half), c the column the unpacked layout gives it; cells hold 1000 * lane + column, so
    lanes above 65 also check the truncation to 16 bits."""
    from cutedsl.sim.instructions.tmem import ldst_layout
    store = "\n".join(f"\tadd.u32 %r{20 + c}, %r9, {c};" for c in range(16)) + \
        "\n\ttcgen05.st.sync.aligned.32x32b.x16.b32 [%r7], {" + ", ".join(f"%r{20 + c}" for c in range(16)) + "};"
    got = _run_shaped(store, "tcgen05.ld.sync.aligned.16x128b.x1.pack::16b.b32 {%r50, %r51}, [%r7];", 2)
    lanes, cols = ldst_layout("16x128b", 1)
    t = np.arange(128)
    row = 32 * (t // 32)[:, None] + lanes[t % 32]
    c = cols[t % 32]
    want = ((1000 * row + 2 * c) & 0xFFFF) | ((1000 * row + 2 * c + 1) & 0xFFFF) << 16
    assert np.array_equal(got, want)


def test_unpack_16b_store_splits_each_register_over_two_columns():
    """st.32x32b.x2.unpack::16b of v0, v1, read back plainly: columns 0..3 hold v0's low and high
    halves, then v1's, zero-extended."""
    store = ("\tadd.u32 %r20, %r9, 70000;\n\tadd.u32 %r21, %r9, 3;\n"
             "\ttcgen05.st.sync.aligned.32x32b.x2.unpack::16b.b32 [%r7], {%r20, %r21};")
    got = _run_shaped(store, "tcgen05.ld.sync.aligned.32x32b.x4.b32 {%r50, %r51, %r52, %r53}, [%r7];", 4)
    v = 1000 * np.arange(128)[:, None] + np.array([[70000, 3]])
    want = np.stack([v[:, 0] & 0xFFFF, v[:, 0] >> 16, v[:, 1] & 0xFFFF, v[:, 1] >> 16], axis=1)
    assert np.array_equal(got, want)


def test_pack_on_a_store_is_refused_by_name():
    """ptxas refuses st.pack::16b; so does the emulator's loader, by name."""
    body = SHAPED.replace("{STORE}", "\ttcgen05.st.sync.aligned.32x32b.x1.pack::16b.b32 [%r7], {%r9};").replace(
        "{LOAD}", "tcgen05.ld.sync.aligned.32x32b.x1.b32 {%r50}, [%r7];").replace("{OUT}", "")
    text = kernel(body).replace(kernel("").split("\n.visible")[0], SM100.rstrip("\n"), 1)
    with pytest.raises(Exception, match=r"Illegal modifier '.pack::16b' for instruction 'tcgen05.st'"):
        ptxas(text, arch=PTXAS_SM100)
    with pytest.raises(Exception, match=r"tcgen05.st takes .unpack::16b, not .pack::16b"):
        load_ptx(text)


SHIFT = """\tmov.u32 %r60, sbar;
\tsetp.eq.u32 %p5, %r1, 0;
\t@%p5 mbarrier.init.shared::cta.b64 [%r60], 1;
\ttcgen05.fence::before_thread_sync;
\tbar.sync 0;
\t@%p5 tcgen05.shift.cta_group::1.down [%r4];
\t@%p5 tcgen05.commit.cta_group::1.mbarrier::arrive::one.shared::cluster.b64 [%r60];
SHIFT_WAIT:
\tmbarrier.try_wait.parity.shared::cta.b64 %p6, [%r60], 0;
\t@!%p6 bra SHIFT_WAIT;
\ttcgen05.fence::after_thread_sync;
"""


def test_shift_moves_every_row_but_the_last_down_one():
    """tcgen05.shift.down (one thread; commit -> mbarrier -> everyone loads): the 8 columns (one
    32-byte element) of lanes 0..126 move to lanes 1..127; lane 0 keeps its value; the next
    columns are untouched. Without the commit's wait the loads race with the shift."""
    store = ("\t.shared .align 8 .b64 sbar;\n" + "\n".join(f"\tadd.u32 %r{20 + c}, %r9, {c};" for c in range(16))
             + "\n\ttcgen05.st.sync.aligned.32x32b.x16.b32 [%r7], {" + ", ".join(f"%r{20 + c}" for c in range(16))
             + "};")
    load = SHIFT + "\ttcgen05.ld.sync.aligned.32x32b.x16.b32 {" + ", ".join(f"%r{50 + r}" for r in range(16)) \
        + "}, [%r7];"
    got = _run_shaped(store, load, 16)
    lane, col = np.arange(128)[:, None], np.arange(16)[None, :]
    want = np.where(col < 8, 1000 * np.maximum(lane - 1, 0) + col, 1000 * lane + col)
    assert np.array_equal(got, want)
    from cutedsl.sim import RaceError
    racy = SHIFT.replace("SHIFT_WAIT:\n\tmbarrier.try_wait.parity.shared::cta.b64 %p6, [%r60], 0;\n"
                         "\t@!%p6 bra SHIFT_WAIT;\n", "")
    with pytest.raises(RaceError, match=r"tcgen05\.shift"):
        _run_shaped(store, racy + "\ttcgen05.ld.sync.aligned.32x32b.x16.b32 {"
                    + ", ".join(f"%r{50 + r}" for r in range(16)) + "}, [%r7];", 16)


def test_pack_16b_with_the_half_split_shape():
    """ld.16x32bx2.x2.pack::16b with half-split offset 8: thread t reads lane t % 16; its register
    j packs columns 2j and 2j + 1, plus 8 for threads 16..31 (the offset stays in columns)."""
    store = "\n".join(f"\tadd.u32 %r{20 + c}, %r9, {c};" for c in range(16)) + \
        "\n\ttcgen05.st.sync.aligned.32x32b.x16.b32 [%r7], {" + ", ".join(f"%r{20 + c}" for c in range(16)) + "};"
    got = _run_shaped(store, "tcgen05.ld.sync.aligned.16x32bx2.x2.pack::16b.b32 {%r50, %r51}, [%r7], 8;", 2)
    t = np.arange(128)
    row = (32 * (t // 32) + t % 16)[:, None]
    c = 8 * ((t % 32) // 16)[:, None] + 2 * np.arange(2)[None, :]
    want = ((1000 * row + c) & 0xFFFF) | ((1000 * row + c + 1) & 0xFFFF) << 16
    assert np.array_equal(got, want)
