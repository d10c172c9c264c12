"""Warp-level MMA (PTX ISA ``mma.sync.aligned.m16n8kK.row.col``), the Ampere tensor-core path.

Compilers fall back to it on sm_90 when a tile is too small for a warpgroup's ``wgmma`` (Triton
with BLOCK_M < 64, for instance). Supported: m16n8k8 / m16n8k16 with f16 or bf16 operands,
m16n8k4 / m16n8k8 tf32, m16n8k16 / m16n8k32 s8/u8 and m16n8k32 e4m3/e5m2 (fp8 mixes allowed);
accumulators f32 (f16 for f16 operands) or s32 for integers (``.satfinite`` clamps).

Fragments (PTX ISA "Matrix fragments for mma.m16n8k*"), lane ``t``: ``g = t // 4``,
``c = t % 4``; an operand register packs ``q = 4 / element bytes`` elements, low bits first.

* A (16 x K, row): element ``j`` of register ``r`` is ``(g + 8*(r%2), q*c + j + 4q*(r//2))``.
* B (K x 8, col): element ``j`` of register ``r`` is ``(q*c + j + 4q*r, g)``.
* C/D (16 x 8): value ``i`` (register i for f32/s32; half i%2 of register i//2 for f16) is
  ``(g + 8*(i//2), 2*c + i%2)``.

Numerics follow ``wgmma`` ("exact" mode, docs/emulator.md): exact products, ``C + sum``
in float64 rounded once to the accumulator type; integer MMAs are exact and wrap (s32).
The instruction is warp-synchronous: it waits until every live lane of the warp is there.
"""
from __future__ import annotations

import re
from functools import lru_cache

import numpy as np

from ..engines import numerics as nm
from ..machine.convergence import need_converged
from ..frontend.errors import SimRuntimeError
from ..frontend.registry import BLOCKED, handler
from ..engines.wgmma_layout import ETYPES

#: operand type -> allowed K values of m16n8kK
SHAPES = {"f16": (8, 16), "bf16": (8, 16), "tf32": (4, 8), "s8": (16, 32), "u8": (16, 32), "e4m3": (32,),
          "e5m2": (32,)}
_FAMILY = {"f16": "16", "bf16": "16", "tf32": "tf32", "s8": "int", "u8": "int", "e4m3": "fp8", "e5m2": "fp8"}


