"""The FlashAttention-4-style forward on sm_100a (cutedsl/kernel/attention_sm100.py: two Q tiles of
128 rows per CTA, 512 threads with a separate correction warpgroup, a share of the exponentials by
the FMA-pipe polynomial): the real compiled sm_100a PTX on the emulator (race checks on, no opt-out;
eager and adversarial through the ``sim`` fixture) against the float64 reference -- ragged lengths
(1, 77, 200, 300; seqlen_q != seqlen_k), causal / window / softcap, GQA, both head dimensions, f16
and bf16, varlen; the stale maximum of the correction step (scores that grow block after block,
both thresholds); the polynomial's effect on O; what the PTX and SASS hold (A = P from tensor
memory, tcgen05.ld/st each waited for, the roles' register budgets, instruction counts per KV
block); and the refusals."""
import ml_dtypes
import numpy as np
import pytest

from cutedsl import Attention, AttentionConfig
from cutedsl.device.attention_reference import attention_reference
from cutedsl.errors import ArgumentError, ConfigError
from cutedsl.collective.attention_block_mask import FULL, PARTIAL, SKIP
from cutedsl.collective.attention_hook_builtins import Alibi, Causal, DocumentMask
from cutedsl.kernel.attention_sm100 import BLOCK_M, BLOCK_N, AttentionFwdSm100Kernel

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


def test_exp2_poly_effect_on_o(rng, sim):
    """Every exponential by the FMA-pipe polynomial (exp2_poly=128) against none (0): both within
    the bf16 tolerance of float64; they differ (the polynomial ran), by far less than the
    tolerance (its 1e-4 relative error is below P's bf16 rounding)."""
    q, k, v = _qkv(rng, "bf16", (1, 200, 2, 64), (1, 300, 2, 64))
    out = {}
    for e in (0, 128):
        o, lse = Attention(AttentionConfig(head_dim=64, arch="sm_100a", exp2_poly=e), sim)(q, k, v, causal=True)
        check(o, lse, q, k, v, "bf16", causal=True)
        out[e] = o.astype(np.float64), lse
    assert not np.array_equal(out[0][1], out[128][1])
    assert np.abs(out[0][0] - out[128][0]).max() < O_TOL["bf16"] / 4
    assert np.abs(out[0][1] - out[128][1]).max() < 1e-4


def test_exp2_poly_config():
    from cutedsl.collective.attention_tmem_softmax import TmemRowSoftmax
    from cutedsl.errors import ConfigTypeError
    assert AttentionConfig(arch="sm_100a").kernel().exp2_poly == AttentionFwdSm100Kernel.EXP2_POLY == 24
    assert AttentionConfig(arch="sm_100a", exp2_poly=0).kernel().exp2_poly == 0
    for bad in (3, 130, -2):
        with pytest.raises(ConfigError, match=rf"exp2_poly must be an even int in 0\.\.128 .*got {bad}"):
            AttentionConfig(arch="sm_100a", exp2_poly=bad)
    with pytest.raises(ConfigError, match="exp2_poly=8: the polynomial exp2 is built for sm_100a .*not sm_90a"):
        AttentionConfig(exp2_poly=8)
    with pytest.raises(ConfigTypeError, match="exp2_poly must be an int or None, got float"):
        AttentionConfig(arch="sm_100a", exp2_poly=2.0)
    assert "exp2_poly" not in AttentionConfig(arch="sm_100a").to_dict()     # identities of older configs unchanged
    d = AttentionConfig(arch="sm_100a", exp2_poly=16).to_dict()
    assert d["exp2_poly"] == 16 and AttentionConfig.from_dict(d).exp2_poly == 16
    pairs = sorted(TmemRowSoftmax.poly_pairs(64, 24))                        # 12 pairs, spread over the row
    assert len(pairs) == 12 and max(b - a for a, b in zip(pairs, pairs[1:])) <= 6
    assert TmemRowSoftmax.poly_pairs(64, 0) == frozenset() and len(TmemRowSoftmax.poly_pairs(64, 128)) == 64


def _check_hooks(attn, q, k, v, **opts):
    o, lse = attn(q, k, v, **opts)
    ro, rl = attn.reference(q, k, v, **opts)                 # float64, the hooks on numpy
    empty = np.isinf(rl)
    assert np.array_equal(np.isinf(lse), empty)
    assert np.abs(o.astype(np.float64) - ro).max() < O_TOL["bf16"]
    assert np.allclose(lse[~empty], rl[~empty], rtol=0, atol=1e-4)
    return o


