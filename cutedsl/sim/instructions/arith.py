"""Integer and float arithmetic: add/sub/mul/mad/fma/div/rem/abs/neg/min/max and the
approximate transcendental functions (modelled as correctly rounded).

Decoders receive ``(ctx, ins, mods, ops)`` and return the execution closure ``fn(warp, group,
mask)``; see :mod:`cutedsl.sim.engines.alu` for the shared conventions.
"""
from __future__ import annotations

import numpy as np

from ..engines import numerics as nm
from ..engines.alu import (ARITH_TYPES, F32X2, FLOAT_TYPES, INT_TYPES, PACKED, RND, binary, direct, float_binop,
                  float_post, need_ops, check_f32x2, pack2, pack_f32x2, split_mods, unary, unpack2, unpack_f32x2,
                  utype)
from ..frontend.registry import handler
from ..frontend.ptxtypes import NP


def _sat_s32(r64):
    return np.clip(r64, -2 ** 31, 2 ** 31 - 1).astype(np.int32)


@handler("add", "sub")
def dec_addsub(ctx, ins, mods, ops):
    base = ins.opcode.split(".")[0]
    flags, (t,) = split_mods(ctx, mods, RND | {"ftz", "sat", "relu", "cc"}, ARITH_TYPES)
    if "cc" in flags:
        ctx.unsupported("carry (.cc) arithmetic is not supported")
    if t == F32X2:
        check_f32x2(ctx, base, flags, ops)
    if t in INT_TYPES:
        dt = NP[t]
        if "sat" in flags:
            if t != "s32":
                ctx.unsupported(".sat integer add/sub only for .s32")
            sign = 1 if base == "add" else -1
            op = lambda a, b: _sat_s32(np.asarray(a, np.int64) + sign * np.asarray(b, np.int64))
        else:
            npop = np.add if base == "add" else np.subtract
            op = lambda a, b: npop(a, b, dtype=dt)
        return binary(ctx, ops, t, op)
    f64op = np.add if base == "add" else np.subtract
    fast = (lambda a, b: np.add(a, b, dtype=np.float32)) if base == "add" else \
        (lambda a, b: np.subtract(a, b, dtype=np.float32))
    return binary(ctx, ops, t, float_binop(ctx, flags, t, f64op, fast))


def mulhi(a, b, t):
    """High half of the full product for 8..64-bit integer types."""
    dt = NP[t]
    nb = dt.itemsize * 8
    signed = dt.kind == "i"
    if nb <= 32:
        wide = np.int64 if signed else np.uint64
        p = np.asarray(a).astype(wide) * np.asarray(b).astype(wide)
        return (p >> nb).astype(dt)
    ua = np.asarray(a).astype(np.int64).view(np.uint64) if signed else np.asarray(a, np.uint64)
    ub = np.asarray(b).astype(np.int64).view(np.uint64) if signed else np.asarray(b, np.uint64)
    M = np.uint64(0xFFFFFFFF)
    s32 = np.uint64(32)
    al, ah = ua & M, ua >> s32
    bl, bh = ub & M, ub >> s32
    ll = al * bl
    lh = al * bh
    hl = ah * bl
    hh = ah * bh
    mid = (ll >> s32) + (lh & M) + (hl & M)
    hi = hh + (lh >> s32) + (hl >> s32) + (mid >> s32)
    if signed:
        hi = hi - np.where(np.asarray(a) < 0, ub, np.uint64(0)) - np.where(np.asarray(b) < 0, ua, np.uint64(0))
        return hi.view(np.int64) if isinstance(hi, np.ndarray) else np.uint64(hi).view(np.int64)
    return hi


def _wide_t(t):
    return {"s16": "s32", "u16": "u32", "s32": "s64", "u32": "u64", "b16": "u32", "b32": "u64"}[t]


@handler("mul")
def dec_mul(ctx, ins, mods, ops):
    flags, (t,) = split_mods(ctx, mods, RND | {"ftz", "sat", "lo", "hi", "wide"}, ARITH_TYPES)
    if t == F32X2:
        check_f32x2(ctx, "mul", flags, ops)
    if t in INT_TYPES:
        dt = NP[t]
        if "wide" in flags:
            wt = _wide_t(t)
            wd = NP[wt]
            return binary(ctx, ops, t, lambda a, b: np.multiply(np.asarray(a).astype(wd),
                                                                 np.asarray(b).astype(wd), dtype=wd), td=wt)
        if "hi" in flags:
            return binary(ctx, ops, t, lambda a, b: mulhi(a, b, t))
        return binary(ctx, ops, t, lambda a, b: np.multiply(a, b, dtype=dt))
    fast = lambda a, b: np.multiply(a, b, dtype=np.float32)
    return binary(ctx, ops, t, float_binop(ctx, flags, t, np.multiply, fast))


