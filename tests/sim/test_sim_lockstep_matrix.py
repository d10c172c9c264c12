"""ldmatrix/stmatrix and cvta in lockstep batches: ldmatrix/stmatrix are BATCH_EACH (registry.each_warp;
ldmatrix gathers for the whole batch when every address is valid), cvta a register instruction
(BATCH_REGS). Results, warp-instruction counts, race reports and address errors must be the ones of
the warps stepped one by one (the decoder's batch kinds switched off)."""
import numpy as np
import pytest

from cutedsl.sim import Emulator, RaceError, load_ptx
from cutedsl.sim.frontend import program
from cutedsl.sim.frontend.errors import SimRuntimeError
from cutedsl.sim.machine import warpbatch
from simkit import kernel, spy

SMEM = "\t.extern .shared .align 16 .b8 dyn[];\n"

# each warp stores a 4-matrix tile of its own (stmatrix), {sync}, then reads the tile of warp
# wid ^ {partner} (ldmatrix .x4, .trans on odd warps' reads too), through cvta'd generic addresses
BODY = """
\tmov.u32 %r1, %tid.x;
\tmov.u32 %r2, dyn;
\tshr.u32 %r3, %r1, 5;
\tand.b32 %r4, %r1, 31;
\tmul.lo.u32 %r5, %r1, 7;
\tadd.u32 %r10, %r5, 1;
\tadd.u32 %r11, %r5, 2;
\tadd.u32 %r12, %r5, 3;
\tadd.u32 %r13, %r5, 4;
\tmul.lo.u32 %r6, %r3, {tile};
\tshl.b32 %r7, %r4, 4;
\tadd.u32 %r8, %r6, %r7;
\tadd.u32 %r9, %r2, %r8;
\tcvt.u64.u32 %rd10, %r9;
\tcvta.shared.u64 %rd11, %rd10;
\tcvta.to.shared.u64 %rd12, %rd11;
\tcvt.u32.u64 %r14, %rd12;
{late}\tstmatrix.sync.aligned.m8n8.x4.shared.b16 [%r14], {{%r10, %r11, %r12, %r13}};
{sync}
\txor.b32 %r15, %r3, {partner};
\tmul.lo.u32 %r16, %r15, {tile};
\tadd.u32 %r17, %r16, %r7;
\tadd.u32 %r18, %r2, %r17;
{bad}
\tldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {{%r20, %r21, %r22, %r23}}, [%r18];
\tld.param.u64 %rd1, [p_out];
\tmul.wide.u32 %rd2, %r1, 32;
\tadd.s64 %rd3, %rd1, %rd2;
\tst.global.v4.u32 [%rd3], {{%r20, %r21, %r22, %r23}};
\tst.global.u64 [%rd3+16], %rd11;
"""


@pytest.fixture(autouse=True)
def _eager(monkeypatch):
    monkeypatch.delenv("CUTEDSL_SIM_CHAOS", raising=False)


@pytest.fixture
def per_warp(monkeypatch):
    """Call it to decode every later kernel with these instructions stepped warp by warp."""
    def off():
        monkeypatch.setattr(program, "BATCH_EACH", program.NO_BATCH)
        monkeypatch.setattr(program, "_BATCH_OPS", program._BATCH_OPS - {"cvta"})
    return off


@pytest.fixture
def leaders(monkeypatch):
    """The leading warp of each batch that ran a BATCH_EACH instruction."""
    return spy(monkeypatch, warpbatch.WarpBatch, "members", lambda args, _: args[0].leader)


@pytest.fixture
def each_runs(monkeypatch):
    return spy(monkeypatch, warpbatch.WarpBatch, "members", lambda args, _: (args[0].lo, args[0].hi))


# warp 7 spins, then every warp waits at a barrier: warp 7 arrives last and leads the stmatrix batch
LATE = """
\tmov.u32 %r31, 0;
\tsetp.ne.u32 %p5, %r3, 7;
\t@%p5 bra ARRIVE;
SPIN:
\tadd.u32 %r31, %r31, 1;
\tsetp.lt.u32 %p6, %r31, 20;
\t@%p6 bra SPIN;
ARRIVE:
\tbar.sync 0;
"""


def run(sync="\tbar.sync 0;", partner=1, bad="", tag="", threads=256, tile=512, race_check=True, late="",
        chaos=None):
    """``tile``: the bytes between the warps' tiles (0: every warp's is at offset 0)."""
    emu = Emulator(race_check=race_check, chaos=chaos)
    out = emu.to_device(np.zeros(threads * 8, np.uint32))
    src = BODY.format(sync=sync, partner=partner, bad=bad, tile=tile, late=late) + tag
    info = emu.launch(load_ptx(kernel(src, decls=SMEM)), 1, threads, [out], smem=4096)
    return emu.to_host(out, (threads, 8), np.uint32), info["instructions"]


