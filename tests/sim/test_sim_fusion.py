"""Fused register blocks (cutedsl/sim/frontend/fusion.py): a straight-line run of register
instructions runs as one numpy operation per step of mutually independent instructions of one
operation (a schedule over the register dependences). Every register must
hold bit for bit what the instructions one by one write -- with read-after-write chains,
write-after-read and write-after-write hazards, special values (NaN, signed zeros, infinities,
subnormals, f16 ties), lockstep batches, a lone warp and a partial warp -- and the
warp-instruction count must not change. Also: shfl.sync run for a lockstep batch."""
import numpy as np
import pytest

from cutedsl.sim import Emulator
from cutedsl.sim.frontend.fusion import FusedBlock
from cutedsl.sim.frontend.limits import DEFAULT_LIMITS
from cutedsl.sim.frontend.parser import parse_module
from cutedsl.sim.frontend.program import decode_entry
from simkit import kernel
from test_sim_lockstep import batches  # noqa: F401  (the fixture recording lockstep batches)


@pytest.fixture(autouse=True)
def _eager(monkeypatch):
    monkeypatch.delenv("CUTEDSL_SIM_CHAOS", raising=False)


def fresh(text):
    """A decoded Program of its own (load_ptx caches by text; these tests alter theirs)."""
    mod = parse_module(text)
    return decode_entry(mod, next(iter(mod.entries.values())), "", DEFAULT_LIMITS)


def unfused(text):
    prog = fresh(text)
    for ins in prog.code:
        ins.fused = None
    return prog


NIN, NOUT = 16, 32
#: loads 16 f32 per thread into %f0..%f15; %rd6 points at the thread's 32 output words
PROLOGUE = """
\tld.param.u64 %rd1, [p_out];
\tld.param.u64 %rd2, [p_in];
\tmov.u32 %r100, %tid.x;
\tmov.u32 %r101, %ctaid.x;
\tmov.u32 %r102, %ntid.x;
\tmad.lo.u32 %r103, %r101, %r102, %r100;
\tmul.wide.u32 %rd3, %r103, 64;
\tadd.s64 %rd4, %rd2, %rd3;
\tmul.wide.u32 %rd5, %r103, 128;
\tadd.s64 %rd6, %rd1, %rd5;
\tld.global.v4.f32 {%f0, %f1, %f2, %f3}, [%rd4];
\tld.global.v4.f32 {%f4, %f5, %f6, %f7}, [%rd4+16];
\tld.global.v4.f32 {%f8, %f9, %f10, %f11}, [%rd4+32];
\tld.global.v4.f32 {%f12, %f13, %f14, %f15}, [%rd4+48];
"""
#: one straight-line block (no label, no guard): what FlashAttention's softmax does (fma/ex2
#: interleaved, a max tree, f16x2 packing) and hazards a reordering could get wrong
BLOCK = """
\tmov.f32 %f40, %f0;
\tfma.rn.f32 %f16, %f0, %f1, %f2;
\tex2.approx.ftz.f32 %f24, %f16;
\tfma.rn.f32 %f17, %f1, %f2, %f3;
\tex2.approx.ftz.f32 %f25, %f17;
\tfma.rn.f32 %f18, %f2, %f3, %f4;
\tex2.approx.ftz.f32 %f26, %f18;
\tfma.rn.f32 %f19, %f3, 0f3FC00000, %f5;
\tex2.approx.ftz.f32 %f27, %f19;
\tmax.f32 %f32, %f0, %f1;
\tmax.f32 %f33, %f2, %f3;
\tmax.f32 %f34, %f4, %f5;
\tmax.f32 %f35, %f6, %f7;
\tmax.f32 %f36, %f32, %f33;
\tmax.f32 %f37, %f34, %f35;
\tmax.f32 %f38, %f36, %f37;
\tcvt.rn.f16x2.f32 %r1, %f1, %f0;
\tcvt.rn.f16x2.f32 %r2, %f3, %f2;
\tcvt.rn.f16x2.f32 %r3, %f5, %f4;
\tadd.rn.f32 %f41, %f5, %f6;
\tadd.rn.f32 %f5, %f7, %f8;
\tadd.rn.f32 %f42, %f9, %f10;
\tadd.rn.f32 %f42, %f42, %f11;
\tmul.rn.f32 %f12, %f12, %f13;
\tmul.rn.f32 %f14, %f14, %f13;
\tsetp.gt.f32 %p1, %f8, %f9;
\tsetp.gt.f32 %p2, %f10, %f11;
\tselp.f32 %f43, %f8, %f9, %p1;
\tselp.f32 %f44, %f10, %f11, %p2;
\tbfe.u32 %r4, %r1, 3, 9;
\tbfe.u32 %r5, %r2, 3, 9;
\tmov.b32 %r6, %f42;
\tmov.b32 %r7, %f5;
"""
OUT_REGS = ["%f16", "%f17", "%f18", "%f19", "%f24", "%f25", "%f26", "%f27", "%f38", "%r1", "%r2", "%r3",
            "%f41", "%f5", "%f42", "%f12", "%f14", "%f43", "%f44", "%r4", "%r5", "%r6", "%r7", "%f40"]