def test_hooks_score_mod_and_mask_mod(rng, sim):
    """FlexAttention hooks on sm_100a: ALiBi (a per-head slope tensor) as score_mod and a causal
    mask_mod, GQA; 300 queries = a full and a ragged 256-row unit, each tile of the first unit
    seeing a different diagonal."""
    q, k, v = _qkv(rng, "bf16", (1, 300, 4, 64), (1, 280, 2, 64))
    slopes = (rng.random((4,)) * 0.1).astype(np.float32)
    attn = Attention(AttentionConfig(head_dim=64, arch="sm_100a", score_mod=Alibi(), mask_mod=Causal()), sim)
    _check_hooks(attn, q, k, v, alibi_slopes=slopes)


def test_block_mask_skips_blocks(rng, sim):
    """A document mask whose keys past 256 belong to no query's document: those KV blocks are
    SKIP in the 256 x 128 block mask and hold NaN in V; O stays finite and right."""
    b, sq, sk = 1, 200, 2 * BLOCK_N + 40
    q, k, v = _qkv(rng, "bf16", (b, sq, 2, 64), (b, sk, 2, 64))
    docs = np.full((b, sk), 7, np.int32)
    docs[:, :sq] = np.sort(rng.integers(0, 2, (b, sq)), axis=1)
    v_clean = v.copy()
    v_clean[:, 2 * BLOCK_N:] = 0
    v[:, 2 * BLOCK_N:] = np.nan
    attn = Attention(AttentionConfig(head_dim=64, arch="sm_100a", mask_mod=DocumentMask()), sim)
    o, lse = attn(q, k, v, doc_ids=docs)
    assert np.isfinite(o.astype(np.float32)).all()
    ro, rl = attn.reference(q, k, v_clean, doc_ids=docs)
    assert np.abs(o.astype(np.float64) - ro).max() < O_TOL["bf16"]
    kern = attn._kernel(attn.config, local=False, softcap=False, varlen=False)
    from cutedsl.problem import AttentionProblem
    kinds = kern.block_mask(AttentionProblem(b, sq, sk, 2, 2, 64), args={"doc_ids": docs}).kind
    assert BLOCK_M == 256 and kinds.shape == (b, 1, 1, 3)
    assert kinds[0, 0, 0, 2] == SKIP and set(kinds[0, 0, 0, :2]) <= {PARTIAL, FULL}


def test_ptx_shape():
    """512 threads in four warpgroups with FlashAttention-4's setmaxnreg budgets (softmax 184,
    correction 80, other 64); S from shared Q and K; P V with A = P in tensor memory (P over S's
    columns); S read in 32-column loads with one wait::ld per block, O's loads in the correction and
    the epilogue each waited for; the correction's warp vote."""
    from cutedsl.arch import SM100A
    ptx = AttentionFwdSm100Kernel(128, "bf16", local=True).compile().ptx
    mmas = [line for line in ptx.splitlines() if "tcgen05.mma" in line]
    tmem_a = [line for line in mmas if "], [" in line]
    # per tile: S 2 k-tiles x 4 k16 steps, P V 8 k16 steps from TMEM; S in the prologue and the
    # loop, P V in the loop and after it
    assert len(mmas) == 2 * 2 * (8 + 8) and len(tmem_a) == 2 * 2 * 8
    # S: 3 softmax loops (masked, unmasked, masked) x 4 loads, 1 wait each; the correction and the
    # epilogue: 2 tiles x 4 chunks of 32 O columns, each load waited for
    s_loads, o_loads = 3 * BLOCK_N // 32, 2 * 2 * 128 // 32
    assert ptx.count("tcgen05.ld.sync.aligned.32x32b.x32.") == s_loads + o_loads
    assert ptx.count("tcgen05.wait::ld") == 3 + o_loads
    assert "tcgen05.wait::st" in ptx and "tcgen05.fence::before_thread_sync" in ptx
    assert "vote.sync.any.pred" in ptx                                           # the warp's correction test
    assert "max.f32" in ptx and any(line.count(",") == 3 and "max.f32" in line for line in ptx.splitlines())
    softmax, correction, other = SM100A.attention_regs
    lines = [line.split() for line in ptx.splitlines() if "maxnreg" in line or "reqntid" in line]
    assert [".reqntid", "512,", "1,", "1"] in lines and [".maxnreg", str(SM100A.launch_regs(512))] in lines
    assert ["setmaxnreg.inc.sync.aligned.u32", f"{softmax};"] in lines
    assert ["setmaxnreg.dec.sync.aligned.u32", f"{correction};"] in lines
    assert ["setmaxnreg.dec.sync.aligned.u32", f"{other};"] in lines
    assert (2 * softmax + correction + other) * 128 == SM100A.regs_per_sm