@handler("mul24", "mad24")
def dec_24(ctx, ins, mods, ops):
    ctx.unsupported("mul24/mad24 are not supported")


@handler("mad", "fma")
def dec_mad(ctx, ins, mods, ops):
    flags, (t,) = split_mods(ctx, mods, RND | {"ftz", "sat", "lo", "hi", "wide", "relu", "oob"}, ARITH_TYPES)
    need_ops(ctx, ops, 4)
    if t == F32X2:
        if ins.opcode.startswith("mad"):
            ctx.unsupported("mad has no .f32x2 form (PTX ISA 9.7.3.7; use fma.rnd.f32x2)")
        check_f32x2(ctx, "fma", flags, ops)
    if t in INT_TYPES:
        dt = NP[t]
        if "wide" in flags:
            wt = _wide_t(t)
            wd = NP[wt]
            w_full, _ = ctx.wr(ops[0], wt)
            ra, rb, rc = ctx.rd(ops[1], t), ctx.rd(ops[2], t), ctx.rd(ops[3], wt)

            def fn(w, g, m):
                p = np.multiply(np.asarray(ra(w)).astype(wd), np.asarray(rb(w)).astype(wd), dtype=wd)
                w_full(w, m, np.add(p, rc(w), dtype=wd))
            return fn
        hi = "hi" in flags
        if "sat" in flags:
            ctx.unsupported("mad.sat is not supported")
        w_full, _ = ctx.wr(ops[0], t)
        ra, rb, rc = ctx.rd(ops[1], t), ctx.rd(ops[2], t), ctx.rd(ops[3], t)

        def fn(w, g, m):
            p = mulhi(ra(w), rb(w), t) if hi else np.multiply(ra(w), rb(w), dtype=dt)
            w_full(w, m, np.add(p, rc(w), dtype=dt))
        return fn
    mode = next((x for x in flags if x in RND), None)
    if mode is None and not (t == "f32" and ins.opcode.startswith("mad")):
        ctx.unsupported("fma/mad on floats needs a rounding modifier")
    mode = mode or "rn"
    w_full, _ = ctx.wr(ops[0], t)
    ra, rb, rc = ctx.rd(ops[1], t), ctx.rd(ops[2], t), ctx.rd(ops[3], t)
    dt = NP[t]
    if t in ("f32", F32X2):
        ftzf = "ftz" in flags
        simple = not (flags - {"rn"})
        f32 = NP["f32"]

        def fma32(a, b, c):
            if ftzf:
                a, b, c = nm.ftz(np.asarray(a, f32)), nm.ftz(np.asarray(b, f32)), nm.ftz(np.asarray(c, f32))
            r = nm.fma_f32(a, b, c, mode)
            return r if simple else float_post(r, flags, f32)
        if t == F32X2:                  # each half
            def fn(w, g, m):
                (al, ah), (bl, bh), (cl, ch) = (unpack_f32x2(r(w)) for r in (ra, rb, rc))
                w_full(w, m, pack_f32x2(fma32(al, bl, cl), fma32(ah, bh, ch)))
            return fn

        def fn(w, g, m):
            w_full(w, m, fma32(ra(w), rb(w), rc(w)))
        ctx.vector(fma32, w_full, (ra, rb, rc))
        return direct(fma32, w_full, (ra, rb, rc)) or fn
    if t == "f64":
        def fn(w, g, m):
            w_full(w, m, nm.fma_f64(ra(w), rb(w), rc(w)))
        return fn

    def hfma(a, b, c, ht):
        a64, b64, c64 = (np.asarray(x, NP[ht]).astype(np.float64) for x in (a, b, c))
        s, e = nm.two_sum(a64 * b64, c64)
        return float_post(nm.f64_to(s, NP[ht], mode, err=e), flags, NP[ht])
    if t in PACKED:
        ht = PACKED[t]

        def fn(w, g, m):
            al, ah = unpack2(ra(w), ht)
            bl, bh = unpack2(rb(w), ht)
            cl, ch = unpack2(rc(w), ht)
            w_full(w, m, pack2(hfma(al, bl, cl, ht), hfma(ah, bh, ch, ht), ht))
        return fn

    def fn(w, g, m):
        w_full(w, m, hfma(ra(w), rb(w), rc(w), t))
    return fn


