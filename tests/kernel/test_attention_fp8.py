"""The fp8 (e4m3) attention forward (kernel/attention_fp8.py, collective/attention_fp8.py) on the
emulator against the float64 reference with descales: ragged lengths (no tile multiples,
seqlen_q != seqlen_k), head dims 64 / 128 / 256, causal and not, GQA, varlen with an empty
sequence, an adversarial seed; race checks on (the emulator's default).

O's tolerance is derived, element by element, from what the kernel rounds: each P value to e4m3
(3 mantissa bits: relative error <= 2^-4, absolute <= 2^-10 in the subnormal range, in units of
the row's running maximum, which is <= 1 at the final one) and O to bf16 (2^-8 relative):
``|O - O_ref| <= (2^-4 sum_j p_j |v_j| + 2^-10 sum_j |v_j|) / l + 2^-8 |O_ref|`` with p, l the
reference's exponentials at the row maximum. LSE is computed from f32 scores and unrounded sums:
f32 accuracy."""
import ml_dtypes
import numpy as np
import pytest

from cutedsl import Attention, AttentionConfig
from cutedsl.device.attention_reference import attention_reference, mask as ref_mask
from cutedsl.errors import ArgumentError, ArgumentTypeError, ConfigError
from cutedsl.testing.seeds import adversarial

F8 = ml_dtypes.float8_e4m3fn


def _qkv(rng, q_shape, kv_shape):
    return tuple(rng.standard_normal(s).astype(F8) for s in (q_shape, kv_shape, kv_shape))


