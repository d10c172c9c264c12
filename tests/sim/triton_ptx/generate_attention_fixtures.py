"""Compile Triton's attention-forward and row-softmax kernels (and its warp-specialized matmul on
Blackwell) for sm_90a / sm_100a without a GPU and save their PTX as emulator fixtures (issue 39:
the emulator must run the attention and softmax PTX that Triton emits today).

Same venv as ``generate_fixtures.py`` (Triton is not a dependency of cutedsl; no GPU needed)::

    python3 -m venv /tmp/tritonvenv
    /tmp/tritonvenv/bin/pip install triton==3.9.0 numpy
    TRITON_DEFAULT_FP_FUSION=1 /tmp/tritonvenv/bin/python tests/sim/triton_ptx/generate_attention_fixtures.py

Each fixture is ``NAME.ptx`` (unchanged) and ``NAME.json`` in the format of
``generate_fixtures.py`` (entry, block, dynamic smem, the ``.param`` list in order, host tensor
descriptors' box and swizzle, the grid rule) plus ``check``: how a test builds the inputs and what
it compares against numpy float64. ``tests/sim/test_attention_fixtures.py`` runs them and
``docs/attention-ptx-survey.md`` records where each stops on today's emulator.

The kernels are written here in the style of Triton's tutorials, not copied from them:

* ``triton_softmax_sm100`` / ``triton_softmax_sm90``: tutorial 02's row softmax (one program per
  row, persistent over rows; masked loads fill ``-inf`` past ``n_cols``; ``exp`` as ``ex2``).
* ``triton_attn_fwd_sm100`` / ``_causal``: tutorial 06's forward (FlashAttention-2 online softmax in
  base 2, ``sm_scale * log2(e)`` folded in, ``M`` = log2-sum-exp per row) with host tensor
  descriptors over ``(Z*H*N_CTX, HEAD_DIM)`` f16 Q/K/V/O; on sm_100a ``tl.dot`` becomes
  ``tcgen05.mma`` and Triton packs the row statistics into ``.f32x2`` arithmetic and three-input
  ``max.f32``. Causal runs the off-diagonal blocks unmasked, then the diagonal block masked.
* ``triton_attn_fwd_ws_sm100``: the same loop with ``warp_specialize=True`` (the tutorial's default
  on Blackwell): partitions dispatched through ``brx.idx`` over a ``.branchtargets`` list.
* ``triton_attn_fwd_sm90`` / ``_causal``: the same kernel for Hopper (``wgmma``), the baseline.
* ``triton_mm_ws_sm100``: ``generate_fixtures.triton_mm_ws`` (persistent, warp-specialized,
  device-side descriptors) compiled for sm_100a on 128 x 128 tiles.
"""
from __future__ import annotations

import os

os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")

import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from generate_fixtures import TARGET, TARGET_SM100, _compile, save, triton_mm_ws  # noqa: E402

LOG2E = 1.44269504


@triton.jit
def triton_softmax(out_ptr, in_ptr, in_row_stride, out_row_stride, n_rows, n_cols,
                   BLOCK_SIZE: tl.constexpr, num_stages: tl.constexpr):
    # Programs stride over the rows; one row at a time sits in registers (BLOCK_SIZE >= n_cols).
    first = tl.program_id(0)
    step = tl.num_programs(0)
    for row in tl.range(first, n_rows, step, num_stages=num_stages):
        cols = tl.arange(0, BLOCK_SIZE)
        x = tl.load(in_ptr + row * in_row_stride + cols, mask=cols < n_cols, other=-float("inf"))
        e = tl.exp(x - tl.max(x, axis=0))
        tl.store(out_ptr + row * out_row_stride + cols, e / tl.sum(e, axis=0), mask=cols < n_cols)


