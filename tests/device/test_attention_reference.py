"""The float64 attention reference (FlashAttention semantics) against torch's SDPA and a
scalar loop written from the definitions: causal aligned bottom-right, sliding windows, softcap,
GQA, varlen, fully masked rows."""
import math

import numpy as np
import pytest

from cutedsl.device.attention_reference import attention_reference, mask
from cutedsl.errors import ArgumentError
from cutedsl.problem import attention_flops


def _loop(q, k, v, scale, causal=False, window=None, softcap=None):
    """One sequence, element by element: q (sq, h, d), k/v (sk, hk, .)."""
    sq, h, _ = q.shape
    sk, hk, dv = v.shape
    o, lse = np.zeros((sq, h, dv)), np.full((h, sq), np.inf)
    for hh in range(h):
        kh = hh // (h // hk)
        for i in range(sq):
            row = []
            for j in range(sk):
                ii = i + sk - sq
                ok = (not causal or j <= ii) and (window is None or (
                    (window[0] < 0 or j >= ii - window[0]) and (window[1] < 0 or j <= ii + window[1])))
                if ok:
                    s = float(q[i, hh] @ k[j, kh]) * scale
                    if softcap:
                        s = softcap * math.tanh(s / softcap)
                    row.append((j, s))
            if row:
                m = max(s for _, s in row)
                z = sum(math.exp(s - m) for _, s in row)
                lse[hh, i] = m + math.log(z)
                o[i, hh] = sum(math.exp(s - m) / z * v[j, kh] for j, s in row)
    return o, lse


@pytest.mark.parametrize("sq,sk,h,hk,causal,window,softcap", [
    (7, 7, 2, 2, False, None, None),
    (5, 9, 4, 2, True, None, None),         # bottom-right causal, GQA
    (9, 5, 3, 1, True, None, None),         # MQA; the first rows see no key
    (12, 12, 2, 1, False, (3, 1), None),
    (6, 10, 2, 2, True, (2, -1), 5.0),
])
def test_reference_matches_the_definition(sq, sk, h, hk, causal, window, softcap, rng):
    q = rng.standard_normal((2, sq, h, 8))
    k = rng.standard_normal((2, sk, hk, 8))
    v = rng.standard_normal((2, sk, hk, 6))
    o, lse = attention_reference(q, k, v, softmax_scale=0.3, causal=causal, window=window, softcap=softcap)
    assert o.shape == (2, sq, h, 6) and lse.shape == (2, h, sq)
    for b in range(2):
        ro, rl = _loop(q[b], k[b], v[b], 0.3, causal, window, softcap)
        np.testing.assert_allclose(o[b], ro, rtol=1e-12, atol=1e-12)
        np.testing.assert_array_equal(np.isinf(lse[b]), np.isinf(rl))
        np.testing.assert_allclose(lse[b][np.isfinite(rl)], rl[np.isfinite(rl)], rtol=1e-12)


def test_reference_matches_torch_sdpa(rng):
    torch = pytest.importorskip("torch")
    import torch.nn.functional as F
    q = rng.standard_normal((1, 33, 4, 16))
    k = rng.standard_normal((1, 47, 4, 16))
    v = rng.standard_normal((1, 47, 4, 16))
    keep = mask(33, 47, causal=True)
    t = lambda x: torch.from_numpy(x).transpose(1, 2)        # noqa: E731  (b, h, s, d)
    want = F.scaled_dot_product_attention(t(q), t(k), t(v), attn_mask=torch.from_numpy(keep)).transpose(1, 2)
    o, _ = attention_reference(q, k, v, causal=True)
    np.testing.assert_allclose(o, want.numpy(), rtol=1e-10, atol=1e-12)


def test_varlen_is_each_sequence_alone(rng):
    lens_q, lens_k = [3, 0, 5], [4, 2, 5]
    cq, ck = np.cumsum([0] + lens_q), np.cumsum([0] + lens_k)
    q = rng.standard_normal((cq[-1], 2, 8))
    k = rng.standard_normal((ck[-1], 1, 8))
    v = rng.standard_normal((ck[-1], 1, 8))
    o, lse = attention_reference(q, k, v, causal=True, cu_seqlens_q=cq, cu_seqlens_k=ck)
    assert o.shape == (8, 2, 8) and lse.shape == (2, 8)
    for b in range(3):
        qs, ks = slice(cq[b], cq[b + 1]), slice(ck[b], ck[b + 1])
        ro, rl = attention_reference(q[None, qs], k[None, ks], v[None, ks], causal=True)
        np.testing.assert_array_equal(o[qs], ro[0])
        np.testing.assert_array_equal(lse[:, qs], rl[0])


