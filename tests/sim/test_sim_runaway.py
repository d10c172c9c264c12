"""Runaway kernels are stopped within seconds by default (issue #40 item 5): loops whose state
changes but which make no progress (livelock by the progress limit), grids the emulator cannot
finish within its wall-clock limit (refused before starting), huge PTX texts (refused while
parsing); and kernels that wait for another warp's progress are not stopped."""
import time

import numpy as np
import pytest

from cutedsl.errors import ArgumentError
from cutedsl.sim import (Emulator, GridTooLarge, LivelockError, PTXParseError, SimLaunchError, SimLimits,
                         TimeLimitExceeded, load_ptx)
from cutedsl.sim.frontend.parser import parse_module
from cutedsl.sim.machine.scheduler import DEFAULT_PROGRESS_LIMIT, DEFAULT_TIME_LIMIT

from simkit import kernel

COUNTER_IN_REGISTER = "$L_spin:\n\tadd.u32 %r1, %r1, 1;\n\tbra.uni $L_spin;\n"
COUNTER_IN_MEMORY = ("\tld.param.u64 %rd1, [p_out];\n$L_spin:\n\tst.global.u32 [%rd1], %r1;\n"
                     "\tadd.u32 %r1, %r1, 1;\n\tbra.uni $L_spin;\n")


def test_defaults_suit_interactive_use(monkeypatch):
    monkeypatch.delenv("CUTEDSL_SIM_TIME_LIMIT", raising=False)
    from cutedsl.sim.machine.scheduler import default_time_limit
    assert (DEFAULT_TIME_LIMIT, DEFAULT_PROGRESS_LIMIT, default_time_limit()) == (60.0, 2_000_000, 60.0)


@pytest.mark.parametrize("body,block", [(COUNTER_IN_REGISTER, 32), (COUNTER_IN_REGISTER, 128),
                                        (COUNTER_IN_MEMORY, 32), (COUNTER_IN_MEMORY, 256)],
                         ids=["register-1warp", "register-4warps", "memory-1warp", "memory-8warps"])
def test_loop_with_a_growing_counter_is_a_livelock_within_seconds(body, block):
    """A counter that only grows (in a register, or stored to the same word each iteration) is no
    repeated state, but no progress either: stopped by the default progress limit in seconds, long
    before the wall-clock limit."""
    emu = Emulator(budget=10 ** 12, time_limit=DEFAULT_TIME_LIMIT)     # stopped before the default limit
    out = emu.to_device(np.zeros(4, np.uint32))
    with pytest.raises(LivelockError, match=r"(?s)livelock: kernel 'k' executed \d+ warp-instructions .*"
                                            r"progress limit is 2000000.*SimBackend\(progress_limit=\.\.\.\) / "
                                            r"CUTEDSL_SIM_PROGRESS_LIMIT.*warp 0 lanes 0-31 at PTX line"):
        emu.launch(emu.load(kernel(body)), 1, block, [out])


def test_progress_limit_option_and_environment(monkeypatch):
    prog = load_ptx(kernel(COUNTER_IN_REGISTER))
    with pytest.raises(LivelockError, match="progress limit is 5000"):
        Emulator(progress_limit=5000).launch(prog, 1, 32, [0])
    monkeypatch.setenv("CUTEDSL_SIM_PROGRESS_LIMIT", "7000")
    with pytest.raises(LivelockError, match="progress limit is 7000"):
        Emulator().launch(prog, 1, 32, [0])
    monkeypatch.setenv("CUTEDSL_SIM_PROGRESS_LIMIT", "many")
    with pytest.raises(SimLaunchError, match="CUTEDSL_SIM_PROGRESS_LIMIT='many' is not an integer"):
        Emulator().launch(prog, 1, 32, [0])
    with pytest.raises(ArgumentError, match="progress_limit must be a positive int"):
        Emulator(progress_limit=0)


