"""MXFP6 on sm_100a (issue 24): e2m3 / e3m2 elements with E8M0 factors per 32, packed 6 bits each
in global memory, moved by 16U6_ALIGN16B tensor maps into the padded shared-memory layout
(16 elements per 16 bytes) that ``tcgen05.mma.kind::mxf8f6f4.block_scale`` reads."""
import ml_dtypes
import numpy as np
import pytest

from cutedsl import Gemm, GemmConfig
from cutedsl.errors import ArgumentTypeError

SIX = {"mxfp6": ml_dtypes.float6_e2m3fn, "mxfp6-e3m2": ml_dtypes.float6_e3m2fn, "mxfp8": ml_dtypes.float8_e4m3fn}


def operands(rng, m, n, k, a_dt, b_dt):
    """Small-integer elements (exact in both 6-bit formats) and factors 2^-1..2^1, K-major."""
    from cutedsl.device import mx
    a = rng.integers(-3, 4, (m, k)).astype(SIX[a_dt])
    b = rng.integers(-3, 4, (n, k)).astype(SIX[b_dt])
    sa = rng.integers(126, 129, (m, -(-k // 32))).astype(np.uint8)
    sb = rng.integers(126, 129, (n, -(-k // 32))).astype(np.uint8)
    ref = mx.dequantize(a, sa, a_dt) @ mx.dequantize(b, sb, b_dt).T
    return a, b, mx.pack_scales(sa, a_dt), mx.pack_scales(sb, b_dt), ref


@pytest.mark.sim_kernel
@pytest.mark.parametrize("a_dt,b_dt", [("mxfp6", "mxfp6"), ("mxfp6-e3m2", "mxfp6-e3m2"), ("mxfp8", "mxfp6")])
def test_mxfp6_exact(a_dt, b_dt, rng, sim):
    """2 SMs for 2 x 2 tiles, a K tail (the rows packed and padded to 128 elements by Gemm);
    6-bit times 6-bit, and e4m3 times e2m3 (kind::mxf8f6f4 mixes them)."""
    m, n = 128 + int(rng.integers(1, 128)), 128 + int(rng.integers(1, 120)) // 8 * 8
    k = 128 + int(rng.integers(1, 128))
    a, b, sa, sb, ref = operands(rng, m, n, k, a_dt, b_dt)
    cfg = GemmConfig(arch="sm_100a", dtype=a_dt, b_dtype=None if b_dt == a_dt else b_dt, stages=2, sm_count=2)
    d = Gemm(cfg, sim)(a, b.T, a_scales=sa, b_scales=sb)
    assert np.array_equal(np.asarray(d, np.float64), ref), rng.seed_value


def test_pack_fp6_bits():
    """Element i of a row in bits 6i..6i+5, little-endian across the row; rows padded to 128."""
    from cutedsl.device import mx
    rng = np.random.default_rng(3)
    q = rng.integers(-7, 8, (3, 130)).astype(ml_dtypes.float6_e2m3fn)
    p = mx.pack_fp6(q)
    assert p.shape == (3, 2 * 96) and p.dtype == np.uint8
    codes = q.view(np.uint8) & 0x3F
    bits = np.unpackbits(p, axis=1, bitorder="little")               # (3, 256 * 6)
    for r, i in ((0, 0), (1, 37), (2, 129)):
        assert int(np.packbits(bits[r, 6 * i:6 * i + 6], bitorder="little")[0]) == codes[r, i]
    assert not bits[:, 6 * 130:].any()                                  # the padding is zero
    with pytest.raises(ArgumentTypeError, match=r"pack_fp6 takes ml_dtypes.float6_e2m3fn or float6_e3m2fn"):
        mx.pack_fp6(np.zeros((2, 4), np.float32))


def test_mxfp6_kernel_and_quantize():
    """The 6-bit operands' tensor maps are 16U6_ALIGN16B; the MMA loop is MXFP8's (4 UTCQMMA,
    2 UTCCP per k-tile, no spills); quantize picks E8M0 exponents against e2m3's emax 2."""
    from cutedsl.compiler.sass_loops import kernel_hot_loop
    from cutedsl.device import mx
    k = GemmConfig(arch="sm_100a", dtype="mxfp6", stages=4).kernel().compile()
    assert [t.dtype for t in k.tensor_maps[:2]] == ["16u6_align16b"] * 2
    h = kernel_hot_loop(k, "UTCQMMA")["histogram"]
    assert (h["UTCQMMA"], h["UTCCP"]) == (4, 2) and k.resources.spill_stores == 0
    x = np.random.default_rng(1).standard_normal((4, 64)) * 10
    q, s = mx.quantize(x, "mxfp6")
    amax = np.abs(x).reshape(4, 2, 32).max(2)
    assert q.dtype == ml_dtypes.float6_e2m3fn and np.array_equal(s.astype(int) - 127, np.floor(np.log2(amax)) - 2)


@pytest.mark.parametrize("kw,match", [
    (dict(dtype="mxfp6", b_dtype="f16"), r"6-bit operands mix with e4m3, e5m2, e2m3, e3m2 only "
                                         r"\(tcgen05.mma.kind::mxf8f6f4\), got e2m3 x f16"),
    (dict(dtype="mxfp6", b_dtype="nvfp4"), r"6-bit operands mix with .* got e2m3 x e2m1"),
    (dict(dtype="mxfp6", b_dtype="e4m3"), r"block-scaled inputs come in pairs \(MXFP8 or MXFP6 with MXFP8 or MXFP6, "
                                          r"MXFP4 with MXFP4, NVFP4 with NVFP4\): dtype 'mxfp6', b_dtype 'e4m3'"),
    (dict(dtype="mxfp6", b_major="MN"), r"e2m3 x e2m3 operands must be K-major .* b_major='MN'"),
    (dict(dtype="mxfp6", tile=(128, 128, 64)), r"BLOCK_K must be 128"),
    (dict(dtype="mxfp6", arch="sm_90a"), r"dtype 'mxfp6' \(block-scaled MX inputs\) needs a block-scaled kernel"),
])
def test_mxfp6_config_errors(kw, match):
    from cutedsl.errors import ConfigError
    with pytest.raises(ConfigError, match=match):
        GemmConfig(**{"arch": "sm_100a", **kw})


def test_mxfp6_operand_dtype_is_checked(rng, sim):
    """A float32 operand where the config expects e2m3 is refused before any launch."""
    a, b, sa, sb, _ = operands(rng, 64, 64, 64, "mxfp6", "mxfp6")
    with pytest.raises(ArgumentTypeError, match=r"a has dtype float32, the config expects e2m3"):
        Gemm(GemmConfig(arch="sm_100a", dtype="mxfp6", stages=2), sim)(a.astype(np.float32), b.T,
                                                                       a_scales=sa, b_scales=sb)
