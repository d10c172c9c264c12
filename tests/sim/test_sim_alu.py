"""ALU instructions against independent Python/numpy answers."""
import ml_dtypes
import numpy as np
import pytest

from simkit import alu

U32 = np.array([0, 1, 5, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF, 123456789, 3], np.uint32)
V32 = np.array([3, 0xFFFFFFFF, 2, 1, 31, 7, 0x10000, 32], np.uint32)


def s32(x):
    return np.asarray(x, np.uint32).view(np.int32)


def test_int_add_sub_mul_wrap():
    assert np.array_equal(alu("add.s32 {d}, {a}, {b}", ["s32", "s32"], [U32, V32], np.uint32), U32 + V32)
    assert np.array_equal(alu("sub.u32 {d}, {a}, {b}", ["u32", "u32"], [U32, V32], np.uint32), U32 - V32)
    assert np.array_equal(alu("mul.lo.u32 {d}, {a}, {b}", ["u32", "u32"], [U32, V32], np.uint32), U32 * V32)


def test_mul_hi_and_wide():
    exp_u = [(int(a) * int(b)) >> 32 for a, b in zip(U32, V32)]
    assert alu("mul.hi.u32 {d}, {a}, {b}", ["u32", "u32"], [U32, V32], np.uint32).tolist() == exp_u
    sa, sb = s32(U32), s32(V32)
    exp_s = [((int(a) * int(b)) >> 32) & 0xFFFFFFFF for a, b in zip(sa, sb)]
    assert alu("mul.hi.s32 {d}, {a}, {b}", ["s32", "s32"], [U32, V32], np.uint32).tolist() == exp_s
    exp_w = [int(a) * int(b) for a, b in zip(sa, sb)]
    assert alu("mul.wide.s32 {d}, {a}, {b}", ["s32", "s32"], [U32, V32], np.int64).tolist() == exp_w
    a64 = np.array([2 ** 64 - 1, 3, 2 ** 63, 12345678901234567], np.uint64)
    b64 = np.array([2 ** 64 - 1, 2 ** 62, 2, 98765432109876543], np.uint64)
    exp = [(int(a) * int(b)) >> 64 for a, b in zip(a64, b64)]
    assert alu("mul.hi.u64 {d}, {a}, {b}", ["u64", "u64"], [a64, b64], np.uint64).tolist() == exp
    sa64, sb64 = a64.view(np.int64), b64.view(np.int64)
    exp = [((int(a) * int(b)) >> 64) & (2 ** 64 - 1) for a, b in zip(sa64, sb64)]
    assert alu("mul.hi.s64 {d}, {a}, {b}", ["s64", "s64"], [a64, b64], np.uint64).tolist() == exp


def test_div_rem_signed_truncates():
    a = np.array([7, -7, 7, -7, 100, -2147483648], np.int32)
    b = np.array([2, 2, -2, -2, 7, 3], np.int32)
    q = alu("div.s32 {d}, {a}, {b}", ["s32", "s32"], [a, b], np.int32)
    r = alu("rem.s32 {d}, {a}, {b}", ["s32", "s32"], [a, b], np.int32)
    assert q.tolist() == [int(x / y) for x, y in zip(a.tolist(), b.tolist())]
    assert r.tolist() == [x - int(x / y) * y for x, y in zip(a.tolist(), b.tolist())]
    au = np.array([7, 0xFFFFFFFF, 100], np.uint32)
    bu = np.array([2, 16, 7], np.uint32)
    assert alu("div.u32 {d}, {a}, {b}", ["u32", "u32"], [au, bu], np.uint32).tolist() == [3, 0x0FFFFFFF, 14]
    assert alu("rem.u32 {d}, {a}, {b}", ["u32", "u32"], [au, bu], np.uint32).tolist() == [1, 15, 2]


