"""The inlined closures of register instructions (cutedsl/sim/engines/alu.py, ``direct``: the
register reads, immediates and the unmasked write inlined; add/sub/mul/max/shl/neg, fma, setp,
selp, mov, cvt) against the generic closures (reader and writer calls): every register bit for
bit, the warp-instruction count,
with whole warps, lockstep batches, a partial warp and lanes that a branch splits (masked
writes), fused and unfused."""
import numpy as np
import pytest

from cutedsl.sim.engines import alu
from simkit import kernel
from test_sim_fusion import BLOCK, EPILOGUE, PROLOGUE, fresh, inputs, run, unfused

#: lanes 0..12 branch over register instructions (their writes are masked), then rejoin
SPLIT = """
\tsetp.lt.u32 %p3, %r100, 13;
\t@%p3 bra SKIP;
\tadd.rn.f32 %f6, %f0, %f1;
\tmul.rn.f32 %f7, %f7, 0f3FC00000;
\tshl.b32 %r50, %r100, 3;
\tadd.s32 %r51, %r50, 7;
\tneg.f32 %f8, %f2;
\tmax.f32 %f9, %f9, %f3;
\tand.b32 %r52, %r51, 0xff;
\tmov.u32 %r53, 77;
\tselp.u32 %r54, 5, 9, %p3;
\tsub.s32 %r55, 100, %r53;
\tcvta.to.global.u64 %rd7, %rd6;
SKIP:
\tadd.s32 %r52, %r52, %r54;
\tadd.s32 %r52, %r52, %r55;
\tcvt.u32.u64 %r56, %rd7;
\txor.b32 %r52, %r52, %r56;
\tselp.u32 %r57, 3, 11, %p3;
\tadd.s32 %r52, %r52, %r57;
\tcvt.rn.f32.u32 %f10, %r52;
\tsub.rn.f32 %f11, %f11, %f10;
"""
TEXT = kernel(PROLOGUE + SPLIT + BLOCK + EPILOGUE, params=("out", "in"))


def inlined(prog):
    """The operand forms of the program's inlined closures (alu._FORMS: ``_rc`` for a register
    and an immediate, ...)."""
    return {ins.fn.__qualname__.split(".")[0] for ins in prog.code if ins.fn.__module__ == alu.__name__}


def test_some_closures_are_inlined():
    # add/mul/max/shl/sub, an immediate second; neg; fma and selp of three registers; setp; mov,
    # cvt, cvta; an immediate mov, sub from an immediate, selp of two immediates
    assert {"_r", "_rr", "_rc", "_rrr", "_rcr", "_c", "_cr", "_ccr"} <= inlined(fresh(TEXT))


@pytest.mark.parametrize("ctas, threads", [(2, 128), (1, 32), (1, 40)])
@pytest.mark.parametrize("fused", [True, False])
def test_inlined_matches_generic(monkeypatch, ctas, threads, fused):
    x = inputs(ctas * threads, seed=ctas + threads)
    prog = fresh(TEXT) if fused else unfused(TEXT)
    got, n_got = run(prog, ctas, threads, x)
    monkeypatch.setattr(alu, "_FORMS", {})          # every instruction's generic closure
    gen = fresh(TEXT) if fused else unfused(TEXT)
    assert not inlined(gen) - {"binary", "unary"}
    want, n_want = run(gen, ctas, threads, x)
    assert np.array_equal(got, want) and n_got == n_want
