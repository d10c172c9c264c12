"""Launchers and float64 references for the attention / softmax PTX fixtures of issue 39
(``tests/sim/triton_ptx/triton_{softmax,attn_fwd}*``, ``triton_mm_ws_sm100`` and
``tests/sim/fa4_ptx/fa4_fwd_*``), shared by ``test_attention_fixtures.py`` and the survey
(``attn_survey.py``).

Each ``run_*`` packs the kernel's parameters the way its launcher does (the fixture's JSON says
how), launches it on an :class:`cutedsl.sim.Emulator` and returns ``(results, references)`` as
float64 numpy arrays. ``ptx`` replaces the fixture's text (the survey runs rewritten PTX).
"""
from __future__ import annotations

import json
import pathlib
import re
import struct

import ml_dtypes
import numpy as np

SIM = pathlib.Path(__file__).parent
DIRS = {"triton": SIM / "triton_ptx", "fa4": SIM / "fa4_ptx"}
SWIZZLE_BYTES = {0: 0, 1: 32, 2: 64, 3: 128}     # Triton's tensordesc_meta swizzle enum
LOG2E = 1.4426950408889634


def fixture(name: str) -> tuple[str, dict]:
    d = DIRS["fa4" if name.startswith("fa4_") else "triton"]
    return (d / f"{name}.ptx").read_text(), json.loads((d / f"{name}.json").read_text())


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def attention_reference(q, k, v, scale, causal=False):
    """``O = softmax(Q K^T * scale) V`` and the natural-log LSE per row, float64; q: (S_q, D),
    k: (S_k, D), v: (S_k, D_v); causal keeps key j <= query i."""
    s = q.astype(np.float64) @ k.astype(np.float64).T * scale
    if causal:
        s = np.where(np.tril(np.ones(s.shape, bool)), s, -np.inf)
    m = s.max(1, keepdims=True)
    p = np.exp(s - m)
    return p / p.sum(1, keepdims=True) @ v.astype(np.float64), (m + np.log(p.sum(1, keepdims=True)))[:, 0]


def _load(emu, name, ptx):
    text, meta = fixture(name)
    return emu.load(ptx or text, meta["entry"]), meta


def run_triton_softmax(emu, name, rng, n_rows=37, n_cols=200, programs=8, ptx=None):
    """Row softmax of an ``n_rows x n_cols`` f32 matrix (masked tail past ``n_cols``)."""
    prog, meta = _load(emu, name, ptx)
    x = rng.standard_normal((n_rows, n_cols)).astype(np.float32)
    out = emu.alloc(x.nbytes)
    vals = {"out_ptr": out, "in_ptr": emu.to_device(x), "in_row_stride": n_cols, "out_row_stride": n_cols,
            "n_rows": n_rows, "n_cols": n_cols, "global_scratch": 0, "profile_scratch": 0}
    emu.launch(prog, grid=(programs, 1, 1), block=tuple(meta["block"]), args=[vals[p[0]] for p in meta["params"]],
               smem=meta["shared"])
    e = np.exp(x.astype(np.float64) - x.max(1, keepdims=True))
    return emu.to_host(out, x.shape, np.float32).astype(np.float64), e / e.sum(1, keepdims=True)