def test_refusals():
    with pytest.raises(ConfigError, match=r"head_dim must be 64 or 128 on sm_100a, got 256: .*384 KiB of shared"):
        AttentionConfig(head_dim=256, arch="sm_100a")
    with pytest.raises(ConfigError, match="dtype must be 'bf16' or 'f16' .*tensor-memory A operand.*got 'e4m3'"):
        AttentionConfig(dtype="e4m3", arch="sm_100a")
    with pytest.raises(ConfigError, match="arch must be one of .*'sm_100a'.* got 'sm_80'"):
        AttentionConfig(arch="sm_80")
    with pytest.raises(ConfigError, match=r"score_mod / mask_mod with packed sequences \(varlen\) are not built"):
        AttentionFwdSm100Kernel(64, varlen=True, hooks=AttentionConfig(arch="sm_100a", mask_mod=Causal()).hooks())
    cfg = AttentionConfig(head_dim=64, arch="sm_100a")
    from cutedsl.problem import AttentionProblem
    assert "head_dim must be 64 or 128 on sm_100a, got 96" in cfg.can_implement(AttentionProblem(1, 8, 8, 1, 1, 96))
    q = np.zeros((1, 8, 1, 64), ml_dtypes.bfloat16)
    with pytest.raises(ArgumentError, match="heads 1 .* must be a multiple of kv_heads 2"):
        Attention(cfg, "sim")(q, np.zeros((1, 8, 2, 64), q.dtype), np.zeros((1, 8, 2, 64), q.dtype))


def _loop(kernel, pred) -> dict:
    """The smallest SASS loop whose histogram satisfies ``pred`` (smaller loops are out-of-line
    wait retries; larger ones nest it)."""
    import collections
    from cutedsl.compiler.sass_loops import loops
    from cutedsl.compiler.toolchain import sass
    found = [o for _s, _e, o in loops(sass(kernel.cubin)) if pred(collections.Counter(o))]
    ops = min(found, key=len)
    return {"instructions": len(ops), "histogram": collections.Counter(ops)}


def _softmax_loop(kernel) -> dict:
    """The softmax loop of an unmasked block: the smallest loop holding a KV block's exponentials."""
    return _loop(kernel, lambda h: h["MUFU"] + h["FFMA2"] >= BLOCK_N)