@handler("div")
def dec_div(ctx, ins, mods, ops):
    flags, (t,) = split_mods(ctx, mods, RND | {"ftz", "approx", "full"})
    if t in INT_TYPES:
        dt = NP[t]

        def op(a, b):
            a = np.asarray(a, dt)
            b = np.asarray(b, dt)
            with np.errstate(all="ignore"):
                if dt.kind == "i":
                    q = np.trunc(a.astype(np.float64) / np.where(b == 0, 1, b)).astype(dt) \
                        if dt.itemsize < 8 else _sdiv64(a, b)
                else:
                    q = a // np.where(b == 0, 1, b)
                return np.where(b == 0, np.array(-1).astype(dt) if dt.kind == "i" else
                                np.array(-1, np.int64).astype(dt), q).astype(dt)
        return binary(ctx, ops, t, op)
    fast = lambda a, b: np.divide(a, b, dtype=np.float32)
    return binary(ctx, ops, t, float_binop(ctx, flags - {"approx", "full"}, t, np.divide, fast))


def _sdiv64(a, b):
    bb = np.where(b == 0, 1, b)
    q = np.abs(a).view(np.uint64) // np.abs(bb).view(np.uint64)
    return np.where((a < 0) != (bb < 0), -q.view(np.int64), q.view(np.int64))


@handler("rem")
def dec_rem(ctx, ins, mods, ops):
    flags, (t,) = split_mods(ctx, mods, set(), INT_TYPES)
    dt = NP[t]

    def op(a, b):
        a = np.asarray(a, dt)
        b = np.asarray(b, dt)
        with np.errstate(all="ignore"):
            bb = np.where(b == 0, 1, b).astype(dt)
            r = np.fmod(a, bb) if dt.kind == "i" else a % bb
            return np.where(b == 0, a, r).astype(dt)
    return binary(ctx, ops, t, op)



@handler("abs", "neg")
def dec_absneg(ctx, ins, mods, ops):
    base = ins.opcode.split(".")[0]
    flags, (t,) = split_mods(ctx, mods, {"ftz"})
    dt = NP[t]
    if t in INT_TYPES:
        if base == "abs":
            return unary(ctx, ops, t, lambda a: np.where(np.asarray(a) < 0, np.negative(a, dtype=dt), a).astype(dt))
        return unary(ctx, ops, t, lambda a: np.negative(a, dtype=dt))
    ut = utype(t)
    sign = np.array(1 << (8 * dt.itemsize - 1), dtype=np.uint64).astype(ut)[()]
    if t in PACKED:
        ut, sign = np.dtype(np.uint32), np.uint32(0x80008000)
    fz = "ftz" in flags and t not in PACKED

    if base == "abs":
        def op(a):
            a = np.asarray(a, dt)
            r = (a.view(ut) & ~sign).view(dt)
            return nm.ftz(r) if fz else r
    else:
        def op(a):
            a = np.asarray(a, dt)
            r = (a.view(ut) ^ sign).view(dt)
            return nm.ftz(r) if fz else r
    return unary(ctx, ops, t, op)


# -- transcendental / approximate (modelled as correctly rounded) ---------------------------

_UFN = {"rcp": lambda x: 1.0 / x, "sqrt": np.sqrt, "rsqrt": lambda x: 1.0 / np.sqrt(x),
        "ex2": np.exp2, "lg2": np.log2, "sin": np.sin, "cos": np.cos, "tanh": np.tanh}


@handler(*_UFN)
def dec_ufn(ctx, ins, mods, ops):
    base = ins.opcode.split(".")[0]
    flags, (t,) = split_mods(ctx, mods, RND | {"approx", "ftz", "full"}, FLOAT_TYPES | set(PACKED))
    f = _UFN[base]
    dt = NP[t]
    mode = next((x for x in flags if x in RND), "rn")
    if t in PACKED:
        ht = PACKED[t]

        def op(a):
            lo, hi = unpack2(a, ht)
            with np.errstate(all="ignore"):
                return pack2(nm.f64_to(f(lo.astype(np.float64)), NP[ht]),
                             nm.f64_to(f(hi.astype(np.float64)), NP[ht]), ht)
        return unary(ctx, ops, t, op)
    fz = "ftz" in flags

    # f32 round to nearest: one cast of the f64 result (what nm.f64_to does for it)
    rn32 = dt == np.float32 and mode == "rn"

    def op(a):                  # (launches run under np.errstate(all="ignore"): Launch.run)
        a = np.asarray(a, dt)
        if fz:
            a = nm.ftz(a)
        y = f(a.astype(np.float64))
        r = y.astype(dt) if rn32 else nm.f64_to(y, dt, mode)
        return nm.ftz(r) if fz else r
    return unary(ctx, ops, t, op)