def test_shifts_clamp():
    a = np.array([1, 0x80000000, 0xFFFFFFFF, 5, 5], np.uint32)
    n = np.array([4, 31, 40, 32, 0], np.uint32)
    assert alu("shl.b32 {d}, {a}, {b}", ["b32", "u32"], [a, n], np.uint32).tolist() == \
        [16, 0, 0, 0, 5]
    assert alu("shr.u32 {d}, {a}, {b}", ["u32", "u32"], [a, n], np.uint32).tolist() == \
        [0, 1, 0, 0, 5]
    assert alu("shr.s32 {d}, {a}, {b}", ["s32", "u32"], [a, n], np.uint32).tolist() == \
        [0, 0xFFFFFFFF, 0xFFFFFFFF, 0, 5]


def test_bfe_bfi_prmt():
    a = np.array([0xF0F0ABCD, 0x80000000, 0x12345678], np.uint32)
    p = np.array([4, 28, 8], np.uint32)
    ln = np.array([8, 8, 0], np.uint32)
    assert alu("bfe.u32 {d}, {a}, {b}, {c}", ["u32", "u32", "u32"], [a, p, ln], np.uint32).tolist() == \
        [0xBC, 0x8, 0]
    # signed: field 0xBC sign-extends; pos+len past msb replicates the sign bit
    assert alu("bfe.s32 {d}, {a}, {b}, {c}", ["s32", "u32", "u32"], [a, p, ln], np.uint32).tolist() == \
        [0xFFFFFFBC, 0xFFFFFFF8, 0]
    f = np.array([0xF, 0xABC, 0x1], np.uint32)
    b = np.array([0, 0xFFFFFFFF, 0], np.uint32)
    pos = np.array([4, 8, 31], np.uint32)
    out = alu("bfi.b32 {d}, {a}, {b}, {c}, 4", ["b32", "b32", "u32"], [f, b, pos], np.uint32)
    assert out.tolist() == [0xF0, 0xFFFFFCFF & 0xFFFFF0FF | 0xC00, 0x80000000]
    a2 = np.array([0x03020100], np.uint32)
    b2 = np.array([0x07060504], np.uint32)
    sel = np.array([0x5140], np.uint32)
    assert alu("prmt.b32 {d}, {a}, {b}, {c}", ["b32", "b32", "b32"], [a2, b2, sel], np.uint32).tolist() == \
        [0x05010400]
    sel = np.array([0x4C0B], np.uint32)    # byte 3 of a sign-replicated, byte 0 of a, b.byte0 replicated
    b3 = np.array([0x80000000], np.uint32)
    assert alu("prmt.b32 {d}, {a}, {b}, {c}", ["b32", "b32", "b32"], [b3, b2, sel], np.uint32).tolist() == \
        [0x040000FF]


def test_popc_clz_brev_bfind():
    a = np.array([0, 1, 0xF0000000, 0xFFFFFFFF], np.uint32)
    assert alu("popc.b32 {d}, {a}", ["b32"], [a], np.uint32).tolist() == [0, 1, 4, 32]
    assert alu("clz.b32 {d}, {a}", ["b32"], [a], np.uint32).tolist() == [32, 31, 0, 0]
    assert alu("brev.b32 {d}, {a}", ["b32"], [a], np.uint32).tolist() == [0, 0x80000000, 0xF, 0xFFFFFFFF]
    assert alu("bfind.u32 {d}, {a}", ["u32"], [a], np.uint32).tolist() == [0xFFFFFFFF, 0, 31, 31]