def test_sass_counts():
    """ptxas 13.5's SASS of the head-dim-128 bf16 kernel (docs/measurements.md). The MMA warp's
    loop issues both Q tiles' MMAs of a KV block -- 32 UTCHMMA (2 x 8 for S, 2 x 8 for P V) and 6
    commits -- within FlashAttention-4's 199 instructions per 32 UTCHMMA. The softmax loop of an
    unmasked block (within FA4's 543) has, of 128 exponentials, 104 MUFU.EX2 and 24 by the
    polynomial (12 pairs: 4 FFMA2 and 2 FADD2 each, beside the 64 FFMA2 of the exponents and the
    63 FADD2 of the row sum), +1 MUFU for the correction factor, the row maximum as 64 FMNMX3,
    64 F2FP packing P and no correction (FMUL2) any more; with exp2_poly=0 every exponential is a
    MUFU. The correction warpgroup's loop rescales both tiles' O rows: 2 x 64 FMUL2, 2 x 4 LDTM and
    STTM (FA4: 185 instructions). No spills at either head dim (each role reads ``seqlen_k``
    through an opaque move after its setmaxnreg: nothing derived from it is hoisted above the role
    dispatch and kept across the other roles' budgets, issue 42)."""
    k = AttentionFwdSm100Kernel(128, "bf16").compile()
    assert k.resources.spill_stores == 0 and k.resources.spill_loads == 0, k.resources
    k64 = AttentionFwdSm100Kernel(64, "bf16").compile()
    assert k64.resources.spill_stores == 0 and k64.resources.spill_loads == 0
    mma = _loop(k, lambda h: h["UTCHMMA"] == 32)
    assert mma["histogram"]["UTCBAR"] == 6                    # 6 commits: 2 S, 2 O, K, V
    assert mma["instructions"] <= 199, mma["instructions"]    # FA4: 199 per 32 UTCHMMA
    sm = _softmax_loop(k)
    hist = sm["histogram"]
    assert sm["instructions"] <= 543, sm["instructions"]      # FA4: 543
    poly = AttentionFwdSm100Kernel.EXP2_POLY
    assert hist["MUFU"] == BLOCK_N - poly + 1
    assert hist["FFMA2"] == BLOCK_N // 2 + 4 * poly // 2 and hist.get("FFMA", 0) <= 2
    assert hist["FADD2"] == BLOCK_N // 2 - 1 + 2 * poly // 2 and hist["FMNMX3"] == BLOCK_N // 2
    assert hist["F2FP"] == BLOCK_N // 2 and "FMUL2" not in hist
    corr = _loop(k, lambda h: h["FMUL2"] >= 128 and not h["MUFU"])
    ch = corr["histogram"]
    assert ch["FMUL2"] == 2 * 128 // 2 and ch["LDTM"] == ch["STTM"] == 2 * 128 // 32
    assert corr["instructions"] <= 200, corr["instructions"]
    mufu = _softmax_loop(AttentionFwdSm100Kernel(128, "bf16", exp2_poly=0).compile())["histogram"]
    assert mufu["MUFU"] == BLOCK_N + 1 and mufu["FFMA2"] == BLOCK_N // 2 and mufu["FADD2"] == BLOCK_N // 2 - 1


# -- the CTA pair (cta_pair=True: one cta_group::2 MMA of 256 rows for two CTAs) ------------------

@pytest.mark.parametrize("dt,sq,sk,h,hk,opts", [
    ("bf16", 77, 200, 2, 2, {}),                          # one pair; its odd CTA has no row (it still feeds the MMAs)
    ("f16", 600, 333, 2, 1, {"softmax_scale": 0.3}),     # GQA, two pairs (the last CTA empty), 3 ragged KV blocks
])
def test_cta_pair_exact(dt, sq, sk, h, hk, opts, rng, sim):
    """The CTA-pair forward on the emulator (race checks on; eager and adversarial through the
    ``sim`` fixture) against float64: both CTAs' rows of S and O from the even CTA's MMAs, P read
    from each CTA's own tensor memory, K and V halves from each CTA's shared memory."""
    q, k, v = _qkv(rng, dt, (1, sq, h, 128), (1, sk, hk, 128))
    attn = Attention(AttentionConfig(head_dim=128, dtype=dt, arch="sm_100a", cta_pair=True), sim)
    launch, result = attn.prepare(q, k, v, **opts)
    try:
        assert "tcgen05.mma.cta_group::2" in launch.compiled.ptx and ".reqnctapercluster 2, 1, 1" in launch.compiled.ptx
        launch()
        o, lse = result()
    finally:
        launch.release()
    check(o, lse, q, k, v, dt, **opts)


