"""Moves and conversions: mov (pack/unpack, symbols, special registers) and cvt.

Decoders receive ``(ctx, ins, mods, ops)`` and return the execution closure ``fn(warp, group,
mask)``; see :mod:`cutedsl.sim.engines.alu` for the shared conventions.
"""
from __future__ import annotations

import sys

import numpy as np

from ..engines import numerics as nm
from ..engines.alu import (ALL_TYPES, FLOAT_TYPES, INT_TYPES, IRND, PACKED, RND, direct, need_ops, pack2,
                  split_mods, utype)
from ..frontend.registry import handler
from ..frontend.ptxtypes import NP


def _same(a):
    return a


# -- mov ----------------------------------------------------------------------------------

@handler("mov")
def dec_mov(ctx, ins, mods, ops):
    if mods == ["b128"]:
        return _mov_b128(ctx, ops)
    flags, (t,) = split_mods(ctx, mods, set())
    need_ops(ctx, ops, 2)
    d = ctx.operand(ops[0])
    s = ctx.operand(ops[1])
    if s.kind == "vec":                       # pack {a, b} -> d
        n = len(s.items)
        et = f"b{8 * NP[t].itemsize // n}"
        readers = [ctx.rd(x, et) for x in s.items]
        w_full, _ = ctx.wr(d, t)
        edt = NP[et]
        ut = utype(t)
        sh = [np.array(8 * edt.itemsize * i, dtype=np.uint64).astype(ut)[()] for i in range(n)]

        def fn(w, g, m):
            acc = np.zeros(w.p.shape[1], ut)     # 32 lanes, or a lockstep batch
            for i, r in enumerate(readers):
                acc |= np.asarray(r(w)).astype(ut) << sh[i]
            w_full(w, m, acc)
        return fn
    if d.kind == "vec":                       # unpack s -> {a, b}
        n = len(d.items)
        et = f"b{8 * NP[t].itemsize // n}"
        writers = [ctx.wr(x, et)[0] for x in d.items]
        rs = ctx.rd(s, "u" + t[1:] if t[0] == "b" else t)
        edt = NP[et]
        ut = utype(t)
        nbits = 8 * edt.itemsize
        sh = [np.array(nbits * i, dtype=np.uint64).astype(ut)[()] for i in range(n)]
        mask = np.array((1 << nbits) - 1, dtype=np.uint64).astype(ut)[()]

        def fn(w, g, m):
            v = np.asarray(rs(w)).view(ut) if np.asarray(rs(w)).dtype != ut else np.asarray(rs(w))
            for i, wr in enumerate(writers):
                wr(w, m, ((v >> sh[i]) & mask).astype(edt))
        return fn
    if s.kind == "label":
        ctx.bad(f"unknown symbol {s.name!r}")
    w_full, _ = ctx.wr(d, t)
    rs = ctx.rd(s, t)

    def fn(w, g, m):
        w_full(w, m, rs(w))
    ctx.vector(_same, w_full, (rs,))
    return direct(_same, w_full, (rs,)) or fn


def _mov_b128(ctx, ops):
    """``mov.b128 d, {lo, hi}`` / ``mov.b128 {lo, hi}, s`` / ``mov.b128 d, s``: a ``.b128``
    register is its two 64-bit halves (:func:`cutedsl.sim.frontend.program._decl_b128`)."""
    need_ops(ctx, ops, 2)
    d, s = ctx.operand(ops[0]), ctx.operand(ops[1])
    if d.kind != "vec" or s.kind != "vec" or len(d.items) != 2 or len(s.items) != 2:
        ctx.bad("mov.b128 moves a .b128 register or a {lo, hi} pair of 64-bit registers")
    moves = [(ctx.wr(a, "b64")[0], ctx.rd(b, "u64")) for a, b in zip(d.items, s.items)]

    def fn(w, g, m):
        vals = [r(w) for _, r in moves]          # both read before either is written
        for (wr, _), v in zip(moves, vals):
            wr(w, m, v)
    return fn


# -- cvt ----------------------------------------------------------------------------------

_INT_LIMITS = {t: (np.iinfo(NP[t]).min, np.iinfo(NP[t]).max) for t in INT_TYPES}
FP8 = {"e4m3": nm.E4M3, "e5m2": nm.E5M2}