def test_setp_selp_and_predicates():
    a = np.array([1, 5, 0xFFFFFFFF, 7], np.uint32)
    b = np.array([2, 5, 1, 3], np.uint32)
    assert alu("setp.lt.u32 {d}, {a}, {b}", ["u32", "u32"], [a, b], "pred").tolist() == [1, 0, 0, 0]
    assert alu("setp.lt.s32 {d}, {a}, {b}", ["s32", "s32"], [a, b], "pred").tolist() == [1, 0, 1, 0]
    assert alu("setp.hs.u32 {d}, {a}, {b}", ["u32", "u32"], [a, b], "pred").tolist() == [0, 1, 1, 1]
    f = np.array([1.0, np.nan, 2.0, -0.0], np.float32)
    g = np.array([1.0, 1.0, np.nan, 0.0], np.float32)
    assert alu("setp.eq.f32 {d}, {a}, {b}", ["f32", "f32"], [f, g], "pred").tolist() == [1, 0, 0, 1]
    assert alu("setp.neu.f32 {d}, {a}, {b}", ["f32", "f32"], [f, g], "pred").tolist() == [0, 1, 1, 0]
    assert alu("setp.ne.f32 {d}, {a}, {b}", ["f32", "f32"], [f, g], "pred").tolist() == [0, 0, 0, 0]
    assert alu("setp.nan.f32 {d}, {a}, {b}", ["f32", "f32"], [f, g], "pred").tolist() == [0, 1, 1, 0]
    c = np.array([1, 0, 1, 0], bool)
    assert alu("selp.b32 {d}, {a}, {b}, {c}", ["b32", "b32", "pred"], [a, b, c], np.uint32).tolist() == \
        [1, 5, 0xFFFFFFFF, 3]
    assert alu("setp.lt.and.u32 {d}, {a}, {b}, {c}", ["u32", "u32", "pred"], [a, b, c], "pred").tolist() == \
        [1, 0, 0, 0]


def test_f32_rounding_modes():
    a = np.array([1.0, 1.0, -1.0, 3.0], np.float32)
    b = np.array([2 ** -30, -2 ** -30, -2 ** -30, 2 ** -23], np.float32)
    rn = alu("add.rn.f32 {d}, {a}, {b}", ["f32", "f32"], [a, b], np.float32)
    rz = alu("add.rz.f32 {d}, {a}, {b}", ["f32", "f32"], [a, b], np.float32)
    rm = alu("add.rm.f32 {d}, {a}, {b}", ["f32", "f32"], [a, b], np.float32)
    rp = alu("add.rp.f32 {d}, {a}, {b}", ["f32", "f32"], [a, b], np.float32)
    one = np.float32(1)
    assert rn.tolist() == (a + b).tolist()
    assert rz[0] == one and rz[1] == np.nextafter(one, 0) and rz[2] == -one
    assert rm[0] == one and rm[1] == np.nextafter(one, 0) and rm[2] == np.nextafter(-one, -2)
    assert rp[0] == np.nextafter(one, 2) and rp[1] == one and rp[2] == -one
    assert rp[3] == np.float32(3.0000002)


def test_fma_f32_correctly_rounded():
    rng = np.random.default_rng(1)
    a = rng.standard_normal(32).astype(np.float32)
    b = rng.standard_normal(32).astype(np.float32)
    c = rng.standard_normal(32).astype(np.float32)
    # a double-rounding case: a*b + c exactly halfway after rounding to f64
    a[0], b[0], c[0] = np.float32(1 + 2 ** -23), np.float32(1 + 2 ** -23), np.float32(-1)
    from fractions import Fraction
    exp = []
    for x, y, z in zip(a, b, c):
        v = Fraction(float(x)) * Fraction(float(y)) + Fraction(float(z))
        exp.append(np.float32(float(v)) if abs(float(v) - v) == 0 else _rn32(v))
    out = alu("fma.rn.f32 {d}, {a}, {b}, {c}", ["f32", "f32", "f32"], [a, b, c], np.float32)
    assert out.tolist() == [float(e) for e in exp]


def _rn32(v):
    """Round a Fraction to nearest-even f32 exactly."""
    from fractions import Fraction
    lo = np.float32(float(v))
    cands = [lo, np.nextafter(lo, np.float32(np.inf)), np.nextafter(lo, np.float32(-np.inf))]
    best = min(cands, key=lambda c: (abs(Fraction(float(c)) - v), int(np.array(c).view(np.uint32)) & 1))
    return best


