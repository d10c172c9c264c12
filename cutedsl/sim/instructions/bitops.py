"""Logic, shifts and bit manipulation: and/or/xor/not/cnot/shl/shr/bfe/bfi/prmt/popc/clz/
brev/bfind/copysign/testp.

Decoders receive ``(ctx, ins, mods, ops)`` and return the execution closure ``fn(warp, group,
mask)``; see :mod:`cutedsl.sim.engines.alu` for the shared conventions.
"""
from __future__ import annotations

import numpy as np

from ..engines import numerics as nm
from ..engines.alu import INT_TYPES, binary, need_ops, split_mods, unary
from ..frontend.registry import handler
from ..frontend.ptxtypes import NP


# -- logic, shifts, bit manipulation ----------------------------------------------------

@handler("and", "or", "xor")
def dec_logic(ctx, ins, mods, ops):
    base = ins.opcode.split(".")[0]
    flags, (t,) = split_mods(ctx, mods, set(), INT_TYPES | {"pred"})
    f = {"and": np.bitwise_and, "or": np.bitwise_or, "xor": np.bitwise_xor}[base]
    if t == "pred":
        return binary(ctx, ops, t, f)
    tt = "u" + t[1:] if t[0] in "bs" else t
    return binary(ctx, ops, tt, f)


@handler("not", "cnot")
def dec_not(ctx, ins, mods, ops):
    base = ins.opcode.split(".")[0]
    flags, (t,) = split_mods(ctx, mods, set(), INT_TYPES | {"pred"})
    if t == "pred":
        return unary(ctx, ops, t, np.logical_not)
    tt = "u" + t[1:] if t[0] in "bs" else t
    dt = NP[tt]
    if base == "cnot":
        return unary(ctx, ops, tt, lambda a: (np.asarray(a) == 0).astype(dt))
    return unary(ctx, ops, tt, np.invert)


@handler("shl", "shr")
def dec_shift(ctx, ins, mods, ops):
    base = ins.opcode.split(".")[0]
    flags, (t,) = split_mods(ctx, mods, set(), INT_TYPES)
    dt = NP[t if base == "shr" else "u" + t[1:]]
    t2 = t if base == "shr" else "u" + t[1:]
    nb = dt.itemsize * 8
    lim = nb - 1
    if base == "shl":
        def op(a, b):
            b = np.asarray(b, np.uint32)
            if not b.ndim and b <= lim and getattr(a, "ndim", 0):
                # one shift count in range (an immediate): the same values, one numpy call
                return np.left_shift(a, b.astype(dt), dtype=dt)
            return np.where(b > lim, 0, np.left_shift(a, np.minimum(b, lim).astype(dt), dtype=dt)).astype(dt)
    elif dt.kind == "i":
        def op(a, b):
            b = np.minimum(np.asarray(b, np.uint32), lim).astype(dt)
            return np.right_shift(a, b, dtype=dt)
    else:
        def op(a, b):
            b = np.asarray(b, np.uint32)
            return np.where(b > lim, 0, np.right_shift(a, np.minimum(b, lim).astype(dt), dtype=dt)).astype(dt)
    return binary(ctx, ops, t2, op, tb="u32")