def reference(threads=256, partner=1):
    """The ISA model (PTX ISA 9.7.14.5.15/16): stmatrix thread t holds row t // 4, columns
    2 (t % 4) and +1 of matrix j in the halves of register j; thread 8 j + r names row r of matrix
    j; ldmatrix .trans gives thread t column t // 4 of rows 2 (t % 4) and +1."""
    mats = np.zeros((threads // 32, 4, 8, 8), np.uint32)
    for t in range(threads):
        w, l = divmod(t, 32)
        for j in range(4):
            v = 7 * t + 1 + j
            mats[w, j, l // 4, 2 * (l % 4)] = v & 0xFFFF
            mats[w, j, l // 4, 2 * (l % 4) + 1] = v >> 16
    # the row addresses: thread 8 j + r of warp w names byte 512 w + 16 (8 j + r)
    tile = mats.reshape(threads // 32, 32, 8)           # (warp, row 8 j + r, column)
    got = np.zeros((threads, 4), np.uint32)
    for t in range(threads):
        w, l = divmod(t, 32)
        src = tile[w ^ partner]
        for j in range(4):
            m = src[8 * j:8 * j + 8]
            got[t, j] = m[2 * (l % 4), l // 4] | (m[2 * (l % 4) + 1, l // 4] << 16)
    return got


def test_matrix_ops_and_cvta_in_a_batch_are_each_warps_own(per_warp, each_runs):
    got, n = run()
    assert np.array_equal(got[:, :4], reference())
    shared = got[:, 4].astype(np.uint64) | (got[:, 5].astype(np.uint64) << 32)
    # cvta.shared: the generic window's address of each thread's row (its low 32 bits are the offset)
    assert np.array_equal(shared & 0xFFFFFFFF, 512 * (np.arange(256) // 32) + 16 * (np.arange(256) % 32))
    assert len(set((shared >> 32).tolist())) == 1 and int(shared[0] >> 32) != 0
    assert (0, 8) in each_runs                          # all eight warps at once
    per_warp()
    each_runs.clear()
    want, n0 = run(tag="\t// per warp\n")
    assert not each_runs
    assert np.array_equal(got, want) and n == n0       # the same warp-instruction count


def test_cvta_is_a_register_instruction_of_the_batch():
    prog = load_ptx(kernel(BODY.format(sync="\tbar.sync 0;", partner=1, bad="", tile=512, late=""), decls=SMEM))
    kinds = {i.opcode: i.batch for i in prog.code if i.opcode.startswith(("cvta", "ldmatrix", "stmatrix"))}
    assert kinds["cvta.shared.u64"] == kinds["cvta.to.shared.u64"] == program.BATCH_REGS
    assert kinds["ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16"] == program.BATCH_EACH
    assert kinds["stmatrix.sync.aligned.m8n8.x4.shared.b16"] == program.BATCH_EACH


def test_ldmatrix_of_another_warps_tile_without_a_barrier_is_the_same_race(per_warp):
    with pytest.raises(RaceError) as batched:
        run(sync="")
    per_warp()
    with pytest.raises(RaceError) as alone:
        run(sync="", tag="\t// per warp\n")
    assert str(batched.value) == str(alone.value)
    assert "ldmatrix" in str(batched.value)


def _skew(wid, by):
    """Move warp ``wid``'s ldmatrix row addresses by ``by`` bytes without a guard (a guard true
    for some warps only would split the batch before the ldmatrix)."""
    return f"\tsetp.eq.u32 %p1, %r3, {wid};\n\tselp.u32 %r19, {by}, 0, %p1;\n\tadd.u32 %r18, %r18, %r19;"


@pytest.mark.parametrize("bad, what", [
    (_skew(5, 8), "not 16-byte aligned"),
    (_skew(6, 65536), "out of shared memory"),
])
def test_an_address_error_of_one_warp_names_that_warp(per_warp, each_runs, bad, what):
    with pytest.raises(SimRuntimeError) as batched:
        run(bad=bad)
    assert (0, 8) in each_runs                          # the error came from the batch's ldmatrix
    per_warp()
    with pytest.raises(SimRuntimeError) as alone:
        run(bad=bad, tag="\t// per warp\n")
    assert str(batched.value) == str(alone.value)
    assert what in str(batched.value)


@pytest.mark.parametrize("race_check", [True, False])
def test_stmatrix_of_every_warp_to_one_tile(per_warp, each_runs, leaders, race_check):
    """Every warp's stmatrix writes the same tile (offset 0) with its own values, in a batch led
    by warp 7 (stepping order 7, 6 .. 0): with race checks the same write-write report;
    without, the bytes of the warp stepped last."""
    if race_check:
        with pytest.raises(RaceError) as batched:
            run(tile=0, late=LATE)
        assert (0, 8) in each_runs and 7 in leaders and "stmatrix" in str(batched.value)
        per_warp()
        with pytest.raises(RaceError) as alone:
            run(tile=0, late=LATE, tag="\t// per warp\n")
        assert str(batched.value) == str(alone.value)
        return
    got, n = run(tile=0, race_check=False, late=LATE)
    assert (0, 8) in each_runs and 7 in leaders
    per_warp()
    each_runs.clear()
    want, n0 = run(tile=0, race_check=False, late=LATE, tag="\t// per warp\n")
    assert not each_runs
    assert np.array_equal(got, want) and n == n0
    # the tile holds one warp's values: every thread read the tile the same way as thread t % 32
    assert np.array_equal(got[:, :4], np.tile(got[:32, :4], (8, 1)))


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_matrix_ops_under_the_adversarial_schedule(seed):
    """Whatever batches the adversarial scheduler leaves, each thread reads what the model says."""
    got, _ = run(chaos=seed, late=LATE)
    assert np.array_equal(got[:, :4], reference())
