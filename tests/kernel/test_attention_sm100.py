"""The FlashAttention-4-style forward on sm_100a (cutedsl/kernel/attention_sm100.py): the real
compiled sm_100a PTX on the emulator (race checks on, no opt-out; eager and adversarial through the
``sim`` fixture) against the float64 reference -- ragged lengths (1, 77, 200, 300; seqlen_q !=
seqlen_k), causal / window / softcap, GQA, both head dimensions, f16 and bf16, varlen; the stale
maximum of the correction step (scores that grow block after block, both thresholds); what the
PTX holds (A = P from tensor memory, tcgen05.ld/st each waited for); and the refusals."""
import ml_dtypes
import numpy as np
import pytest

from cutedsl import Attention, AttentionConfig
from cutedsl.device.attention_reference import attention_reference
from cutedsl.errors import ArgumentError, ConfigError
from cutedsl.kernel.attention_sm100 import BLOCK_N, AttentionFwdSm100Kernel

NP = {"bf16": ml_dtypes.bfloat16, "f16": np.float16}
O_TOL = {"bf16": 2e-2, "f16": 4e-3}       # P and O rounded to 16 bits, as the Hopper kernel's tests


def _qkv(rng, dt, q_shape, kv_shape, scale=1.0):
    return tuple((rng.standard_normal(s) * scale).astype(NP[dt]) for s in (q_shape, kv_shape, kv_shape))


def check(o, lse, q, k, v, dt, **opts):
    ro, rl = attention_reference(q, k, v, **opts)
    assert o.dtype == q.dtype and o.shape == ro.shape and lse.dtype == np.float32 and lse.shape == rl.shape
    empty = np.isinf(rl)
    assert np.array_equal(np.isinf(lse), empty) and np.all(lse[empty] > 0)
    err = np.abs(o.astype(np.float64) - ro).max()
    assert err < O_TOL[dt], err
    assert np.allclose(lse[~empty], rl[~empty], rtol=0, atol=1e-4), np.abs(lse[~empty] - rl[~empty]).max()
    return ro, rl


def attn(d, dt="bf16", backend=None):
    return Attention(AttentionConfig(head_dim=d, dtype=dt, arch="sm_100a"), backend)


@pytest.mark.parametrize("d,dt,sq,sk,opts", [
    (64, "bf16", 77, 200, {}),
    (128, "f16", 200, 77, {"causal": True}),          # rows with no key: O = 0, LSE = +inf
    (128, "bf16", 1, 1, {}),
    (64, "f16", 200, 300, {"causal": True}),          # 3 KV blocks: masked, unmasked, masked ranges
    (64, "bf16", 77, 300, {"window": (40, 7)}),
    (128, "bf16", 130, 200, {"softcap": 3.0, "causal": True}),
])
def test_dense_exact(d, dt, sq, sk, opts, rng, sim):
    q, k, v = _qkv(rng, dt, (1, sq, 2, d), (1, sk, 2, d))
    o, lse = attn(d, dt, sim)(q, k, v, **opts)
    ro, rl = check(o, lse, q, k, v, dt, **opts)
    assert np.all(o[np.transpose(np.isinf(rl), (0, 2, 1))] == 0)                # the fully masked rows


def test_gqa(rng, sim):
    """4 query heads on 2 KV heads, 2 sequences, a non-default scale."""
    q, k, v = _qkv(rng, "bf16", (2, 70, 4, 64), (2, 150, 2, 64))
    o, lse = attn(64, "bf16", sim)(q, k, v, causal=True, softmax_scale=0.3)
    check(o, lse, q, k, v, "bf16", causal=True, softmax_scale=0.3)


def test_varlen(rng, sim):
    lens_q, lens_k = [1, 0, 77, 130], [5, 3, 0, 150]              # 0-length queries, 0-length keys
    cq = np.concatenate([[0], np.cumsum(lens_q)]).astype(np.int32)
    ck = np.concatenate([[0], np.cumsum(lens_k)]).astype(np.int32)
    q, k, v = _qkv(rng, "bf16", (cq[-1], 2, 64), (ck[-1], 1, 64))
    o, lse = attn(64, "bf16", sim)(q, k, v, cu_seqlens_q=cq, cu_seqlens_k=ck, causal=True)
    check(o, lse, q, k, v, "bf16", cu_seqlens_q=cq, cu_seqlens_k=ck, causal=True)


