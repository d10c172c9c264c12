"""sm_100 instruction forms that compilers emit for softmax and attention (issue #39): three-input
``min``/``max`` and ``.xorsign.abs`` (PTX ISA 9.7.3.11/12, 9.7.4.7/8), packed ``.f32x2`` arithmetic
(9.7.3.3-9.7.3.6), ``brx.idx`` with ``.branchtargets`` (9.7.12.4) -- values against independent
Python/numpy answers, eager and adversarial, and the forms the ISA forbids refused at load."""
import math
from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest

from cutedsl.sim import Emulator, PTXParseError, SimRuntimeError, UnsupportedInstruction, load_ptx
from simkit import alu, kernel

SUB = float(np.float32(1e-40))          # an f32 subnormal
SPECIAL = [0.0, -0.0, 1.5, -1.5, np.inf, -np.inf, np.nan, SUB, -SUB, 3.0, -7.25, 1e30]
CANON32 = 0x7FFFFFFF


def bits32(x):
    return np.asarray(x, np.float32).view(np.uint32)


def ref_minmax(vals, is_min, nan=False, ab=False, xorsign=False, ftz=False):
    """The ISA's pseudo-code for min/max (9.7.3.11/12) on Python floats: returns a float (NaN as
    math.nan; the canonical bit pattern is checked separately)."""
    if ftz:
        vals = [math.copysign(0.0, v) if v == v and 0 < abs(v) < 2.0 ** -126 else v for v in vals]
    sign = (math.copysign(1, vals[0]) < 0) != (math.copysign(1, vals[1]) < 0)
    if ab:
        vals = [abs(v) for v in vals]
    if nan and any(v != v for v in vals):
        return math.nan
    num = [v for v in vals if v == v]
    if not num:
        return math.nan
    key = lambda v: (v, math.copysign(1, v))           # -0.0 before +0.0
    r = min(num, key=key) if is_min else max(num, key=key)
    if xorsign:
        r = -abs(r) if sign else abs(r)
    return r


def same_f32(got, want):
    """Bit equality, NaN compared as the canonical NaN."""
    w = np.float32(want)
    return int(bits32(got)) == (CANON32 if want != want else int(bits32(w)))


def triples(seed=0):
    rng = np.random.default_rng(seed)
    out = [(a, b, c) for a in SPECIAL for b in SPECIAL[:6] for c in (np.nan, -0.0, 2.0)]
    out += [tuple(rng.standard_normal(3)) for _ in range(40)]
    return [tuple(float(np.float32(x)) for x in t) for t in out]


def run3(instr, cols, emu=None):
    """Run ``instr`` with f32 inputs ``cols`` (3 lists) in chunks of 32 threads; return f32 results."""
    outs = []
    for i in range(0, len(cols[0]), 32):
        chunk = [np.array(c[i:i + 32], np.float32) for c in cols]
        outs.append(alu(instr, ["f32"] * len(cols), chunk, np.float32, emu=emu))
    return np.concatenate(outs)


@pytest.mark.parametrize("op", ["min", "max"])
@pytest.mark.parametrize("mods", ["", ".NaN", ".abs", ".ftz", ".ftz.NaN.abs"])
@pytest.mark.parametrize("chaos", [None, 3])
def test_three_input_min_max_f32(op, mods, chaos):
    """``min/max{.ftz}{.NaN}{.abs}.f32 d, a, b, c`` (sm_100): NaN inputs ignored (or, with .NaN,
    the canonical NaN), -0.0 < +0.0, .abs on every input, subnormals flushed with .ftz."""
    ts = triples()
    cols = [[t[i] for t in ts] for i in range(3)]
    got = run3(f"{op}{mods}.f32 {{d}}, {{a}}, {{b}}, {{c}}", cols, emu=Emulator(chaos=chaos))
    for g, t in zip(got, ts):
        want = ref_minmax(list(t), op == "min", nan=".NaN" in mods, ab=".abs" in mods, ftz=".ftz" in mods)
        assert same_f32(g, want), (op, mods, t, g, want)


def test_three_input_is_two_two_input_ops():
    """``max a, b, c`` equals ``max(max(a, b), c)`` of the two-input instruction, NaN and zeros included."""
    ts = triples(1)
    cols = [[t[i] for t in ts] for i in range(3)]
    three = run3("max.NaN.f32 {d}, {a}, {b}, {c}", cols)
    ab = run3("max.NaN.f32 {d}, {a}, {b}", cols[:2])
    two = run3("max.NaN.f32 {d}, {a}, {b}", [list(ab), cols[2]])
    assert np.array_equal(bits32(three), bits32(two))