def test_cvt_float_int_and_half():
    f = np.array([1.5, 2.5, -1.5, 3e9, np.nan, -0.4], np.float32)
    assert alu("cvt.rni.s32.f32 {d}, {a}", ["f32"], [f], np.int32).tolist() == [2, 2, -2, 2147483647, 0, 0]
    assert alu("cvt.rzi.s32.f32 {d}, {a}", ["f32"], [f], np.int32).tolist() == [1, 2, -1, 2147483647, 0, 0]
    assert alu("cvt.rmi.s32.f32 {d}, {a}", ["f32"], [f], np.int32).tolist() == [1, 2, -2, 2147483647, 0, -1]
    x = np.array([1 + 2 ** -11, 1 + 3 * 2 ** -11, 65520.0, 1e-8, 1 + 2 ** -9 + 2 ** -30], np.float32)
    h = alu("cvt.rn.f16.f32 {d}, {a}", ["f32"], [x], np.float16)
    with np.errstate(over="ignore"):
        assert h.tolist() == x.astype(np.float16).tolist()
    bf = alu("cvt.rn.bf16.f32 {d}, {a}", ["f32"], [x], ml_dtypes.bfloat16)
    assert bf.astype(np.float32).tolist() == x.astype(ml_dtypes.bfloat16).astype(np.float32).tolist()
    hz = alu("cvt.rz.f16.f32 {d}, {a}", ["f32"], [x], np.float16)
    assert hz[1] == np.float16(1 + 2 ** -10) and hz[2] == np.float16(65504)
    back = alu("cvt.f32.f16 {d}, {a}", ["f16"], [h], np.float32)
    assert back.tolist() == h.astype(np.float32).tolist()
    a = np.array([1.0, -2.5], np.float32)
    b = np.array([3.0, 0.1], np.float32)
    packed = alu("cvt.rn.f16x2.f32 {d}, {a}, {b}", ["f32", "f32"], [a, b], np.uint32)
    lo = (packed & 0xFFFF).astype(np.uint16).view(np.float16)
    hi = (packed >> 16).astype(np.uint16).view(np.float16)
    assert hi.tolist() == a.astype(np.float16).tolist() and lo.tolist() == b.astype(np.float16).tolist()
    packed = alu("cvt.rn.bf16x2.f32 {d}, {a}, {b}", ["f32", "f32"], [a, b], np.uint32)
    assert (packed >> 16).astype(np.uint16).view(ml_dtypes.bfloat16).astype(np.float32).tolist() == \
        a.astype(ml_dtypes.bfloat16).astype(np.float32).tolist()


def test_cvt_int_widths_and_sat():
    a = np.array([0x1FF, 0xFFFFFF80, 300], np.uint32)
    assert alu("cvt.u8.u32 {d}, {a}", ["u32"], [a], np.uint16).tolist() == [0xFF, 0x80, 44]
    assert alu("cvt.s32.s8 {d}, {a}", ["s8"], [a.astype(np.uint8)], np.int32).tolist() == [-1, -128, 44]
    assert alu("cvt.sat.s8.s32 {d}, {a}", ["s32"], [a], np.int16).tolist() == [127, -128, 127]
    assert alu("cvt.u64.u32 {d}, {a}", ["u32"], [a], np.uint64).tolist() == a.tolist()
    assert alu("cvt.s64.s32 {d}, {a}", ["s32"], [a], np.int64).tolist() == s32(a).tolist()
    assert alu("cvt.rn.f32.s32 {d}, {a}", ["s32"], [a], np.float32).tolist() == s32(a).astype(np.float32).tolist()


def test_mov_pack_unpack_and_min_max():
    a = np.array([0x1234, 0xFFFF], np.uint16)
    b = np.array([0xABCD, 0x0001], np.uint16)
    out = alu("mov.b32 {d}, {{{a}, {b}}}", ["b16", "b16"], [a, b], np.uint32)
    assert out.tolist() == [0xABCD1234, 0x0001FFFF]
    f = np.array([1.0, np.nan, -0.0], np.float32)
    g = np.array([2.0, 3.0, 0.0], np.float32)
    mn = alu("min.f32 {d}, {a}, {b}", ["f32", "f32"], [f, g], np.float32)
    assert mn[0] == 1 and mn[1] == 3 and np.signbit(mn[2])
    mx = alu("max.NaN.f32 {d}, {a}, {b}", ["f32", "f32"], [f, g], np.float32)
    assert mx[0] == 2 and np.isnan(mx[1])
    i = np.array([-5, 7], np.int32).view(np.uint32)
    j = np.array([3, -9], np.int32).view(np.uint32)
    assert alu("min.s32 {d}, {a}, {b}", ["s32", "s32"], [i, j], np.int32).tolist() == [-5, -9]
    assert alu("max.u32 {d}, {a}, {b}", ["u32", "u32"], [i, j], np.uint32).tolist() == \
        [max(int(x), int(y)) for x, y in zip(i, j)]