@pytest.mark.parametrize("threshold", [0.0, 8.0])
def test_correction_with_growing_maxima(threshold, rng, sim):
    """Keys whose scores grow block by block as the kernel visits them (last block first, so
    the *first* blocks hold the largest scores): every visited block raises the row maximum --
    by less than FlashAttention-4's threshold in the first KV blocks' steps, by more in others --
    so both the stale reference and the correction of O run."""
    d, sq, sk = 64, 70, 4 * BLOCK_N - 5
    q, k, v = _qkv(rng, "bf16", (1, sq, 1, d), (1, sk, 1, d))
    q[...] = (np.abs(q.astype(np.float32)) + 0.5).astype(q.dtype)
    ramp = np.repeat([6.0, 2.0, 1.0, 0.2], BLOCK_N)[:sk]                   # block 0 largest
    k[...] = (np.abs(k.astype(np.float32)) * ramp[None, :, None, None] / 8).astype(k.dtype)
    kern_cls = type("Rescale", (AttentionFwdSm100Kernel,), {"THRESHOLD": threshold})
    o, lse = Attention(AttentionConfig(head_dim=d, arch="sm_100a"), sim, kernel_cls=kern_cls)(q, k, v)
    check(o, lse, q, k, v, "bf16")


def test_ptx_shape():
    """S from shared Q and K; P V with A = P in tensor memory; every tcgen05.ld / st waited for."""
    ptx = AttentionFwdSm100Kernel(128, "bf16", local=True).compile().ptx
    mmas = [line for line in ptx.splitlines() if "tcgen05.mma" in line]
    tmem_a = [line for line in mmas if "], [" in line]
    assert len(mmas) == 8 + 8 and len(tmem_a) == 8       # QK: 2 k-tiles x 4 k16 steps; PV: 8 k16 steps from TMEM
    assert ptx.count("tcgen05.wait::ld") >= ptx.count("tcgen05.ld.") // 2       # loads in sets, each waited for
    assert "tcgen05.wait::st" in ptx and "tcgen05.fence::before_thread_sync" in ptx
    assert "vote.sync.any.pred" in ptx                                           # the warp's correction test
    assert "max.f32" in ptx and any(line.count(",") == 3 and "max.f32" in line for line in ptx.splitlines())


def test_refusals():
    with pytest.raises(ConfigError, match=r"head_dim must be 64 or 128 on sm_100a, got 256: .*320 KiB of shared"):
        AttentionConfig(head_dim=256, arch="sm_100a")
    with pytest.raises(ConfigError, match="dtype must be 'bf16' or 'f16' .*tensor-memory A operand.*got 'e4m3'"):
        AttentionConfig(dtype="e4m3", arch="sm_100a")
    with pytest.raises(ConfigError, match="arch must be one of .*'sm_100a'.* got 'sm_80'"):
        AttentionConfig(arch="sm_80")
    with pytest.raises(ConfigError, match="score_mod / mask_mod hooks are built for arch='sm_90a' so far"):
        AttentionConfig(arch="sm_100a", score_mod=lambda score, b, h, q, kv: score)
    cfg = AttentionConfig(head_dim=64, arch="sm_100a")
    from cutedsl.problem import AttentionProblem
    assert "head_dim must be 64 or 128 on sm_100a, got 96" in cfg.can_implement(AttentionProblem(1, 8, 8, 1, 1, 96))
    q = np.zeros((1, 8, 1, 64), ml_dtypes.bfloat16)
    with pytest.raises(ArgumentError, match="heads 1 .* must be a multiple of kv_heads 2"):
        Attention(cfg, "sim")(q, np.zeros((1, 8, 2, 64), q.dtype), np.zeros((1, 8, 2, 64), q.dtype))


def test_sass_counts():
    """ptxas 13.5's SASS of the head-dim-128 bf16 kernel (docs/measurements.md): no spills; the
    MMA warp's loop issues 16 UTCHMMA per KV block (8 for S, 8 for P V); the softmax loop of an
    unmasked block has one MUFU.EX2 per score (+1 for the correction factor), the exponents'
    FMAs and the row sum as packed f32x2 (FFMA2 / FADD2), the row maximum as three-input FMNMX3,
    64 F2FP packing P and the O correction as FMUL2."""
    from cutedsl.compiler.sass_loops import kernel_hot_loop
    k = AttentionFwdSm100Kernel(128, "bf16").compile()
    assert k.resources.spill_stores == 0 and k.resources.spill_loads == 0
    mma = kernel_hot_loop(k, "UTCHMMA")["histogram"]
    assert mma["UTCHMMA"] == 16 and mma["UTCBAR"] == 4                 # 4 commits: K, S, V, O
    sm = kernel_hot_loop(k, "MUFU")["histogram"]
    assert sm["MUFU"] == BLOCK_N + 1
    assert sm["FFMA2"] == BLOCK_N // 2 and sm.get("FFMA", 0) <= 2
    assert sm["FADD2"] == BLOCK_N // 2 - 1 and sm["FMNMX3"] == BLOCK_N // 2
    assert sm["F2FP"] == BLOCK_N // 2 and sm["FMUL2"] == 128 // 2