EPILOGUE = "".join(f"\tst.global.b32 [%rd6+{4 * i}], {r};\n" for i, r in enumerate(OUT_REGS))
TEXT = kernel(PROLOGUE + BLOCK + EPILOGUE, params=("out", "in"))


def inputs(n, seed=0):
    """(n, 16) f32: normal values and, on some threads, NaN, +-0, +-inf, subnormals and f16 ties."""
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((n, NIN)) * 4).astype(np.float32)
    special = np.array([np.nan, -0.0, 0.0, np.inf, -np.inf, 1e-40, -3e-39, 1 + 2 ** -11, 1 + 3 * 2 ** -11,
                        65520.0, 2.0 ** -25], np.float32)
    pick = rng.random((n, NIN)) < 0.15
    x[pick] = rng.choice(special, int(pick.sum()))
    return x


def run(prog, ctas, threads, x):
    emu = Emulator()
    inp = emu.to_device(x)
    out = emu.to_device(np.zeros((ctas * threads, NOUT), np.uint32))
    info = emu.launch(prog, ctas, threads, [out, inp])
    return emu.to_host(out, (ctas * threads, NOUT), np.uint32), info["instructions"]


def test_block_is_fused_by_dependences():
    prog = fresh(TEXT)
    blocks = [(ins.pc, ins.fused) for ins in prog.code if ins.fused is not None]
    assert len(blocks) == 1
    pc, fb = blocks[0]
    n = BLOCK.count(";")
    assert isinstance(fb, FusedBlock) and fb.n == n
    assert prog.code[pc].text.startswith("mov.f32 %f40")
    # groups of one operation whose inputs are all computed: mov.f32, fma x3, fma with an
    # immediate, ex2 x4, max x4, max x2, max, cvt x3, add %f41 and %f42 = f9 + f10, add %f5 --
    # after the read of %f5: WAR -- and %f42 += f11: RAW/WAW, mul x2, setp x2, selp x2, bfe x2
    # (after the cvts), mov.b32 x2: 15 for 33
    assert len(fb.steps) == 15


#: two rows of a softmax whose scales come from chains of different lengths: grouped by
#: dependence level, the rows' fma and ex2 would run at different levels (8 steps); the
#: schedule delays the first row's until the second's are ready (6 steps)
ROWS = """
	mul.rn.f32 %f20, %f0, %f1;
	fma.rn.f32 %f21, %f2, %f20, %f3;
	fma.rn.f32 %f22, %f4, %f20, %f5;
	ex2.approx.ftz.f32 %f27, %f21;
	ex2.approx.ftz.f32 %f28, %f22;
	setp.gt.f32 %p1, %f6, %f7;
	selp.f32 %f23, %f6, %f7, %p1;
	mul.rn.f32 %f24, %f23, %f1;
	fma.rn.f32 %f25, %f8, %f24, %f9;
	fma.rn.f32 %f26, %f10, %f24, %f11;
	ex2.approx.ftz.f32 %f29, %f25;
	ex2.approx.ftz.f32 %f30, %f26;
	mul.rn.f32 %f2, %f2, %f2;
"""
ROWS_OUT = ["%f20", "%f21", "%f22", "%f23", "%f24", "%f25", "%f26", "%f27", "%f28", "%f29", "%f30", "%f2"]


