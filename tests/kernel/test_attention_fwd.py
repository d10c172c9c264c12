"""The FlashAttention-3-style forward kernel (cutedsl/kernel/attention.py) on the emulator against
the float64 reference (cutedsl/device/attention_reference.py): O within the 16-bit rounding of P
and O, LSE to f32 accuracy, fully masked rows exactly O = 0 / LSE = +inf; ragged lengths that are
no tile multiples, both head dimensions, causal / window / softcap / GQA / varlen, each schedule
(simple, intra-warpgroup overlap, ping-pong); whole-block skipping; the block ranges on the host."""
import itertools

import ml_dtypes
import numpy as np
import pytest

from cutedsl import Attention, AttentionConfig
from cutedsl.collective.attention_mask import AttentionMask
from cutedsl.device.attention_reference import attention_reference, mask as ref_mask
from cutedsl.kernel.attention import BLOCK_M, BLOCK_N

NP = {"bf16": ml_dtypes.bfloat16, "f16": np.float16}
#: O: P and O are rounded to 16 bits (bf16: 2^-8 relative, a few ulps over |O| <= ~1.5)
O_TOL = {"bf16": 2e-2, "f16": 4e-3}
SCHEDULES = {"simple": dict(overlap=False, pingpong=False), "overlap": dict(overlap=True, pingpong=False),
             "pingpong": dict(overlap=True, pingpong=True)}


def _qkv(rng, dt, q_shape, kv_shape):
    q = rng.standard_normal(q_shape).astype(NP[dt])
    k = rng.standard_normal(kv_shape).astype(NP[dt])
    v = rng.standard_normal(kv_shape).astype(NP[dt])
    return q, k, v


def check(o, lse, q, k, v, dt, **opts):
    ro, rl = attention_reference(q, k, v, **opts)
    assert o.dtype == q.dtype and o.shape == ro.shape and lse.dtype == np.float32 and lse.shape == rl.shape
    empty = np.isinf(rl)
    assert np.array_equal(np.isinf(lse), empty) and np.all(lse[empty] > 0)        # +inf where no key is left
    err = np.abs(o.astype(np.float64) - ro).max()
    assert err < O_TOL[dt], err
    assert np.allclose(lse[~empty], rl[~empty], rtol=0, atol=1e-4), np.abs(lse[~empty] - rl[~empty]).max()
    return ro, rl


@pytest.mark.parametrize("schedule,d,dt,sq,sk,opts", [
    ("simple", 64, "bf16", 77, 300, {}),
    ("overlap", 64, "f16", 300, 77, {"causal": True}),               # rows with no key: O = 0, LSE = +inf
    ("pingpong", 128, "bf16", 300, 300, {"causal": True}),
    ("pingpong", 64, "bf16", 1, 1, {}),
    ("pingpong", 64, "bf16", 70, 700, {"window": (400, 30)}),        # 5 KV blocks, both edges masked: the rings wrap twice
    ("pingpong", 128, "f16", 77, 200, {"window": (30, 5)}),
    ("overlap", 64, "bf16", 200, 130, {"window": (-1, 20), "softcap": 4.0}),
    ("pingpong", 64, "bf16", 130, 261, {"window": (-1, 3)}),        # right edge only, shift 131 (not 8k)
    ("overlap", 64, "f16", 200, 190, {"window": (7, -1)}),           # left edge only
    ("simple", 64, "bf16", 150, 150, {"causal": True}),
    ("pingpong", 96, "bf16", 77, 200, {"causal": True}),             # 96: tiles of 128, TMA zero fill
    ("overlap", 256, "f16", 70, 150, {"window": (20, 3)}),            # 256: 64-key KV blocks
])
def test_dense_exact(schedule, d, dt, sq, sk, opts, rng, sim):
    q, k, v = _qkv(rng, dt, (1, sq, 2, d), (1, sk, 2, d))
    attn = Attention(AttentionConfig(head_dim=d, dtype=dt, **SCHEDULES[schedule]), sim)
    o, lse = attn(q, k, v, **opts)
    ro, rl = check(o, lse, q, k, v, dt, **opts)
    (kern,) = attn._kernels.values()               # the variant: causal = a band with no left edge
    no_left = opts.get("causal", False) or opts.get("window", (0, 0))[0] == -1
    assert (kern.local, kern.causal) == ("causal" in opts or "window" in opts, no_left)
    assert np.all(o[np.transpose(np.isinf(rl), (0, 2, 1))] == 0)                # the fully masked rows