@pytest.mark.parametrize("op", ["min", "max"])
def test_two_input_xorsign_abs_f32(op):
    """``.xorsign.abs``: the magnitude of min/max of |a|, |b| with sign = sign(a) XOR sign(b);
    a NaN result keeps no sign rule (canonical NaN with .NaN)."""
    vals = [(a, b) for a in SPECIAL for b in SPECIAL]
    cols = [[v[0] for v in vals], [v[1] for v in vals]]
    for mods in (".xorsign.abs", ".NaN.xorsign.abs"):
        got = run3(f"{op}{mods}.f32 {{d}}, {{a}}, {{b}}", cols)
        for g, (a, b) in zip(got, vals):
            want = ref_minmax([np.float32(a).item(), np.float32(b).item()], op == "min",
                              nan=".NaN" in mods, ab=True, xorsign=True)
            assert same_f32(g, want), (mods, a, b, g, want)


@pytest.mark.parametrize("ht,np_t", [("f16", np.float16), ("bf16", ml_dtypes.bfloat16)])
@pytest.mark.parametrize("mods", ["", ".NaN", ".xorsign.abs"])
def test_packed_half_min_max(ht, np_t, mods):
    """``min/max{.NaN}{.xorsign.abs}.{f16x2,bf16x2}`` (9.7.4.7/8): each half as the scalar rule,
    the canonical NaN being 0x7fff."""
    rng = np.random.default_rng(2)
    spec = np.array([0.0, -0.0, 1.5, -2.0, np.inf, -np.inf, np.nan, 0.25], np.float64)
    lo_a, lo_b = np.repeat(spec, 8), np.tile(spec, 8)
    hi_a, hi_b = rng.standard_normal(64), rng.standard_normal(64)

    def pack(lo, hi):
        return (np.asarray(lo, np_t).view(np.uint16).astype(np.uint32)
                | (np.asarray(hi, np_t).view(np.uint16).astype(np.uint32) << 16))
    for op in ("min", "max"):
        outs = []
        for i in range(0, 64, 32):
            s = slice(i, i + 32)
            outs.append(alu(f"{op}{mods}.{ht}x2 {{d}}, {{a}}, {{b}}", ["u32", "u32"],
                            [pack(lo_a[s], hi_a[s]), pack(lo_b[s], hi_b[s])], np.uint32))
        got = np.concatenate(outs)
        for half, (xa, xb) in ((got & 0xFFFF, (lo_a, lo_b)), (got >> 16, (hi_a, hi_b))):
            for g, a, b in zip(half, xa, xb):
                a, b = float(np_t(a)), float(np_t(b))
                want = ref_minmax([a, b], op == "min", nan=".NaN" in mods, ab="abs" in mods,
                                  xorsign="xorsign" in mods)
                wb = 0x7FFF if want != want else int(np.array(want, np_t).view(np.uint16))
                assert int(g) == wb, (ht, op, mods, a, b, hex(int(g)), want)


@pytest.mark.parametrize("instr,err,text", [
    ("max.xorsign.abs.f32 {d}, {a}, {b}, {c}", PTXParseError, "cannot be used with three inputs"),
    ("max.f16x2 {d}, {a}, {b}, {c}", UnsupportedInstruction, "exists only for .f32"),
    ("min.f64 {d}, {a}, {b}, {c}", UnsupportedInstruction, "exists only for .f32"),
    ("max.abs.f32 {d}, {a}, {b}", PTXParseError, ".xorsign and .abs go together"),
    ("max.xorsign.f32 {d}, {a}, {b}", PTXParseError, ".xorsign and .abs go together"),
    ("min.f32x2 {d}, {a}, {b}", UnsupportedInstruction, "unsupported modifier .f32x2"),
])
def test_forbidden_min_max_forms_refused_at_load(instr, err, text):
    wide = "f64" in instr or "f32x2" in instr
    n = instr.count("{") - 1                  # the operands besides {d}
    with pytest.raises(err, match=text.replace(".", r"\.")):
        alu(instr, ["u64" if wide else "u32"] * n, [np.zeros(1, np.uint64 if wide else np.uint32)] * n, np.uint32)


# -- .f32x2 ---------------------------------------------------------------------------------

