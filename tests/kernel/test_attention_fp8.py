"""The fp8 (e4m3) attention forward (kernel/attention_fp8.py, collective/attention_fp8.py) on the
emulator against the float64 reference with descales (per tensor and FlashAttention-3's per
(batch, kv_head)): ragged lengths (no tile multiples,
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


def _factor(d, heads):
    """A descale (one value, or (batch, kv_heads) as FlashAttention-3's) as a factor broadcasting
    over a dense (batch, seqlen, heads, head_dim) operand."""
    d = np.asarray(d, np.float64)
    return float(d.ravel()[0]) if d.size == 1 else np.repeat(d, heads // d.shape[1], axis=1)[:, None, :, None]


def _bound(q, k, v, scale, descales, causal, window, softcap=None):
    """The per-element O tolerance (module docstring) of one dense batch entry set."""
    q64, k64, v64 = (x.astype(np.float64) * _factor(d, x.shape[2]) for x, d in zip((q, k, v), descales))
    b, sq, h, d = q64.shape
    sk, hk = k64.shape[1], k64.shape[2]
    keep = ref_mask(sq, sk, causal, window)
    tol = np.zeros((b, sq, h, d))
    for bi in range(b):
        for hi in range(h):
            kh, vh = k64[bi, :, hi // (h // hk)], np.abs(v64[bi, :, hi // (h // hk)])
            s = q64[bi, :, hi] @ kh.T * scale
            s = np.where(keep, s if softcap is None else softcap * np.tanh(s / softcap), -np.inf)
            m = s.max(axis=1, keepdims=True)
            p = np.exp(s - np.where(np.isinf(m), 0, m))
            l = np.maximum(p.sum(axis=1, keepdims=True), 1)
            tol[bi, :, hi] = (2 ** -4 * p @ vh + 2 ** -10 * keep @ vh) / l
    return tol


def check(o, lse, q, k, v, descales=(1.0, 1.0, 1.0), causal=False, window=None, softmax_scale=None, softcap=None):
    opts = dict(causal=causal, window=window, softmax_scale=softmax_scale, softcap=softcap)
    ro, rl = attention_reference(q, k, v, q_descale=descales[0], k_descale=descales[1], v_descale=descales[2], **opts)
    assert o.dtype == ml_dtypes.bfloat16 and o.shape == ro.shape and lse.dtype == np.float32
    empty = np.isinf(rl)
    assert np.array_equal(np.isinf(lse), empty) and np.all(lse[empty] > 0)
    assert np.allclose(lse[~empty], rl[~empty], rtol=0, atol=1e-4), np.abs(lse[~empty] - rl[~empty]).max()
    scale = q.shape[-1] ** -0.5 if softmax_scale is None else softmax_scale
    tol = _bound(q, k, v, scale, descales, causal, window, softcap) + 2 ** -8 * np.abs(ro) + 1e-6
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
    # k: per (sequence, K/V head), as FlashAttention-3's descales; v: per tensor
    kd = rng.uniform(0.25, 4.0, (3, 2)).astype(np.float32)
    o, lse = Attention(AttentionConfig(head_dim=64, dtype="e4m3"), sim)(q, k, v, cu_seqlens_q=cq, cu_seqlens_k=ck,
                                                                         causal=True, k_descale=kd, v_descale=0.5)
    ro, rl = attention_reference(q, k, v, cu_seqlens_q=cq, cu_seqlens_k=ck, causal=True, k_descale=kd, v_descale=0.5)
    for b in range(3):
        qs, ks = slice(cq[b], cq[b + 1]), slice(ck[b], ck[b + 1])
        if cq[b] == cq[b + 1]:
            continue
        ro_b, _ = check(o[None, qs], lse[None, :, qs], q[None, qs], k[None, ks], v[None, ks], (1.0, kd[b:b + 1], 0.5),
                        causal=True)
        assert np.array_equal(ro_b[0], ro[qs])          # the packed reference applies sequence b's row


@pytest.mark.parametrize("opts", [{}, {"softcap": 4.0, "causal": True}])
def test_fp8_descales_per_kv_head(opts, rng, sim):
    """FlashAttention-3's (batch, kv_heads) descales, GQA (each K/V head's factors for its two query
    heads), with the scale in the exponent and (softcap) before it."""
    q, k, v = _qkv(rng, (2, 100, 4, 128), (2, 190, 2, 128))
    descales = tuple(rng.uniform(0.25, 4.0, (2, 2)).astype(np.float32) for _ in range(3))
    attn = Attention(AttentionConfig(head_dim=128, dtype="e4m3"), sim)
    o, lse = attn(q, k, v, q_descale=descales[0], k_descale=descales[1], v_descale=descales[2], **opts)
    _, err = check(o, lse, q, k, v, descales, **opts)
    # each (batch, K/V head) takes its own factors: one mean factor per tensor is far off
    ro1, _ = attention_reference(q, k, v, **opts, **{n: float(d.mean()) for n, d in
                                                        zip(("q_descale", "k_descale", "v_descale"), descales)})
    assert np.abs(o.astype(np.float64) - ro1).max() > 10 * err.max()


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
    with pytest.raises(ArgumentError, match=r"v_descale must hold one value \(per tensor\) or have shape \(batch, "
                                            r"kv_heads\) = \(1, 1\) .* got shape \(2, 3\)"):
        attn(q, q, q, v_descale=np.ones((2, 3), np.float32))
    with pytest.raises(ArgumentError, match=r"q_descale must hold finite positive numbers, got -1.0 at \(0, 1\)"):
        q2 = np.zeros((1, 8, 2, 64), F8)
        attn(q2, q2, q2, q_descale=np.array([[1.0, -1.0]], np.float32))
    with pytest.raises(ArgumentTypeError, match="k_descale must be a float .* got int32"):
        attn(q, q, q, k_descale=np.ones(1, np.int32))
    with pytest.raises(ArgumentTypeError, match="q, k, v must share one dtype"):
        attn(q, q.astype(ml_dtypes.bfloat16), q)
    b = np.zeros((1, 8, 1, 64), ml_dtypes.bfloat16)
    with pytest.raises(ArgumentError, match="q_descale: descale factors are for fp8 \\(e4m3\\) inputs; q, k, v are bf16"):
        Attention(AttentionConfig(head_dim=64), sim)(b, b, b, q_descale=2.0)
    with pytest.raises(ArgumentTypeError, match="built for e4m3: use AttentionConfig\\(dtype='bf16'\\)"):
        attn(b, b, b)


@pytest.mark.parametrize("d", [128, 256])
def test_fp8_sass(d):
    """ptxas' code (docs/measurements.md): 0 spills, setmaxnreg 24 / 240, per 128-key block of the
    unmasked loop of one MMA warpgroup 8 QGMMA.64x128x32 (4 for S, 4 for P V; head dim 128),
    FlashAttention-3's softmax mix (66 MUFU, 68 FMNMX, 4 SHFL: P takes no quad exchange in the
    permuted order), 32 F2FP (two e4m3 per cvt); the transposers' loop: per 16 keys x 32 head-dim
    bytes of V and warp one LDSM.T, 4 PRMT, one STSM and ~12 integer instructions, no LDS / STS."""
    import collections
    from cutedsl.compiler.sass_loops import loops
    from cutedsl.compiler.toolchain import sass
    from cutedsl.kernel.attention_fp8 import AttentionFwdFp8Kernel
    ck = AttentionFwdFp8Kernel(d, "e4m3").compile()
    assert ck.resources.spill_stores == 0 and ck.resources.spill_loads == 0
    text = sass(ck.cubin)
    assert sorted(int(ln.split()[-2].rstrip(";"), 16) for ln in text.splitlines() if "USETMAXREG" in ln) == [24, 240]
    # S = Q K^T: N = 128 keys; O += P V: N = head dim
    assert {ln.split()[1] for ln in text.splitlines() if "QGMMA" in ln} == {f"QGMMA.64x{n}x32.F32.E4M3.E4M3"
                                                                             for n in (128, d)}
    counts = [collections.Counter(ops + ["total"] * len(ops)) for _, _, ops in loops(text)]
    if d == 128:
        h = next(c for c in counts if c["QGMMA"] == 8)
        assert (h["MUFU"], h["FMNMX"], h["SHFL"], h["F2FP"], h["PRMT"]) == (66, 68, 4, 32, 0), h
        assert h["total"] <= 454, h["total"]           # ptxas 13.5; 465 before the 64-bit descriptor steps (bf16: 442)
    t = next(c for c in counts if c["LDSM"])           # the smallest such loop: one transposer unit
    assert (t["LDSM"], t["PRMT"], t["STSM"], t["LDS"], t["STS"], t["QGMMA"]) == (1, 4, 1, 0, 0, 0), t
    assert t["total"] <= (22 if d == 128 else 28), t["total"]      # 21 / 27 with ptxas 13.5 (was 50 per 16 B)


@pytest.mark.parametrize("case", ["alibi_causal", "document_skip"])
def test_fp8_flex_hooks(case, rng, sim):
    """FlexAttention hooks with fp8 inputs and (batch, kv_head) descales, against the float64
    reference running the hooks on numpy: ALiBi (a score_mod: the scale, times q * k descale, is
    applied before it) with a causal mask_mod; a document mask whose SKIP blocks (128-key fp8 KV
    blocks 2, 3) hold NaN in V -- never read, so O stays finite. Tolerance: P's e4m3 rounding
    (2^-4 relative) on |V| plus O's bf16, as the module's bound without its per-row sums."""
    from cutedsl.collective.attention_hook_builtins import Alibi, Causal, DocumentMask
    b, sq, sk = 2, 200, 3 * 128 + 17
    q, k, v = _qkv(rng, (b, sq, 4, 64), (b, sk, 2, 64))
    descales = {n: rng.uniform(0.5, 2.0, (b, 2)).astype(np.float32) for n in ("q_descale", "k_descale", "v_descale")}
    if case == "alibi_causal":
        cfg, args = dict(score_mod=Alibi(), mask_mod=Causal()), {"alibi_slopes": rng.uniform(0, 0.1, 4).astype(np.float32)}
        v_clean = v
    else:
        docs = np.full((b, sk), 7, np.int32)
        docs[:, :sq] = np.sort(rng.integers(0, 2, (b, sq)), axis=1)
        cfg, args = dict(mask_mod=DocumentMask()), {"doc_ids": docs}
        v_clean = v.copy()
        v_clean[:, 256:] = 0
        v[:, 256:] = np.nan
    attn = Attention(AttentionConfig(head_dim=64, dtype="e4m3", **cfg), sim)
    o, lse = attn(q, k, v, **args, **descales)
    assert np.isfinite(o.astype(np.float32)).all()
    ro, rl = attn.reference(q, k, v_clean, **args, **descales)
    vmax = np.abs(v_clean.astype(np.float64) * _factor(descales["v_descale"], 2)).max()
    err = np.abs(o.astype(np.float64) - ro)
    assert err.max() <= 2 ** -4 * vmax + 2 ** -8 * np.abs(ro).max(), (err.max(), vmax)
    empty = np.isinf(rl)
    assert np.array_equal(np.isinf(lse), empty)
    assert np.allclose(lse[~empty], rl[~empty], rtol=0, atol=1e-4), np.abs(lse[~empty] - rl[~empty]).max()
    # the hooks and the per-head descales matter: without them the reference is far off
    plain, _ = attention_reference(q, k, v_clean)
    assert np.abs(o.astype(np.float64) - plain).max() > 10 * err.max()
    if case == "document_skip":
        kern = attn._kernel(attn.config, local=False, softcap=False, varlen=False)
        from cutedsl.collective.attention_block_mask import SKIP
        from cutedsl.problem import AttentionProblem
        kinds = kern.block_mask(AttentionProblem(b, sq, sk, 4, 2, 64), args={"doc_ids": docs}).kind
        assert kinds.shape[-1] == 4 and np.all(kinds[..., 2:] == SKIP)      # 128-key blocks
