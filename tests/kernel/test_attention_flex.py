"""FlexAttention-style hooks through ``AttentionConfig(score_mod=, mask_mod=)`` (issue 41): the real
kernel on the emulator (eager and adversarial, ``sim_seed``) against the float64 reference running
the same hooks on numpy, on ragged shapes; user callables and hook classes with tensor parameters,
each built-in; whole KV blocks skipped by the mask_mod's block mask (NaN planted in the skipped V
blocks leaves O finite); the block mask cache; every mistake refused by name before compiling."""
import ml_dtypes
import numpy as np
import pytest

from cutedsl import Attention, AttentionConfig
from cutedsl.collective.attention_block_mask import FULL, PARTIAL, SKIP
from cutedsl.collective.attention_hook_builtins import (Alibi, Causal, DocumentMask, SlidingWindow, Softcap,
                                                        and_masks)
from cutedsl.collective.attention_hooks import MaskMod, Param
from cutedsl.errors import ArgumentError, ArgumentTypeError, ConfigError, HookError
from cutedsl.kernel.attention import BLOCK_M, BLOCK_N

BF = ml_dtypes.bfloat16
O_TOL = 2e-2          # bf16 P and O (tests/kernel/test_attention_fwd.py)


def _qkv(rng, b, sq, sk, h=2, kvh=2, d=64, scale=1.0):
    q = (rng.standard_normal((b, sq, h, d)) * scale).astype(BF)
    k, v = (rng.standard_normal((b, sk, kvh, d)).astype(BF) for _ in range(2))
    return q, k, v


def run_and_check(attn, q, k, v, **opts):
    """The kernel's (o, lse) against ``attn.reference`` (float64, the config's hooks on numpy)."""
    o, lse = attn(q, k, v, **opts)
    ro, rl = attn.reference(q, k, v, **opts)
    empty = np.isinf(rl)
    assert np.array_equal(np.isinf(lse), empty) and np.all(lse[empty] > 0)
    assert np.all(o[np.transpose(empty, (0, 2, 1))].astype(np.float32) == 0)
    err = np.abs(o.astype(np.float64) - ro).max()
    assert err < O_TOL, err
    assert np.allclose(lse[~empty], rl[~empty], rtol=0, atol=1e-4), np.abs(lse[~empty] - rl[~empty]).max()
    return o, lse, ro, rl


def rel_bias(score, batch, head, q_idx, kv_idx):
    """A user score_mod (ALiBi-like, a per-head slope and a clamp), a plain function."""
    from cutedsl.collective.attention_hook_ops import minimum
    return score - minimum(abs(q_idx - kv_idx), 64) * (0.03 * (head + 1))


class PrefixLM(MaskMod):
    """Prefix-LM: a query sees its sequence's first ``prefix[b]`` keys, and causally after them
    (a user hook class with an i32 tensor parameter)."""

    def params(self):
        return [Param("prefix", "ptr", shape=("batch",), dtype="i32")]

    def mask_mod(self, batch, head, q_idx, kv_idx, ctx):
        return (kv_idx <= q_idx) | (kv_idx < ctx.prefix[batch])


def test_user_score_mod_callable_with_causal_band(rng, sim):
    """A plain function as score_mod, with the kernel's own causal band (bottom-right) and GQA."""
    q, k, v = _qkv(rng, 2, 150, 201, h=4, kvh=2)
    attn = Attention(AttentionConfig(head_dim=64, score_mod=rel_bias), sim)
    run_and_check(attn, q, k, v, causal=True, softmax_scale=0.3)


def test_user_mask_class_with_tensor_parameter(rng, sim):
    """PrefixLM reads ``prefix`` (batch,) i32, passed by name to the call; blocks past every
    query's prefix and diagonal are skipped, whole blocks below them run unmasked (FULL)."""
    q, k, v = _qkv(rng, 2, 300, 300)
    prefix = np.array([10, 200], np.int32)
    attn = Attention(AttentionConfig(head_dim=64, mask_mod=PrefixLM()), sim)
    run_and_check(attn, q, k, v, prefix=prefix)
    kern = attn._kernel(attn.config, local=False, softcap=False, varlen=False)
    from cutedsl.problem import AttentionProblem
    kinds = kern.block_mask(AttentionProblem(2, 300, 300, 2, 2, 64), args={"prefix": prefix}).kind
    assert kinds.shape == (2, 1, 3, 3)                      # depends on the batch, not on the head
    assert kinds[0, 0, 0, 1] == SKIP and kinds[1, 0, 0, 1] == PARTIAL    # batch 1's prefix reaches key 199
    assert kinds[0, 0, 1, 0] == FULL and kinds[0, 0, 2, 2] == PARTIAL    # the ragged last block: partial


