"""FlexAttention-style hooks (issue 41): each built-in and user callables evaluated per element in a
tiny kernel on the emulator (each thread calls ``BoundHooks.apply`` on a few (batch, head, q_idx,
kv_idx) tuples) against the same hook's numpy evaluation; the built-ins' conventions against the
float64 attention reference; the errors a hook can cause, raised while the kernel is built."""
import math

import numpy as np
import pytest

from cutedsl.collective.attention_hook_builtins import (Alibi, Causal, DocumentMask, SlidingWindow, Softcap,
                                                        and_masks)
from cutedsl.collective.attention_hook_ops import exp2, maximum, minimum, tanh, where
from cutedsl.collective.attention_hooks import DIMS, AttentionHooks, MaskMod, Param, ScoreMod
from cutedsl.device.attention_reference import attention_reference, mask as ref_mask
from cutedsl.errors import ArgumentError, ConfigError, HookError

THREADS, PER_THREAD = 32, 3
#: not multiples of any tile; q != k, so bottom-right alignment matters
PROBLEM = dict(batch=2, heads=3, seqlen_q=37, seqlen_k=45)
#: PTX ISA 9.7.3.22: tanh.approx.f32 has a maximum relative error of 2^-11
TANH_REL = 2.0 ** -11


def build(hooks, mask=True):
    """A kernel: thread t evaluates ``apply`` on tuples t, t + 32, t + 64 of ``idx`` (b, h, q, kv)
    with scores ``score``, stores to ``out``. Sizes are i32 parameters."""
    from cutedsl.compiler import compile_kernel
    from cutedsl.ir import GlobalPtr, KernelBuilder, thread_idx
    params = [Param("idx", "ptr"), Param("score", "ptr"), Param("out", "ptr")] + \
        [Param(d, "i32") for d in DIMS] + hooks.kernel_params()
    kb = KernelBuilder("hooks_test", params, block=(THREADS,))
    with kb.build() as a:
        bound = hooks.bind(a, {d: getattr(a, d) for d in DIMS})
        idx, sc, out = GlobalPtr(a.idx, "i32"), GlobalPtr(a.score, "f32"), GlobalPtr(a.out, "f32")
        for k in range(PER_THREAD):
            e = thread_idx() + k * THREADS
            b, h, q, kv = (idx.load(e * 4 + j) for j in range(4))
            out.store(e, bound.apply(sc.load(e), b, h, q, kv, mask=mask))
    return compile_kernel(kb)


