"""Attention forward (FlashAttention-3-style, sm_90a): dense GQA and packed variable-length causal
sequences through ``cutedsl.Attention``, and an fp8 (e4m3) call with FlashAttention-3's descales
per (batch, kv_head), each checked against the float64 reference.

Runs on a Hopper GPU when one is present, else on the PTX emulator (the same compiled kernel).
Layouts are ``flash_attn_func``'s: q (batch, seqlen_q, heads, head_dim), k/v (batch, seqlen_k,
kv_heads, head_dim); packed: (total_tokens, heads, head_dim) with int32 ``cu_seqlens`` offsets.
"""
import ml_dtypes
import numpy as np

import cutedsl
from cutedsl.device.attention_reference import attention_reference


def check(what, got, ref, o_tol=1.6e-2):
    (o, lse), (ro, rl) = got, ref
    live = np.isfinite(rl)                          # rows with no key: LSE = +inf, O = 0
    err = np.abs(o.astype(np.float64) - ro).max() / np.abs(ro).max()
    lse_err = np.abs(lse[live] - rl[live]).max()
    assert err < o_tol and lse_err < 1e-3 and np.array_equal(np.isposinf(lse), ~live), (what, err, lse_err)
    print(f"checked {what}: O max rel err {err:.2e}, LSE max abs err {lse_err:.1e}, {(~live).sum()} rows with no key")


def main():
    rng = np.random.default_rng(0)
    bf16 = ml_dtypes.bfloat16
    attn = cutedsl.Attention(cutedsl.AttentionConfig(head_dim=64, dtype="bf16"))    # backend: GPU, else emulator
    print(f"backend: {attn.backend.name}")

    # dense, GQA (4 query heads share 2 K/V heads), 100 queries against 150 keys
    q = rng.standard_normal((2, 100, 4, 64)).astype(bf16)
    k = rng.standard_normal((2, 150, 2, 64)).astype(bf16)
    v = rng.standard_normal((2, 150, 2, 64)).astype(bf16)
    check("dense GQA", attn(q, k, v), attention_reference(q, k, v))

    # packed causal sequences (flash_attn_varlen_func) of 70, 0 and 130 queries against 40, 20 and
    # 160 keys; causal is aligned bottom-right, so the first 30 queries of the first see no key
    cu_q = np.array([0, 70, 70, 200], np.int32)
    cu_k = np.array([0, 40, 60, 220], np.int32)
    qp = rng.standard_normal((200, 4, 64)).astype(bf16)
    kp = rng.standard_normal((220, 2, 64)).astype(bf16)
    vp = rng.standard_normal((220, 2, 64)).astype(bf16)
    got = attn(qp, kp, vp, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, causal=True)
    check("varlen causal", got, attention_reference(qp, kp, vp, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, causal=True))


    # fp8 (e4m3) with descales per (batch, kv_head): each group of heads is quantized by its own
    # amax (the true tensor is x8 * descale); O comes back in bf16
    e4m3 = ml_dtypes.float8_e4m3fn
    x = {n: rng.standard_normal((2, 150, h, 128)) * rng.uniform(0.1, 10, (2, 1, h, 1))
         for n, h in (("q", 4), ("k", 2), ("v", 2))}
    x8, descale = {}, {}
    for n, t in x.items():
        group = t.reshape(2, 150, 2, -1, 128)                         # (batch, seqlen, kv_heads, heads per group, d)
        amax = np.abs(group).max(axis=(1, 3, 4)).astype(np.float32)   # (batch, kv_heads)
        descale[n] = amax / 448                                        # e4m3's largest finite value
        x8[n] = (group / descale[n][:, None, :, None, None]).reshape(t.shape).astype(e4m3)
    fp8 = cutedsl.Attention(cutedsl.AttentionConfig(head_dim=128, dtype="e4m3"), attn.backend)
    got = fp8(x8["q"], x8["k"], x8["v"], causal=True, q_descale=descale["q"], k_descale=descale["k"],
              v_descale=descale["v"])
    ref = attention_reference(x8["q"], x8["k"], x8["v"], causal=True, q_descale=descale["q"],
                              k_descale=descale["k"], v_descale=descale["v"])
    check("fp8 causal, (batch, kv_head) descales", got, ref, o_tol=6e-2)   # P rounded to e4m3


if __name__ == "__main__":
    main()