@pytest.mark.parametrize("case", ["softcap", "alibi_causal", "alibi_batch_window", "doc_causal"])
def test_builtins(case, rng, sim):
    b, sq, sk = 2, 200, 333
    q, k, v = _qkv(rng, b, sq, sk, scale=3.0 if case == "softcap" else 1.0)
    slopes = (rng.random((2,)) * 0.1).astype(np.float32)
    cfg, args = {
        "softcap": (dict(score_mod=Softcap(2.5)), {}),
        "alibi_causal": (dict(score_mod=Alibi(), mask_mod=Causal()), {"alibi_slopes": slopes}),
        "alibi_batch_window": (dict(score_mod=Alibi(per_batch=True), mask_mod=SlidingWindow(90, 10)),
                               {"alibi_slopes": (rng.random((b, 2)) * 0.1).astype(np.float32)}),
        "doc_causal": (dict(mask_mod=and_masks(DocumentMask(), Causal("top_left"))),
                       {"doc_ids": np.sort(rng.integers(0, 4, (b, sk)), axis=1).astype(np.int32)}),
    }[case]
    attn = Attention(AttentionConfig(head_dim=64, **cfg), sim)
    _, _, ro, _ = run_and_check(attn, q, k, v, **args)
    if case == "softcap":                     # the hook is FlashAttention's softcap
        from cutedsl.device.attention_reference import attention_reference
        assert np.allclose(ro, attention_reference(q, k, v, softcap=2.5)[0], rtol=0, atol=1e-12)


def test_blocks_the_document_mask_skips_are_never_read(rng, sim):
    """Queries 0..199 are in documents 0/1, keys 200.. in document 7: KV blocks 2 and 3 are SKIP
    for every query block and their V rows hold NaN; O stays finite (0 * NaN would reach it if
    those blocks were loaded and multiplied) and equals the reference on clean V."""
    b, sq, sk = 2, 200, 3 * BLOCK_N + 17
    q, k, v = _qkv(rng, b, sq, sk)
    docs = np.full((b, sk), 7, np.int32)
    docs[:, :sq] = np.sort(rng.integers(0, 2, (b, sq)), axis=1)
    v_clean = v.copy()
    v_clean[:, 2 * BLOCK_N:] = 0
    v[:, 2 * BLOCK_N:] = np.nan
    attn = Attention(AttentionConfig(head_dim=64, mask_mod=DocumentMask()), sim)
    o, lse = attn(q, k, v, doc_ids=docs)
    assert np.isfinite(o.astype(np.float32)).all()
    ro, rl = attn.reference(q, k, v_clean, doc_ids=docs)
    assert np.abs(o.astype(np.float64) - ro).max() < O_TOL
    assert np.allclose(lse, rl, rtol=0, atol=1e-4)
    kern = attn._kernel(attn.config, local=False, softcap=False, varlen=False)
    from cutedsl.problem import AttentionProblem
    kinds = kern.block_mask(AttentionProblem(b, sq, sk, 2, 2, 64), args={"doc_ids": docs}).kind
    assert kinds.shape == (b, 1, 2, 4) and np.all(kinds[..., 2:] == SKIP)


def test_mask_mod_with_the_kernels_window_and_head_dependence(rng, sim):
    """A head-dependent user mask_mod (strides along heads) intersected with the call's own
    sliding window: blocks outside either are skipped, the band still masks element-wise."""
    def head_band(batch, head, q_idx, kv_idx):
        return abs(q_idx - kv_idx) <= 60 * (head + 1)
    q, k, v = _qkv(rng, 1, 260, 260)
    attn = Attention(AttentionConfig(head_dim=64, mask_mod=head_band), sim)
    run_and_check(attn, q, k, v, window=(100, 0))


def test_block_masks_are_cached_only_when_sound(rng, sim):
    """A mask of indices only: built once per problem shape; a mask reading a tensor: every call
    (the same shape may carry other contents), with results that follow the contents."""
    q, k, v = _qkv(rng, 1, 70, 90)
    attn = Attention(AttentionConfig(head_dim=64, mask_mod=Causal()), sim)
    for _ in range(2):
        run_and_check(attn, q, k, v)
    assert attn._block_masks.built == 1
    run_and_check(attn, q[:, :40], k, v)
    assert attn._block_masks.built == 2
    # one document: the mask keeps whole blocks, the band alone masks the ragged last one (keys
    # 256..299 of 384), which is not the first block visited: it must not run unmasked
    q, k, v = _qkv(rng, 1, 70, 300)
    attn = Attention(AttentionConfig(head_dim=64, mask_mod=DocumentMask()), sim)
    for docs in (np.zeros((1, 300), np.int32), np.repeat(np.arange(3), 100)[None].astype(np.int32)):
        run_and_check(attn, q, k, v, doc_ids=docs)
    assert attn._block_masks.built == 2