@pytest.mark.parametrize("heads,kv_heads", [(4, 2), (3, 1)])
def test_gqa_mqa(heads, kv_heads, rng, sim):
    q, k, v = _qkv(rng, "bf16", (2, 70, heads, 64), (2, 150, kv_heads, 64))
    o, lse = Attention(AttentionConfig(head_dim=64), sim)(q, k, v, causal=True, softmax_scale=0.3)
    check(o, lse, q, k, v, "bf16", causal=True, softmax_scale=0.3)


def test_softcap_scale(rng, sim):
    q, k, v = _qkv(rng, "f16", (1, 100, 1, 128), (1, 140, 1, 128))
    q *= 3                                                         # scores large enough for the cap to bite
    o, lse = Attention(AttentionConfig(head_dim=128, dtype="f16"), sim)(q, k, v, softcap=2.5, softmax_scale=0.5)
    check(o, lse, q, k, v, "f16", softcap=2.5, softmax_scale=0.5)


@pytest.mark.parametrize("causal,d", [(False, 64), (True, 128), (False, 96), (True, 256)])
def test_varlen_mixed_lengths(causal, d, rng, sim):
    lens_q, lens_k = [1, 0, 77, 130], [5, 3, 0, 150]               # 0-length queries, 0-length keys
    cq = np.concatenate([[0], np.cumsum(lens_q)]).astype(np.int32)
    ck = np.concatenate([[0], np.cumsum(lens_k)]).astype(np.int32)
    q, k, v = _qkv(rng, "bf16", (cq[-1], 2, d), (ck[-1], 1, d))
    o, lse = Attention(AttentionConfig(head_dim=d), sim)(q, k, v, cu_seqlens_q=cq, cu_seqlens_k=ck, causal=causal)
    check(o, lse, q, k, v, "bf16", cu_seqlens_q=cq, cu_seqlens_k=ck, causal=causal)


def test_whole_blocks_skipped(rng, sim):
    """A window (0, 0) with seqlen_k - seqlen_q = 256: query i sees key i + 256 only, so KV blocks
    0 and 1 are never loaded nor multiplied. NaN in their V rows would reach O (0 * NaN) if they were."""
    q, k, v = _qkv(rng, "bf16", (1, BLOCK_M, 1, 64), (1, BLOCK_M + 2 * BLOCK_N, 1, 64))
    v_clean = v.copy()
    v_clean[:, :2 * BLOCK_N] = 0
    v[:, :2 * BLOCK_N] = np.nan
    o, lse = Attention(AttentionConfig(head_dim=64), sim)(q, k, v, window=(0, 0))
    assert np.isfinite(o.astype(np.float32)).all()
    check(o, lse, q, k, v_clean, "bf16", window=(0, 0))


def _host_ranges():
    shapes = [(1, 1), (77, 300), (300, 77), (128, 128), (300, 300), (129, 513)]
    windows = [None, (-1, 0), (0, 0), (40, 7), (-1, 20), (3, -1)]
    for (sq, sk), w in itertools.product(shapes, windows):
        yield sq, sk, w