def run_triton_attention(emu, name, rng, z=1, h=2, n_ctx=128, sm_scale=0.125, ptx=None):
    """Triton's attention forward on ``z x h`` heads of ``n_ctx`` f16 rows; returns
    ``((O, M / log2 e), (O_ref, LSE_ref))`` stacked over heads."""
    prog, meta = _load(emu, name, ptx)
    d, rows = meta["constexprs"]["HEAD_DIM"], z * h * n_ctx
    q, k, v = (rng.standard_normal((rows, d)).astype(np.float16) for _ in range(3))
    o, m = emu.alloc(rows * d * 2), emu.alloc(rows * 4)
    vals = {"sm_scale": sm_scale, "M": m, "Z": z, "H": h, "N_CTX": n_ctx, "global_scratch": 0, "profile_scratch": 0}
    for i, (pname, buf) in enumerate((("q_desc", emu.to_device(q)), ("k_desc", emu.to_device(k)),
                                      ("v_desc", emu.to_device(v)), ("o_desc", o))):
        tm = meta["tensordesc_meta"][i]
        vals[pname] = emu.tensor_map(buf, (rows, d), "f16", tuple(tm["block_size"]), swizzle=SWIZZLE_BYTES[tm["swizzle"]])
        vals.update({f"{pname}.shape0": rows, f"{pname}.shape1": d, f"{pname}.stride0": d, f"{pname}.stride1": 1})
    grid = (cdiv(n_ctx, meta["constexprs"]["BLOCK_M"]), z * h, 1)
    emu.launch(prog, grid=grid, block=tuple(meta["block"]), args=[vals[p[0]] for p in meta["params"]],
               smem=meta["shared"])
    refs = [attention_reference(q[i:i + n_ctx], k[i:i + n_ctx], v[i:i + n_ctx], sm_scale, meta["constexprs"]["CAUSAL"])
            for i in range(0, rows, n_ctx)]
    got = (emu.to_host(o, (rows, d), np.float16).astype(np.float64),
           emu.to_host(m, (rows,), np.float32).astype(np.float64) / LOG2E)
    return got, (np.concatenate([r[0] for r in refs]), np.concatenate([r[1] for r in refs]))


def run_triton_mm_ws(emu, name, rng, m=200, n=136, k=96, programs=3, ptx=None):
    """The persistent warp-specialized matmul: C (f32) = A B^T of small-integer f16 operands."""
    prog, meta = _load(emu, name, ptx)
    a = rng.integers(-3, 4, (m, k)).astype(np.float16)
    bt = rng.integers(-3, 4, (n, k)).astype(np.float16)
    out, scratch = emu.alloc(m * n * 4), emu.alloc(programs * meta["global_scratch_size"])
    vals = {"a_ptr": emu.to_device(a), "b_ptr": emu.to_device(bt), "c_ptr": out, "M": m, "N": n, "K": k,
            "num_programs": programs, "global_scratch": scratch, "profile_scratch": 0}
    emu.launch(prog, grid=(programs, 1, 1), block=tuple(meta["block"]), args=[vals[p[0]] for p in meta["params"]],
               smem=meta["shared"])
    return emu.to_host(out, (m, n), np.float32).astype(np.float64), a.astype(np.float64) @ bt.astype(np.float64).T


def fast_divmod(d: int) -> bytes:
    """CuTe DSL's FastDivmod divisor as its kernels read it (12 bytes: ``d``, ``m``, ``s1``, ``s2``;
    quotient ``(t + ((x - t) >> s1)) >> s2`` with ``t = mulhi(x, m)``: Granlund and Montgomery's
    round-up multiplier for a 32-bit dividend)."""
    ell = (d - 1).bit_length()                  # ceil(log2 d)
    mult = ((1 << 32) * ((1 << ell) - d)) // d + 1
    return struct.pack("<iIBBxx", d, mult & 0xFFFFFFFF, min(ell, 1), max(ell - 1, 0))


def fast_divmod_quotient(x: int, packed: bytes) -> int:
    """What the kernel computes from :func:`fast_divmod`'s bytes (to check the encoding)."""
    _, mult, s1, s2 = struct.unpack("<iIBBxx", packed)
    t = (x * mult) >> 32
    return (t + ((x - t) >> s1)) >> s2


def _bf16(a):
    return a.astype(ml_dtypes.bfloat16)