@handler("cvt")
def dec_cvt(ctx, ins, mods, ops):
    tys = [m for m in mods if m in ALL_TYPES or m in ("e4m3x2", "e5m2x2", "tf32")]
    flags = [m for m in mods if m not in tys]
    allowed = RND | IRND | {"ftz", "sat", "satfinite", "relu", "rna"}
    for f in flags:
        if f not in allowed:
            ctx.unsupported(f"unsupported cvt modifier .{f}")
    flags = set(flags)
    if len(tys) != 2:
        ctx.unsupported(f"cvt needs two types, got {tys}")
    dt_, st = tys
    irnd = next((f for f in flags if f in IRND), None)
    rnd = next((f for f in flags if f in RND), None)
    satf = "satfinite" in flags

    # packed two-input forms
    if dt_ in ("f16x2", "bf16x2", "e4m3x2", "e5m2x2") and st == "f32":
        need_ops(ctx, ops, 3)
        w_full, _ = ctx.wr(ops[0], "b32" if dt_ in PACKED else "b16")
        ra, rb = ctx.rd(ops[1], "f32"), ctx.rd(ops[2], "f32")
        relu = "relu" in flags
        if dt_ in PACKED:
            ht = PACKED[dt_]

            def conv(x):
                if relu:
                    x = np.asarray(x, np.float64)
                    x = np.where(np.isnan(x), x, np.maximum(x, 0.0))
                return nm.f64_to(x, NP[ht], rnd or "rn", satfinite=satf)     # f32 in: exact in f64

            plain = not relu and not satf and (rnd or "rn") == "rn" and sys.byteorder == "little"
            hdt = NP[ht]

            def pack(a, b):             # a is the upper half (PTX ISA 9.7.9.21, cvt)
                a, b = np.asarray(a), np.asarray(b)
                if plain and a.dtype == np.float32 and b.dtype == np.float32 and a.shape == b.shape:
                    # f32 -> f16/bf16 by rn is one cast (nm.f64_to); a NaN takes the general path
                    if ht == "f16":
                        if a.ndim:          # both halves in one conversion (its cost is per call)
                            h = nm.f32_to_f16_bits(np.concatenate((b, a)))
                            if h is not None:
                                hi = h[len(b):]
                                hi <<= 16
                                hi |= h[:len(b)]
                                return hi
                        else:
                            lo = nm.f32_to_f16_bits(b)
                            hi = nm.f32_to_f16_bits(a) if lo is not None else None
                            if hi is not None:
                                return lo | (hi << 16)
                    elif not (np.isnan(a).any() or np.isnan(b).any()):
                        out = np.empty(a.shape + (2,), hdt)         # (little-endian: low half first)
                        out[..., 0] = b
                        out[..., 1] = a
                        return out.view(np.uint32)[..., 0]
                return pack2(conv(b), conv(a), ht)

            def fn(w, g, m):
                w_full(w, m, pack(ra(w), rb(w)))
            ctx.vector(pack, w_full, (ra, rb))
            return direct(pack, w_full, (ra, rb)) or fn
        fdt = FP8[dt_[:4]]

        def conv8(x):
            x = np.asarray(x, np.float64)
            if relu:
                x = np.where(np.isnan(x), x, np.maximum(x, 0.0))
            return nm.f64_to(x, fdt, "rn", satfinite=satf).view(np.uint8).astype(np.uint16)

        def fn(w, g, m):
            w_full(w, m, conv8(rb(w)) | (conv8(ra(w)) << np.uint16(8)))
        return fn
    if st in ("e4m3x2", "e5m2x2") and dt_ in ("f16x2",):
        need_ops(ctx, ops, 2)
        w_full, _ = ctx.wr(ops[0], "b32")
        ra = ctx.rd(ops[1], "b16")
        fdt = FP8[st[:4]]

        def fn(w, g, m):
            v = np.asarray(ra(w), np.uint16)
            lo = (v & 0xFF).astype(np.uint8).view(fdt).astype(np.float16)
            hi = (v >> 8).astype(np.uint8).view(fdt).astype(np.float16)
            w_full(w, m, pack2(lo, hi, "f16"))
        return fn
    if dt_ == "tf32" and st == "f32":
        w_full, _ = ctx.wr(ops[0], "b32")
        ra = ctx.rd(ops[1], "b32")
        if "rna" not in flags and rnd not in (None, "rn", "rz"):
            ctx.unsupported("cvt.tf32.f32 rounding")

        def fn(w, g, m):
            b = np.asarray(ra(w), np.uint32).astype(np.uint64)
            if "rz" in flags:
                r = b & 0xFFFFE000
            else:   # round to nearest, ties away
                r = (b + 0x1000) & 0xFFFFE000
                f = np.asarray(ra(w), np.uint32).view(np.float32)
                r = np.where(np.isfinite(f), r, b)
            w_full(w, m, r.astype(np.uint32))
        return fn
    need_ops(ctx, ops, 2)
    if dt_ not in NP or st not in NP:
        ctx.unsupported(f"cvt .{dt_}.{st}")
    w_full, _ = ctx.wr(ops[0], dt_)
    ra = ctx.rd(ops[1], st)
    D, S = NP[dt_], NP[st]
    d_is_f = dt_ in FLOAT_TYPES
    s_is_f = st in FLOAT_TYPES
    ftzf = "ftz" in flags
    sat = "sat" in flags
    relu = "relu" in flags

    if not d_is_f and not s_is_f:                       # int -> int
        lo, hi = _INT_LIMITS[dt_]

        def conv(a):
            a = np.asarray(a)
            if sat:
                if S.kind == "u" and D.kind == "i" or S.itemsize >= 8 or D.itemsize >= 8:
                    return np.clip(a, max(lo, np.iinfo(S).min), min(hi, np.iinfo(S).max)).astype(D)
                return np.clip(a.astype(np.int64), lo, hi).astype(D)
            return a.astype(D)
    elif not d_is_f:                                     # float -> int
        mode = irnd or ("rzi" if rnd is None else None)
        if mode is None:
            ctx.unsupported("float -> int cvt needs .rni/.rzi/.rmi/.rpi")
        rf = {"rni": np.rint, "rzi": np.trunc, "rmi": np.floor, "rpi": np.ceil}[mode]
        lo, hi = _INT_LIMITS[dt_]

        def conv(a):
            a = np.asarray(a).astype(np.float64)
            if ftzf:
                a = nm.ftz(a)
            r = rf(a)
            r = np.where(np.isnan(r), 0, np.clip(r, lo, hi))
            if D.itemsize == 8:
                big = r >= 2.0 ** 63 if D.kind == "i" else r >= 2.0 ** 64
                out = np.where(big, 0, r).astype(D)
                return np.where(big, np.array(hi, dtype=D), out)
            return r.astype(D)
    elif not s_is_f:                                     # int -> float
        mode = rnd or "rn"

        def conv(a):
            a = np.asarray(a)
            if S.itemsize <= 4:
                return nm.f64_to(a.astype(np.float64), D, mode)
            if mode != "rn":
                # exact split: high part exact in f64, rounding error from the remainder
                x = a.astype(np.float64)
                return nm.f64_to(x, D, mode)
            if D == np.float64 or D == np.float32:
                return a.astype(D)
            return nm.f64_to(a.astype(np.float64), D, mode)
    else:                                                # float -> float
        narrowing = D.itemsize < S.itemsize or (dt_ == "bf16" and st == "f16") or (dt_ == "f16" and st == "bf16")
        if irnd:
            rf = {"rni": np.rint, "rzi": np.trunc, "rmi": np.floor, "rpi": np.ceil}[irnd]

            def conv(a):
                a = np.asarray(a)
                if ftzf:
                    a = nm.ftz(a)
                return rf(a.astype(np.float64)).astype(D)
        else:
            mode = rnd or "rn"
            if narrowing and rnd is None:
                ctx.unsupported("narrowing float cvt needs a rounding modifier")

            def conv(a):
                a = np.asarray(a)
                if ftzf:
                    a = nm.ftz(a)
                r = nm.f64_to(a, D, mode, satfinite=satf)       # widened to f64 there (exact)
                if ftzf:
                    r = nm.ftz(r)
                return r
        if sat or relu:
            conv0 = conv

            def conv(a):
                r = conv0(a)
                if sat:
                    r = nm.sat01(r)
                if relu:
                    r = np.where(np.isnan(r) | (r >= 0), r, np.zeros_like(r)).astype(D)
                return r

    def fn(w, g, m):                # (launches run under np.errstate(all="ignore"): Launch.run)
        w_full(w, m, conv(ra(w)))
    ctx.vector(conv, w_full, (ra,))
    return direct(conv, w_full, (ra,)) or fn