def test_hooks_are_in_the_cache_identity():
    def bias(s, b, h, q_idx, kv_idx):
        return s + 1.0

    def bias2(s, b, h, q_idx, kv_idx):
        return s + 2.0
    plain = AttentionConfig(head_dim=64)
    cfgs = [plain, AttentionConfig(head_dim=64, score_mod=bias), AttentionConfig(head_dim=64, score_mod=bias2),
            AttentionConfig(head_dim=64, mask_mod=SlidingWindow(3, 0)),
            AttentionConfig(head_dim=64, mask_mod=SlidingWindow(4, 0))]
    from cutedsl.compiler.identity import kernel_key
    keys = {kernel_key("attention", c.kernel().config())[0] for c in cfgs}
    assert len(keys) == len(cfgs)
    assert len({str(c.identity()) for c in cfgs}) == len(cfgs)
    assert "score_mod" not in plain.kernel().config()["hooks"] and plain.kernel().block_sparse is False
    assert cfgs[3].kernel().block_sparse is True
    with pytest.raises(ConfigError, match=r"from_dict: the dict holds mask_mod as code identities, not code"):
        AttentionConfig.from_dict(cfgs[3].to_dict())


# -- errors by name, before anything is compiled ------------------------------------------------

def _refused(monkeypatch, cfg, err, match, *args, sim=None, **kw):
    monkeypatch.setattr(AttentionConfig, "kernel", lambda *a, **k: pytest.fail("reached the kernel"))
    with pytest.raises(err, match=match):
        Attention(cfg, sim)(*args, **kw)


def test_call_errors_name_the_argument(rng, sim, monkeypatch):
    q, k, v = _qkv(rng, 2, 9, 11)
    alibi = AttentionConfig(head_dim=64, score_mod=Alibi(), mask_mod=DocumentMask())
    slopes, docs = np.ones(2, np.float32), np.zeros((2, 11), np.int32)
    _refused(monkeypatch, alibi, ArgumentError, r"missing hook argument 'alibi_slopes' \(f32 array of shape "
             r"\(heads,\)\) that score_mod Alibi.score_mod \(.*\) reads: pass alibi_slopes=\.\.\.", q, k, v,
             sim=sim, doc_ids=docs)
    _refused(monkeypatch, alibi, ArgumentError, r"doc_ids must have shape \(batch, seqlen_k\) = \(2, 11\) for this "
             r"problem, got \(2, 10\)", q, k, v, sim=sim, alibi_slopes=slopes, doc_ids=docs[:, :10])
    _refused(monkeypatch, alibi, ArgumentTypeError, r"alibi_slopes has dtype f64, the kernel expects f32", q, k, v,
             sim=sim, alibi_slopes=slopes.astype(np.float64), doc_ids=docs)
    _refused(monkeypatch, alibi, ArgumentError, r"unknown keyword argument\(s\) 'doc_id'; this Attention accepts "
             r"q, k, v, softmax_scale, .* and the hooks' parameters: alibi_slopes, doc_ids", q, k, v, sim=sim,
             alibi_slopes=slopes, doc_id=docs)
    _refused(monkeypatch, AttentionConfig(head_dim=64), ArgumentError, r"unknown keyword argument\(s\) 'bias'.*"
             r"none \(the config's hooks declare no parameters\)", q, k, v, sim=sim, bias=slopes)
    cu = np.array([0, 9], np.int32)
    _refused(monkeypatch, AttentionConfig(head_dim=64, mask_mod=Causal()), ArgumentError,
             r"score_mod / mask_mod with cu_seqlens_q / cu_seqlens_k \(varlen\) are not supported: .* pad the "
             r"sequences", q[0], k[0, :9], v[0, :9], sim=sim, cu_seqlens_q=cu, cu_seqlens_k=cu)


def test_config_errors_name_the_hook():
    with pytest.raises(HookError, match=r"score_mod .*<lambda> .* takes \(s, q\); a score_mod takes \(score, batch, "
                                        r"head, q_idx, kv_idx\) and optionally a last ctx"):
        AttentionConfig(head_dim=64, score_mod=lambda s, q: s)
    with pytest.raises(HookError, match=r"mask_mod Causal.mask_mod .* is a mask_mod, passed as the score_mod"):
        AttentionConfig(head_dim=64, score_mod=Causal())
    with pytest.raises(ConfigError, match=r"score_mod Alibi.score_mod .* declares parameter 'softcap', a name the "
                                          r"attention kernel or its call already uses .*: rename it"):
        AttentionConfig(head_dim=64, score_mod=Alibi(name="softcap"))
    with pytest.raises(ConfigError, match=r"declares parameter 'window'"):
        AttentionConfig(head_dim=64, mask_mod=DocumentMask(name="window"))


def test_kernel_names_cover_every_variant():
    """OWN_PARAMS (what a hook parameter may not be called) lists every name any variant declares."""
    import itertools
    from cutedsl.kernel.attention import OWN_PARAMS, AttentionFwdKernel
    for local, softcap, varlen in itertools.product((False, True), repeat=3):
        names = {p.name for p in AttentionFwdKernel(64, local=local, softcap=softcap, varlen=varlen).params()}
        assert names <= set(OWN_PARAMS), names - set(OWN_PARAMS)
    from cutedsl.collective.attention_hooks import AttentionHooks
    with pytest.raises(ConfigError, match=r"score_mod / mask_mod with packed sequences \(varlen\) are not built"):
        AttentionFwdKernel(64, varlen=True, hooks=AttentionHooks(mask_mod=Causal()))
