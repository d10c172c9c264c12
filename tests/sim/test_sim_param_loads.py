"""Kernel-parameter loads at one address (cutedsl/sim/machine/machine.py, Warp.load): after the
first whole-warp ``ld.param`` of an address the launch reuses its checked result (parameters are
read-only in a launch, PTX ISA 5.1.6.1 kernel function parameters). The values, the
warp-instruction count and every access the livelock detector notes match the uncached loads;
an out-of-range parameter load still fails."""
import numpy as np
import pytest

from cutedsl.sim import Emulator, load_ptx
from cutedsl.sim.frontend.errors import MemoryAccessError
from cutedsl.sim.machine import machine
from simkit import kernel

BODY = """
\tmov.u32 %r1, %tid.x;
\tmov.u32 %r7, %ctaid.x;
\tshl.b32 %r7, %r7, 5;
\tadd.s32 %r1, %r1, %r7;
\tmov.u32 %r2, 0;
\tmov.u32 %r3, 0;
LOOP:
\tld.param.u32 %r4, [p_n];
\tld.param.v2.u32 {%r5, %r6}, [p_n];
\tadd.s32 %r2, %r2, %r4;
\tadd.s32 %r2, %r2, %r6;
\tadd.s32 %r3, %r3, 1;
\tsetp.lt.u32 %p1, %r3, 5;
\t@%p1 bra LOOP;
\tld.param.u64 %rd1, [p_out];
\tmul.wide.u32 %rd2, %r1, 4;
\tadd.s64 %rd3, %rd1, %rd2;
\tst.global.u32 [%rd3], %r2;
"""
TEXT = kernel(BODY, params=("out", "n"))


def launch(monkeypatch, cached):
    notes, loads = [], []
    note, load = machine.Warp.note_access, machine.Warp._load
    monkeypatch.setattr(machine.Warp, "note_access", lambda w, ins, a: (notes.append((ins.pc, int(a[0]))),
                                                                        note(w, ins, a)))
    monkeypatch.setattr(machine.Warp, "_load", lambda w, *a: (loads.append(a[0]), load(w, *a))[1])
    if not cached:                  # no address counts as a kernel parameter's: nothing kept
        monkeypatch.setattr(machine, "CALLPARAM_BASE", 0)
    emu = Emulator()
    out = emu.to_device(np.zeros(64, np.uint32))
    n = np.uint64(7 | (3 << 32))    # p_n's low word 7, high word 3
    info = emu.launch(load_ptx(TEXT), 2, 32, [out, n])
    return emu.to_host(out, (64,), np.uint32), info["instructions"], notes, len(loads)


def test_reused_loads_match_the_loads_themselves(monkeypatch):
    got, n_got, notes_got, loads_got = launch(monkeypatch, True)
    monkeypatch.undo()
    want, n_want, notes_want, loads_want = launch(monkeypatch, False)
    assert got.tolist() == [5 * (7 + 3)] * 64
    assert np.array_equal(got, want) and n_got == n_want and notes_got == notes_want
    assert loads_want == 2 * (5 * 2 + 1) and loads_got == 3     # 2 warps; 3 distinct (address, form)


def test_out_of_range_parameter_load_still_fails():
    body = "\tld.param.u32 %r4, [p_n+64];\n"
    with pytest.raises(MemoryAccessError, match="param"):
        Emulator().launch(load_ptx(kernel(body, params=("out", "n"))), 1, 32, [np.zeros(1), np.uint64(1)])
