"""Residency and intra-warp store conflicts (issue 21): the CTAs that fit on the GPU at once run
together, so CTAs that synchronise through global memory finish; a wait on a CTA that cannot
become resident is a deadlock report saying so; lanes of one store writing different values to
one shared word are a race."""
import numpy as np
import pytest

from cutedsl.sim import DeadlockError, Emulator, load_ptx
from simkit import kernel

# every CTA adds 1 to a global counter, then spins until the counter reaches the grid size
# (a grid-wide barrier): only possible when every CTA is resident at once
GRID_BARRIER = """
\tld.param.u64 %rd1, [p_out];
\tcvta.to.global.u64 %rd1, %rd1;
\tmov.u32 %r1, %tid.x;
\tmov.u32 %r2, %nctaid.x;
\tsetp.eq.u32 %p1, %r1, 0;
\t@%p1 red.release.gpu.global.add.u32 [%rd1], 1;
SPIN:
\tld.acquire.gpu.global.u32 %r3, [%rd1];
\tsetp.lt.u32 %p2, %r3, %r2;
\t@%p2 bra SPIN;
\tmov.u32 %r4, %ctaid.x;
\tmul.wide.u32 %rd2, %r4, 4;
\tadd.s64 %rd3, %rd1, %rd2;
\t@%p1 st.global.u32 [%rd3+4], %r3;
"""

# a work queue: CTAs take item numbers from a global counter until it passes N
WORK_QUEUE = """
\tld.param.u64 %rd1, [p_out];
\tcvta.to.global.u64 %rd1, %rd1;
\tmov.u32 %r1, %tid.x;
\tsetp.ne.u32 %p1, %r1, 0;
\t@%p1 bra END;
\tmov.u32 %r5, %ctaid.x;
NEXT:
\tatom.relaxed.gpu.global.add.u32 %r2, [%rd1], 1;
\tsetp.ge.u32 %p2, %r2, 64;
\t@%p2 bra END;
\tmul.wide.u32 %rd2, %r2, 4;
\tadd.s64 %rd3, %rd1, %rd2;
\tadd.u32 %r6, %r5, 1;
\tst.global.u32 [%rd3+4], %r6;
\tbra NEXT;
END:
"""


def test_grid_wide_barrier_through_global_memory():
    emu = Emulator(sm_count=4)                 # 4 SMs x 16 CTAs of 128 threads: 24 CTAs fit
    prog = load_ptx(kernel(GRID_BARRIER))
    out = emu.to_device(np.zeros(1 + 24, np.uint32))
    emu.launch(prog, 24, 128, [out])
    r = emu.to_host(out, (25,), np.uint32)
    assert r[0] == 24 and (r[1:] == 24).all()
    assert emu.backend.last_launch["resident_clusters"] == 64


def test_work_queue_spread_over_resident_ctas():
    emu = Emulator()
    prog = load_ptx(kernel(WORK_QUEUE))
    out = emu.to_device(np.zeros(1 + 64, np.uint32))
    emu.launch(prog, 8, 32, [out])
    r = emu.to_host(out, (65,), np.uint32)
    assert r[0] >= 64 and set(r[1:]) <= set(range(1, 9)) and (r[1:] > 0).all()


def test_waiting_on_a_cta_that_cannot_become_resident_is_a_deadlock():
    """1024-thread CTAs: 2 per SM; on 2 SMs only 4 of the 6 are resident and the barrier waits
    for the other two forever."""
    emu = Emulator(sm_count=2)
    prog = load_ptx(kernel(GRID_BARRIER))
    out = emu.to_device(np.zeros(1 + 6, np.uint32))
    with pytest.raises(DeadlockError, match=r"(?s)livelock.*2 more cluster\(s\) of the launch cannot become "
                                            r"resident until one of these exits \(4 live at once: 2 SMs\)"):
        emu.launch(prog, 6, 1024, [out])


def test_adversarial_mode_keeps_the_barrier_correct():
    emu = Emulator(sm_count=1, chaos=7)
    prog = load_ptx(kernel(GRID_BARRIER))
    out = emu.to_device(np.zeros(1 + 8, np.uint32))
    emu.launch(prog, 8, 64, [out])
    assert (emu.to_host(out, (9,), np.uint32) == 8).all()


LANE_STORE = """
\tld.param.u64 %rd1, [p_out];
\tmov.u32 %r1, %tid.x;
\tmov.u32 %r9, buf;
\t{value}
\tst.shared.u32 [%r9], %r2;
\tbar.sync 0;
\tld.shared.u32 %r3, [%r9];
\tcvta.to.global.u64 %rd1, %rd1;
\tst.global.u32 [%rd1], %r3;
"""


@pytest.mark.parametrize("value,race", [("mov.u32 %r2, %r1;", True), ("mov.u32 %r2, 7;", False)])
def test_lanes_of_one_store_writing_one_word(value, race):
    """Issue 21: two lanes of one st.shared writing different values to one word is a race
    (which lane wins is undefined); all lanes writing the same value is benign."""
    from cutedsl.sim import RaceError
    emu = Emulator()
    prog = load_ptx(kernel(LANE_STORE.replace("{value}", value), decls="\t.shared .align 4 .b8 buf[4];\n"))
    out = emu.to_device(np.zeros(1, np.uint32))
    if race:
        with pytest.raises(RaceError, match=r"lanes 0 and 1 of warp 0 store different values there in one "
                                            r"instruction"):
            emu.launch(prog, 1, 32, [out])
    else:
        emu.launch(prog, 1, 32, [out])
        assert emu.to_host(out, (1,), np.uint32)[0] == 7


CP_ASYNC = """
\tld.param.u64 %rd1, [p_src];
\tld.param.u64 %rd2, [p_out];
\tcvta.to.global.u64 %rd1, %rd1;
\tcvta.to.global.u64 %rd2, %rd2;
\tmov.u32 %r9, buf;
\tst.shared.u32 [%r9], 0;
\tcp.async.ca.shared.global [%r9], [%rd1], 4;
\tcp.async.commit_group;
\t{wait}
\tld.shared.u32 %r3, [%r9];
\tst.global.u32 [%rd2], %r3;
"""


@pytest.mark.parametrize("wait", ["cp.async.wait_group 0;", ""])
def test_cp_async_lands_late_in_the_adversarial_mode(wait):
    """Issue 21: cp.async copies are deferred like the other async copies: without the wait
    some seeds read the old shared value (the race detector, off here, reports it in any mode);
    with it every seed reads the copy."""
    got = set()
    for seed in range(1, 11):
        emu = Emulator(chaos=seed, race_check=False)
        prog = load_ptx(kernel(CP_ASYNC.replace("{wait}", wait), params=("src", "out"),
                               decls="\t.shared .align 4 .b8 buf[4];\n"))
        src, out = emu.to_device(np.array([42], np.uint32)), emu.to_device(np.zeros(1, np.uint32))
        emu.launch(prog, 1, 1, [src, out])
        got.add(int(emu.to_host(out, (1,), np.uint32)[0]))
    assert got == {42} if wait else 0 in got        # without the wait the old value shows