# warp 0 polls a flag that warp 1 sets after walking an array (loads at new addresses, no
# synchronisation): warp 0 is waiting for a live warp that progresses, not livelocked
WAIT_FOR_WALKER = """
\tld.param.u64 %rd1, [p_out];
\tmov.u32 %r1, %tid.x;
\tsetp.lt.u32 %p1, %r1, 32;
\t@%p1 bra.uni $L_poll;
\tmov.u32 %r2, 0;
\tmov.u32 %r5, 0;
\tmov.u64 %rd2, %rd1;
$L_walk:
\tld.global.u32 %r3, [%rd2+4];
\tadd.u32 %r5, %r5, %r3;
\tadd.s64 %rd2, %rd2, 4;
\tadd.u32 %r2, %r2, 1;
\tsetp.lt.u32 %p2, %r2, {n};
\t@%p2 bra.uni $L_walk;
\tst.volatile.global.u32 [%rd1], %r5;
\tbra.uni $L_end;
$L_poll:
\tld.volatile.global.u32 %r4, [%rd1];
\tsetp.eq.u32 %p3, %r4, 0;
\t@%p3 bra.uni $L_poll;
$L_end:
"""


def test_a_warp_waiting_for_a_progressing_warp_is_not_stopped():
    n = 12_000                  # the walker alone runs 72,000 warp-instructions > the limit
    emu = Emulator(progress_limit=50_000)
    buf = emu.to_device(np.concatenate([[0], np.ones(n, np.uint32)]).astype(np.uint32))
    r = emu.launch(emu.load(kernel(WAIT_FOR_WALKER.format(n=n))), 1, 64, [buf])
    assert r["instructions"] > 50_000
    assert emu.to_host(buf, (1,), np.uint32)[0] == n


def test_grid_that_cannot_finish_in_the_time_limit_is_refused_before_starting():
    """The largest legal grid (2^31-1 x 65535 x 65535) of an empty kernel: refused at once, as a
    launch error and a time-limit error, naming the limit and how to raise it."""
    emu = Emulator()
    prog = emu.load(kernel(""))
    t = time.perf_counter()
    with pytest.raises(GridTooLarge, match=r"grid \(2147483647, 65535, 65535\) .* cannot finish within the "
                                           r"emulator's wall-clock limit of \d+ s.*SimBackend\(time_limit=\.\.\.\) / "
                                           r"CUTEDSL_SIM_TIME_LIMIT") as e:
        emu.launch(prog, (2 ** 31 - 1, 65535, 65535), 32, [0])
    assert time.perf_counter() - t < 1.0
    assert isinstance(e.value, SimLaunchError) and isinstance(e.value, TimeLimitExceeded)
    with pytest.raises(GridTooLarge):
        Emulator(time_limit=1.0).launch(prog, 400_000, 32, [0])     # >= 3.6 s even if empty
    r = Emulator(time_limit=30.0).launch(prog, 2000, 32, [0])        # fits (>= 0.018 s): runs
    assert r["ctas"] == 2000


def _straight_line(n: int) -> str:
    return kernel("\n".join("\tadd.s32 %r1, %r1, 1;" for _ in range(n)))


def test_huge_ptx_is_refused_while_parsing():
    t = time.perf_counter()
    with pytest.raises(PTXParseError, match=r"more than 200000 statements .*SimLimits\(statements=\.\.\.\)"):
        load_ptx(_straight_line(10 ** 6))
    assert time.perf_counter() - t < 15.0
    with pytest.raises(PTXParseError, match="more than 1000 statements"):
        load_ptx(_straight_line(2000), limits=SimLimits(statements=1000))
    assert len(load_ptx(_straight_line(2000), limits=SimLimits(statements=3000)).code) == 2002      # + ret, + the end sentinel


def test_parse_time_is_linear_in_the_text():
    """10x the lines costs about 10x the time (measured 2026-11-28: 4.9 us per line at 10^5
    lines, 5.2 at 10^6; the comment stripper was a per-character loop before)."""
    small, big = _straight_line(20_000), _straight_line(200_000)
    ts = []
    for text in (small, big):
        t = time.perf_counter()
        parse_module(text)
        ts.append(time.perf_counter() - t)
    assert ts[1] < 25 * ts[0], ts