def test_rows_of_different_depth_merge():
    text = kernel(PROLOGUE + ROWS + "".join(f"\tst.global.b32 [%rd6+{4 * i}], {r};\n"
                                            for i, r in enumerate(ROWS_OUT)), params=("out", "in"))
    prog = fresh(text)
    fb = next(ins.fused for ins in prog.code if ins.fused is not None and ins.fused.n == ROWS.count(";"))
    # setp, selp, mul x2 (%f20 waits for %f24), fma x4, ex2 x4, then the mul of %f2 (after the
    # fma reading %f2: WAR): 6 steps for 13 instructions
    assert len(fb.steps) == 6
    x = inputs(256, seed=5)
    got, n_fused = run(prog, 2, 128, x)
    want, n_plain = run(unfused(text), 2, 128, x)
    assert np.array_equal(got, want) and n_fused == n_plain
    with np.errstate(all="ignore"):
        assert np.array_equal(got[:, 11], (x[:, 2] * x[:, 2]).view(np.uint32))    # after both reads


@pytest.mark.parametrize("ctas, threads", [(2, 128), (1, 32), (1, 40)])
def test_fused_block_matches_instructions_one_by_one(ctas, threads):
    x = inputs(ctas * threads)
    got, n_fused = run(fresh(TEXT), ctas, threads, x)
    want, n_plain = run(unfused(TEXT), ctas, threads, x)
    assert np.array_equal(got, want)            # bit for bit, NaN payloads included
    assert n_fused == n_plain
    # independent checks against numpy (f32 add/mul/max/select are correctly rounded there)
    f = got.view(np.float32)
    with np.errstate(all="ignore"):
        assert np.array_equal(got[:, 12], (x[:, 5] + x[:, 6]).view(np.uint32))      # read before the WAR
        assert np.array_equal(got[:, 13], (x[:, 7] + x[:, 8]).view(np.uint32))
        assert np.array_equal(got[:, 14], ((x[:, 9] + x[:, 10]) + x[:, 11]).view(np.uint32))
        assert np.array_equal(got[:, 15], (x[:, 12] * x[:, 13]).view(np.uint32))
        assert np.array_equal(got[:, 23], x[:, 0].view(np.uint32))                 # the mov before it all
        sel = np.where(x[:, 8] > x[:, 9], x[:, 8], x[:, 9])
        assert np.array_equal(got[:, 17], sel.view(np.uint32))
        halves = np.stack([x[:, 0], x[:, 1]], axis=1).astype(np.float16).view(np.uint16).astype(np.uint32)
        assert np.array_equal(got[:, 9], halves[:, 0] | (halves[:, 1] << 16))
        assert np.array_equal(got[:, 19], (got[:, 9] >> 3) & 0x1FF)
        ok = ~np.isnan(x[:, :8]).any(axis=1) & (x[:, :8] != 0).all(axis=1)
        assert np.array_equal(f[ok, 8], x[ok, :8].max(axis=1))
        # ex2 of the fma: within an ulp of float64 exp2 (the emulator rounds it correctly)
        fm = x[:, 0].astype(np.float64) * x[:, 1] + x[:, 2]
        fin = np.isfinite(fm) & (np.abs(fm) < 100)
        ref = np.exp2(fm[fin].astype(np.float32).astype(np.float64))
        assert np.allclose(f[fin, 4], ref, rtol=2 ** -23, atol=1e-38)


def test_fused_block_under_the_adversarial_mode():
    x = inputs(256, seed=3)
    emu = Emulator(chaos=1)
    inp = emu.to_device(x)
    out = emu.to_device(np.zeros((256, NOUT), np.uint32))
    emu.launch(fresh(TEXT), 2, 128, [out, inp])
    want, _ = run(unfused(TEXT), 2, 128, x)
    assert np.array_equal(emu.to_host(out, (256, NOUT), np.uint32), want)


