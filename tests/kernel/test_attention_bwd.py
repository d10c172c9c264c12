"""The FlashAttention-3-style attention backward (cutedsl/kernel/attention_bwd.py with its pre- and
postprocessing kernels, through cutedsl.AttentionBackward) on the emulator against the float64
reference (attention_backward_reference): ragged lengths that are no tile multiples, seqlen_q !=
seqlen_k, causal (rows with no key), windows, GQA/MQA, varlen with 0-length sequences, both head
dimensions and dtypes; deterministic mode bit-identical across runs and adversarial seeds; the
block ranges on the host; the SASS of the main loop; errors before launch.

O and LSE come from the float64 forward reference (O rounded to the input type, LSE to f32), so a
failure here is the backward's own."""
import itertools

import ml_dtypes
import numpy as np
import pytest

from cutedsl import AttentionBackward, AttentionConfig
from cutedsl.collective.attention_bwd_mainloop import AttentionBwdMainloop
from cutedsl.collective.attention_bwd_operands import AttentionBwdOperands
from cutedsl.device.attention_reference import attention_backward_reference, attention_reference, mask as ref_mask
from cutedsl.errors import ArgumentError, ArgumentTypeError
from cutedsl.kernel.attention_bwd import BLOCK_M, BLOCK_N

NP = {"bf16": ml_dtypes.bfloat16, "f16": np.float16}
#: P and dS are rounded to 16 bits before their GEMMs (bf16: 2^-8 relative), dQ/dK/dV once more
TOL = {"bf16": 1.5e-2, "f16": 4e-3}


def _inputs(rng, dt, q_shape, kv_shape, **opts):
    q, k, v = (rng.standard_normal(s).astype(NP[dt]) for s in (q_shape, kv_shape, kv_shape))
    do = rng.standard_normal(q_shape).astype(NP[dt])
    o, lse = attention_reference(q, k, v, **opts)
    return do, q, k, v, o.astype(NP[dt]), lse.astype(np.float32)


def check(grads, do, q, k, v, dt, **opts):
    ref = attention_backward_reference(do, q, k, v, **opts)
    for name, got, want, like in zip(("dq", "dk", "dv"), grads, ref, (q, k, v)):
        assert got.dtype == like.dtype and got.shape == like.shape, name
        err = np.abs(got.astype(np.float64) - want).max()
        assert err <= TOL[dt] * max(1.0, np.abs(want).max()), (name, err)
    return ref


@pytest.mark.parametrize("d,dt,sq,sk,heads,kv_heads,opts", [
    (64, "bf16", 77, 200, 2, 2, {}),
    (64, "f16", 200, 77, 2, 1, {"causal": True}),                   # rows 0..122 see no key: dq = 0
    (128, "bf16", 1, 1, 1, 1, {}),
    (64, "bf16", 130, 100, 4, 2, {"window": (30, 5), "softmax_scale": 0.2}),
    (128, "f16", 77, 130, 2, 1, {"causal": True}),                  # MQA, seqlen_k > seqlen_q
    (128, "bf16", 70, 150, 2, 2, {"window": (20, 40)}),             # band across both MMA warpgroups' keys
])
def test_dense(d, dt, sq, sk, heads, kv_heads, opts, rng, sim):
    do, q, k, v, o, lse = _inputs(rng, dt, (1, sq, heads, d), (1, sk, kv_heads, d), **opts)
    grads = AttentionBackward(AttentionConfig(head_dim=d, dtype=dt), sim)(do, q, k, v, o, lse, **opts)
    ref = check(grads, do, q, k, v, dt, **opts)
    if opts.get("causal") and sq > sk:
        assert np.all(grads[0][:, :sq - sk] == 0) and np.all(ref[0][:, :sq - sk] == 0)


