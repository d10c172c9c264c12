"""A batch's guarded ``bra`` that some warps take whole and the others skip whole, the leader
skipping it (lockstep_alone.split, which lockstep calls as ``_split``): every warp moves at once
instead of the leader falling through and each neighbour being stepped through the branch on its
own (``SPLIT = False``). Results, warp-instruction counts and race, deadlock and adversarial-mode
outcomes must be the same."""
import numpy as np
import pytest

from cutedsl.sim import DeadlockError, Emulator, RaceError, SimError, load_ptx
from cutedsl.sim.machine import lockstep
from simkit import kernel, spy

SMEM = "\t.extern .shared .align 16 .b8 dyn[];\n"

# each thread stores its id; warps whose number meets {cond} jump over two instructions
# (the others add to %r30); after {sync} each thread reads the word of the thread 32 above
BODY = """
\tmov.u32 %r1, %tid.x;
\tmov.u32 %r2, dyn;
\tshl.b32 %r4, %r1, 2;
\tadd.u32 %r5, %r2, %r4;
\tst.shared.u32 [%r5], %r1;
\tshr.u32 %r6, %r1, 5;
\tmov.u32 %r30, 5;
\tand.b32 %r11, %r1, 31;
\tsetp.{cond} %p3, {reg}, {val};
\tmov.u32 %r31, 9;
\t@%p3 bra L1;
\tadd.u32 %r30, %r30, %r6;
\tmul.lo.u32 %r30, %r30, 3;
L1:
\tadd.u32 %r31, %r31, %r30;
{sync}
\txor.b32 %r7, %r1, 32;
\tshl.b32 %r8, %r7, 2;
\tadd.u32 %r9, %r2, %r8;
\tld.shared.u32 %r10, [%r9];
\tld.param.u64 %rd1, [p_out];
\tmul.wide.u32 %rd2, %r1, 8;
\tadd.s64 %rd3, %rd1, %rd2;
\tst.global.u32 [%rd3], %r10;
\tst.global.u32 [%rd3+4], %r31;
\t// {tag}
"""
BAR = "\tbar.sync 0;"


@pytest.fixture(autouse=True)
def _eager(monkeypatch):
    monkeypatch.delenv("CUTEDSL_SIM_CHAOS", raising=False)


@pytest.fixture
def splits(monkeypatch):
    """What _split decided for each branch it looked at (None: declined)."""
    return spy(monkeypatch, lockstep, "_split", lambda args, r: r)


def run(tag, cond="ne.u32", reg="%r6", val="0", sync=BAR, threads=128, chaos=None):
    emu = Emulator(chaos=chaos) if chaos is not None else Emulator()
    out = emu.to_device(np.zeros(threads * 2, np.uint32))
    body = BODY.format(cond=cond, reg=reg, val=val, sync=sync, tag=tag)
    info = emu.launch(load_ptx(kernel(body, decls=SMEM)), 1, threads, [out], smem=2048)
    return emu.to_host(out, (threads, 2), np.uint32), info["instructions"]


def both(monkeypatch, tag, **kw):
    """(split run, per-warp run): results and counts, or the errors' texts."""
    def one(t):
        try:
            return run(t, **kw)
        except SimError as e:
            return type(e), str(e)
    got = one(tag)
    monkeypatch.setattr(lockstep, "SPLIT", False)
    try:
        want = one(tag + " per warp")
    finally:
        monkeypatch.undo()
    return got, want


def same(got, want):
    if isinstance(got[0], np.ndarray):
        return np.array_equal(got[0], want[0]) and got[1] == want[1]
    return got == want


@pytest.mark.parametrize("cond, val, jumping", [("ne.u32", "0", [False, True, True, True]),
                                                ("ge.u32", "2", [False, False, True, True]),
                                                ("eq.u32", "3", [False, False, False, True])])
def test_warps_jump_or_fall_through_whole(cond, val, jumping, splits, monkeypatch):
    got, want = both(monkeypatch, f"split {cond} {val}", cond=cond, val=val)
    assert jumping in splits
    assert same(got, want)
    r, _ = got
    t = np.arange(128, dtype=np.uint32)
    assert np.array_equal(r[:, 0], t ^ 32)
    w = t // 32
    jumps = np.array(jumping)[w]
    assert np.array_equal(r[:, 1], np.where(jumps, 14, 9 + 3 * (5 + w)))


def test_the_leader_taking_it_is_not_split(splits, monkeypatch):
    """Warp 0 (the batch's leader) jumps, the others fall through: the main loop runs the leader's
    branch alone and leaves the others where they are (no split)."""
    got, want = both(monkeypatch, "leader jumps", cond="eq.u32", val="0")
    assert splits and not any(splits) and same(got, want)


def test_a_warp_split_by_lanes_declines(splits, monkeypatch):
    """Lane 7 of every warp jumps: the warps diverge, each on its own."""
    got, want = both(monkeypatch, "lanes", cond="eq.u32", reg="%r11", val="7")
    assert splits == [None] or not any(splits)
    assert same(got, want)


def test_the_same_race_without_the_barrier(splits, monkeypatch):
    got, want = both(monkeypatch, "race", sync="")
    assert [False, True, True, True] in splits
    assert got[0] is RaceError and same(got, want)


def test_the_same_deadlock(splits, monkeypatch):
    """The warps that jumped wait at a barrier for 160 threads that never come."""
    got, want = both(monkeypatch, "deadlock", sync="\tbar.sync 1, 160;")
    assert got[0] is DeadlockError and same(got, want)


@pytest.mark.parametrize("seed", [1, 5])
def test_adversarial_mode(seed, monkeypatch):
    got, want = both(monkeypatch, f"chaos {seed}", chaos=seed)
    assert same(got, want)
