"""``redux.sync`` (PTX ISA 9.7.13.12) on the emulator: the sm_100a form
``redux.sync.{min,max}{.abs}{.NaN}.f32 d, a, membermask`` against an independent reading of the
ISA text (NaN inputs ignored unless all are NaN, or with ``.NaN`` any NaN gives the canonical NaN;
``+0.0 > -0.0``; ``.abs`` reduces magnitudes; subnormals kept), the integer forms against numpy,
the membermask rules (the live lanes it names, exited lanes left out, divergent arrival waits,
undefined uses reported), eager and adversarial, and the forms the ISA does not define refused at
load with ``PTXParseError``."""
import math

import numpy as np
import pytest

from cutedsl.sim import Emulator, PTXParseError, SimRuntimeError, load_ptx
from simkit import alu, kernel

CANON = 0x7FFFFFFF
SUB = float(np.float32(1e-40))                     # an f32 subnormal
#: NaNs with payloads and signs (quiet, negative, signalling): the result is the canonical NaN
NAN_PAYLOADS = np.array([0x7FC00001, 0xFFC00000, 0x7F800001], np.uint32).view(np.float32)


def ref_redux(vals, is_min, nan=False, ab=False):
    """The ISA text on Python floats: a float, NaN as math.nan."""
    x = [abs(v) if ab else v for v in vals]
    if nan and any(v != v for v in x):
        return math.nan
    num = [v for v in x if v == v]
    if not num:
        return math.nan
    key = lambda v: (v, math.copysign(1.0, v))     # -0.0 before +0.0
    return min(num, key=key) if is_min else max(num, key=key)


def want_bits(want):
    return CANON if want != want else int(np.array(want, np.float32).view(np.uint32))


def warps(seed=0):
    """Lists of f32 values, one per launch (1..32 lanes): specials, zeros of both signs alone,
    all-NaN, NaN among numbers, subnormals only, random."""
    rng = np.random.default_rng(seed)
    special = [0.0, -0.0, 1.5, -1.5, np.inf, -np.inf, np.nan, SUB, -SUB, 3.0, -7.25, 1e30, -1e30]
    out = [special, [-0.0, 0.0, -0.0], [0.0, -0.0, 0.0], [0.0, -0.0], [-0.0, 0.0], [-0.0] * 5, [-2.0, 2.0, -2.0],
           [np.nan] * 4, list(NAN_PAYLOADS),
           [np.nan, -0.0], [SUB, -SUB, 2 * SUB], [-SUB, np.nan, -2 * SUB], [np.nan], [-2.5], [-0.0],
           [np.inf, np.nan, -np.inf], list(NAN_PAYLOADS) + [-3.0, 4.0]]
    for n in (7, 13, 31, 32):
        v = rng.standard_normal(n).astype(np.float32) * 10.0 ** rng.integers(-40, 30, n)
        v[rng.integers(0, n, 2)] = np.nan
        out.append(list(v))
        out.append(list(rng.permutation(special + [-0.0] * 3 + [SUB] * 2)[:n]))
        out.append(list(np.where(rng.integers(0, 2, n) == 1, -0.0, 0.0)))       # zeros, both signs in any order
    return [np.array(w, np.float32) for w in out]


def redux(instr, vals, emu=None, dtype=np.float32, in_type="f32"):
    return alu(f"{instr} {{d}}, {{a}}, {{b}}", [in_type, "u32"],
               [np.asarray(vals, dtype), np.full(len(vals), 0xFFFFFFFF, np.uint32)], dtype, emu=emu)


@pytest.mark.parametrize("op", ["min", "max"])
@pytest.mark.parametrize("mods", ["", ".abs", ".NaN", ".abs.NaN", ".NaN.abs"])
@pytest.mark.parametrize("chaos", [None, 7])
def test_f32_min_max_against_the_isa(op, mods, chaos):
    emu = Emulator(chaos=chaos)
    for vals in warps():
        got = redux(f"redux.sync.{op}{mods}.f32", vals, emu=emu).view(np.uint32)
        want = ref_redux([float(v) for v in vals], op == "min", nan=".NaN" in mods, ab=".abs" in mods)
        assert got.tolist() == [want_bits(want)] * len(vals), (op, mods, vals.tolist(), hex(int(got[0])), want)