@pytest.mark.parametrize("d,block_n", [(96, 128), (256, 64)])
def test_head_dims_fit(d, block_n):
    """Head dims 96 (tiles of 128) and 256 (64-key KV blocks): no spills in the causal ping-pong
    build, shared memory within the CTA's (docs/measurements.md)."""
    from cutedsl.arch import get_arch
    from cutedsl.kernel.attention import AttentionFwdKernel
    kern = AttentionFwdKernel(d, "bf16", local=True, causal=True)
    ck = kern.compile()
    assert kern.block_n == block_n and kern.config()["block"] == [BLOCK_M, block_n]
    assert ck.resources.spill_stores == 0 and ck.resources.spill_loads == 0 and ck.resources.registers == 168
    assert ck.dynamic_smem <= get_arch("sm_90a").smem_per_cta, ck.dynamic_smem


def test_causal_variant():
    """``causal`` (a band with no left edge) without ``local`` is refused by name; the front end's
    choice of variant is checked in test_dense_exact."""
    from cutedsl.errors import ConfigError
    from cutedsl.kernel.attention import AttentionFwdKernel
    with pytest.raises(ConfigError, match="causal=True is a local band whose left edge is unbounded"):
        AttentionFwdKernel(64, causal=True)
    assert AttentionFwdKernel(64, local=True, causal=True).config()["causal"] is True
    m = AttentionMask(BLOCK_M, BLOCK_N, local=True, causal=True)
    assert not m.left_edge and AttentionMask(BLOCK_M, BLOCK_N, local=True).left_edge


def test_block_ranges_on_the_host():
    """Every kept (query, key) pair lies in a visited block, and the blocks the kernel runs
    unmasked hold no masked pair (the same block_range code builds the kernel's IR)."""
    for sq, sk, w in _host_ranges():
        local = w is not None
        left, right = (w if w else (-1, -1))
        far = sq + sk
        m = AttentionMask(BLOCK_M, BLOCK_N, local, causal=local and left < 0)
        keep = ref_mask(sq, sk, window=w)
        for m0 in range(0, sq, BLOCK_M):
            r = m.block_range(m0, sq, sk, far if left < 0 else left, far if right < 0 else right)
            assert r.n_min <= r.u_lo <= r.u_hi <= r.n_max
            rows = keep[m0:m0 + BLOCK_M]
            cols = np.flatnonzero(rows.any(axis=0))
            if cols.size:
                assert r.n_min * BLOCK_N <= cols.min() and cols.max() < r.n_max * BLOCK_N, (sq, sk, w, m0)
            for j in range(r.u_lo, r.u_hi):
                blk = np.zeros((rows.shape[0], BLOCK_N), bool)
                part = rows[:, j * BLOCK_N:(j + 1) * BLOCK_N]
                blk[:, :part.shape[1]] = part
                assert blk.all(), (sq, sk, w, m0, j)
            # skipping is tight for bands: the first and last visited blocks hold a kept pair
            if r.n_max > r.n_min:
                assert rows[:, (r.n_max - 1) * BLOCK_N:r.n_max * BLOCK_N].any()
                assert rows[:, r.n_min * BLOCK_N:(r.n_min + 1) * BLOCK_N].any()


def _loops_with_hgmma(text) -> list:
    import collections
    from cutedsl.compiler.sass_loops import loops
    return [collections.Counter(ops) | {"total": len(ops)} for _, _, ops in loops(text) if "HGMMA" in ops]