@pytest.mark.parametrize("d,causal", [(64, False), (64, True), (128, True)])    # 128: two MMA warpgroups
def test_varlen_with_empty_sequences(d, causal, rng, sim):
    lens_q, lens_k = [1, 0, 77, 70], [5, 3, 0, 100]                 # 0-length queries, 0-length keys
    cq = np.concatenate([[0], np.cumsum(lens_q)]).astype(np.int32)
    ck = np.concatenate([[0], np.cumsum(lens_k)]).astype(np.int32)
    opts = dict(cu_seqlens_q=cq, cu_seqlens_k=ck, causal=causal)
    do, q, k, v, o, lse = _inputs(rng, "bf16", (cq[-1], 2, d), (ck[-1], 1, d), **opts)
    grads = AttentionBackward(AttentionConfig(head_dim=d), sim)(do, q, k, v, o, lse, **opts)
    check(grads, do, q, k, v, "bf16", **opts)
    dk, dv = grads[1], grads[2]
    assert np.all(dk[ck[1]:ck[2]] == 0) and np.all(dv[ck[1]:ck[2]] == 0)   # keys whose queries are empty
    assert np.all(grads[0][cq[2]:cq[3]] == 0)                           # queries with no keys


@pytest.mark.sim_kernel
@pytest.mark.parametrize("d,sk", [(64, 200), (128, 300)])
def test_deterministic_bit_identical(d, sk, rng, sim, monkeypatch):
    """dQ sums over up to 4 KV blocks (64 keys; 3 of 128 keys, two MMA warpgroups, at head dim 128)
    per query block: the semaphore order makes every launch, eager or under adversarial
    interleavings (seeds set here, beside the test's own sim_seed), produce the same bits; and the
    result is the right one."""
    from cutedsl.testing.seeds import CHAOS_ENV
    opts = dict(causal=True)
    do, q, k, v, o, lse = _inputs(rng, "bf16", (1, 100, 1, d), (1, sk, 1, d), **opts)
    bw = AttentionBackward(AttentionConfig(head_dim=d), sim, deterministic=True)
    first = bw(do, q, k, v, o, lse, **opts)
    check(first, do, q, k, v, "bf16", **opts)
    for seed in ("11", "12"):
        monkeypatch.setenv(CHAOS_ENV, seed)
        again = bw(do, q, k, v, o, lse, **opts)
        for a, b in zip(first, again):
            assert a.tobytes() == b.tobytes()


def _host_cases():
    shapes = [(1, 1), (77, 300), (300, 77), (128, 128), (200, 130), (129, 513)]
    windows = [None, (-1, 0), (0, 0), (40, 7), (-1, 20), (3, -1)]
    yield from itertools.product(shapes, windows)