def test_hooks_and_errors(rng):
    q, k, v = (rng.standard_normal((1, 6, 2, 4)) for _ in range(3))
    alibi = lambda s, b, h, i, j: s - (h + 1) * np.abs(i - j)           # noqa: E731
    o, _ = attention_reference(q, k, v, score_mod=alibi, mask_mod=lambda b, h, i, j: (i + j) % 2 == 0)
    s = np.einsum("qd,kd->qk", q[0, :, 1], k[0, :, 1]) * 0.5 - 2 * np.abs(np.arange(6)[:, None] - np.arange(6))
    s[(np.arange(6)[:, None] + np.arange(6)) % 2 == 1] = -np.inf
    p = np.exp(s - s.max(1, keepdims=True))
    np.testing.assert_allclose(o[0, :, 1], (p / p.sum(1, keepdims=True)) @ v[0, :, 1], rtol=1e-12)
    with pytest.raises(ArgumentError, match="heads 2 must be a multiple of kv_heads 3"):
        attention_reference(q, rng.standard_normal((1, 6, 3, 4)), rng.standard_normal((1, 6, 3, 4)))
    with pytest.raises(ArgumentError, match="cu_seqlens_q and cu_seqlens_k go together"):
        attention_reference(q[0], k[0], v[0], cu_seqlens_q=[0, 6])


def test_flops_count_the_kept_pairs():
    assert attention_flops(128, 128, 2, 64) == 4 * 128 * 128 * 64 * 2
    assert attention_flops(4, 4, 1, 1, causal=True) == 2 * 10 * 2
    assert attention_flops(3, 5, 1, 1, causal=True) == 2 * int(mask(3, 5, True).sum()) * 2
    assert attention_flops(9, 9, 1, 1, window=(2, 1)) == 2 * int(mask(9, 9, window=(2, 1)).sum()) * 2


def test_descales_scale_the_true_operands(rng):
    """fp8 descales (FlashAttention-3): the reference of (q, k, v) with descales is the reference of
    (q * q_descale, k * k_descale, v * v_descale); the LSE sees q_descale * k_descale, O also v_descale."""
    q, k, v = (rng.standard_normal((1, 9, 2, 16)) for _ in range(3))
    o, lse = attention_reference(q, k, v, causal=True, q_descale=0.5, k_descale=np.float32(3.0), v_descale=[0.25])
    o2, lse2 = attention_reference(q * 0.5, k * 3.0, v * 0.25, causal=True)
    np.testing.assert_allclose(o, o2, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(lse, lse2, rtol=1e-12)
    o3, _ = attention_reference(q, k, v, causal=True, q_descale=0.5, k_descale=3.0)
    np.testing.assert_allclose(o, o3 * 0.25, rtol=1e-12, atol=1e-14)
    for bad in (0.0, -1.0, float("nan"), np.ones(2)):
        with pytest.raises(ArgumentError, match="v_descale must be one positive finite value"):
            attention_reference(q, k, v, v_descale=bad)


def test_descales_per_batch_and_kv_head(rng):
    """FlashAttention-3's (batch, kv_heads) descales: query head h of batch b is scaled by entry
    (b, h // group), K/V head j by (b, j); varlen: entry b is sequence b's."""
    q, k, v = rng.standard_normal((2, 9, 4, 16)), rng.standard_normal((2, 11, 2, 16)), rng.standard_normal((2, 11, 2, 16))
    qd, kd, vd = (rng.uniform(0.5, 2.0, (2, 2)) for _ in range(3))
    o, lse = attention_reference(q, k, v, q_descale=qd, k_descale=kd, v_descale=vd)
    qs = q * np.array([[qd[b, h // 2] for h in range(4)] for b in range(2)])[:, None, :, None]
    o2, lse2 = attention_reference(qs, k * kd[:, None, :, None], v * vd[:, None, :, None])
    np.testing.assert_allclose(o, o2, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(lse, lse2, rtol=1e-12)
    cq, ck = np.array([0, 4, 9]), np.array([0, 7, 11])
    ov, lv = attention_reference(q[0], k[0], v[0], cu_seqlens_q=cq, cu_seqlens_k=ck, q_descale=qd, k_descale=kd,
                                 v_descale=vd, causal=True)
    for b in range(2):
        qb, kb = slice(cq[b], cq[b + 1]), slice(ck[b], ck[b + 1])
        per = [attention_reference(q[None, 0, qb, 2 * j:2 * j + 2], k[None, 0, kb, j:j + 1], v[None, 0, kb, j:j + 1],
                                   causal=True, q_descale=qd[b, j], k_descale=kd[b, j], v_descale=vd[b, j])
               for j in range(2)]
        np.testing.assert_allclose(ov[qb], np.concatenate([p[0][0] for p in per], axis=1), rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(lv[:, qb], np.concatenate([p[1][0] for p in per], axis=0), rtol=1e-12)
    with pytest.raises(ArgumentError, match=r"k_descale must have shape \(batch, kv_heads\) = \(2, 2\), got \(2, 4\)"):
        attention_reference(q, k, v, k_descale=np.ones((2, 4)))