def test_sass_bf16_head_dim_128():
    """ptxas' code for the FlashAttention-3 schedule (bf16, head dim 128, ping-pong): no spills,
    setmaxnreg 24 / 240, and per 128-key block of the unmasked main loop exactly FlashAttention-3's
    mix (docs/measurements.md): 16 HGMMA.64x128x16, 66 MUFU.EX2 (64 of P, 2 corrections), 68 FMNMX,
    4 SHFL (row max only: the row sums are reduced once, after the loop), 32 F2FP; 442 instructions
    in all, FlashAttention-3's 455 less 13: the k-step descriptors one UIADD3.64 each (no UMOV of
    the constant high word per WGMMA: 4 UMOV, was 17), the barrier parities a carried 0/1 bit (one
    SHF per wait). The masked blocks (docs/measurements.md): one FSEL per element, its predicates
    from one keep mask per row through R2P (seven bits per instruction), no per-element compare
    (ISETP); the keep counts hoisted (one subtraction per block); a dense kernel's last block one
    mask for both rows."""
    from cutedsl.compiler.toolchain import sass
    from cutedsl.kernel.attention import AttentionFwdKernel
    ck = AttentionFwdKernel(128, "bf16", overlap=True, pingpong=True).compile()
    assert ck.resources.spill_stores == 0 and ck.resources.spill_loads == 0
    text = sass(ck.cubin)
    regs = [ln.split()[-2].rstrip(";") for ln in text.splitlines() if "USETMAXREG" in ln]
    assert sorted(int(r, 16) for r in regs) == [24, 240], regs
    # the smallest loop holding both GEMMs of a block (a smaller one closes over the last P V and the
    # epilogue: the out-of-line retry of the last V wait jumps back into it)
    h = next(c for c in _loops_with_hgmma(text) if c["HGMMA"] == 16)
    assert (h["HGMMA"], h["MUFU"], h["FMNMX"], h["SHFL"], h["F2FP"]) == (16, 66, 68, 4, 32), h
    assert h["total"] <= 442 and h["UMOV"] <= 4, h              # main before issue 41's pass: 457, 17 UMOV
    assert sum("HGMMA.64x128x16" in ln for ln in text.splitlines()) >= 16
    # dense O leaves through shared memory and TMA: 2 boxes of 64 columns per warpgroup, no global stores
    # of O (the 2 STG left are LSE's: one per row of the thread); varlen keeps guarded stores
    stg = [ln for ln in text.splitlines() if "STG.E" in ln and "UTMASTG" not in ln]
    assert text.count("UTMASTG") == 2 and text.count("STSM") == 8 and len(stg) == 2, stg
    assert "UTMASTG" not in sass(AttentionFwdKernel(128, "bf16", varlen=True).compile().cubin)

    causal = AttentionFwdKernel(128, "bf16", local=True, causal=True).compile()
    assert causal.resources.spill_stores == 0 and causal.resources.spill_loads == 0
    body = _loops_with_hgmma(sass(causal.cubin))
    unmasked = next(c for c in body if c["HGMMA"] == 16)
    masked = next(c for c in body if c["HGMMA"] == 16 and c["FSEL"] >= 64)
    assert unmasked["total"] <= 440 and unmasked["FSEL"] == 2, unmasked     # FA3's causal build: 474
    # 64 selects of the mask + 2 of the softmax's empty-row guard; the rest as in the unmasked block
    assert masked["FSEL"] == 66 and masked["R2P"] >= 8 and masked["ISETP"] <= 4, masked
    # the keep counts left the loop: per row one VIADDMNMX (minus the block, clamped at 0) and one SHF
    assert masked["total"] <= 526 and masked["total"] - unmasked["total"] <= 86, masked["total"]   # was 551
    # a dense kernel's last block (seqlen_k only): one keep mask shared by both rows
    dense_masked = next(c for c in _loops_with_hgmma(text) if c["HGMMA"] == 16 and c["FSEL"] >= 64)
    assert dense_masked["FSEL"] == 66 and dense_masked["total"] <= 526, dense_masked       # was 567
    window = AttentionFwdKernel(128, "bf16", local=True).compile()
    body = _loops_with_hgmma(sass(window.cubin))
    assert next(c for c in body if c["HGMMA"] == 16)["total"] <= 442
    assert max(c["total"] for c in body if c["HGMMA"] == 16 and c["FSEL"] == 66) <= 537    # was 572 / 573


