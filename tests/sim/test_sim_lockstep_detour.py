"""A lockstep batch through a divergent forward branch (lockstep._detour): FA3/CUTLASS-style
``@p bra L; <lane 0 arrives on an mbarrier>; L:`` runs for the batch's warps in one call, each
warp's fall-through lanes with their own mask, in the order the scheduler steps them. Results,
warp-instruction counts, the arrive's state register and race and deadlock reports must be those
of the warps run one by one (``DETOUR = 0``)."""
import numpy as np
import pytest

from cutedsl.sim import DeadlockError, Emulator, RaceError, SimError, load_ptx
from cutedsl.sim.checks.hb import HB
from cutedsl.sim.machine import lockstep
from simkit import kernel, mbarrier_wait, spy

SMEM = "\t.extern .shared .align 16 .b8 dyn[];\n"

# each thread stores its id; lane 0 of each warp (and, for GUARDED, lane 1 only where %p7)
# arrives on a barrier of {count} arrivals; all wait for the phase and read another warp's word
BODY = """
\tmov.u32 %r1, %tid.x;
\tmov.u32 %r2, dyn;
\tadd.u32 %r40, %r2, 1024;
\tsetp.eq.u32 %p1, %r1, 0;
\tmov.u32 %r41, {count};
\t@%p1 mbarrier.init.shared.b64 [%r40], %r41;
\tfence.mbarrier_init.release.cluster;
\tbar.sync 0;
\tshl.b32 %r4, %r1, 2;
\tadd.u32 %r5, %r2, %r4;
\tst.shared.u32 [%r5], %r1;
\tand.b32 %r6, %r1, 31;
\tmov.u64 %rd9, 77;
\tmov.u32 %r30, 5;
\tsetp.ne.u32 %p3, %r6, {lane};
{skip}
\tadd.u32 %r30, %r30, %r6;
\t{arrive} %rd9, [%r40];
DONE0:
\tadd.u32 %r31, %r30, 1;
{wait}
\txor.b32 %r7, %r1, 32;
\tshl.b32 %r8, %r7, 2;
\tadd.u32 %r9, %r2, %r8;
\tld.shared.u32 %r10, [%r9];
\tld.param.u64 %rd1, [p_out];
\tmul.wide.u32 %rd2, %r1, 16;
\tadd.s64 %rd3, %rd1, %rd2;
\tst.global.u32 [%rd3], %r10;
\tst.global.u32 [%rd3+4], %r31;
\tst.global.u64 [%rd3+8], %rd9;
"""
SKIP = "\t@%p3 bra DONE0;"
ARRIVE = "mbarrier.arrive.shared.b64"


@pytest.fixture(autouse=True)
def _eager(monkeypatch):
    monkeypatch.delenv("CUTEDSL_SIM_CHAOS", raising=False)


@pytest.fixture
def detours(monkeypatch):
    """The warp-instruction counts of the detours that ran as one batch."""
    return spy(monkeypatch, lockstep, "_detour", lambda args, k: k)


def run(tag, count=4, lane=0, skip=SKIP, arrive=ARRIVE, threads=128, chaos=None, body=BODY):
    """``tag``: a comment that makes the PTX text new (decoded programs are cached by text)."""
    emu = Emulator(chaos=chaos) if chaos is not None else Emulator()
    out = emu.to_device(np.zeros(threads * 4, np.uint32))
    body = body.format(count=count, lane=lane, skip=skip, arrive=arrive, wait=mbarrier_wait()) + f"\t// {tag}\n"
    info = emu.launch(load_ptx(kernel(body, decls=SMEM)), 1, threads, [out], smem=2048)
    return emu.to_host(out, (threads, 4), np.uint32), info["instructions"]


def per_warp(monkeypatch, **kw):
    monkeypatch.setattr(lockstep, "DETOUR", 0)
    try:
        return run("per warp " + repr(sorted(kw.items())), **kw)
    finally:
        monkeypatch.undo()


@pytest.mark.parametrize("lane", [0, 5, 31])
def test_a_lane_arrive_behind_a_branch_is_each_warps_own(lane, detours, monkeypatch):
    got, n = run(f"batched {lane}", lane=lane)
    tid = np.arange(128, dtype=np.uint32)
    assert np.array_equal(got[:, 0], tid ^ 32)
    lanes = tid & 31
    # the arriving lane added its lane id (5 + lane + 1), the others only 1
    assert np.array_equal(got[:, 1], np.where(lanes == lane, 6 + lanes, 6))
    # the arrive's state: the phase (0) in the arriving lane, the others keep 77
    assert np.array_equal(got[:, 2], np.where(lanes == lane, 0, 77)) and not got[:, 3].any()
    assert detours and 3 in detours             # one batch ran bra + 2 instructions for each warp
    want, n0 = per_warp(monkeypatch, lane=lane)
    assert np.array_equal(got, want) and n == n0


