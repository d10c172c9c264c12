"""Chain folding (cutedsl/sim/frontend/chain_fold.py): the register instructions between a
chain's wgmmas run before the chain as one plan, only where no MMA between their places reads or
writes what they write (or writes what they read). A real GEMM gives bit for bit the D and the
warp-instruction count it gives without folds; the decoder folds exactly the safe runs."""
import numpy as np
import pytest

from cutedsl.sim.frontend import loader
from cutedsl.sim.frontend.chain_fold import ChainFold
from cutedsl.sim.frontend.limits import DEFAULT_LIMITS
from cutedsl.sim.frontend.parser import parse_module
from cutedsl.sim.frontend.program import decode_entry
from simkit import kernel

DREGS = "{" + ", ".join(f"%r{100 + i}" for i in range(32)) + "}"
MMA = "\twgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 " + DREGS + ", A, B, %p1, 1, 1, 0, 1;\n"


def mma(a, b):
    return MMA.replace("A, B", f"{a}, {b}")


def decode(between, first="\tsetp.ne.b32 %p1, 1, 0;\n"):
    """Code of: the descriptors, ``first``, an MMA, ``between``, a second MMA on the next
    descriptors (%rd26, %rd27)."""
    body = ("\tld.param.u64 %rd22, [p_out];\n\tld.param.u64 %rd25, [p_out];\n\twgmma.fence.sync.aligned;\n"
            + first + mma("%rd22", "%rd25") + between + mma("%rd26", "%rd27")
            + "\twgmma.commit_group.sync.aligned;\n\twgmma.wait_group.sync.aligned 0;\n")
    mod = parse_module(kernel(body))
    return decode_entry(mod, next(iter(mod.entries.values())), "", DEFAULT_LIMITS).code


def folds(code):
    return {pc: ins.fold for pc, ins in enumerate(code) if ins.fold is not None}


ADVANCE = "\tadd.s64 %rd26, %rd22, 2;\n\tadd.s64 %rd27, %rd25, 2;\n"


def test_descriptor_advance_and_repeated_constant_setp_fold():
    code = decode(ADVANCE + "\tsetp.ne.b32 %p1, 1, 0;\n")
    (pc, f), = folds(code).items()
    assert code[pc].opcode == "setp.ne.b32" and code[pc + 1].opcode.startswith("wgmma.mma_async")
    assert f.n == 6 and f.regpcs == {pc, pc + 2, pc + 3, pc + 4}
    assert len(f.steps) == 2        # the first setp, the two adds as one; the repeated setp dropped


@pytest.mark.parametrize("bad, good", [
    ("\tadd.s64 %rd22, %rd22, 2;\n", "\tadd.s64 %rd28, %rd22, 2;\n"),   # WAR on the first MMA's operand
    ("\tsetp.ne.b32 %p1, %r5, 0;\n", "\tsetp.ne.b32 %p1, 1, 0;\n"),     # a scale-d the first MMA read, not a repeat
    ("\tsetp.eq.b32 %p1, 1, 0;\n", "\tsetp.ne.b32 %p1, 1, 0;\n"),      # another value than the one p holds
])
def test_a_write_an_earlier_mma_reads_is_not_folded(bad, good):
    # (the same run with a harmless instruction in its place folds: the rule is what declines)
    rest = ADVANCE + "\tsetp.ne.b32 %p1, 1, 0;\n\tadd.s64 %rd29, %rd25, 2;\n"
    assert len(folds(decode(rest + good))) == 1
    assert folds(decode(rest + bad)) == {}


def test_accumulator_registers_end_the_fold():
    # an instruction naming an accumulator (here: reading one after the first MMA) stays in place;
    # what follows it up to one MMA is too short to fold
    assert folds(decode(ADVANCE + "\tsetp.ne.b32 %p1, 1, 0;\n\tmov.b32 %r5, %r100;\n")) == {}
    code = decode(ADVANCE + "\tsetp.ne.b32 %p1, 1, 0;\n", first="\tmov.b32 %r100, 0;\n\tsetp.ne.b32 %p1, 1, 0;\n")
    (pc, f), = folds(code).items()
    assert code[pc - 1].opcode == "mov.b32" and code[pc].opcode == "setp.ne.b32"    # after the zeroing
    assert f.n == 6


def test_gemm_is_bit_identical_without_folds(monkeypatch):
    from cutedsl import Gemm, GemmConfig
    from cutedsl.sim import SimBackend
    runs = []
    orig = ChainFold.run

    def run(self, b):
        runs.append(self.n)
        return orig(self, b)
    monkeypatch.setattr(ChainFold, "run", run)
    rng = np.random.default_rng(7)
    a = rng.standard_normal((300, 330)).astype(np.float16)
    b = rng.standard_normal((330, 200)).astype(np.float16)
    be = SimBackend()
    g = Gemm(GemmConfig(), be)
    d = g(a, b)
    n = be.last_launch["instructions"]
    assert runs, "no chain fold ran in the GEMM's k-loop"
    progs = [p for p in loader._CACHE.values() if any(ins.fold is not None for ins in p.code)]
    assert progs
    saved = [(ins, ins.fold) for p in progs for ins in p.code if ins.fold is not None]
    try:
        for ins, _f in saved:
            ins.fold = None
        runs.clear()
        d0 = g(a, b)
        assert not runs
        assert be.last_launch["instructions"] == n
    finally:
        for ins, f in saved:
            ins.fold = f
    assert d.tobytes() == d0.tobytes()
    ref = a.astype(np.float64) @ b.astype(np.float64)
    assert np.abs(d.astype(np.float64) - ref).max() < 0.05 * np.abs(ref).max()