def test_score_and_mask_hooks(rng, sim):
    """FlexAttention-style hooks through the config, called per accumulator element with (batch,
    head, q_idx, kv_idx): an ALiBi-like score_mod and a mask_mod written once, run by the kernel
    (as IR) and by the float64 reference (on numpy) -- the one hook mechanism."""
    def alibi(score, batch, head, q_idx, kv_idx):
        return score + (kv_idx - q_idx) * 0.05 * (head + 1)

    def sparse(batch, head, q_idx, kv_idx):
        return (q_idx + kv_idx + batch) % 3 != 0

    q, k, v = _qkv(rng, "bf16", (2, 70, 2, 64), (2, 150, 2, 64))
    attn = Attention(AttentionConfig(head_dim=64, score_mod=alibi, mask_mod=sparse), sim)
    o, lse = attn(q, k, v, softmax_scale=0.2)
    check(o, lse, q, k, v, "bf16", softmax_scale=0.2, score_mod=alibi, mask_mod=sparse)


def test_on_the_skeleton_with_the_operand_loader():
    """The forward is a SkeletonKernel: two MMA warpgroups sharing one body and the producer
    warpgroup, budgets from the Arch (a different Arch budget changes the PTX's setmaxnreg), the
    producer's branch first; Q, K and V are OperandLoader rings with one buffer tile per MMA
    k-tile (head dim 256: 64-key blocks, V in 4 boxes per k-tile)."""
    import re
    import attrs
    from cutedsl.arch import SM90A
    from cutedsl.kernel.attention import AttentionFwdKernel
    from cutedsl.kernel.skeleton import SkeletonKernel
    k = AttentionFwdKernel(128, "bf16")
    lay = k.layout()
    assert isinstance(k, SkeletonKernel) and lay.threads == k.threads == 384 and k.launch_registers == 168
    assert [(r.name, r.count, r.regs) for r in lay.roles] == [("mma", 2, 240), ("producer", 1, 24)]
    assert lay.span("mma") == (0, 2) and lay.span("producer") == (2, 1)
    loader = k.operands.loader
    assert [(r.name, r.stages, r.tx_bytes) for r in loader.rings.values()] == [
        ("q", None, 128 * 128 * 2), ("k", 2, 128 * 128 * 2), ("v", 2, 128 * 128 * 2)]
    for d, bn, v_tile, v_tiles in ((128, 128, (128, 64), 4), (256, 64, (256, 64), 2)):
        kd = AttentionFwdKernel(d, "f16")
        bufs = kd.smem_plan().buffers
        assert [(n, b.stages, b.shape) for n, b in bufs.items()] == [
            ("q", d // 64, (BLOCK_M, 64)), ("k", 2 * d // 64, (bn, 64)), ("v", v_tiles, v_tile)], d
        assert [(s.param, s.box) for s in kd.tensor_maps()[:3]] == [
            ("q", (1, 1, BLOCK_M, 64)), ("k", (1, 1, bn, 64)), ("v", (1, 1, 64, 64))]
    assert list(k.smem_plan()._barriers) == ["q_full", "k_full", "k_empty", "v_full", "v_empty"]
    other = attrs.evolve(SM90A, attention_wgmma_regs=(232, 40))
    ptx = " ".join(AttentionFwdKernel(64, "bf16", arch=other).compile(use_cache=False).ptx.split())
    assert re.findall(r"setmaxnreg\.(\w+)\.sync\.aligned\.u32 (\d+);", ptx) == [("dec", "40"), ("inc", "232")]
    # budgets the SM cannot hold, or none, are refused when the kernel is made
    from cutedsl.errors import ConfigError
    with pytest.raises(ConfigError, match="role register budgets need 68608 registers, past the 65536"):
        AttentionFwdKernel(64, arch=attrs.evolve(SM90A, attention_wgmma_regs=(256, 24)))
    with pytest.raises(ConfigError, match="sm_90a gives no attention_wgmma_regs"):
        AttentionFwdKernel(64, arch=attrs.evolve(SM90A, attention_wgmma_regs=None))