@lru_cache(maxsize=32)
def fragment_maps(k: int, esize: int):
    """(A rows, A cols) of shape (32, K/2), (B ks) of shape (32, K/4), B col (32,), D (rows, cols) (32, 4)."""
    q = 4 // esize
    t = np.arange(32)[:, None]
    g, c = t // 4, t % 4
    na = k // 2                      # A elements per lane (16*K/32)
    i = np.arange(na)[None, :]
    r, j = i // q, i % q
    a_row = g + 8 * (r % 2)
    a_col = q * c + j + 4 * q * (r // 2)
    ib = np.arange(k // 4)[None, :]
    b_k = q * c + ib % q + 4 * q * (ib // q)
    v = np.arange(4)[None, :]
    return (a_row, a_col), b_k, g[:, 0], (g + 8 * (v // 2), 2 * c + v % 2)


def _elements(u32, esize, etype):
    """Unpack (32, nregs) 32-bit registers into (32, nregs*q) float64/int64 element values."""
    n = u32.shape[1] * (4 // esize)
    raw = np.ascontiguousarray(u32).view(np.dtype(f"u{esize}")).reshape(32, n)
    if etype == "tf32":
        return (raw & np.uint32(0xFFFFE000)).view(np.float32).astype(np.float64)
    dt = np.dtype(ETYPES[etype][1])
    if dt.kind in "iu":
        return raw.view(dt).astype(np.int64)
    return raw.view(dt).astype(np.float64)


def _regs(ctx, op, n, what):
    o = ctx.operand(op)
    if o.kind != "vec" or len(o.items) != n or any(x.kind != "reg" or x.cls != "r" for x in o.items):
        ctx.bad(f"mma {what} must be a brace list of {n} 32-bit registers")
    return np.array([x.idx for x in o.items])


@handler("mma")
def dec_mma(ctx, ins, mods, ops):
    rest = [m for m in mods if m not in ("sync", "aligned")]
    if "sync" not in mods or "aligned" not in mods:
        ctx.unsupported("only mma.sync.aligned is supported")
    shape = rest[0] if rest else ""
    m = re.fullmatch(r"m16n8k(\d+)", shape)
    if not m:
        ctx.unsupported(f"unsupported mma shape .{shape} (m16n8kK only)")
    k = int(m.group(1))
    if rest[1:3] != ["row", "col"]:
        ctx.unsupported("mma needs .row.col layouts")
    sat = "satfinite" in rest
    types = [x for x in rest[3:] if x != "satfinite"]
    if len(types) != 4:
        ctx.unsupported("mma needs .dtype.atype.btype.ctype")
    td, ta, tb, tc = types
    if ta not in SHAPES or tb not in SHAPES or _FAMILY[ta] != _FAMILY[tb] or k not in SHAPES[ta]:
        ctx.unsupported(f"unsupported mma operand types .{ta}.{tb} for .{shape}")
    if (ta in ("f16", "bf16") and ta != tb) or (ta == "tf32" and tb != "tf32"):
        ctx.unsupported(f"mma operand types .{ta}.{tb} must match")
    is_int = _FAMILY[ta] == "int"
    accs = ("s32",) if is_int else (("f32", "f16") if ta == "f16" else ("f32",))
    if td not in accs or tc not in accs:
        ctx.unsupported(f"unsupported mma accumulator types .{td}/.{tc} for .{ta}")
    if sat and not is_int:
        ctx.unsupported(".satfinite is for integer mma")
    esize = ETYPES[ta][0]
    na, nb = k * esize // 8, k * esize // 16      # A/B registers per lane
    didx = _regs(ctx, ops[0], 2 if td == "f16" else 4, "D")
    aidx = _regs(ctx, ops[1], na, "A")
    bidx = _regs(ctx, ops[2], nb, "B")
    cidx = _regs(ctx, ops[3], 2 if tc == "f16" else 4, "C")
    (a_row, a_col), b_k, b_col, (d_row, d_col) = fragment_maps(k, esize)

    def acc_values(u32, t):
        if t == "f16":
            return u32.view(np.uint16).reshape(32, 4).view(np.float16).astype(np.float64)
        return u32.view(np.int32).astype(np.int64) if t == "s32" else u32.view(np.float32).astype(np.float64)

    def fn(w, g, mask):
        if mask is not g.m:
            raise SimRuntimeError(f"mma.sync executed by only part of a warp\n    at {ins.where()}")
        if need_converged(w, g, ins):
            return BLOCKED
        if w.nlive != 32:
            raise SimRuntimeError(f"mma.sync needs all 32 lanes of the warp\n    at {ins.where()}")
        A = np.zeros((16, k), np.int64 if is_int else np.float64)
        A[a_row, a_col] = _elements(w.u32[aidx].T, esize, ta)
        B = np.zeros((k, 8), A.dtype)
        B[b_k, np.broadcast_to(b_col[:, None], b_k.shape)] = _elements(w.u32[bidx].T, esize, tb)
        C = np.zeros((16, 8), A.dtype)
        C[d_row, d_col] = acc_values(np.ascontiguousarray(w.u32[cidx].T), tc)
        r = (C + A @ B)[d_row, d_col]                     # (32 lanes, 4 values)
        if is_int:
            if sat:
                r = np.clip(r, -2 ** 31, 2 ** 31 - 1)
            out = r.astype(np.int32).view(np.uint32)
        elif td == "f16":
            h = nm.f64_to(r.reshape(-1), np.float16).view(np.uint16).reshape(32, 4).astype(np.uint32)
            out = h[:, 0::2] | (h[:, 1::2] << 16)
        else:
            with np.errstate(over="ignore"):
                out = r.astype(np.float32).view(np.uint32)
        w.u32[didx] = out.T
        return None
    return fn