@handler("bfe")
def dec_bfe(ctx, ins, mods, ops):
    flags, (t,) = split_mods(ctx, mods, set(), {"u32", "s32", "u64", "s64"})
    need_ops(ctx, ops, 4)
    dt = NP[t]
    nb = dt.itemsize * 8
    signed = t[0] == "s"
    w_full, _ = ctx.wr(ops[0], t)
    ra, rb, rc = ctx.rd(ops[1], t), ctx.rd(ops[2], "u32"), ctx.rd(ops[3], "u32")

    def extract(a, pos, ln):
        a = np.asarray(a).astype(np.int64 if signed else np.uint64)
        pos = np.asarray(pos).astype(np.int64) & 0xFF
        ln = np.asarray(ln).astype(np.int64) & 0xFF
        if signed:
            sbit = np.minimum(pos + ln - 1, nb - 1)
            sh = np.minimum(pos, nb - 1)
            x = a >> sh
            x = np.where(pos >= nb, a >> (nb - 1), x)
            # sign-extend from bit (ln-1) of x unless the field runs past the msb
            l2 = np.clip(np.minimum(ln, nb - np.minimum(pos, nb)), 1, 64)
            msk = np.where(l2 >= 64, -1, (np.left_shift(1, np.minimum(l2, 63)) - 1))
            x = x & msk
            neg = ((a >> sbit) & 1).astype(bool)
            x = np.where(neg & (l2 < 64), x | ~msk, x)
            r = np.where(ln == 0, 0, x)
            return np.asarray(r).astype(dt)
        else:
            sh = np.minimum(pos, 63).astype(np.uint64)
            x = np.where(pos >= nb, np.uint64(0), a >> sh)
            l2 = np.minimum(ln, 64)
            msk = np.where(l2 >= 64, np.uint64(2 ** 64 - 1),
                           (np.left_shift(np.uint64(1), np.minimum(l2, 63).astype(np.uint64)) - np.uint64(1)))
            r = np.where(ln == 0, np.uint64(0), x & msk)
            return np.asarray(r).astype(dt)

    def fn(w, g, m):
        w_full(w, m, extract(ra(w), rb(w), rc(w)))
    ctx.vector(extract, w_full, (ra, rb, rc))
    return fn


@handler("bfi")
def dec_bfi(ctx, ins, mods, ops):
    flags, (t,) = split_mods(ctx, mods, set(), {"b32", "b64"})
    need_ops(ctx, ops, 5)
    ut = NP[t]
    nb = ut.itemsize * 8
    w_full, _ = ctx.wr(ops[0], t)
    ra, rb = ctx.rd(ops[1], t), ctx.rd(ops[2], t)
    rp, rl = ctx.rd(ops[3], "u32"), ctx.rd(ops[4], "u32")

    def fn(w, g, m):
        f = np.asarray(ra(w)).astype(np.uint64)
        b = np.asarray(rb(w)).astype(np.uint64)
        pos = np.asarray(rp(w)).astype(np.int64) & 0xFF
        ln = np.asarray(rl(w)).astype(np.int64) & 0xFF
        ln = np.minimum(ln, np.maximum(nb - pos, 0))
        msk = np.where(ln >= 64, np.uint64(2 ** 64 - 1),
                       np.left_shift(np.uint64(1), np.minimum(ln, 63).astype(np.uint64)) - np.uint64(1))
        sh = np.minimum(pos, 63).astype(np.uint64)
        msk = np.where(pos >= nb, np.uint64(0), np.left_shift(msk, sh))
        r = (b & ~msk) | (np.left_shift(f, sh) & msk)
        w_full(w, m, np.asarray(r).astype(ut))
    return fn


@handler("prmt")
def dec_prmt(ctx, ins, mods, ops):
    flags, (t,) = split_mods(ctx, mods, {"f4e", "b4e", "rc8", "ecl", "ecr", "rc16"}, {"b32"})
    need_ops(ctx, ops, 4)
    mode = next(iter(flags), None)
    w_full, _ = ctx.wr(ops[0], "b32")
    ra, rb, rc = ctx.rd(ops[1], "b32"), ctx.rd(ops[2], "b32"), ctx.rd(ops[3], "b32")

    def fn(w, g, m):
        width = w.p.shape[1]        # 32 lanes, or a lockstep batch of warps
        a = np.broadcast_to(np.asarray(ra(w), np.uint32), (width,))
        b = np.broadcast_to(np.asarray(rb(w), np.uint32), (width,))
        c = np.broadcast_to(np.asarray(rc(w), np.uint32), (width,))
        src = np.concatenate([a[:, None], b[:, None]], axis=1).view(np.uint8)   # (lanes, 8) bytes
        if mode is None:
            sels = [(c >> (4 * i)) & 0xF for i in range(4)]
        else:
            s = c & 3
            tab = {"f4e": lambda i: (s + i) & 7, "b4e": lambda i: (s - i) & 7,
                   "rc8": lambda i: s, "ecl": lambda i: np.maximum(s, i) if False else np.where(i <= s, i, s),
                   "ecr": lambda i: np.where(i >= s, i, s),
                   "rc16": lambda i: ((c & 1) * 2 + (i & 1))}
            sels = [np.asarray(tab[mode](i), np.uint32) for i in range(4)]
        lanes = np.arange(width)
        out = np.zeros((width, 4), np.uint8)
        for i, sel in enumerate(sels):
            sel = np.broadcast_to(sel, (width,))
            byte = src[lanes, (sel & 7).astype(np.int64)]
            if mode is None:
                rep = (sel & 8) != 0
                byte = np.where(rep, np.where(byte & 0x80, 0xFF, 0), byte).astype(np.uint8)
            out[:, i] = byte
        w_full(w, m, out.view(np.uint32)[:, 0])
    return fn