def pk(lo, hi):
    return lo.view(np.uint32).astype(np.uint64) | hi.view(np.uint32).astype(np.uint64) << np.uint64(32)


def halves(v):
    v = np.asarray(v, np.uint64)
    return ((v & np.uint64(0xFFFFFFFF)).astype(np.uint32).view(np.float32),
            (v >> np.uint64(32)).astype(np.uint32).view(np.float32))


def round_f32(x: Fraction, mode: str) -> np.float32:
    """``x`` rounded to f32 in ``mode`` (exact rational in, by stepping from the nearest f32)."""
    r = np.float32(float(x))
    fr = Fraction(float(r))
    if mode == "rz" and abs(fr) > abs(x):
        r = np.nextafter(r, np.float32(0))
    elif mode == "rm" and fr > x:
        r = np.nextafter(r, np.float32(-np.inf))
    elif mode == "rp" and fr < x:
        r = np.nextafter(r, np.float32(np.inf))
    return np.float32(r)


def operands(seed, n=32):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((3, 2, n)).astype(np.float32)
    x[:2] = np.round(x[:2] * 2048) / 2048                  # 12-bit mantissas: products exact in f64
    return x


@pytest.mark.parametrize("mode", ["", ".rn", ".rz", ".rm", ".rp"])
@pytest.mark.parametrize("chaos", [None, 5])
def test_f32x2_rounding_modes(mode, chaos):
    """add/sub/mul ``{.rnd}.f32x2`` (default .rn) and ``fma.rnd.f32x2``: each half is the exact
    result rounded once in the mode, low half first."""
    x = operands(7)
    regs = [pk(x[i, 0], x[i, 1]) for i in range(3)]
    emu = Emulator(chaos=chaos)
    ops = {"add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b}
    for name, f in ops.items():
        got = halves(alu(f"{name}{mode}.f32x2 {{d}}, {{a}}, {{b}}", ["u64"] * 2, regs[:2], np.uint64, emu=emu))
        for h in range(2):
            want = [round_f32(f(Fraction(float(a)), Fraction(float(b))), mode[1:] or "rn")
                    for a, b in zip(x[0, h], x[1, h])]
            assert np.array_equal(got[h], np.array(want, np.float32)), (name, mode, h)
    if mode:
        got = halves(alu(f"fma{mode}.f32x2 {{d}}, {{a}}, {{b}}, {{c}}", ["u64"] * 3, regs, np.uint64, emu=emu))
        for h in range(2):
            want = [round_f32(Fraction(float(a)) * Fraction(float(b)) + Fraction(float(c)), mode[1:])
                    for a, b, c in zip(x[0, h], x[1, h], x[2, h])]
            assert np.array_equal(got[h], np.array(want, np.float32)), ("fma", mode, h)


def test_f32x2_ftz_flushes_each_half():
    lo = np.array([SUB, 1.0, -SUB], np.float32)
    hi = np.array([2.0, SUB, 3.0], np.float32)
    zero = np.array([0.0, 0.0, -0.0], np.float32)      # -0 + -0 = -0: the flushed input keeps its sign
    got = halves(alu("add.rn.ftz.f32x2 {d}, {a}, {b}", ["u64"] * 2, [pk(lo, hi), pk(zero, zero)], np.uint64))
    assert got[0].tolist() == [0.0, 1.0, 0.0] and np.signbit(got[0][2]) and got[1].tolist() == [2.0, 0.0, 3.0]
    plain = halves(alu("add.rn.f32x2 {d}, {a}, {b}", ["u64"] * 2, [pk(lo, hi), pk(zero, zero)], np.uint64))
    assert plain[0][0] == np.float32(SUB)


@pytest.mark.parametrize("instr,err,text", [
    ("add.rn.sat.f32x2 {d}, {a}, {b}", PTXParseError, "not .sat"),
    ("mul.rn.relu.f32x2 {d}, {a}, {b}", UnsupportedInstruction, "unsupported modifier .relu"),
    ("fma.f32x2 {d}, {a}, {b}, {c}", UnsupportedInstruction, "needs a rounding modifier"),
    ("mad.rn.f32x2 {d}, {a}, {b}, {c}", UnsupportedInstruction, "mad has no .f32x2 form"),
    ("div.rn.f32x2 {d}, {a}, {b}", UnsupportedInstruction, "unsupported modifier .f32x2"),
    ("add.rn.f32x2 {d}, {a}, 0f3F800000", PTXParseError, "must be a .b64 register"),
])
def test_f32x2_forbidden_forms(instr, err, text):
    with pytest.raises(err, match=text.replace(".", r"\.")):
        alu(instr, ["u64"] * 3, [np.zeros(1, np.uint64)] * 3, np.uint64)


# -- brx.idx --------------------------------------------------------------------------------

PRE = """
\tld.param.u64 %rd1, [p_out];
\tmov.u32 %r1, %tid.x;
\tmul.wide.u32 %rd2, %r1, 4;
\tadd.s64 %rd3, %rd1, %rd2;
"""

SWITCH = """
\t{idx}
$L_tab: .branchtargets $L_a, $L_b, $L_c;
\tbrx.idx{uni} %r2, $L_tab;
$L_a:
\tmov.u32 %r3, 100;
\tbra.uni $L_join;
$L_b:
\tmov.u32 %r3, 200;
\tbra.uni $L_join;
$L_c:
\tmov.u32 %r3, 300;
$L_join:
\tactivemask.b32 %r4;
\tpopc.b32 %r5, %r4;
\tmad.lo.u32 %r6, %r5, 1000, %r3;
\tst.global.u32 [%rd3], %r6;
"""


def run_switch(idx, uni="", n=32, chaos=None):
    emu = Emulator(chaos=chaos)
    prog = load_ptx(kernel(PRE + SWITCH.format(idx=idx, uni=uni)))
    out = emu.to_device(np.zeros(n, np.uint32))
    emu.launch(prog, 1, n, [out])
    return emu.to_host(out, (n,), np.uint32)


@pytest.mark.parametrize("chaos", [None, 2])
def test_brx_idx_divergent_lanes_take_their_targets_and_reconverge(chaos):
    """Lane i branches to tlist[i % 3]; all 32 lanes meet again at the join (activemask = 32)."""
    got = run_switch("rem.u32 %r2, %r1, 3;", chaos=chaos)
    assert got.tolist() == [32000 + 100 * (1 + i % 3) for i in range(32)]


def test_brx_idx_uniform_and_guarded():
    assert run_switch("mov.u32 %r2, 2;", uni=".uni").tolist() == [32300] * 32
    body = PRE + """
\tmov.u32 %r3, 7;
\tmov.u32 %r2, 1;
\tsetp.lt.u32 %p1, %r1, 10;
$L_tab: .branchtargets $L_a, $L_b;
\t@%p1 brx.idx %r2, $L_tab;
\tbra.uni $L_join;
$L_a:
\tmov.u32 %r3, 100;
\tbra.uni $L_join;
$L_b:
\tmov.u32 %r3, 200;
$L_join:
\tst.global.u32 [%rd3], %r3;
"""
    emu = Emulator()
    out = emu.to_device(np.zeros(32, np.uint32))
    emu.launch(load_ptx(kernel(body)), 1, 32, [out])
    assert emu.to_host(out, (32,), np.uint32).tolist() == [200] * 10 + [7] * 22


def test_brx_idx_out_of_range_is_reported():
    with pytest.raises(SimRuntimeError, match=r"brx.idx index 3 is outside \$L_tab \(3 targets\): undefined "
                                              r"behaviour \(PTX ISA 9.7.12.4\)"):
        run_switch("mov.u32 %r2, %r1;")


def test_brx_idx_uni_with_different_indices_is_reported():
    with pytest.raises(SimRuntimeError, match=r"brx.idx.uni with different indices"):
        run_switch("rem.u32 %r2, %r1, 3;", uni=".uni")


@pytest.mark.parametrize("body,text", [
    ("\tmov.u32 %r2, 0;\n\tbrx.idx %r2, $L_tab;\n$L_tab: .branchtargets $L_a;\n$L_a:\n",
     "defined after this brx.idx"),
    ("\tmov.u32 %r2, 0;\n\tbrx.idx %r2, $L_a;\n$L_a:\n", "not the label of a .branchtargets"),
    ("$L_tab: .branchtargets $L_a, $L_nowhere;\n\tmov.u32 %r2, 0;\n\tbrx.idx %r2, $L_tab;\n$L_a:\n",
     "unknown label '\\$L_nowhere'"),
    ("$L_tab: .branchtargets $L_a;\n\tbrx.idx 0, $L_tab;\n$L_a:\n", "must be a .u32 register"),
])
def test_brx_idx_malformed_refused_at_load(body, text):
    with pytest.raises(PTXParseError, match=text):
        load_ptx(kernel(PRE + body))