def run_fa4_forward(emu, name, rng, s_q=200, s_k=200, heads=1, batch=1, scale=None, ptx=None):
    """FlashAttention-4's forward (sm_100a or sm_90a) on ``(batch, s, heads, D)`` bf16 Q/K/V;
    returns ``((O, LSE), (O_ref, LSE_ref))`` as (batch*heads*s_q, D) / (batch*heads*s_q,) float64,
    ordered by (b, h, row)."""
    prog, meta = _load(emu, name, ptx)
    d = meta["head_dim"]
    scale = scale if scale is not None else d ** -0.5
    q = _bf16(rng.standard_normal((batch, s_q, heads, d)))
    k, v = (_bf16(rng.standard_normal((batch, s_k, heads, d))) for _ in range(2))
    o, lse = emu.alloc(q.size * 2), emu.alloc(batch * heads * s_q * 4)
    bufs = {"q_map": (emu.to_device(q.view(np.uint16)), s_q), "k_map": (emu.to_device(k.view(np.uint16)), s_k),
            "v_map": (emu.to_device(v.view(np.uint16)), s_k), "o_map": (o, s_q)}
    coords = {"(S_q, D, H, B)": (s_q, d, heads, batch), "(S_k, D, H_k, B)": (s_k, d, heads, batch),
              "(D_v, S_k, H_k, B)": (d, s_k, heads, batch), "(S_k, D_v, H_k, B)": (s_k, d, heads, batch),
              "(S_q, D_v, H, B)": (s_q, d, heads, batch)}
    m_blocks = cdiv(s_q, meta["tile"][0])
    ints = {"m_blocks": m_blocks, "heads": heads, "batch": batch, "one": 1, "total_blocks": m_blocks * heads * batch}
    divisors = {"m_blocks_divmod": m_blocks, "heads_divmod": heads, "one_divmod": 1}
    args = []
    for pname, kind, detail in meta["params"]:
        if kind == "i32x4":
            args.append(np.array(coords[detail], np.int32).tobytes())
        elif kind == "view40":      # pointer, (S_q, H, B) extents, pad, strides of H and B (elements)
            args.append(struct.pack("<Q3i4xqq", lse.ptr, s_q, heads, batch, s_q, heads * s_q))
        elif kind == "tensormap":
            buf, s = bufs[pname]
            tma = meta["tma"][detail]
            # numpy-order (B, H, S, D) view of the (B, S, H, D) tensor (byte strides)
            st = (s * heads * d * 2, d * 2, heads * d * 2, 2)
            args.append(emu.tensor_map(buf, (batch, heads, s, d), tma["dtype"], tuple(tma["box"]),
                                       swizzle=tma["swizzle"], strides=st))
        elif kind == "f32":
            args.append(scale * LOG2E)
        elif kind == "zeros":
            args.append(bytes(detail))
        elif kind == "fastdivmod":
            args.append(fast_divmod(divisors[pname]))
        else:
            args.append(ints[pname])
    grid_rule = meta["grid"]
    total = m_blocks * heads * batch
    grid = (min(total, int(re.search(r"(\d+)\)$", grid_rule[0]).group(1))), 1, 1) if grid_rule[0].startswith("min") \
        else (m_blocks, heads, batch)
    emu.launch(prog, grid=grid, block=tuple(meta["block"]), args=args, cluster=tuple(meta["cluster"]), smem=meta["smem"])
    out = emu.to_host(o, q.shape, np.uint16).view(ml_dtypes.bfloat16).astype(np.float64)
    got_lse = emu.to_host(lse, (batch, heads, s_q), np.float32).astype(np.float64)
    f = lambda t: t.astype(np.float64)  # noqa: E731
    refs = [attention_reference(f(q[b, :, hh]), f(k[b, :, hh]), f(v[b, :, hh]), scale)
            for b in range(batch) for hh in range(heads)]
    got_o = np.concatenate([out[b, :, hh] for b in range(batch) for hh in range(heads)])
    return (got_o, got_lse.reshape(-1)), (np.concatenate([r[0] for r in refs]), np.concatenate([r[1] for r in refs]))