@pytest.mark.parametrize("block_n", [BLOCK_N, 2 * BLOCK_N])          # one or two MMA warpgroups
def test_query_block_ranges_on_the_host(block_n):
    """For every KV block: each kept (query, key) pair lies in a visited query block, the blocks
    run unmasked hold only kept pairs (a ragged KV block is masked everywhere), and the visiting
    sets agree with the forward's ranges, so the deterministic rank n - n_min(m) counts 0, 1, ..
    in launch order (a mismatch would hang the semaphore wait)."""
    for (sq, sk), w in _host_cases():
        local = w is not None
        left, right = w if w else (-1, -1)
        far = sq + sk
        lr = (far if left < 0 else left, far if right < 0 else right)
        ml = AttentionBwdMainloop(AttentionBwdOperands(128, BLOCK_M, block_n, 2, "bf16", False, 4), local, True)
        keep = ref_mask(sq, sk, window=w)
        visits = {}
        for n in range(-(-sk // block_n)):
            r = ml.query_blocks(n * block_n, sq, sk, *lr)
            assert r.n_min <= r.u_lo <= r.u_hi <= r.n_max
            cols = keep[:, n * block_n:(n + 1) * block_n]
            rows = np.flatnonzero(cols.any(axis=1))
            if rows.size:
                assert r.n_min * BLOCK_M <= rows.min() and rows.max() < r.n_max * BLOCK_M, (sq, sk, w, n)
            for m in range(r.u_lo, r.u_hi):
                blk = np.zeros((BLOCK_M, block_n), bool)
                part = cols[m * BLOCK_M:(m + 1) * BLOCK_M]
                blk[:part.shape[0], :part.shape[1]] = part
                assert blk.all(), (sq, sk, w, n, m)
            for m in range(r.n_min, r.n_max):
                visits.setdefault(m, []).append(n)
        for m, ns in visits.items():
            ranks = [ml.rank(n, m, sq, sk, *lr) for n in ns]
            assert ranks == list(range(len(ns))), (sq, sk, w, m, ns, ranks)


def test_sass_main_loop():
    """ptxas' code for bf16, head dim 128 (docs/measurements.md): a 128-key CTA, 384 threads (two MMA
    warpgroups of 64 keys, as FA3/FA4's flash_bwd_sm90), setmaxnreg 24 / 240, WGMMAs not serialized
    (no C7511), and per 64 x 64 (query, key) block of a warpgroup's unmasked loop 32 HGMMA (S^T, dP^T:
    8 each; dV, dK: 4 each; its dQ chunk over 128 keys: 8), 32 MUFU.EX2 (P), 4 STSM (dS), LSE and D
    from shared memory (16 LDS.64, the producer's bulk copy; no LDG, no FSEL); its dQ chunk leaves
    through 8 STS.128 (fragment order) handed by named barriers to the dQ writer warp, whose one
    UBLKRED (cp.reduce.async.bulk per 64 x 128 block) is outside the MMA loop; each k-step's WGMMA
    descriptor one UIADD3.64 from one anchored origin (no UMOV of the constant high word per HGMMA):
    321 instructions (FA4: ~370 per 64 x 64; 386 before the 64-bit descriptors and the writer warp,
    327 before the anchor). One MMA warpgroup at 128: 321, 16 STS.128. Head dim 64 (one
    warpgroup): 279. Deterministic: 321 too, no R2UR (the semaphore spin lives in the writer warp;
    in the loop it cost 49 R2UR, 450). No variant spills (the element mask as per-row keep bits:
    local spilled 56 bytes, reloading 5 values per masked block); the masked loops: 415, local
    374 / 421 (537, 539 / 595 with a compare per element)."""
    import collections
    from cutedsl.compiler.sass_loops import hot_loop, loops
    from cutedsl.compiler.toolchain import sass
    from cutedsl.kernel.attention_bwd import AttentionBwdKernel

    def loop(d=128, **kw):
        ck = AttentionBwdKernel(d, "bf16", **kw).compile()
        text = sass(ck.cubin)
        assert (ck.resources.spill_stores, ck.resources.spill_loads) == (0, 0), (d, kw, ck.resources)
        return ck, text, collections.Counter(hot_loop(text)["histogram"])

    def masked(text):          # the other loops of one block's HGMMAs (masked; past 2x: out-of-line retry paths)
        steps = [len(ops) for _, _, ops in loops(text) if ops.count("HGMMA") == h["HGMMA"]]
        return [n for n in steps[1:] if n < 2 * steps[0]]
    ck, text, h = loop()
    assert ck.block == (384, 1, 1) and not any("C7511" in m for m in ck.resources.ptxas_messages), ck.resources
    regs = [ln.split()[-2].rstrip(";") for ln in text.splitlines() if "USETMAXREG" in ln]
    assert sorted(int(r, 16) for r in regs) == [24, 240], regs
    assert (h["HGMMA"], h["MUFU"], h["STSM"], h["LDS"], h["LDG"], h["FSEL"], h["STS"], h["UBLKRED"], h["REDG"]) == \
        (32, 32, 4, 16, 0, 0, 8, 0, 0), h
    assert text.count("UBLKRED") == 1                              # the writer warp's, out of the MMA loop
    # the per-k-step descriptors are formed in the loop (uniform registers), not hoisted and spilled
    assert (h["LDL"], h["STL"], h["R2UR"]) == (0, 0, 0), h
    assert sum(h.values()) <= 321, sum(h.values())                 # 32-bit descriptors, dQ sent in the loop: 386
    assert len(masked(text)) == 1 and masked(text)[0] <= 415, masked(text)     # ragged KV blocks: 537
    ops = [ln.split()[1] for ln in text.splitlines() if len(ln.split()) > 1]
    assert {op for op in ops if op.startswith("STS.")} == {"STS.128"}       # dQ: 16-byte stores only
    assert {op for op in ops if op.startswith("LDS")} == {"LDS.64"}        # LSE, D: one column pair each
    assert "REDG" not in text
    ck, _, h = loop(mma_warpgroups=1)
    assert (ck.block, h["STS"], h["UBLKRED"]) == ((256, 1, 1), 16, 0), h
    assert sum(h.values()) <= 321, sum(h.values())
    ck, _, h = loop(64)
    assert (h["STS"], h["UBLKRED"], h["REDG"]) == (8, 0, 0), h
    assert sum(h.values()) <= 279, sum(h.values())                 # LSE and D by LDG: 477
    for kw, count, most in (({"deterministic": True}, 321, [415]), ({"local": True}, 367, [374, 421]),
                            ({"varlen": True}, 321, [415])):
        ck, text, h = loop(**kw)
        got = masked(text)
        assert sum(h.values()) <= count and len(got) == len(most) and all(map(int.__le__, got, most)), \
            (kw, sum(h.values()), got)
        assert (h["LDL"], h["STL"], h["R2UR"]) == (0, 0, 0), (kw, h)


def test_mma_warpgroups_refused():
    from cutedsl.errors import ConfigError
    from cutedsl.kernel.attention_bwd import AttentionBwdKernel
    with pytest.raises(ConfigError, match="mma_warpgroups must be 1 or 2 .* got 2 at head_dim 64"):
        AttentionBwdKernel(64, mma_warpgroups=2)
    with pytest.raises(ConfigError, match="got 3 at head_dim 128"):
        AttentionBwdKernel(128, mma_warpgroups=3)


def _bad_calls(rng):
    d = 64
    do, q, k, v, o, lse = _inputs(rng, "bf16", (1, 10, 2, d), (1, 12, 2, d))
    yield (do[:, :9], q, k, v, o, lse), {}, ArgumentError, "dout must have o's shape"
    yield (do, q, k, v, o.astype(np.float16), lse), {}, ArgumentTypeError, "out must have q's dtype bf16"
    yield (do, q, k, v, o, lse.astype(np.float64)), {}, ArgumentTypeError, "softmax_lse must be float32"
    yield (do, q, k, v, o, lse[:, :1]), {}, ArgumentError, r"softmax_lse must be \(batch, heads, seqlen_q\)"
    yield (do, q, k, v, o, lse), {"softcap": 2.0}, ArgumentError, "softcap: the attention backward does not"
    big = [x.astype(NP["bf16"]).repeat(4, axis=-1) for x in (do, q, k, v, o)]
    yield (*big, lse), {}, ArgumentError, "head_dim must be 64 or 128 for the attention backward, got 256: dK and dV"
    yield (do, q, k, v, o, lse), {"causal": True, "window": (3, 2)}, ArgumentError, "causal=True keeps keys"


def test_errors_before_launch(rng):
    """Bad arguments are refused by name before anything is compiled: the backend is a sentinel
    that fails any use."""
    class NoLaunch:
        name = "nolaunch"

        def __getattr__(self, item):
            raise AssertionError(f"backend used ({item}) before the arguments were checked")
    bw = AttentionBackward(AttentionConfig(head_dim=64), backend="sim")
    bw._backend = NoLaunch()
    for args, kw, err, msg in _bad_calls(rng):
        with pytest.raises(err, match=msg):
            bw(*args, **kw)
    with pytest.raises(ArgumentTypeError, match="deterministic must be a bool"):
        AttentionBackward(deterministic="yes")
