"""The float64 reference of attention, FlashAttention's semantics: what ``--check``, the bench
and the tests compare a kernel's O and LSE with.

``S = Q K^T * softmax_scale`` (with ``softcap``: ``softcap * tanh(S / softcap)``), then
``score_mod``; masked entries (causal / sliding window aligned bottom-right when ``seqlen_q !=
seqlen_k``, a ``mask_mod``, keys past a sequence's end) are ``-inf``; ``P = softmax(S)`` row by
row; ``O = P V``; ``LSE = log(sum(exp(S)))`` (natural log, of the scaled scores). A row whose
every key is masked has ``O = 0`` and ``LSE = +inf`` (FlashAttention's convention, so that a
backward pass's ``exp(S - LSE)`` is 0 there).

The backward (:func:`attention_backward_reference`, FlashAttention-2's equations): ``dV = P^T
dO``, ``dP = dO V^T``, ``D = rowsum(dO * O) = rowsum(P * dP)``, ``dS = P * (dP - D)`` (times
``1 - tanh^2`` under softcap), ``dQ = dS K * softmax_scale``, ``dK = dS^T Q * softmax_scale``;
with GQA a K/V head's dK and dV sum over the query heads that share it.
"""
from __future__ import annotations

import numpy as np

from ..errors import ArgumentError


def _mods(score_mod, mask_mod, hook_args, sizes) -> tuple:
    """numpy ``(score_mod, mask_mod)`` of hooks (callables, ``ScoreMod`` / ``MaskMod``) on a
    problem of ``sizes`` (batch, heads, seqlen_q, seqlen_k), their parameters from ``hook_args``."""
    if score_mod is None and mask_mod is None:
        return None, None
    from ..collective.attention_hooks import AttentionHooks
    b, h, sq, sk = sizes
    return AttentionHooks(score_mod, mask_mod).reference_mods(
        dict(hook_args or {}), {"batch": b, "heads": h, "seqlen_q": sq, "seqlen_k": sk})


def mask(seqlen_q: int, seqlen_k: int, causal: bool = False, window=None) -> np.ndarray:
    """Boolean ``(seqlen_q, seqlen_k)``: True where query ``i`` may attend key ``j``. Causal
    keeps ``j <= i + seqlen_k - seqlen_q`` (bottom-right alignment); ``window=(left, right)``
    keeps ``i + shift - left <= j <= i + shift + right`` (``-1``: unbounded on that side);
    causal with a window takes both."""
    shift = seqlen_k - seqlen_q
    i = np.arange(seqlen_q)[:, None] + shift
    j = np.arange(seqlen_k)[None, :]
    keep = np.ones((seqlen_q, seqlen_k), bool)
    if causal:
        keep &= j <= i
    if window is not None:
        left, right = window
        if left >= 0:
            keep &= j >= i - left
        if right >= 0:
            keep &= j <= i + right
    return keep


def _check(q, k, v, softmax_scale, cu_seqlens_q, cu_seqlens_k) -> float:
    """The softmax scale, after checking that the shapes agree (``ArgumentError``)."""
    if (cu_seqlens_q is None) != (cu_seqlens_k is None):
        raise ArgumentError("cu_seqlens_q and cu_seqlens_k go together: pass both or neither")
    if q.shape[-2] % k.shape[-2] or k.shape[-2] != v.shape[-2]:
        raise ArgumentError(f"heads {q.shape[-2]} must be a multiple of kv_heads {k.shape[-2]} (and k, v agree)")
    if cu_seqlens_q is None and (q.ndim != 4 or k.shape[:2] != v.shape[:2] or q.shape[0] != k.shape[0]):
        raise ArgumentError(f"q, k, v must be (batch, seqlen, heads, dim), got {q.shape}, {k.shape}, {v.shape}")
    return q.shape[-1] ** -0.5 if softmax_scale is None else float(softmax_scale)


def _scores(qh, kh, scale, softcap, score_mod, mask_mod, base, b, hh, qi, kj) -> tuple:
    """``(S with masked entries -inf, tanh(S / softcap) or None)`` of one head: ``qh`` (sq, d),
    ``kh`` (sk, d)."""
    s = (qh @ kh.T) * scale
    t = None
    if softcap:
        t = np.tanh(s / softcap)
        s = softcap * t
    if score_mod is not None:
        s = np.asarray(score_mod(s, b, hh, qi, kj), np.float64)
    keep = base if mask_mod is None else base & np.asarray(mask_mod(b, hh, qi, kj), bool)
    return np.where(keep, s, -np.inf), t