def test_half_arith_and_neg_abs():
    a = np.array([1.0, -2.0, 65504.0], np.float16)
    b = np.array([2 ** -11, 0.5, 65504.0], np.float16)
    out = alu("add.rn.f16 {d}, {a}, {b}", ["f16", "f16"], [a, b], np.float16)
    with np.errstate(over="ignore"):
        assert out.tolist() == (a.astype(np.float64) + b.astype(np.float64)).astype(np.float16).tolist()
    f = np.array([1.5, -0.0, np.inf], np.float32)
    assert alu("neg.f32 {d}, {a}", ["f32"], [f], np.float32).tolist() == [-1.5, 0.0, -np.inf]
    assert alu("abs.f32 {d}, {a}", ["f32"], [f], np.float32).tolist() == [1.5, 0.0, np.inf]
    h2a = np.array([0x3C003C00], np.uint32)     # (1.0, 1.0)
    h2b = np.array([0x40004400], np.uint32)     # (lo 4.0, hi 2.0)
    out = alu("fma.rn.f16x2 {d}, {a}, {b}, {a}", ["f16x2", "f16x2"], [h2a, h2b], np.uint32)
    assert out.tolist() == [0x42004500]         # (hi 3.0, lo 5.0)


@pytest.mark.parametrize("t,dt", [("u64", np.uint64), ("s64", np.int64)])
def test_64bit_add_and_logic(t, dt):
    a = np.array([2 ** 63 - 1, 5, 2 ** 40], np.uint64)
    b = np.array([1, 2 ** 64 - 1, 2 ** 41], np.uint64)
    assert alu(f"add.{t} {{d}}, {{a}}, {{b}}", [t, t], [a, b], np.uint64).tolist() == \
        [(int(x) + int(y)) % 2 ** 64 for x, y in zip(a, b)]
    assert alu("xor.b64 {d}, {a}, {b}", ["b64", "b64"], [a, b], np.uint64).tolist() == (a ^ b).tolist()


def test_packed_f32x2_add_mul_fma():
    """sm_100's add/sub/mul/fma .f32x2 on 64-bit registers (LLVM 22 pairs f32 adds into them):
    each 32-bit half is the f32 operation of the halves (low half first), rounding per half."""
    from simkit import alu
    rng = np.random.default_rng(5)
    lo = rng.standard_normal((3, 32)).astype(np.float32)
    hi = rng.standard_normal((3, 32)).astype(np.float32)
    pk = [(lo[i].view(np.uint32).astype(np.uint64) | hi[i].view(np.uint32).astype(np.uint64) << np.uint64(32))
          for i in range(3)]

    def halves(v):
        v = np.asarray(v, np.uint64)
        return (v & np.uint64(0xFFFFFFFF)).astype(np.uint32).view(np.float32), \
            (v >> np.uint64(32)).astype(np.uint32).view(np.float32)
    for instr, f in (("add.rn.f32x2", np.add), ("sub.rn.f32x2", np.subtract), ("mul.rn.f32x2", np.multiply)):
        got = halves(alu(instr + " {d}, {a}, {b}", ["u64", "u64"], pk[:2], np.uint64))
        assert np.array_equal(got[0], f(lo[0], lo[1])) and np.array_equal(got[1], f(hi[0], hi[1])), instr
    got = halves(alu("fma.rn.f32x2 {d}, {a}, {b}, {c}", ["u64"] * 3, pk, np.uint64))
    want = [(x[0].astype(np.float64) * x[1] + x[2]).astype(np.float32) for x in (lo, hi)]
    assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])