def test_f32_signed_zero_nan_and_subnormal_cases_exactly():
    """The ISA's corner cases, spelled out (bit patterns)."""
    b = lambda x: int(np.float32(x).view(np.uint32))
    cases = [("max", [-0.0, 0.0], b(0.0)), ("max", [0.0, -0.0], b(0.0)), ("min", [0.0, -0.0], b(-0.0)),
             ("min", [-0.0, 0.0], b(-0.0)), ("max", [-0.0, -0.0], b(-0.0)),
             ("min.abs", [-0.0, 0.0], b(0.0)), ("max.abs", [-3.0, 2.0], b(3.0)), ("min.abs", [-SUB, 5.0], b(SUB)),
             ("max", [np.nan, -1.0], b(-1.0)), ("max.NaN", [np.nan, -1.0], CANON),
             ("min", list(NAN_PAYLOADS), CANON), ("max.abs", [float(NAN_PAYLOADS[1])], CANON),
             ("min", [SUB, 2 * SUB], b(SUB)), ("max", [-SUB, -0.0], b(-0.0)), ("min", [-SUB, -0.0], b(-SUB))]
    for form, vals, want in cases:
        got = redux(f"redux.sync.{form}.f32", vals).view(np.uint32)
        assert got.tolist() == [want] * len(vals), (form, vals, [hex(int(g)) for g in got])


@pytest.mark.parametrize("op,t", [("add", "u32"), ("add", "s32"), ("min", "u32"), ("min", "s32"), ("max", "u32"),
                                  ("max", "s32"), ("and", "b32"), ("or", "b32"), ("xor", "b32")])
def test_integer_forms_against_numpy(op, t):
    """The integer forms are unchanged: signedness from the type, .add truncated to 32 bits."""
    rng = np.random.default_rng(3)
    dt = np.int32 if t == "s32" else np.uint32
    ref = {"add": lambda v: np.sum(v.astype(np.int64)) & 0xFFFFFFFF, "min": np.min, "max": np.max,
           "and": np.bitwise_and.reduce, "or": np.bitwise_or.reduce, "xor": np.bitwise_xor.reduce}[op]
    for n in (1, 13, 32):
        v = rng.integers(0, 2 ** 32, n, dtype=np.uint64).astype(np.uint32).view(dt)
        got = redux(f"redux.sync.{op}.{t}", v, dtype=dt, in_type=t)
        assert got.view(np.uint32).tolist() == [int(np.asarray(ref(v)).astype(dt).view(np.uint32))] * n, (op, t, n)


PRE = """
\tld.param.u64 %rd1, [p_out];
\tld.param.u64 %rd2, [p_a];
\tmov.u32 %r1, %tid.x;
\tmul.wide.u32 %rd3, %r1, 4;
\tadd.s64 %rd4, %rd2, %rd3;
\tadd.s64 %rd5, %rd1, %rd3;
\tld.global.f32 %f1, [%rd4];
\tmov.f32 %f2, 0f7F7FFFFF;
"""
STORE = "\n\tst.global.f32 [%rd5], %f2;\n"
SENTINEL = np.float32(np.finfo(np.float32).max)


def launch(body, vals, chaos=None):
    emu = Emulator(chaos=chaos)
    prog = load_ptx(kernel(PRE + body + STORE, params=("out", "a")))
    out = emu.to_device(np.zeros(32, np.float32))
    emu.launch(prog, 1, 32, [out, emu.to_device(np.asarray(vals, np.float32))])
    return emu.to_host(out, (32,), np.float32)


@pytest.mark.parametrize("chaos", [None, 11])
@pytest.mark.parametrize("lanes,mask", [(range(16), 0x0000FFFF), (range(0, 32, 2), 0x55555555),
                                        (range(16, 32), 0xFFFF0000), ([5], 1 << 5)])
def test_membermask_subset(lanes, mask, chaos):
    """Only the lanes the membermask names (and that execute it) take part; the others keep d.
    The .f32 register class works as the .b32 one Triton uses."""
    vals = np.random.default_rng(5).standard_normal(32).astype(np.float32)
    vals[list(lanes)[-1]] = -0.0
    on = np.zeros(32, bool)
    on[list(lanes)] = True
    body = f"""
\tshr.u32 %r2, {mask:#x}, %r1;
\tand.b32 %r2, %r2, 1;
\tsetp.eq.u32 %p1, %r2, 1;
\t@%p1 redux.sync.min.abs.f32 %f2, %f1, {mask:#x};"""
    got = launch(body, vals, chaos)
    want = ref_redux([float(v) for v in vals[on]], True, ab=True)
    assert np.array_equal(got[on].view(np.uint32), np.full(on.sum(), want_bits(want), np.uint32))
    assert np.all(got[~on] == SENTINEL)