def test_a_guarded_instruction_in_the_detour(detours, monkeypatch):
    """Lanes 0..3 of each warp fall through and the arrive is guarded to lane 2 of them: the
    guard's mask within the fall-through mask."""
    skip = "\tsetp.gt.u32 %p3, %r6, 3;\n\tsetp.eq.u32 %p4, %r6, 2;\n" + SKIP
    kw = dict(skip=skip, arrive="@%p4 " + ARRIVE)
    got, n = run("guarded", **kw)
    assert 3 in detours
    want, n0 = per_warp(monkeypatch, **kw)
    assert np.array_equal(got, want) and n == n0
    lanes = np.arange(128) & 31
    assert np.array_equal(got[:, 2], np.where(lanes == 2, 0, 77))
    assert np.array_equal(got[:, 1], np.where(lanes < 4, 6 + lanes, 6))


def test_a_warp_whose_lanes_all_jump_declines(detours, monkeypatch):
    """setp.ne %r1, 0: every lane but thread 0 jumps, so warps 1..3 take the branch whole (one
    instruction where warp 0 runs three) and the batch declines; only warp 0 arrives (count 1),
    so warp 0's read of warp 1's word is a race -- the same report as the warps' own runs."""
    kw = dict(count=1, skip="\tsetp.ne.u32 %p3, %r1, 0;\n" + SKIP)
    with pytest.raises(RaceError) as batched:
        run("whole jump", **kw)
    assert detours and not any(detours)
    monkeypatch.setattr(lockstep, "DETOUR", 0)
    with pytest.raises(RaceError) as alone:
        run("whole jump per warp", **kw)
    assert str(batched.value) == str(alone.value)


def test_a_missing_arrival_is_the_same_deadlock(detours, monkeypatch):
    with pytest.raises(DeadlockError) as batched:
        run("deadlock", count=5)
    assert 3 in detours
    monkeypatch.setattr(lockstep, "DETOUR", 0)
    with pytest.raises(DeadlockError) as alone:
        run("deadlock per warp", count=5)
    assert str(batched.value) == str(alone.value)


def test_a_relaxed_arrive_is_the_same_race(detours, monkeypatch):
    """A relaxed arrive releases nothing (PTX ISA 9.7.13.15.13 mbarrier.arrive, .relaxed): the
    read of another warp's word races with its store, reported the same batched or not."""
    arrive = "mbarrier.arrive.relaxed.cta.shared::cta.b64"
    with pytest.raises(RaceError) as batched:
        run("relaxed", arrive=arrive)
    assert 3 in detours
    monkeypatch.setattr(lockstep, "DETOUR", 0)
    with pytest.raises(RaceError) as alone:
        run("relaxed per warp", arrive=arrive)
    assert str(batched.value) == str(alone.value)


@pytest.mark.parametrize("seed", [1, 7])
def test_adversarial_mode(seed, monkeypatch):
    got, _ = run(f"chaos {seed}", chaos=seed)
    want, _ = per_warp(monkeypatch, chaos=seed)
    assert np.array_equal(got, want)


# the detour is the arrive alone: the warps' arrivals run as one (mbarrier.py one_barrier) when they
# name one barrier and only the last may complete its phase; else warp by warp
ONLY_ARRIVE = BODY.replace("\tadd.u32 %r30, %r30, %r6;\n", "")
NO_INIT_ORDER = ONLY_ARRIVE.replace("\tfence.mbarrier_init.release.cluster;\n\tbar.sync 0;\n", "")


@pytest.fixture
def joins(monkeypatch):
    """The warps of each arrival run as one (``HB.release_join_all``)."""
    return spy(monkeypatch, HB, "release_join_all", lambda args, r: len(args[1]))


def same_as_per_warp(monkeypatch, tag, **kw):
    """Run batched and warp by warp (``DETOUR = 0``): the same results and warp-instruction count,
    or the same error; returns the batched results (or the error)."""
    try:
        got = run(tag, **kw)
    except SimError as e:
        monkeypatch.setattr(lockstep, "DETOUR", 0)
        with pytest.raises(type(e)) as alone:
            run(tag + " per warp", **kw)
        assert str(alone.value) == str(e)
        return e
    want = per_warp(monkeypatch, **kw)
    assert np.array_equal(got[0], want[0]) and got[1] == want[1]
    return got[0]