def _one(q, k, v, scale, causal, window, softcap, score_mod, mask_mod, b):
    """One sequence: q (sq, h, d), k (sk, hk, d), v (sk, hk, dv) -> o (sq, h, dv), lse (h, sq)."""
    sq, h, _ = q.shape
    sk, hk, dv = v.shape
    group = h // hk
    o = np.zeros((sq, h, dv))
    lse = np.full((h, sq), np.inf)
    base = mask(sq, sk, causal, window)
    qi, kj = np.arange(sq)[:, None], np.arange(sk)[None, :]
    for hh in range(h):
        kh = hh // group
        s, _ = _scores(q[:, hh, :], k[:, kh, :], scale, softcap, score_mod, mask_mod, base, b, hh, qi, kj)
        m = s.max(axis=1, initial=-np.inf)
        live = np.isfinite(m)
        p = np.exp(s - np.where(live, m, 0.0)[:, None])
        total = p.sum(axis=1)
        o[live, hh, :] = (p[live] @ v[:, kh, :]) / total[live, None]
        lse[hh, live] = m[live] + np.log(total[live])
    return o, lse


def _descaled(x, d, name, kv_heads, cu=None):
    """``x`` (dense (batch, seqlen, heads, d) or varlen (total, heads, d) with ``cu`` offsets)
    times its descale ``d``: None, one value or (batch, kv_heads) (see :func:`attention_reference`)."""
    if d is None:
        return x
    d = np.asarray(d, np.float64)
    if not (np.isfinite(d).all() and (d > 0).all()) or (d.size != 1 and d.ndim != 2):
        raise ArgumentError(f"{name} must be one positive finite value or a (batch, kv_heads) array of them, "
                            f"got {d!r}")
    if d.size == 1:
        return x * float(d.ravel()[0])
    batch = len(cu) - 1 if cu is not None else x.shape[0]
    if d.shape != (batch, kv_heads):
        raise ArgumentError(f"{name} must have shape (batch, kv_heads) = {(batch, kv_heads)}, got {d.shape}")
    per_head = np.repeat(d, x.shape[-2] // kv_heads, axis=1)              # (batch, heads of x)
    if cu is None:
        return x * per_head[:, None, :, None]
    seq = np.searchsorted(np.asarray(cu)[1:], np.arange(x.shape[0]), side="right")   # token -> sequence
    return x * np.concatenate([per_head, np.ones((1, per_head.shape[1]))])[seq][:, :, None]


def attention_reference(q, k, v, *, softmax_scale=None, causal=False, window=None, softcap=None,
                        cu_seqlens_q=None, cu_seqlens_k=None, score_mod=None, mask_mod=None, hook_args=None,
                        q_descale=None, k_descale=None, v_descale=None):
    """``(o, lse)`` in float64 for inputs laid out as ``flash_attn_func``'s.

    Dense: ``q`` (batch, seqlen_q, heads, head_dim), ``k`` (batch, seqlen_k, kv_heads, head_dim),
    ``v`` (batch, seqlen_k, kv_heads, head_dim_v) -> ``o`` (batch, seqlen_q, heads, head_dim_v),
    ``lse`` (batch, heads, seqlen_q). Varlen (``cu_seqlens_q`` / ``cu_seqlens_k``: int arrays of
    batch + 1 offsets): ``q`` (total_q, heads, head_dim), ``k``/``v`` (total_k, kv_heads, ...) ->
    ``o`` (total_q, heads, head_dim_v), ``lse`` (heads, total_q). ``softmax_scale`` defaults to
    ``head_dim ** -0.5``. ``score_mod(score, batch, head, q_idx, kv_idx)`` and
    ``mask_mod(batch, head, q_idx, kv_idx)`` are the kernel's hooks -- callables or
    ``ScoreMod`` / ``MaskMod`` instances, as ``AttentionConfig`` takes them -- run on numpy
    (``AttentionHooks.reference_mods``: float64 scores, int64 index arrays broadcasting to
    (seqlen_q, seqlen_k)); ``hook_args``: their declared parameters by name (numpy arrays,
    numbers); a hook's ``ctx`` sizes are the batch, heads and this sequence's lengths. Raises
    ``ArgumentError`` for shapes that do not agree or a missing hook argument, ``HookError`` for
    a hook of the wrong kind or signature. ``q_descale`` / ``k_descale`` / ``v_descale``
    (FlashAttention-3's fp8 descales; None: 1): one value (per tensor) or an array of shape
    (batch, kv_heads) (query head ``h`` takes K/V head ``h // (heads / kv_heads)``'s); the true
    operands are ``q * q_descale`` etc., so ``S`` and ``O`` are computed from those
    (``ArgumentError`` for a non-positive or non-finite descale or another shape)."""
    q, k, v = (np.asarray(x, np.float64) for x in (q, k, v))
    kv_heads = k.shape[-2]
    q, k, v = (_descaled(x, d, n, kv_heads, cu_seqlens_q if n == "q_descale" else cu_seqlens_k)
               for x, d, n in ((q, q_descale, "q_descale"), (k, k_descale, "k_descale"), (v, v_descale, "v_descale")))
    scale = _check(q, k, v, softmax_scale, cu_seqlens_q, cu_seqlens_k)
    mods = (score_mod, mask_mod, hook_args)
    if cu_seqlens_q is None:
        hooks = (scale, causal, window, softcap, *_mods(*mods, (q.shape[0], q.shape[2], q.shape[1], k.shape[1])))
        outs = [_one(q[b], k[b], v[b], *hooks, b) for b in range(q.shape[0])]
        return np.stack([o for o, _ in outs]), np.stack([lse for _, lse in outs])
    cq, ck = np.asarray(cu_seqlens_q), np.asarray(cu_seqlens_k)
    o = np.zeros(q.shape[:2] + (v.shape[-1],))
    lse = np.full((q.shape[1], q.shape[0]), np.inf)
    for b in range(len(cq) - 1):
        qs, ks = slice(cq[b], cq[b + 1]), slice(ck[b], ck[b + 1])
        sizes = (len(cq) - 1, q.shape[1], int(cq[b + 1] - cq[b]), int(ck[b + 1] - ck[b]))
        o[qs], lse[:, qs] = _one(q[qs], k[ks], v[ks], scale, causal, window, softcap, *_mods(*mods, sizes), b)
    return o, lse


def _one_bwd(do, q, k, v, scale, causal, window, softcap, mask_mod, b):
    """One sequence: do, q (sq, h, d), k, v (sk, hk, d) -> dq (sq, h, d), dk, dv (sk, hk, d)."""
    sq, h, _ = q.shape
    sk, hk, _ = k.shape
    group = h // hk
    dq, dk, dv = np.zeros(q.shape), np.zeros(k.shape), np.zeros(v.shape)
    base = mask(sq, sk, causal, window)
    qi, kj = np.arange(sq)[:, None], np.arange(sk)[None, :]
    for hh in range(h):
        kh = hh // group
        s, t = _scores(q[:, hh, :], k[:, kh, :], scale, softcap, None, mask_mod, base, b, hh, qi, kj)
        m = s.max(axis=1, initial=-np.inf)
        live = np.isfinite(m)
        p = np.exp(s - np.where(live, m, 0.0)[:, None])
        p[live] /= p[live].sum(axis=1, keepdims=True)        # rows with no key: P = 0
        dp = do[:, hh, :] @ v[:, kh, :].T
        ds = p * (dp - (p * dp).sum(axis=1, keepdims=True))   # rowsum(P * dP) = rowsum(dO * O)
        if softcap:
            ds = ds * (1.0 - t * t)
        dv[:, kh, :] += p.T @ do[:, hh, :]
        dq[:, hh, :] = ds @ k[:, kh, :] * scale
        dk[:, kh, :] += ds.T @ q[:, hh, :] * scale
    return dq, dk, dv


def attention_backward_reference(dout, q, k, v, *, softmax_scale=None, causal=False, window=None, softcap=None,
                                 cu_seqlens_q=None, cu_seqlens_k=None, mask_mod=None, hook_args=None):
    """``(dq, dk, dv)`` in float64: the gradients of :func:`attention_reference`'s ``o`` with
    respect to ``q``, ``k``, ``v`` for the output gradient ``dout`` (shaped like ``o``), from
    the definitions (module docstring), P recomputed in float64 (no O or LSE is taken, so the
    reference does not inherit a kernel's forward error). Shapes, options and errors as
    :func:`attention_reference` (no ``score_mod``: its derivative is unknown); ``dq`` is shaped
    like ``q``, ``dk``/``dv`` like ``k``/``v`` (summed over the query heads of a K/V head)."""
    do, q, k, v = (np.asarray(x, np.float64) for x in (dout, q, k, v))
    scale = _check(q, k, v, softmax_scale, cu_seqlens_q, cu_seqlens_k)
    if do.shape != q.shape[:-1] + (v.shape[-1],):
        raise ArgumentError(f"dout must have o's shape {q.shape[:-1] + (v.shape[-1],)}, got {do.shape}")
    opts = (scale, causal, window, softcap)

    def mm(sizes):
        return _mods(None, mask_mod, hook_args, sizes)[1]
    if cu_seqlens_q is None:
        m = mm((q.shape[0], q.shape[2], q.shape[1], k.shape[1]))
        outs = [_one_bwd(do[b], q[b], k[b], v[b], *opts, m, b) for b in range(q.shape[0])]
        return tuple(np.stack([x[i] for x in outs]) for i in range(3))
    cq, ck = np.asarray(cu_seqlens_q), np.asarray(cu_seqlens_k)
    dq, dk, dv = np.zeros(q.shape), np.zeros(k.shape), np.zeros(v.shape)
    for b in range(len(cq) - 1):
        qs, ks = slice(cq[b], cq[b + 1]), slice(ck[b], ck[b + 1])
        m = mm((len(cq) - 1, q.shape[1], int(cq[b + 1] - cq[b]), int(ck[b + 1] - ck[b])))
        dq[qs], dk[ks], dv[ks] = _one_bwd(do[qs], q[qs], k[ks], v[ks], *opts, m, b)
    return dq, dk, dv


__all__ = ["attention_reference", "attention_backward_reference", "mask"]
