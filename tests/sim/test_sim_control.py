"""Parsing, branches/divergence/reconvergence, exits, load-time errors, budgets, livelock and
wall-clock limits."""
import time

import numpy as np
import pytest

from cutedsl.errors import ArgumentError
from cutedsl.sim import (DeadlockError, Emulator, InstructionBudgetExceeded, PTXParseError, SimLaunchError,
                         TimeLimitExceeded, UnsupportedInstruction, load_ptx)
from simkit import kernel

PRE = """
\tld.param.u64 %rd1, [p_out];
\tmov.u32 %r1, %tid.x;
\tmul.wide.u32 %rd2, %r1, 4;
\tadd.s64 %rd3, %rd1, %rd2;
"""


def run(body, n=32, grid=1, emu=None, **kw):
    emu = emu or Emulator()
    prog = load_ptx(kernel(PRE + body))
    out = emu.to_device(np.zeros(n * grid, np.uint32))
    emu.launch(prog, grid, n, [out], **kw)
    return emu.to_host(out, (n * grid,), np.uint32)


def test_divergent_if_else_reconverges():
    body = """
\tand.b32 %r2, %r1, 1;
\tsetp.eq.u32 %p1, %r2, 0;
\t@%p1 bra $L_even;
\tadd.s32 %r3, %r1, 100;
\tbra.uni $L_join;
$L_even:
\tadd.s32 %r3, %r1, 200;
$L_join:
\tshl.b32 %r4, %r3, 1;
\tactivemask.b32 %r5;
\tsetp.eq.u32 %p2, %r5, -1;
\tselp.u32 %r6, 0, 1000000, %p2;
\tadd.s32 %r4, %r4, %r6;
\tst.global.u32 [%rd3], %r4;
"""
    out = run(body)
    t = np.arange(32)
    assert out.tolist() == (2 * np.where(t % 2 == 0, t + 200, t + 100)).tolist()