def tuples(rng, pad=8):
    """(b, h, q, kv) per element: random inside the problem, and ``pad`` padding tuples past
    seqlen_q / seqlen_k (a partial tile's) at the end."""
    n = THREADS * PER_THREAD
    p = PROBLEM
    t = np.stack([rng.integers(0, p["batch"], n), rng.integers(0, p["heads"], n),
                  rng.integers(0, p["seqlen_q"], n), rng.integers(0, p["seqlen_k"], n)], 1)
    t[n - pad:, 2] += p["seqlen_q"]
    t[n - pad // 2:, 3] += p["seqlen_k"]
    return t.astype(np.int32), n - pad


def run(hooks, rng, sim, args=None, mask=True, scores=None):
    """``(kernel result, numpy result)`` on the tuples inside the problem (padding is run, not compared)."""
    from cutedsl.runtime import arrays, launch
    args = dict(args or {})
    t, valid = tuples(rng)
    s = (rng.standard_normal(len(t)) * 8).astype(np.float32) if scores is None else scores
    out = arrays.to_device(sim, np.zeros(len(t), np.float32))
    launch(build(hooks, mask), (1, 1, 1), idx=t, score=s, out=out, backend=sim, **PROBLEM, **args)
    got = arrays.to_host(out)[:valid]
    sm, mm = hooks.reference_mods(args, PROBLEM)
    ref = []
    for i in range(valid):
        b, h, q, kv = (int(x) for x in t[i])
        v = float(s[i]) if sm is None else float(sm(np.float64(s[i]), b, h, np.int64(q), np.int64(kv)))
        if mask and mm is not None and not mm(b, h, np.int64(q), np.int64(kv)):
            v = -math.inf
        ref.append(v)
    return got, np.array(ref), t[:valid], s[:valid]


def assert_mask_exact(got, ref, s):
    """A mask keeps the score bit for bit and drops to -inf exactly where numpy says."""
    kept = np.isfinite(ref)
    assert np.array_equal(np.isneginf(got), ~kept)
    assert np.array_equal(got[kept], s[kept])
    assert 0 < kept.sum() < len(ref), "the sample should have kept and dropped pairs"


@pytest.mark.parametrize("mask", [Causal(), Causal("top_left"), SlidingWindow(5, 3), SlidingWindow(6, 0),
                                  SlidingWindow(-1, 2)], ids=repr)
def test_index_masks_exact(mask, rng, sim):
    got, ref, t, s = run(AttentionHooks(mask_mod=mask), rng, sim)
    assert_mask_exact(got, ref, s)


def test_document_mask_self_and_cross(rng, sim):
    b, sq, sk = PROBLEM["batch"], PROBLEM["seqlen_q"], PROBLEM["seqlen_k"]
    docs = np.sort(rng.integers(0, 3, (b, sk)), axis=1).astype(np.int32)
    got, ref, t, s = run(AttentionHooks(mask_mod=DocumentMask()), rng, sim, {"doc_ids": docs})
    assert_mask_exact(got, ref, s)
    bb, q, kv = t[:, 0], t[:, 2], t[:, 3]
    assert np.array_equal(np.isfinite(ref), docs[bb, q] == docs[bb, kv])     # the numpy side itself
    qdocs = np.sort(rng.integers(0, 3, (b, sq)), axis=1).astype(np.int32)
    got, ref, t, s = run(AttentionHooks(mask_mod=DocumentMask(q_name="q_doc_ids")), rng, sim,
                         {"doc_ids": docs, "q_doc_ids": qdocs})
    assert_mask_exact(got, ref, s)
    assert np.array_equal(np.isfinite(ref), qdocs[t[:, 0], t[:, 2]] == docs[t[:, 0], t[:, 3]])


@pytest.mark.parametrize("per_batch", [False, True])
def test_alibi(per_batch, rng, sim):
    shape = (PROBLEM["batch"], PROBLEM["heads"]) if per_batch else (PROBLEM["heads"],)
    slopes = rng.random(shape).astype(np.float32)
    got, ref, t, s = run(AttentionHooks(Alibi(per_batch=per_batch)), rng, sim, {"alibi_slopes": slopes})
    b, h, q, kv = t.T.astype(np.int64)
    slope = slopes[b, h] if per_batch else slopes[h]
    want = s - slope.astype(np.float64) * np.abs(q + PROBLEM["seqlen_k"] - PROBLEM["seqlen_q"] - kv)
    assert np.allclose(ref, want, rtol=0, atol=1e-12)
    # f32: a product and a difference, each rounded once
    assert np.all(np.abs(got - ref) <= 2 * np.finfo(np.float32).eps * (np.abs(s) + np.abs(ref - s)) + 1e-30)


def test_softcap_within_tanh_approx_accuracy(rng, sim):
    scores = np.concatenate([rng.standard_normal(64) * 60, np.array([0.0, -0.0, 1e-3, 500.0, -500.0] +
                                                                     [30.0] * 27)]).astype(np.float32)
    got, ref, t, s = run(AttentionHooks(Softcap(30.0)), rng, sim, scores=scores)
    assert np.allclose(ref, 30.0 * np.tanh(s.astype(np.float64) / 30.0), rtol=1e-15)
    # tanh.approx's 2^-11 relative error, scaled by softcap, plus the f32 roundings of the scaling
    assert np.all(np.abs(got - ref) <= np.abs(ref) * (TANH_REL + 4 * np.finfo(np.float32).eps))
    assert np.all(np.abs(got) <= 30.0)


def rel_bias(score, batch, head, q_idx, kv_idx):
    """A user score_mod: every supported operation once (floor // and % on negative values)."""
    d = q_idx - kv_idx
    bucket = d // 4 + d % 3 - abs(d) // 7                  # Python floor semantics on negatives
    capped = minimum(maximum(score, -20.0), 20.0)
    return where((bucket > 0) | ~(head == 1), capped + bucket * 0.25, capped * 0.5 - exp2(-abs(d) / 8)) \
        + (batch - head) / 4 + tanh(score / 16) * 0


def test_user_score_mod_callable(rng, sim):
    got, ref, t, s = run(AttentionHooks(rel_bias), rng, sim)
    q, kv = t[:, 2].astype(np.int64), t[:, 3].astype(np.int64)
    assert np.any((q - kv) < 0) and np.any((q - kv) % 3 != 0)   # negative operands of // and % ran
    # exp2.approx (2^-22 relative) + a handful of f32 roundings, on values of magnitude <= ~30
    assert np.allclose(got, ref, rtol=1e-6, atol=2e-6), np.max(np.abs(got - ref))


def test_user_mask_callable_and_combination(rng, sim):
    def stripes(batch, head, q_idx, kv_idx):
        return ((q_idx // 8) % 2 == (kv_idx // 8) % 2) | (abs(q_idx - kv_idx) < head + 2)
    hooks = AttentionHooks(mask_mod=and_masks(stripes, Causal()))
    got, ref, t, s = run(hooks, rng, sim)
    assert_mask_exact(got, ref, s)
    b, h, q, kv = t.T.astype(np.int64)
    want = (((q // 8) % 2 == (kv // 8) % 2) | (np.abs(q - kv) < h + 2)) & (kv <= q + 8)
    assert np.array_equal(np.isfinite(ref), want)


def test_score_and_mask_together_and_mask_off(rng, sim):
    """apply: score_mod first, then -inf where masked; mask=False (a FULL block) skips the mask."""
    hooks = AttentionHooks(Softcap(20.0), SlidingWindow(4, 4))
    got, ref, t, s = run(hooks, rng, sim)
    kept = np.isfinite(ref)
    assert np.array_equal(np.isneginf(got), ~kept) and 0 < kept.sum() < len(ref)
    assert np.all(np.abs(got[kept] - ref[kept]) <= np.abs(ref[kept]) * (TANH_REL + 4 * np.finfo(np.float32).eps))
    off, _, _, _ = run(hooks, rng, sim, mask=False)
    assert np.all(np.isfinite(off))


def test_subclass_with_scalar_and_tensor_params(rng, sim):
    class HeadScale(ScoreMod):
        def params(self):
            return [Param("temp", "f32"), Param("head_scale", "ptr", shape=("heads",), dtype="f16")]

        def score_mod(self, score, batch, head, q_idx, kv_idx, ctx):
            return score * ctx.head_scale[head] * ctx.temp + ctx.seqlen_k

    hs = np.array([0.5, 2.0, -1.25], np.float16)
    got, ref, t, s = run(AttentionHooks(HeadScale()), rng, sim, {"temp": 0.75, "head_scale": hs})
    assert np.allclose(ref, s * hs[t[:, 1]].astype(np.float64) * 0.75 + 45)
    assert np.allclose(got, ref, rtol=4e-7, atol=4e-6)


def test_a_hook_class_reference_serves_the_host(rng, sim):
    """A class's own numpy ``reference`` is what the float64 side runs; the kernel runs ``mask_mod``."""
    calls = []

    class EveryFourth(MaskMod):
        def mask_mod(self, batch, head, q_idx, kv_idx):
            return (kv_idx % 4 == 0) | (q_idx == kv_idx)

        def reference(self, batch, head, q_idx, kv_idx, ctx):
            calls.append(1)
            return (np.mod(kv_idx, 4) == 0) | (q_idx == kv_idx)

    got, ref, t, s = run(AttentionHooks(mask_mod=EveryFourth()), rng, sim)
    assert_mask_exact(got, ref, s)
    assert len(calls) == len(ref)


@pytest.mark.parametrize("mask,causal,window", [(Causal(), True, None), (SlidingWindow(7, 2), False, (7, 2)),
                                                (SlidingWindow(-1, 0), True, None)])
def test_builtin_masks_follow_flash_attention_conventions(mask, causal, window, rng):
    """Causal / window as mask_mods agree with the reference's own causal / window_size (bottom-right)."""
    b, sq, sk, h, d = 1, 11, 19, 2, 8
    q, k, v = (rng.standard_normal((b, n, h, d)) for n in (sq, sk, sk))
    _, mm = AttentionHooks(mask_mod=mask).reference_mods({}, dict(batch=b, heads=h, seqlen_q=sq, seqlen_k=sk))
    assert np.array_equal(mm(0, 0, np.arange(sq)[:, None], np.arange(sk)[None, :]),
                          ref_mask(sq, sk, causal, window))
    o1, l1 = attention_reference(q, k, v, mask_mod=mm)
    o2, l2 = attention_reference(q, k, v, causal=causal, window=window)
    assert np.allclose(o1, o2, rtol=0, atol=1e-12) and np.allclose(l1, l2, rtol=0, atol=1e-12)


def test_softcap_and_alibi_follow_flash_attention_conventions(rng):
    b, sq, sk, h, d = 2, 9, 13, 2, 8
    q, k, v = (rng.standard_normal((b, n, h, d)) * 3 for n in (sq, sk, sk))
    prob = dict(batch=b, heads=h, seqlen_q=sq, seqlen_k=sk)
    sm, _ = AttentionHooks(Softcap(5.0)).reference_mods({}, prob)
    assert np.allclose(attention_reference(q, k, v, score_mod=sm)[0], attention_reference(q, k, v, softcap=5.0)[0])
    slopes = np.array([0.5, 0.125], np.float32)
    sm, _ = AttentionHooks(Alibi()).reference_mods({"alibi_slopes": slopes}, prob)
    s = sm(np.zeros((sq, sk)), 1, 1, np.arange(sq)[:, None], np.arange(sk)[None, :])
    i, j = np.arange(sq)[:, None] + sk - sq, np.arange(sk)[None, :]
    assert np.array_equal(s, -0.125 * np.abs(i - j))       # flash_attn's alibi bias, bottom-right


# -- errors ------------------------------------------------------------------------------------

def _build_err(hooks, match):
    with pytest.raises(HookError, match=match) as e:
        build(hooks)
    return str(e.value)


def test_wrong_return_types_are_named_with_the_fix():
    def as_pred(score, batch, head, q_idx, kv_idx):
        return score > 0
    msg = _build_err(AttentionHooks(as_pred), r"score_mod .*as_pred \(.*test_attention_hooks.py:\d+\) returned i1 "
                                              r"\(a predicate\): to mask, use a mask_mod or where")
    assert "returns the f32 score" in msg

    def as_score(batch, head, q_idx, kv_idx):
        return (q_idx - kv_idx) * 1.5
    _build_err(AttentionHooks(mask_mod=as_score), r"mask_mod .*as_score .* returned f32: a mask_mod returns "
                                                  r"a predicate")

    def forgot(batch, head, q_idx, kv_idx):
        q_idx >= kv_idx
    _build_err(AttentionHooks(mask_mod=forgot), r"returned NoneType: a mask_mod returns a predicate")
    with pytest.raises(HookError, match=r"as_pred .* returned a predicate"):     # the host side too
        AttentionHooks(as_pred).reference_mods({}, PROBLEM)[0](np.zeros(3), 0, 0, np.arange(3), np.arange(3))


@pytest.mark.parametrize("body,match", [
    (lambda s, b, h, q, k: s ** 2, r"\*\* is not supported in a hook: write x \* x"),
    (lambda s, b, h, q, k: math.tanh(s), r"math\.\* and float\(\) cannot take it -- use exp2\(\) / tanh\(\)"),
    (lambda s, b, h, q, k: np.tanh(s), r"numpy's tanh cannot take an IR value"),
    (lambda s, b, h, q, k: s if q > k else -s, r"Python `if`, `and`, `or`, `not`, min\(\) and max\(\) need one "
                                               r"-- use where\(pred, a, b\)"),
    (lambda s, b, h, q, k: max(s, 0.0), r"need one -- use where"),
    (lambda s, b, h, q, k: s // 2.0, r"// is defined on integers only"),
    (lambda s, b, h, q, k: s + "x", r"cannot be combined with str"),
])
def test_unsupported_operations_name_the_hook_and_the_alternatives(body, match):
    msg = _build_err(AttentionHooks(body), match)
    assert msg.startswith("score_mod ") and "<lambda>" in msg and "while the kernel was built" in msg
    assert "where(pred, a, b), minimum, maximum, exp2, tanh" in msg


def test_wrong_signatures_fail_on_construction():
    with pytest.raises(HookError, match=r"score_mod .*two_args .* takes \(score, q\); a score_mod takes "
                                        r"\(score, batch, head, q_idx, kv_idx\) and optionally a last ctx"):
        def two_args(score, q):
            return score
        AttentionHooks(two_args)
    with pytest.raises(HookError, match=r"mask_mod .* takes \(b, h, q, k, ctx, extra\)"):
        AttentionHooks(mask_mod=lambda b, h, q, k, ctx, extra: q >= k)
    with pytest.raises(HookError, match=r"mask_mod Causal is a class: pass an instance, Causal\(...\)"):
        AttentionHooks(mask_mod=Causal)
    with pytest.raises(HookError, match=r"mask_mod Causal.mask_mod .* is a mask_mod, passed as the score_mod"):
        AttentionHooks(Causal())
    with pytest.raises(HookError, match=r"score_mod must be a callable or a ScoreMod instance, got int"):
        AttentionHooks(3)

    class NoMethod(ScoreMod):
        pass
    with pytest.raises(HookError, match=r"NoMethod is a score_mod class without a score_mod method: define "
                                        r"score_mod\(self, score, batch, head, q_idx, kv_idx\[, ctx\]\)"):
        AttentionHooks(NoMethod())


def test_parameter_declarations_are_checked():
    class Bad(MaskMod):
        def __init__(self, p):
            self.p = p

        def params(self):
            return [self.p]

        def mask_mod(self, b, h, q, k):
            return q >= k
    with pytest.raises(ConfigError, match=r"declares parameter 'seqlen_k', already a problem size: rename it"):
        AttentionHooks(mask_mod=Bad(Param("seqlen_k", "i32")))
    with pytest.raises(ConfigError, match=r"parameter 'slopes', already declared by score_mod Alibi"):
        AttentionHooks(Alibi(name="slopes"), Bad(Param("slopes", "f32")))
    with pytest.raises(ConfigError, match=r"tensor 'x' needs dtype in f32, f16, bf16, i32 and a shape of ints or "
                                          r"batch, heads, seqlen_q, seqlen_k, got i32, \('m',\)"):
        AttentionHooks(mask_mod=Bad(Param("x", "ptr", shape=("m",), dtype="i32")))
    hooks = AttentionHooks(mask_mod=DocumentMask())
    with pytest.raises(ArgumentError, match=r"the attention hooks read 'doc_ids': pass it"):
        hooks.reference_mods({}, PROBLEM)
    with pytest.raises(ArgumentError, match=r"doc_ids must have shape \('batch', 'seqlen_k'\) = \(2, 45\), "
                                            r"got \(2, 44\)"):
        hooks.reference_mods({"doc_ids": np.zeros((2, 44), np.int32)}, PROBLEM)
    with pytest.raises(ConfigError, match=r"Softcap needs softcap > 0"):
        Softcap(0.0)
    with pytest.raises(ConfigError, match=r"SlidingWindow\(-1, -1\) keeps everything"):
        SlidingWindow()


def test_missing_ctx_name_lists_what_ctx_holds():
    class Reads(ScoreMod):
        def score_mod(self, score, b, h, q, k, ctx):
            return score * ctx.temperature
    _build_err(AttentionHooks(Reads()), r"ctx has no 'temperature': it holds batch, heads, seqlen_k, seqlen_q; "
                                        r"declare a parameter in the hook's params\(\)")


def test_scalar_abs_floor_ops_and_tanh_approx_on_the_emulator(sim):
    """The IR pieces under the hooks: ``abs`` (i32, wrapping at INT_MIN like ``abs.s32``; f32, -0
    -> +0, NaN stays NaN), ``//`` and ``%`` with Python's signs, ``tanh.approx.f32`` within 2^-11."""
    from cutedsl.compiler import compile_kernel
    from cutedsl.ir import GlobalPtr, KernelBuilder, thread_idx
    from cutedsl.ir.fmath import tanh_approx
    from cutedsl.runtime import arrays, launch
    ints = np.array([-2 ** 31, -7, -6, -1, 0, 1, 5, 2 ** 31 - 1], np.int32)
    divs = np.array([3, -3, 4, -4, 7, -7, 2, -2], np.int32)
    flts = np.array([-0.0, 0.0, -1.5, np.nan, -np.inf, 3e-3, -20.0, 0.5], np.float32)
    kb = KernelBuilder("scalar_ops", [Param(n, "ptr") for n in ("i", "d", "f", "oi", "of")], block=(8,))
    with kb.build() as a:
        t = thread_idx()
        x, d, y = GlobalPtr(a.i, "i32").load(t), GlobalPtr(a.d, "i32").load(t), GlobalPtr(a.f, "f32").load(t)
        oi, of = GlobalPtr(a.oi, "i32"), GlobalPtr(a.of, "f32")
        for k, v in enumerate((abs(x), x // d, x % d)):
            oi.store(t * 3 + k, v)
        of.store(t * 2, abs(y))
        of.store(t * 2 + 1, tanh_approx(y))
    oi, of = (arrays.to_device(sim, np.zeros(n, dt)) for n, dt in ((24, np.int32), (16, np.float32)))
    launch(compile_kernel(kb), (1, 1, 1), i=ints, d=divs, f=flts, oi=oi, of=of, backend=sim)
    gi, gf = arrays.to_host(oi).reshape(8, 3), arrays.to_host(of).reshape(8, 2)
    i64, d64 = ints.astype(np.int64), divs.astype(np.int64)
    assert list(gi[:, 0]) == [-2 ** 31] + [abs(int(v)) for v in ints[1:]]
    assert list(gi[:, 1]) == list(((i64 // d64 + 2 ** 31) % 2 ** 32 - 2 ** 31).astype(np.int32))
    assert list(gi[:, 2]) == list(i64 % d64)
    assert np.array_equal(gf[:, 0], np.abs(flts), equal_nan=True) and not np.signbit(gf[0, 0])
    want = np.tanh(flts.astype(np.float64))
    fin = ~np.isnan(want)
    assert np.all(np.abs(gf[fin, 1] - want[fin]) <= TANH_REL * np.abs(want[fin])) and np.isnan(gf[3, 1])
