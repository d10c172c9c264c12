"""f32 ``atom``/``red`` ``.add`` and subnormals, as PTX ISA 9.7.13.5 (atom) and 9.7.13.6 (red)
state them: on global memory (a ``.global`` address, or a generic one into global) the add
flushes subnormal inputs and results to zero of the same sign and rounds to nearest even (ptxas
emits ``REDG.E.ADD.F32.FTZ.RN``); on shared memory it keeps subnormals. ``.noftz`` f16 / bf16
adds keep them too. Every case runs one thread, so the sums are exact expectations in bits."""
import numpy as np
import pytest

from cutedsl.sim import Emulator, load_ptx
from simkit import kernel

SUB = 0x00400000          #: 2^-127, a subnormal f32
TINY = 0x00800000         #: 2^-126, the smallest normal f32
NEG = 0x80000000


def _run(body: str, init: list, decls: str = "") -> list:
    """Bits of the u32 words at ``p_out`` after one thread runs ``body`` on words ``init``."""
    emu = Emulator()
    out = emu.to_device(np.array(init, np.uint32))
    emu.launch(load_ptx(kernel("\tld.param.u64 %rd1, [p_out];\n" + body, decls=decls)), 1, 1, [out])
    return [int(x) for x in emu.to_host(out, (len(init),), np.uint32)]


def _f(bits: int) -> str:
    return f"0f{bits:08X}"


@pytest.mark.parametrize("instr", ["red.global.add.f32 [%rd1+{o}], {b};",
                                   "red.add.f32 [%rd1+{o}], {b};",                    # generic, into global
                                   "atom.global.add.f32 %f9, [%rd1+{o}], {b};",
                                   "atom.add.f32 %f9, [%rd1+{o}], {b};"],
                         ids=["red.global", "red.generic", "atom.global", "atom.generic"])
def test_global_f32_add_flushes_subnormal_inputs_and_results(instr):
    cases = [                     # (memory before, b, memory after)
        (0, SUB, 0),                              # subnormal b, positive: +0 (IEEE: 2^-127)
        (NEG, NEG | SUB, NEG),                    # subnormal b, negative, onto -0: -0
        (SUB, TINY, TINY),                        # subnormal old value flushed: 2^-126 (IEEE: 1.5 * 2^-126)
        (NEG | SUB, 0, 0),                        # -subnormal + 0 -> -0 + +0 = +0 (round to nearest)
        (0x00C00000, NEG | TINY, 0),              # 1.5 * 2^-126 - 2^-126: a subnormal result, flushed to +0
        (NEG | 0x00C00000, TINY, NEG),            # its negative: -0
        (0x3F800000, 0x33800000, 0x3F800000),     # 1 + 2^-24: a tie, to even (1.0)
        (0x3F800001, 0x33800000, 0x3F800002),     # 1 + ulp + 2^-24: a tie, to even (1 + 2 ulp)
    ]
    body = "".join(instr.format(o=4 * i, b=_f(b)) + "\n" for i, (_, b, _) in enumerate(cases))
    got = _run(body, [m for m, _, _ in cases])
    assert [f"{g:08x}" for g in got] == [f"{w:08x}" for _, _, w in cases]


def test_atom_returns_the_old_value_unflushed():
    """``atom`` hands back the memory's old value as it was (d = *a); only the addition flushes."""
    got = _run(f"\tatom.global.add.f32 %f1, [%rd1], {_f(TINY)};\n\tst.global.f32 [%rd1+4], %f1;\n", [SUB, 0])
    assert got == [TINY, SUB]


def test_vector_red_f32_flushes_each_element():
    got = _run(f"\tred.global.add.v4.f32 [%rd1], {{{_f(SUB)}, {_f(NEG | SUB)}, {_f(TINY)}, {_f(NEG | TINY)}}};\n",
               [0, NEG, SUB, 0x00C00000])
    assert got == [0, NEG, TINY, 0]


@pytest.mark.parametrize("generic", [False, True], ids=["shared", "generic-shared"])
def test_shared_f32_add_keeps_subnormals(generic):
    """On shared memory the ISA says the add supports subnormal inputs and results."""
    decls = "\t.shared .align 4 .b8 s[16];\n"
    addr = "%rd3" if generic else "s"
    space = "" if generic else ".shared"
    body = f"""
\tmov.u64 %rd2, s;
\tcvta.shared.u64 %rd3, %rd2;
\tst.shared.u32 [s], 0;
\tst.shared.u32 [s+4], {SUB};
\tst.shared.u32 [s+8], {0x00C00000};
\tred{space}.add.f32 [{addr}], {_f(SUB)};
\tatom{space}.add.f32 %f1, [{addr}+4], {_f(TINY)};
\tred{space}.add.f32 [{addr}+8], {_f(NEG | TINY)};
\tld.shared.v2.u32 {{%r1, %r2}}, [s];
\tld.shared.u32 %r3, [s+8];
\tst.global.v2.u32 [%rd1], {{%r1, %r2}};
\tst.global.u32 [%rd1+8], %r3;
"""
    assert _run(body, [7, 7, 7], decls) == [SUB, 0x00C00000, SUB]


def test_noftz_half_adds_keep_subnormals():
    """``.noftz`` f16 / bf16 adds preserve subnormal inputs and results (ISA 9.7.13.5), on global memory too."""
    f16_sub, bf16_sub = 0x0001, 0x0001              # the smallest subnormal of each
    body = f"""
\tmov.b16 %rs1, {f16_sub};
\tmov.b16 %rs2, {bf16_sub};
\tred.global.add.noftz.f16 [%rd1], %rs1;
\tred.global.add.noftz.bf16 [%rd1+4], %rs2;
\tatom.global.add.noftz.f16 %rs3, [%rd1+8], %rs1;
"""
    got = _run(body, [f16_sub, bf16_sub, 0])
    assert got == [2 * f16_sub, 2 * bf16_sub, f16_sub]
