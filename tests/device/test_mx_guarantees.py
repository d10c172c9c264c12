"""Issue 40: what mx.quantize / dequantize promise for NaN, Inf, overflow and bad input.

OCP MX v1.0: E8M0 0xFF is NaN, and a NaN scale makes its whole block NaN; the reference
quantiser gives a block whose largest magnitude is NaN or Inf the NaN scale. NVFP4's UE4M3
factor has its NaN at 0x7F. Before the fix e2m1/nvfp4 turned a NaN into -0.0, and an Inf
saturated to the format's max and flushed its block-mates to 0 (finite numbers)."""
import ml_dtypes
import numpy as np
import pytest

from cutedsl.device import mx
from cutedsl.errors import ArgumentError, ArgumentTypeError

#: element (or config dtype) -> (dequantize dtype, block, NaN factor code, element format has a NaN)
FORMATS = {"e4m3": ("mxfp8", 32, 0xFF, True), "e5m2": ("mxfp8", 32, 0xFF, True),
           "e2m3": ("mxfp8", 32, 0xFF, False), "e3m2": ("mxfp8", 32, 0xFF, False),
           "e2m1": ("mxfp4", 32, 0xFF, False), "nvfp4": ("nvfp4", 16, 0x7F, False)}


@pytest.mark.parametrize("special", [np.nan, np.inf, -np.inf], ids=["nan", "inf", "-inf"])
@pytest.mark.parametrize("fmt", list(FORMATS))
def test_non_finite_makes_its_block_nan_and_nothing_else(rng, fmt, special):
    deq, block, nan_code, elem_nan = FORMATS[fmt]
    x = rng.standard_normal((3, 3 * block + 5)) * 4
    clean_q, clean_s = mx.quantize(x, fmt)
    r, c = 1, block + 7                                   # row 1, the second block
    x[r, c] = special
    q, s = mx.quantize(x, fmt)
    assert s[r, 1] == nan_code
    others = np.ones(s.shape, bool)
    others[r, 1] = False
    assert np.array_equal(s[others], clean_s[others])     # every other block is as before
    d = mx.dequantize(q, s, deq)
    ref = mx.dequantize(clean_q, clean_s, deq)
    blk = np.zeros(x.shape, bool)
    blk[r, block:2 * block] = True
    assert np.isnan(d[blk]).all()                         # the whole block: NaN, never a finite number
    assert np.array_equal(d[~blk], ref[~blk])             # nothing else changes
    codes = q[r, block:2 * block].astype(np.float64)      # the block's elements: NaN where x was not
    want = np.zeros(block)                                # finite (if the format has a NaN), else 0
    want[c - block] = np.nan if elem_nan else 0.0
    assert np.array_equal(codes, want, equal_nan=True)


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_nan_factor_dequantizes_to_nan(fmt):
    deq, block, nan_code, _ = FORMATS[fmt]
    q = np.zeros((1, block), mx.ELEMENTS["e2m1" if fmt == "nvfp4" else fmt][0])
    assert np.isnan(mx.dequantize(q, np.array([[nan_code]], np.uint8), deq)).all()
    assert np.isnan(mx.scale_values(np.array([nan_code], np.uint8), mx.DTYPE_SCALES.get(deq, mx.MX_SCALE))).all()


def test_finite_overflow_is_refused_not_saturated():
    x = np.ones((2, 32))
    x[1, 20] = 2688.0                                     # 6 * 448: the largest NVFP4 block
    q, s = mx.quantize(x, "nvfp4")
    assert mx.dequantize(q, s, "nvfp4")[1, 20] == 2688.0
    x[1, 20] = 2700.0
    with pytest.raises(ArgumentError, match=r"row 1, block 1 is 2700, over 6 \* 448 = 2688 .*per-tensor scale"):
        mx.quantize(x, "nvfp4")
    y = np.ones((1, 32))
    y[0, 3] = 2.0 ** 140                                  # float64 only: past 2^127 * e4m3's 2^8 range
    with pytest.raises(ArgumentError, match=r"row 0, block 0 is .* over 2\^136"):
        mx.quantize(y, "e4m3")
    assert mx.quantize(np.full((1, 32), 2.0 ** 135), "e4m3")[1][0, 0] == 254     # the largest factor