@triton.jit
def _attn_block_loop(acc, l_i, m_i, q, k_desc, v_desc, row0, start_m, qk_scale, offs_m, offs_n, N_CTX,
                     BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, PART: tl.constexpr, WS: tl.constexpr):
    # PART 0: every key block (non-causal); 1: key blocks left of the diagonal; 2: the diagonal block
    if PART == 1:
        lo, hi = 0, start_m * BLOCK_M
    elif PART == 2:
        lo, hi = start_m * BLOCK_M, (start_m + 1) * BLOCK_M
        lo = tl.multiple_of(lo, BLOCK_M)
    else:
        lo, hi = 0, N_CTX
    for start_n in tl.range(lo, hi, BLOCK_N, warp_specialize=WS):
        start_n = tl.multiple_of(start_n, BLOCK_N)
        s = tl.dot(q, k_desc.load([row0 + start_n, 0]).T)
        if PART == 2:
            s = s * qk_scale + tl.where(offs_m[:, None] >= start_n + offs_n[None, :], 0, -1.0e6)
            m_new = tl.maximum(m_i, tl.max(s, 1))
            s -= m_new[:, None]
        else:
            m_new = tl.maximum(m_i, tl.max(s, 1) * qk_scale)
            s = s * qk_scale - m_new[:, None]
        p = tl.math.exp2(s)
        alpha = tl.math.exp2(m_i - m_new)           # rescale of what was accumulated so far
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = tl.dot(p.to(tl.float16), v_desc.load([row0 + start_n, 0]), acc * alpha[:, None])
        m_i = m_new
    return acc, l_i, m_i


@triton.jit
def triton_attn_fwd(sm_scale, M, Z, H, q_desc, k_desc, v_desc, o_desc, N_CTX,
                    HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                    CAUSAL: tl.constexpr, WS: tl.constexpr):
    # One program per (query block, batch*head); the descriptors view (Z*H*N_CTX, HEAD_DIM).
    start_m = tl.program_id(0)
    bh = tl.program_id(1)
    row0 = bh * N_CTX
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    m_i = tl.zeros([BLOCK_M], dtype=tl.float32) - float("inf")
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32) + 1.0
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    qk_scale = sm_scale * 1.44269504
    q = q_desc.load([row0 + start_m * BLOCK_M, 0])
    if CAUSAL:
        acc, l_i, m_i = _attn_block_loop(acc, l_i, m_i, q, k_desc, v_desc, row0, start_m, qk_scale, offs_m, offs_n,
                                         N_CTX, BLOCK_M, BLOCK_N, 1, WS)
        acc, l_i, m_i = _attn_block_loop(acc, l_i, m_i, q, k_desc, v_desc, row0, start_m, qk_scale, offs_m, offs_n,
                                         N_CTX, BLOCK_M, BLOCK_N, 2, WS)
    else:
        acc, l_i, m_i = _attn_block_loop(acc, l_i, m_i, q, k_desc, v_desc, row0, start_m, qk_scale, offs_m, offs_n,
                                         N_CTX, BLOCK_M, BLOCK_N, 0, WS)
    m_i += tl.math.log2(l_i)
    tl.store(M + bh * N_CTX + offs_m, m_i)
    o_desc.store([row0 + start_m * BLOCK_M, 0], (acc / l_i[:, None]).to(tl.float16))


SOFTMAX_CHECK = {
    "inputs": "x: n_rows x n_cols f32 (row-major, row stride n_cols), out: the same; "
              "n_cols <= BLOCK_SIZE, any n_rows; grid = min(n_rows, programs)",
    "expect": "out = exp(x - max_row) / sum_row(exp(x - max_row)) in float64; ex2.approx: rtol 1e-5",
}
ATTN_CHECK = {
    "inputs": "Q, K, V, O: (Z*H*N_CTX, HEAD_DIM) f16 row-major, one host tensor map each (box per "
              "tensordesc_meta, 128-byte swizzle) followed by its shape (i32: rows, HEAD_DIM) and strides "
              "(i64: HEAD_DIM, 1); M: Z*H*N_CTX f32; N_CTX a multiple of BLOCK_M (and of BLOCK_N)",
    "expect": "O = softmax(Q K^T * sm_scale [causal: keys <= query]) V per (z, h) in float64 (P is rounded to "
              "f16 before P V: atol ~2e-3 for unit-normal inputs); M = LSE / ln 2 = log2(sum exp(s - 0)) "
              "per row, s = Q K^T * sm_scale",
}