@pytest.mark.parametrize("lane", [0, 17])
def test_one_arrival_for_the_batch(lane, detours, joins, monkeypatch):
    """count 4: the last warp's arrival completes the phase; every warp's release is in it (no
    race reading another warp's word), each arriving lane's state is the phase before (0)."""
    got = same_as_per_warp(monkeypatch, f"one {lane}", lane=lane, body=ONLY_ARRIVE)
    assert 2 in detours and joins == [4]
    lanes = np.arange(128) & 31
    assert np.array_equal(got[:, 2], np.where(lanes == lane, 0, 77))
    assert np.array_equal(got[:, 0], np.arange(128, dtype=np.uint32) ^ 32)


def test_register_instructions_then_one_arrival(detours, joins, monkeypatch):
    """The detour's add runs for each warp first, then the four arrivals as one (the add writes
    only its own warp's registers)."""
    got = same_as_per_warp(monkeypatch, "add then arrive", lane=5, body=BODY)
    assert 3 in detours and joins == [4]
    lanes = np.arange(128) & 31
    assert np.array_equal(got[:, 1], np.where(lanes == 5, 11, 6))
    assert np.array_equal(got[:, 2], np.where(lanes == 5, 0, 77))


def test_two_lanes_of_each_warp(detours, joins, monkeypatch):
    """Lanes 0 and 1 of each warp arrive (8 arrivals, count 8): the lane counts add up."""
    skip = "\tsetp.gt.u32 %p3, %r6, 1;\n" + SKIP
    got = same_as_per_warp(monkeypatch, "two lanes", count=8, skip=skip, body=ONLY_ARRIVE)
    assert 2 in detours and joins == [4]
    assert np.array_equal(got[:, 2], np.where((np.arange(128) & 31) < 2, 0, 77))


@pytest.mark.parametrize("count, error", [(2, DeadlockError), (3, RaceError)])
def test_a_phase_completed_before_the_last_warp(count, error, detours, joins, monkeypatch):
    """A warp before the last completes phase 0, so the warps arrive one by one, as their own runs.
    count 2: the last two complete phase 1, parity 0 again -- the waits for phase 0's parity never
    end (the same deadlock report); count 3: the last warp's release is not in phase 0, and the
    warp below it reads its word after waiting only for phase 0 (the same race report)."""
    err = same_as_per_warp(monkeypatch, f"early {count}", count=count, body=ONLY_ARRIVE)
    assert 2 in detours and joins == []
    assert type(err) is error


def test_a_missing_arrival_reports_the_same_barrier_history(detours, joins, monkeypatch):
    """count 5: four arrivals, none completes; the deadlock report (pending count, the barrier's
    recorded arrivals) is the warps' own."""
    with pytest.raises(DeadlockError) as batched:
        run("missing one", count=5, body=ONLY_ARRIVE)
    assert 2 in detours and joins == [4]
    assert "arrive x1" in str(batched.value)
    monkeypatch.setattr(lockstep, "DETOUR", 0)
    with pytest.raises(DeadlockError) as alone:
        run("missing one per warp", count=5, body=ONLY_ARRIVE)
    assert str(batched.value) == str(alone.value)


def test_relaxed_arrivals_release_nothing(detours, joins, monkeypatch):
    """PTX ISA 9.7.13.15.13: ``.relaxed`` arrives release nothing, batched as one or not."""
    arrive = "mbarrier.arrive.relaxed.cta.shared::cta.b64"
    with pytest.raises(RaceError) as batched:
        run("relaxed one", arrive=arrive, body=ONLY_ARRIVE)
    assert 2 in detours and joins == []
    monkeypatch.setattr(lockstep, "DETOUR", 0)
    with pytest.raises(RaceError) as alone:
        run("relaxed one per warp", arrive=arrive, body=ONLY_ARRIVE)
    assert str(batched.value) == str(alone.value)


def test_an_arrive_not_ordered_after_the_init(detours, joins, monkeypatch):
    """No fence.mbarrier_init and barrier between thread 0's init and the other warps' arrives:
    the init check fails for warp 1, so the batch arrives warp by warp and reports it there."""
    with pytest.raises(RaceError) as batched:
        run("no init order", body=NO_INIT_ORDER)
    assert joins == [] and "mbarrier.init" in str(batched.value)
    monkeypatch.setattr(lockstep, "DETOUR", 0)
    with pytest.raises(RaceError) as alone:
        run("no init order per warp", body=NO_INIT_ORDER)
    assert str(batched.value) == str(alone.value)