@pytest.mark.parametrize("chaos", [None, 2, 9])
def test_divergent_lanes_wait_for_each_other(chaos):
    """Odd lanes take a longer path (doubling their value 3 times) before the full-warp redux:
    the first lanes to arrive wait; the result covers every lane's final value."""
    vals = np.random.default_rng(6).standard_normal(32).astype(np.float32)
    body = """
\tand.b32 %r2, %r1, 1;
\tsetp.eq.u32 %p1, %r2, 0;
\t@%p1 bra $L_join;
\tmov.u32 %r3, 0;
$L_loop:
\tmul.f32 %f1, %f1, 0f40000000;
\tadd.s32 %r3, %r3, 1;
\tsetp.lt.u32 %p2, %r3, 3;
\t@%p2 bra $L_loop;
$L_join:
\tmov.b32 %r4, %f1;
\tredux.sync.max.f32 %r5, %r4, -1;
\tmov.b32 %f2, %r5;"""
    got = launch(body, vals, chaos)
    final = np.where(np.arange(32) % 2 == 1, vals * 8, vals)
    assert got.tolist() == [float(final.max())] * 32


def test_exited_lanes_leave_the_reduction():
    """'all non-exited threads corresponding to membermask': lanes 20.. exit; a full mask reduces 0..19."""
    vals = np.arange(32, dtype=np.float32)[::-1].copy()         # the largest values in the lanes that exit
    body = """
\tsetp.ge.u32 %p1, %r1, 20;
\t@%p1 exit;
\tredux.sync.max.NaN.f32 %f2, %f1, -1;"""
    got = launch(body, vals)
    assert got[:20].tolist() == [float(vals[:20].max())] * 20 and np.all(got[20:] == 0)


@pytest.mark.parametrize("body,text", [
    # a lane outside membermask executing it: undefined (9.7.13.12)
    ("\tredux.sync.max.f32 %f2, %f1, 0xffff;", r"executed by lanes \[16, 17, .*\] that its membermask 0x0000ffff"),
    # membermask differing between lanes
    ("\tsetp.lt.u32 %p1, %r1, 16;\n\tselp.u32 %r2, 0xffff, -1, %p1;\n\tredux.sync.min.f32 %f2, %f1, %r2;",
     r"different membermask values \['0xffff', '0xffffffff'\]"),
    # membermask naming lanes predicated off
    ("\tsetp.lt.u32 %p1, %r1, 16;\n\t@%p1 redux.sync.min.f32 %f2, %f1, -1;",
     "member mask names lanes that are predicated off"),
])
def test_undefined_membermask_uses_reported(body, text):
    with pytest.raises(SimRuntimeError, match=text):
        launch(body, np.ones(32, np.float32))


@pytest.mark.parametrize("form,text", [
    ("redux.sync.add.f32", r"redux\.sync\.add takes \.u32/\.s32, not \.f32"),
    ("redux.sync.and.f32", r"redux\.sync\.and takes \.b32, not \.f32"),
    ("redux.sync.min.abs.s32", r"\.abs exists only for \.f32 \(min/max\), not \.s32"),
    ("redux.sync.max.NaN.u32", r"\.NaN exists only for \.f32 \(min/max\), not \.u32"),
    ("redux.sync.and.u32", r"redux\.sync\.and takes \.b32, not \.u32"),
    ("redux.sync.add.b32", r"redux\.sync\.add takes \.u32/\.s32, not \.b32"),
    ("redux.sync.xor.s32", r"redux\.sync\.xor takes \.b32, not \.s32"),
    ("redux.sync.max.ftz.f32", r"redux\.sync\.max\.ftz\.f32 is not a redux\.sync form"),
    ("redux.max.f32", r"redux\.max\.f32 is not a redux\.sync form"),
    ("redux.sync.min.max.f32", r"is not a redux\.sync form"),
    ("redux.sync.max.f64", r"is not a redux\.sync form"),
    ("redux.sync.max.abs.abs.f32", r"repeats \.abs"),
])
def test_forms_the_isa_does_not_define_refused_at_load(form, text):
    """ptxas 13.0 rejects each of these too; the emulator refuses them at load, naming the ISA forms."""
    with pytest.raises(PTXParseError, match=text) as e:
        redux(form, np.zeros(1, np.float32))
    assert type(e.value) is PTXParseError
    assert "9.7.13.12" in str(e.value)


def test_operand_count_refused_at_load():
    with pytest.raises(PTXParseError, match=r"takes d, a, membermask; got 4 operands"):
        alu("redux.sync.max.f32 {d}, {a}, {b}, {c}", ["f32", "u32", "u32"], [np.zeros(1, np.float32)] + [
            np.zeros(1, np.uint32)] * 2, np.float32)