def attention(name, target, causal, ws, num_warps=4, block_n=64, head_dim=64):
    tile = {"HEAD_DIM": head_dim, "BLOCK_M": 128, "BLOCK_N": block_n, "CAUSAL": causal, "WS": ws}
    q_box = f"tensordesc<fp16[128, {head_dim}]>"
    kv_box = f"tensordesc<fp16[{block_n}, {head_dim}]>"
    sig = {"sm_scale": "fp32", "M": "*fp32", "Z": "i32", "H": "i32", "q_desc": q_box, "k_desc": kv_box,
           "v_desc": kv_box, "o_desc": q_box, "N_CTX": "i32", "HEAD_DIM": "constexpr", "BLOCK_M": "constexpr",
           "BLOCK_N": "constexpr", "CAUSAL": "constexpr", "WS": "constexpr"}
    ck = _compile(triton_attn_fwd, sig, tile, ["M", "N_CTX"], num_warps=num_warps, num_stages=3, target=target)
    save(name, ck, sig, tile, ["cdiv(N_CTX, BLOCK_M)", "Z * H", "1"],
         {"N_CTX": "multiple of BLOCK_M (the descriptors span all heads: a ragged block would read the next "
                   "head)", "descriptors": "q, o: box [128, HEAD_DIM]; k, v: box [BLOCK_N, HEAD_DIM]"},
         check=ATTN_CHECK, kind="attention")


def main():
    sig = {"out_ptr": "*fp32", "in_ptr": "*fp32", "in_row_stride": "i32", "out_row_stride": "i32",
           "n_rows": "i32", "n_cols": "i32", "BLOCK_SIZE": "constexpr", "num_stages": "constexpr"}
    tile = {"BLOCK_SIZE": 256, "num_stages": 2}
    for name, target in (("triton_softmax_sm100", TARGET_SM100), ("triton_softmax_sm90", TARGET)):
        ck = _compile(triton_softmax, sig, tile, ["out_ptr", "in_ptr"], num_warps=8, num_stages=2, target=target)
        save(name, ck, sig, tile, ["programs (persistent; any count <= n_rows)", "1", "1"],
             {"n_cols": "<= BLOCK_SIZE (masked past n_cols)", "n_rows": "any"}, check=SOFTMAX_CHECK, kind="softmax")

    attention("triton_attn_fwd_sm100", TARGET_SM100, causal=False, ws=False)
    attention("triton_attn_fwd_sm100_causal", TARGET_SM100, causal=True, ws=False)
    attention("triton_attn_fwd_ws_sm100", TARGET_SM100, causal=False, ws=True)
    attention("triton_attn_fwd_sm90", TARGET, causal=False, ws=False)
    attention("triton_attn_fwd_sm90_causal", TARGET, causal=True, ws=False)

    tile = {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "GROUP_M": 2}
    sig = {"a_ptr": "*fp16", "b_ptr": "*fp16", "c_ptr": "*fp32", "M": "i32", "N": "i32", "K": "i32",
           "num_programs": "i32",
           "BLOCK_M": "constexpr", "BLOCK_N": "constexpr", "BLOCK_K": "constexpr", "GROUP_M": "constexpr"}
    ck = _compile(triton_mm_ws, sig, tile, ["a_ptr", "b_ptr", "c_ptr", "K", "N"], num_warps=4, num_stages=3,
                  target=TARGET_SM100)
    save("triton_mm_ws_sm100", ck, sig, tile, ["num_programs", "1", "1"],
         {"K": "multiple of 16; N multiple of 16 (16-byte pitch of C, hinted); M any",
          "grid": "num_programs <= cdiv(M, BLOCK_M) * cdiv(N, BLOCK_N) persistent programs",
          "global_scratch": "global_scratch_size bytes per program, base aligned to global_scratch_align"},
         check={"inputs": "A: M x K f16, B: N x K f16 (K-major), C: M x N f32, all row-major",
                "expect": "C = A B^T in float64, bit-exact for small-integer inputs"}, kind="matmul")


if __name__ == "__main__":
    main()