def test_lane_varying_loop():
    body = """
\trem.u32 %r2, %r1, 5;
\tmov.u32 %r3, 0;
\tmov.u32 %r4, 0;
$L_loop:
\tsetp.ge.u32 %p1, %r4, %r2;
\t@%p1 bra $L_done;
\tadd.s32 %r4, %r4, 1;
\tadd.s32 %r3, %r3, %r4;
\tbra.uni $L_loop;
$L_done:
\tst.global.u32 [%rd3], %r3;
"""
    out = run(body, n=64)
    k = np.arange(64) % 5
    assert out.tolist() == (k * (k + 1) // 2).tolist()


def test_exit_lanes_and_block_barrier():
    # odd threads exit; bar.sync 0 then only waits for the live ones
    body = """
\tand.b32 %r2, %r1, 1;
\tsetp.ne.u32 %p1, %r2, 0;
\t@%p1 exit;
\tbar.sync 0;
\tst.global.u32 [%rd3], 7;
"""
    out = run(body, n=96)
    assert out.tolist() == [7 if t % 2 == 0 else 0 for t in range(96)]


def test_inline_asm_scopes_repeat_labels_and_regs():
    blk = """
\t{
\t.reg .pred P1;
\t.reg .b32 t;
\tmov.u32 t, 0;
\tLAB_LOOP:
\tadd.s32 t, t, 1;
\tadd.s32 %r2, %r2, 1;
\tsetp.ge.u32 P1, t, 3;
\t@P1 bra.uni DONE;
\tbra.uni LAB_LOOP;
\tDONE:
\t}
"""
    body = "\tmov.u32 %r2, 0;\n" + blk + blk + "\tst.global.u32 [%rd3], %r2;\n"
    assert run(body).tolist() == [6] * 32


def test_special_registers_grid():
    body = """
\tmov.u32 %r2, %ctaid.x;
\tmov.u32 %r3, %ntid.x;
\tmad.lo.s32 %r4, %r2, %r3, %r1;
\tmul.wide.u32 %rd4, %r4, 4;
\tadd.s64 %rd5, %rd1, %rd4;
\tmov.u32 %r5, %laneid;
\tmov.u32 %r6, %nctaid.x;
\tmad.lo.s32 %r7, %r6, 1000, %r5;
\tst.global.u32 [%rd5], %r7;
"""
    out = run(body, n=64, grid=3)
    assert out.tolist() == [3000 + (i % 64) % 32 for i in range(192)]


def test_unknown_instruction_fails_at_load_with_line():
    ptx = kernel("\tmov.u32 %r1, 1;\n\tfrobnicate.b32 %r2, %r1;\n")
    with pytest.raises(UnsupportedInstruction) as e:
        load_ptx(ptx)
    line = [i for i, l in enumerate(ptx.splitlines(), 1) if "frobnicate" in l][0]
    assert f"line {line}" in str(e.value) and "frobnicate" in str(e.value)
    with pytest.raises(UnsupportedInstruction, match="modifier .sqz"):
        load_ptx(kernel("\tadd.sqz.s32 %r1, %r1, 1;\n"))
    with pytest.raises(PTXParseError, match="undeclared register"):
        load_ptx(kernel("\tadd.s32 %r1, %q9, 1;\n"))
    with pytest.raises(PTXParseError, match="unknown label"):
        load_ptx(kernel("\tbra.uni $L_nowhere;\n"))


def test_instruction_budget():
    emu = Emulator(budget=5000)
    # a loop whose state changes every iteration: not a livelock, stopped by the budget
    prog = load_ptx(kernel("$L_spin:\n\tadd.u32 %r1, %r1, 1;\n\tbra.uni $L_spin;\n"))
    with pytest.raises(InstructionBudgetExceeded, match="5000"):
        emu.launch(prog, 1, 32, [0])


def test_warp_collectives():
    body = """
\tshfl.sync.bfly.b32 %r2, %r1, 1, 31, -1;
\tshfl.sync.down.b32 %r3|%p1, %r1, 4, 31, -1;
\tsetp.lt.u32 %p2, %r1, 10;
\tvote.sync.ballot.b32 %r4, %p2, -1;
\telect.sync %r5|%p3, -1;
\tselp.u32 %r6, 1, 0, %p3;
\tmad.lo.s32 %r7, %r2, 1000, %r3;
\tst.global.u32 [%rd3], %r7;
\tadd.s64 %rd4, %rd3, 128;
\tst.global.u32 [%rd4], %r4;
\tadd.s64 %rd5, %rd3, 256;
\tadd.s32 %r8, %r6, %r5;
\tst.global.u32 [%rd5], %r8;
"""
    emu = Emulator()
    prog = load_ptx(kernel(PRE + body))
    out = emu.to_device(np.zeros(96, np.uint32))
    emu.launch(prog, 1, 32, [out])
    r = emu.to_host(out, (96,), np.uint32)
    t = np.arange(32)
    down = np.where(t + 4 <= 31, t + 4, t)
    assert r[:32].tolist() == ((t ^ 1) * 1000 + down).tolist()
    assert r[32:64].tolist() == [(1 << 10) - 1] * 32
    assert r[64:96].tolist() == [1] + [0] * 31


@pytest.mark.parametrize("mask, n", [("-1", 64), ("%r9", 64), ("-1", 40), ("%r10", 64)])
def test_elect_sync_leader_and_predicate(mask, n):
    """elect.sync d|p, membermask (PTX ISA 9.7.13.14): d is the leader's lane in every member lane,
    p true in the leader only. An immediate -1 with every lane of the warp live takes the fast
    path; a register mask, a partial warp (lanes 8..31 of the second warp of 40 threads do not
    exist) and a mask without lanes 0..2 (leader 3) the general one -- the same answers."""
    body = f"""
\tmov.u32 %r9, -1;
\tmov.u32 %r10, 0xfffffff8;
\telect.sync %r5|%p3, {mask};
\tselp.u32 %r6, 1000, 0, %p3;
\tadd.s32 %r7, %r6, %r5;
\tst.global.u32 [%rd3], %r7;
"""
    if mask == "%r10":
        body = "\tand.b32 %r11, %r1, 31;\n\tsetp.ge.u32 %p4, %r11, 3;\n" + body.replace("\telect", "\t@%p4 elect")
    r = run(body, n=n)
    lane = np.arange(n) % 32
    leader = 3 if mask == "%r10" else 0
    want = np.where(lane == leader, 1000 + leader, leader)
    if mask == "%r10":
        want = np.where(lane < 3, 0, want)      # predicated off: nothing written over the zeros
    assert r.tolist() == want.tolist()


SPIN = """
\tld.param.u64 %rd1, [p_out];
$L_spin:
\tld.volatile.global.u32 %r1, [%rd1];
\tsetp.eq.u32 %p1, %r1, 0;
\t@%p1 bra.uni $L_spin;
"""


@pytest.mark.parametrize("seed", [None, 4])
def test_spinning_kernel_is_stopped_in_seconds(seed):
    # four warps poll a flag nobody sets: no memory or barrier changes, the warp states repeat
    emu = Emulator(chaos=seed)
    prog = load_ptx(kernel(SPIN))
    flag = emu.to_device(np.zeros(1, np.uint32))
    t = time.perf_counter()
    with pytest.raises(DeadlockError, match=r"(?s)livelock.*warp 0 lanes 0-31 at PTX line \d+: .*"
                                            r"spinning \(PTX lines \d+-\d+\).*warp 3 lanes 0-31") as e:
        emu.launch(prog, 1, 128, [flag])
    assert time.perf_counter() - t < 5.0
    assert ("seed 4" in str(e.value)) == (seed is not None)


def test_wall_clock_limit():
    # a loop that changes its registers forever is no livelock: the time limit stops it
    emu = Emulator(time_limit=0.3, budget=10 ** 12)
    prog = load_ptx(kernel("$L_spin:\n\tadd.u32 %r1, %r1, 1;\n\tbra.uni $L_spin;\n"))
    t = time.perf_counter()
    with pytest.raises(TimeLimitExceeded, match=r"(?s)wall-clock limit of 0.3 s.*CUTEDSL_SIM_TIME_LIMIT.*"
                                                r"warp 0 lanes 0-31 at PTX line"):
        emu.launch(prog, 1, 32, [0])
    assert time.perf_counter() - t < 3.0


def test_time_limit_and_chaos_options_are_validated(monkeypatch):
    with pytest.raises(ArgumentError, match="time_limit"):
        Emulator(time_limit=0)
    with pytest.raises(ArgumentError, match="chaos must be an integer seed"):
        Emulator(chaos="1")
    prog = load_ptx(kernel(""))
    monkeypatch.setenv("CUTEDSL_SIM_TIME_LIMIT", "soon")
    with pytest.raises(SimLaunchError, match="CUTEDSL_SIM_TIME_LIMIT='soon'"):
        Emulator().launch(prog, 1, 32, [0])
    monkeypatch.delenv("CUTEDSL_SIM_TIME_LIMIT")
    monkeypatch.setenv("CUTEDSL_SIM_CHAOS", "x")
    with pytest.raises(SimLaunchError, match="CUTEDSL_SIM_CHAOS='x' is not an integer seed"):
        Emulator().launch(prog, 1, 32, [0])
    monkeypatch.setenv("CUTEDSL_SIM_CHAOS", "7")
    assert Emulator().launch(prog, 1, 32, [0])["chaos"] == 7