def test_a_label_ends_a_block_and_a_guard_is_not_fused():
    body = PROLOGUE + """
\tadd.rn.f32 %f16, %f0, %f1;
\tadd.rn.f32 %f17, %f2, %f3;
\tadd.rn.f32 %f18, %f4, %f5;
MID:
\tadd.rn.f32 %f19, %f6, %f7;
\tadd.rn.f32 %f20, %f8, %f9;
\tadd.rn.f32 %f21, %f10, %f11;
\tsetp.gt.f32 %p1, %f0, 0f00000000;
\t@%p1 add.rn.f32 %f22, %f12, %f13;
"""
    prog = fresh(kernel(body, params=("out", "in")))
    fused = {ins.text.split(",")[0]: ins.fused for ins in prog.code if ins.fused is not None}
    assert set(fused) == {"add.rn.f32 %f16", "add.rn.f32 %f19"}
    assert fused["add.rn.f32 %f16"].n == 3 and len(fused["add.rn.f32 %f16"].steps) == 1
    assert fused["add.rn.f32 %f19"].n == 4 and len(fused["add.rn.f32 %f19"].steps) == 2


SHFL = """
\tmov.u32 %r1, %tid.x;
\tmul.lo.u32 %r2, %r1, 7;
\tshfl.sync.bfly.b32 %r3|%p1, %r2, 5, 31, -1;
\tshfl.sync.up.b32 %r4|%p2, %r2, 3, 0, -1;
\tshfl.sync.down.b32 %r5|%p3, %r2, 6, 0x81f, -1;
\tshfl.sync.idx.b32 %r6, %r2, %r1, 0x1c1f, -1;
\tselp.u32 %r7, 1, 0, %p1;
\tselp.u32 %r8, 1, 0, %p2;
\tselp.u32 %r9, 1, 0, %p3;
\tld.param.u64 %rd1, [p_out];
\tmul.wide.u32 %rd2, %r1, 28;
\tadd.s64 %rd3, %rd1, %rd2;
\tst.global.u32 [%rd3], %r3;
\tst.global.u32 [%rd3+4], %r4;
\tst.global.u32 [%rd3+8], %r5;
\tst.global.u32 [%rd3+12], %r6;
\tst.global.u32 [%rd3+16], %r7;
\tst.global.u32 [%rd3+20], %r8;
\tst.global.u32 [%rd3+24], %r9;
"""


def shfl_ref(threads):
    """PTX ISA shfl.sync semantics per warp (9.7.9.6), for the four shuffles of SHFL."""
    t = np.arange(threads)
    lane, base = t % 32, t - t % 32
    a = (7 * t).astype(np.uint32)
    out = np.zeros((threads, 7), np.uint32)

    def one(j, ok):
        j = np.where(ok, j, lane)
        return a[base + j], ok.astype(np.uint32)
    out[:, 0], out[:, 4] = one(lane ^ 5, (lane ^ 5) <= 31)
    out[:, 1], out[:, 5] = one(lane - 3, (lane - 3) >= 0)
    seg = 8                                    # c = 0x81f: segments of 8 lanes, clamp 31
    maxl = (lane & seg) | (31 & ~seg)
    out[:, 2], out[:, 6] = one(lane + 6, (lane + 6) <= maxl)
    seg = 0x1c                                 # c = 0x1c1f: segments of 4 lanes, b = own lane id
    minl, maxl = lane & seg, (lane & seg) | (31 & ~seg)
    j = minl | (lane & ~seg & 31)
    out[:, 3] = one(j, j <= maxl)[0]
    return out


@pytest.mark.parametrize("threads", [128, 32])
def test_shfl_runs_once_for_a_lockstep_batch(batches, threads):
    emu = Emulator()
    out = emu.to_device(np.zeros((threads, 7), np.uint32))
    emu.launch(fresh(kernel(SHFL)), 1, threads, [out])
    assert np.array_equal(emu.to_host(out, (threads, 7), np.uint32), shfl_ref(threads))
    if threads == 128:
        assert (0, 4) in batches