def test_cta_pair_ptx_and_sass():
    """What the pair's code holds: every tcgen05 instruction with ``.cta_group::2`` (PTX ISA: one
    cta_group per kernel), the MMAs M = 256 (instruction descriptor bits 24-28), P V's A from
    tensor memory, every commit multicast to the pair, every TMA load completing on the even CTA's
    barrier, the softmax and correction arrivals on the even CTA's barriers (``mapa``); a cluster of
    2 along x, the grid in whole pairs. SASS (ptxas 13.5, docs/measurements.md): the MMA warp's loop
    of a KV block -- 32 UTCHMMA, 6 commits -- within FlashAttention-4's 199 instructions (its
    2-CTA kernel), the softmax loop within 543, no spills."""
    import re
    from cutedsl.problem import AttentionProblem
    kern = AttentionFwdSm100Kernel(128, "bf16", cta_pair=True)
    assert kern.cluster_ctas == 2 and kern.grid(AttentionProblem(3, 513, 9, 4, 4, 128)) == (4, 4, 3)
    assert kern.grid(AttentionProblem(1, 256, 9, 1, 1, 128)) == (2, 1, 1) and kern.config()["cta_pair"] is True
    k = kern.compile()
    ptx = k.ptx
    mmas = [line for line in ptx.splitlines() if "tcgen05.mma" in line]
    assert len(mmas) == 2 * 2 * (8 + 8) and all("tcgen05.mma.cta_group::2" in m for m in mmas)
    assert sum("], [" in m for m in mmas) == 2 * 2 * 8                           # A = P from tensor memory
    assert not re.search(r"tcgen05\.\w+\.cta_group::1", ptx)
    commits = [line for line in ptx.splitlines() if "tcgen05.commit" in line]
    assert len(commits) == 12 and all(".multicast::cluster" in c for c in commits)
    tma = re.findall(r"cp\.async\.bulk\.tensor\S*", ptx)
    assert tma and all(t.endswith(".cta_group::2") for t in tma)
    # remote arrivals: the softmax's p_full (the block loops' copies as LLVM 22 emits them: 2) and
    # the correction's o_ready (2 tiles x (block 0, later blocks))
    assert ptx.count("mbarrier.arrive.release.cluster.shared::cluster.b64") == 2 + 2 * 2
    assert "tcgen05.alloc.cta_group::2" in ptx and ".reqnctapercluster 2, 1, 1" in ptx
    from cutedsl.atom.tcgen05 import instr_descriptor
    assert instr_descriptor(256, 128, "bf16", "bf16") >> 24 & 0x1F == 256 >> 4
    assert k.resources.spill_stores == 0 and k.resources.spill_loads == 0, k.resources
    mma = _loop(k, lambda h: h["UTCHMMA"] == 32)
    assert mma["histogram"]["UTCBAR"] == 6 and mma["instructions"] <= 199, mma
    sm = _softmax_loop(k)
    assert sm["instructions"] <= 543 and sm["histogram"]["MUFU"] == BLOCK_N - AttentionFwdSm100Kernel.EXP2_POLY + 1


def test_cta_pair_config_and_refusals():
    from cutedsl.errors import ConfigTypeError
    from cutedsl.problem import AttentionProblem
    with pytest.raises(ConfigError, match=r"cta_pair=True is built for head_dim 128 \(each CTA loads half of V's "
                                          r"columns.*got 64; use cta_pair=False"):
        AttentionConfig(head_dim=64, arch="sm_100a", cta_pair=True)
    with pytest.raises(ConfigError, match=r"cta_pair=True \(a cta_group::2 MMA over two CTAs\) is built for sm_100a, "
                                          r"not sm_90a"):
        AttentionConfig(cta_pair=True)
    with pytest.raises(ConfigError, match="built for the dense non-causal forward, not with score_mod / mask_mod"):
        AttentionConfig(arch="sm_100a", cta_pair=True, mask_mod=Causal())
    with pytest.raises(ConfigTypeError, match="cta_pair must be a bool, got 1"):
        AttentionConfig(arch="sm_100a", cta_pair=1)
    cfg = AttentionConfig(arch="sm_100a", cta_pair=True)
    for variant, what in (({"local": True}, "a causal or sliding-window band"),
                          ({"varlen": True}, r"packed sequences \(varlen\)")):
        with pytest.raises(ConfigError, match=f"AttentionFwdSm100Kernel: cta_pair=True .*not with {what}; use "
                                              f"cta_pair=False"):
            cfg.kernel(**variant)
    q = np.zeros((1, 300, 1, 128), ml_dtypes.bfloat16)
    with pytest.raises(ConfigError, match="not with a causal or sliding-window band"):   # before any launch
        Attention(cfg, "sim")(q, q, q, causal=True)
    # identities: the default leaves older configs' dicts unchanged; True round-trips
    assert "cta_pair" not in AttentionConfig(arch="sm_100a").to_dict()
    assert AttentionConfig.from_dict(cfg.to_dict()) == cfg and cfg.to_dict()["cta_pair"] is True
    # for_problem: the pair for a dense non-causal head-dim-128 problem of more than 256 query rows
    def pick(sq, d=128, **kw):
        return AttentionConfig.for_problem(AttentionProblem(1, sq, 64, 2, 2, d), arch="sm_100a", **kw).cta_pair
    assert pick(257) and not pick(256) and not pick(300, d=64)
    assert not pick(300, local=True) and not pick(300, varlen=True) and not pick(300, cta_pair=False)
    assert not AttentionConfig.for_problem(AttentionProblem(1, 999, 64, 2, 2, 128)).cta_pair     # sm_90a