@pytest.mark.parametrize("x, dtype", [(np.ones((2, 32)) * (1 + 2j), "complex128"), ([["a", "b"]], "<U1"),
                                      (np.array([[None, 1.0]], object), "object")])
def test_quantize_refuses_non_real_input(x, dtype):
    with pytest.raises(ArgumentTypeError, match=rf"quantize\(x\) must hold real numbers .*got dtype {dtype}"):
        mx.quantize(x)


def test_quantize_takes_real_numbers_of_any_kind():
    for x in (np.arange(-8, 8).reshape(2, 8).repeat(4, 1), np.full((2, 32), -1.5, ml_dtypes.bfloat16), np.ones((2, 32), bool)):
        q, s = mx.quantize(x)
        assert np.array_equal(mx.dequantize(q, s), np.asarray(x).astype(np.float64))


def test_dequantize_names_shape_and_type_mismatches():
    q, s = mx.quantize(np.ones((4, 70)))
    with pytest.raises(ArgumentError, match=r"q of shape \(4, 70\) takes scales of shape \(4, 3\) .*got \(4, 2\)"):
        mx.dequantize(q, s[:, :2])
    with pytest.raises(ArgumentError, match=r"takes scales of shape \(4, 3\) .*got \(3, 3\)"):
        mx.dequantize(q, s[:3])
    with pytest.raises(ArgumentError, match=r"takes scales of shape \(4, 5\) .*'nvfp4'.*got \(4, 3\)"):
        mx.dequantize(q, s, "nvfp4")
    with pytest.raises(ArgumentTypeError, match=r"dequantize\(scales\) must be uint8 factor codes .*float64"):
        mx.dequantize(q, s.astype(np.float64))
    wide = s.astype(np.int64)
    wide[0, 0] = 256
    with pytest.raises(ArgumentError, match=r"factor codes are bytes 0..255, got 119..256"):
        mx.dequantize(q, wide)
    with pytest.raises(ArgumentTypeError, match=r"dequantize\(q\) must hold real numbers"):
        mx.dequantize(q.astype(np.float64) * 1j, s)
    b = mx.dequantize(np.stack([q, q]), np.stack([s, s]).astype(np.int64))     # a batch; integer codes
    assert b.shape == (2, 4, 70) and np.array_equal(b[1], mx.dequantize(q, s))


def test_pack_of_a_0d_array_is_refused():
    with pytest.raises(ArgumentError, match=r"pack_fp4 packs along the last axis .*0-d"):
        mx.pack_fp4(np.array(1.0, ml_dtypes.float4_e2m1fn))
    with pytest.raises(ArgumentError, match=r"pack_fp6 packs along the last axis .*0-d"):
        mx.pack_fp6(np.array(1.0, ml_dtypes.float6_e2m3fn))
    assert mx.pack_fp4(np.array([1.0], ml_dtypes.float4_e2m1fn)).tolist() == [2]      # e2m1 1.0 is code 2


def test_nan_block_reaches_the_gemm_result_as_nan(rng, sim):
    """End to end on the emulator (tcgen05.mma.kind::mxf8f6f4.block_scale): a NaN in A's row 5
    makes that row of D NaN where its block meets B (all columns), and an Inf in B's row 3
    (column 3 of D) likewise; every other element is exact."""
    from cutedsl import Gemm, GemmConfig
    m, n, k = 130, 70, 100
    x = rng.integers(-2, 3, (m, k)).astype(np.float64)
    y = rng.integers(-2, 3, (n, k)).astype(np.float64)
    x[5, 40] = np.nan
    y[3, 90] = np.inf
    (qa, sa), (qb, sb) = mx.quantize(x), mx.quantize(y)
    cfg = GemmConfig(arch="sm_100a", dtype="mxfp8", stages=2, sm_count=2)
    d = Gemm(cfg, sim)(qa, qb.T, a_scales=mx.pack_scales(sa), b_scales=mx.pack_scales(sb)).astype(np.float64)
    nan = np.zeros((m, n), bool)
    nan[5, :] = nan[:, 3] = True
    assert np.array_equal(np.isnan(d), nan)
    ref = np.nan_to_num(x, nan=0.0) @ np.nan_to_num(y, posinf=0.0).T   # the finite elements' products
    assert np.array_equal(d[~nan], ref[~nan])