@handler("popc", "clz", "brev", "bfind")
def dec_bits(ctx, ins, mods, ops):
    base = ins.opcode.split(".")[0]
    flags, (t,) = split_mods(ctx, mods, {"shiftamt"}, {"b32", "b64", "u32", "u64", "s32", "s64"})
    dt = NP[t]
    nb = dt.itemsize * 8
    if base == "popc":
        return unary(ctx, ops, "u32", lambda a: np.bitwise_count(a).astype(np.uint32), ta=t)
    if base == "clz":
        def op(a):
            a = np.asarray(a).astype(np.uint64)
            return (nb - _bitlen(a)).astype(np.uint32)
        return unary(ctx, ops, "u32", op, ta=t)
    if base == "brev":
        def op(a):
            a = np.asarray(a).astype(np.uint64)
            r = np.zeros_like(a)
            for i in range(nb):
                r |= ((a >> np.uint64(i)) & np.uint64(1)) << np.uint64(nb - 1 - i)
            return r.astype(dt)
        return unary(ctx, ops, t, op)
    shift = "shiftamt" in flags

    def op(a):
        a = np.asarray(a)
        if t[0] == "s":
            a = np.where(a < 0, ~a, a)
        bl = _bitlen(np.asarray(a).astype(np.int64).view(np.uint64) if t[0] == "s" else np.asarray(a).astype(np.uint64))
        pos = bl.astype(np.int64) - 1
        r = np.where(pos < 0, 0xFFFFFFFF, (nb - 1 - pos) if shift else pos)
        return r.astype(np.int64).astype(np.uint32)
    return unary(ctx, ops, "u32", op, ta=t)


def _bitlen(a):
    """Number of significant bits of uint64 values."""
    a = np.asarray(a, np.uint64)
    n = np.zeros(a.shape, np.int64)
    x = a.copy()
    for s in (32, 16, 8, 4, 2, 1):
        big = x >= (np.uint64(1) << np.uint64(s))
        n = n + np.where(big, s, 0)
        x = np.where(big, x >> np.uint64(s), x)
    return n + (x > 0)


@handler("copysign")
def dec_copysign(ctx, ins, mods, ops):
    flags, (t,) = split_mods(ctx, mods, set(), {"f32", "f64"})
    return binary(ctx, ops, t, lambda a, b: np.copysign(b, a).astype(NP[t]))


@handler("testp")
def dec_testp(ctx, ins, mods, ops):
    flags, (t,) = split_mods(ctx, mods, {"finite", "infinite", "number", "notanumber", "normal",
                                          "subnormal"}, {"f32", "f64"})
    k = next(iter(flags))
    tiny = nm.TINY[NP[t]]
    f = {"finite": np.isfinite, "infinite": np.isinf, "number": lambda a: ~np.isnan(a),
         "notanumber": np.isnan, "normal": lambda a: np.isfinite(a) & (np.abs(a) >= tiny),
         "subnormal": lambda a: (np.abs(a) < tiny) & (a != 0)}[k]
    return unary(ctx, ops, "pred", f, ta=t)