def _bound(q, k, v, scale, descales, causal, window):
    """The per-element O tolerance (module docstring) of one dense batch entry set."""
    qd, kd, vd = descales
    q64, k64, v64 = q.astype(np.float64) * qd, k.astype(np.float64) * kd, v.astype(np.float64) * vd
    b, sq, h, d = q64.shape
    sk, hk = k64.shape[1], k64.shape[2]
    keep = ref_mask(sq, sk, causal, window)
    tol = np.zeros((b, sq, h, d))
    for bi in range(b):
        for hi in range(h):
            kh, vh = k64[bi, :, hi // (h // hk)], np.abs(v64[bi, :, hi // (h // hk)])
            s = np.where(keep, q64[bi, :, hi] @ kh.T * scale, -np.inf)
            m = s.max(axis=1, keepdims=True)
            p = np.exp(s - np.where(np.isinf(m), 0, m))
            l = np.maximum(p.sum(axis=1, keepdims=True), 1)
            tol[bi, :, hi] = (2 ** -4 * p @ vh + 2 ** -10 * keep @ vh) / l
    return tol


def check(o, lse, q, k, v, descales=(1.0, 1.0, 1.0), causal=False, window=None, softmax_scale=None):
    opts = dict(causal=causal, window=window, softmax_scale=softmax_scale)
    ro, rl = attention_reference(q, k, v, q_descale=descales[0], k_descale=descales[1], v_descale=descales[2], **opts)
    assert o.dtype == ml_dtypes.bfloat16 and o.shape == ro.shape and lse.dtype == np.float32
    empty = np.isinf(rl)
    assert np.array_equal(np.isinf(lse), empty) and np.all(lse[empty] > 0)
    assert np.allclose(lse[~empty], rl[~empty], rtol=0, atol=1e-4), np.abs(lse[~empty] - rl[~empty]).max()
    scale = q.shape[-1] ** -0.5 if softmax_scale is None else softmax_scale
    tol = _bound(q, k, v, scale, descales, causal, window) + 2 ** -8 * np.abs(ro) + 1e-6
    err = np.abs(o.astype(np.float64) - ro)
    assert np.all(err <= tol), (err - tol).max()
    return ro, err


@pytest.mark.parametrize("d,sq,sk,heads,kv_heads,opts,descales", [
    (128, 77, 300, 2, 2, {}, (0.5, 2.0, 0.25)),
    (64, 300, 77, 4, 2, {"causal": True}, (1.0, 1.0, 1.0)),          # GQA; rows with no key: O = 0, LSE = +inf
    (256, 130, 200, 1, 1, {"window": (40, 7)}, (2.0, 0.75, 3.0)),
])
def test_fp8_dense(d, sq, sk, heads, kv_heads, opts, descales, rng, sim):
    q, k, v = _qkv(rng, (1, sq, heads, d), (1, sk, kv_heads, d))
    attn = Attention(AttentionConfig(head_dim=d, dtype="e4m3"), sim)
    o, lse = attn(q, k, v, q_descale=descales[0], k_descale=descales[1], v_descale=np.float32(descales[2]), **opts)
    ro, err = check(o, lse, q, k, v, descales, **opts)
    # the descales are applied: without them the reference is far off
    if descales != (1.0, 1.0, 1.0):
        ro1, _ = attention_reference(q, k, v, **opts)
        assert np.abs(o.astype(np.float64) - ro1).max() > 10 * err.max()
    (kern,) = attn._kernels.values()
    assert type(kern).__name__ == "AttentionFwdFp8Kernel"


def test_fp8_adversarial_overlap(rng, sim):
    """The overlap schedule (no ping-pong) under the adversarial mode: late TMA and WGMMA completion
    reorder the transposers' V^T stores against the consumers' reads if any barrier were missing."""
    q, k, v = _qkv(rng, (1, 150, 2, 128), (1, 150, 2, 128))
    with adversarial(3):
        o, lse = Attention(AttentionConfig(head_dim=128, dtype="e4m3", pingpong=False), sim)(q, k, v, causal=True)
    check(o, lse, q, k, v, causal=True)


def test_fp8_varlen(rng, sim):
    cq, ck = np.array([0, 77, 77, 200], np.int32), np.array([0, 50, 130, 300], np.int32)
    q, k, v = rng.standard_normal((200, 4, 64)).astype(F8), *(rng.standard_normal((300, 2, 64)).astype(F8)
                                                               for _ in range(2))
    o, lse = Attention(AttentionConfig(head_dim=64, dtype="e4m3"), sim)(q, k, v, cu_seqlens_q=cq, cu_seqlens_k=ck,
                                                                         causal=True, k_descale=0.5)
    for b in range(3):
        qs, ks = slice(cq[b], cq[b + 1]), slice(ck[b], ck[b + 1])
        if cq[b] == cq[b + 1]:
            continue
        check(o[None, qs], lse[None, :, qs], q[None, qs], k[None, ks], v[None, ks], (1.0, 0.5, 1.0), causal=True)


def test_fp8_config_and_call_errors(sim):
    with pytest.raises(ConfigError, match="head_dim must be 64, 128 or 256 for fp8 .* got 96"):
        AttentionConfig(head_dim=96, dtype="e4m3")
    with pytest.raises(ConfigError, match="dtype must be"):
        AttentionConfig(head_dim=128, dtype="e4m3", arch="sm_100a")
    q = np.zeros((1, 8, 1, 64), F8)
    attn = Attention(AttentionConfig(head_dim=64, dtype="e4m3"), sim)
    with pytest.raises(ArgumentError, match="v_descale must be a finite positive number, got 0.0"):
        attn(q, q, q, v_descale=0.0)
    with pytest.raises(ArgumentError, match="q_descale must hold one value .* got shape \\(2,\\)"):
        attn(q, q, q, q_descale=np.ones(2, np.float32))
    with pytest.raises(ArgumentTypeError, match="k_descale must be a float .* got int32"):
        attn(q, q, q, k_descale=np.ones(1, np.int32))
    with pytest.raises(ArgumentTypeError, match="q, k, v must share one dtype"):
        attn(q, q.astype(ml_dtypes.bfloat16), q)
    b = np.zeros((1, 8, 1, 64), ml_dtypes.bfloat16)
    with pytest.raises(ArgumentError, match="q_descale: descale factors are for fp8 \\(e4m3\\) inputs; q, k, v are bf16"):
        Attention(AttentionConfig(head_dim=64), sim)(b, b, b, q_descale=2.0)
    with pytest.raises(ArgumentTypeError, match="built for e4m3: use AttentionConfig\\(dtype='bf16'\\)"):
        attn(b, b, b)


def test_fp8_sass_head_dim_128():
    """ptxas' code (docs/measurements.md): 0 spills, setmaxnreg 24 / 240, per 128-key block of the
    unmasked loop of one MMA warpgroup 8 QGMMA.64x128x32 (4 for S, 4 for P V), FlashAttention-3's
    softmax mix (66 MUFU, 68 FMNMX, 4 SHFL: P takes no quad exchange in the permuted order), 32 F2FP
    (two e4m3 per cvt); the transposers' loop: 4 LDS, 8 PRMT, 4 STS per 16 bytes of V."""
    import collections
    from cutedsl.compiler.sass_loops import loops
    from cutedsl.compiler.toolchain import sass
    from cutedsl.kernel.attention_fp8 import AttentionFwdFp8Kernel
    ck = AttentionFwdFp8Kernel(128, "e4m3").compile()
    assert ck.resources.spill_stores == 0 and ck.resources.spill_loads == 0
    text = sass(ck.cubin)
    assert sorted(int(ln.split()[-2].rstrip(";"), 16) for ln in text.splitlines() if "USETMAXREG" in ln) == [24, 240]
    assert {ln.split()[1] for ln in text.splitlines() if "QGMMA" in ln} == {"QGMMA.64x128x32.F32.E4M3.E4M3"}
    counts = [collections.Counter(ops + ["total"] * len(ops)) for _, _, ops in loops(text)]
    h = next(c for c in counts if c["QGMMA"] == 8)
    assert (h["MUFU"], h["FMNMX"], h["SHFL"], h["F2FP"], h["PRMT"]) == (66, 68, 4, 32, 0), h
    assert h["total"] <= 470, h["total"]           # 465 with ptxas 13.5 (bf16: 457)
    t = next(c for c in counts if c["STS"])
    assert (t["LDS"], t["PRMT"], t["STS"], t["QGMMA"]) == (4, 8, 4, 0), t
