"""Integer, float, logic, compare, move, conversion and control-flow instructions.

Each decoder receives ``(ctx, ins, mods, ops)``: the :class:`~cutedsl.sim.program.DecodeCtx`,
the :class:`~cutedsl.sim.program.Instr`, the dot-separated modifiers after the opcode base
(e.g. ``['rn', 'f32']``) and the raw operand strings, and returns the execution closure
``fn(warp, group, mask)``. Values are numpy arrays over the 32 lanes (or numpy scalars for
immediates and uniform special registers); inactive lanes compute garbage that the masked
write discards. Integer arithmetic wraps like PTX; float arithmetic follows
:mod:`cutedsl.sim.numerics` for rounding modes, ``.ftz`` and ``.sat``.
"""
from __future__ import annotations

import numpy as np

from . import numerics as nm
from .program import JUMPED, NP, RESCHED, YIELD, handler
from .errors import SimRuntimeError

INT_TYPES = {"u8", "s8", "b8", "u16", "s16", "b16", "u32", "s32", "b32", "u64", "s64", "b64"}
FLOAT_TYPES = {"f32", "f64", "f16", "bf16"}
PACKED = {"f16x2": "f16", "bf16x2": "bf16"}
RND = {"rn", "rz", "rm", "rp"}
IRND = {"rni", "rzi", "rmi", "rpi"}
ALL_TYPES = INT_TYPES | FLOAT_TYPES | set(PACKED) | {"pred"}


def split_mods(ctx, mods, allowed, types=ALL_TYPES, ntypes=1):
    """Return (flags set, [types]) from ``mods``; unknown modifiers fail at load."""
    flags, tys = set(), []
    for m in mods:
        if m in types:
            tys.append(m)
        elif m in allowed:
            flags.add(m)
        else:
            ctx.unsupported(f"unsupported modifier .{m}")
    if len(tys) != ntypes:
        ctx.unsupported(f"expected {ntypes} type modifier(s), got {tys}")
    return flags, tys


def _u(t):
    return np.dtype(f"u{NP[t].itemsize}")


def _need(ctx, ops, n):
    if len(ops) != n:
        ctx.bad(f"expected {n} operands, got {len(ops)}")


# -- packed half helpers -------------------------------------------------------------------

def unpack2(v, ht):
    v = np.asarray(v, np.uint32)
    lo = (v & 0xFFFF).astype(np.uint16).view(NP[ht])
    hi = (v >> 16).astype(np.uint16).view(NP[ht])
    return lo, hi


def pack2(lo, hi, ht):
    lo = np.asarray(lo, NP[ht]).view(np.uint16).astype(np.uint32)
    hi = np.asarray(hi, NP[ht]).view(np.uint16).astype(np.uint32)
    return lo | (hi << 16)


def _half_op(f, ht):
    """Lift a float64 op to f16/bf16: compute exactly-ish in f64, round once."""
    def g(*args, mode="rn"):
        r = f(*[np.asarray(a, NP[ht]).astype(np.float64) for a in args])
        return nm.f64_to(r, NP[ht], mode)
    return g


# -- arithmetic ----------------------------------------------------------------------------

def _float_post(r, flags, dt):
    if "ftz" in flags:
        r = nm.ftz(r)
    if "sat" in flags:
        r = nm.sat01(r)
    if "relu" in flags:
        r = np.where(np.isnan(r) | (r < 0), np.zeros_like(r), r).astype(dt)
    return r


def _make_float_binop(ctx, flags, t, f64op, f32fast):
    """Closure computing a float binary op with rounding mode handling."""
    mode = next((m for m in flags if m in RND), "rn")
    dt = NP[t]
    ftzf = "ftz" in flags
    if t in PACKED:
        ht = PACKED[t]
        hop = _half_op(f64op, ht)

        def op(a, b):
            al, ah = unpack2(a, ht)
            bl, bh = unpack2(b, ht)
            return pack2(_float_post(hop(al, bl, mode=mode), flags, NP[ht]),
                         _float_post(hop(ah, bh, mode=mode), flags, NP[ht]), ht)
        return op
    if t in ("f16", "bf16"):
        hop = _half_op(f64op, t)
        return lambda a, b: _float_post(hop(a, b, mode=mode), flags, dt)
    if t == "f32":
        if mode == "rn" and not (flags - {"rn"}):
            return f32fast

        def op(a, b):
            if ftzf:
                a, b = nm.ftz(np.asarray(a, dt)), nm.ftz(np.asarray(b, dt))
            if mode == "rn":
                r = f32fast(a, b)
            else:
                a64, b64 = np.asarray(a, np.float64), np.asarray(b, np.float64)
                if f64op is np.add or f64op is np.subtract:
                    s, e = nm.two_sum(a64, b64 if f64op is np.add else -b64)
                    r = nm.f64_to(s, dt, mode, err=e)
                else:
                    r = nm.f64_to(f64op(a64, b64), dt, mode)
            return _float_post(r, flags, dt)
        return op
    if t == "f64":
        if flags - {"rn"}:
            if mode != "rn":
                ctx.unsupported(f"directed rounding .{mode} for .f64 is not supported")
        return lambda a, b: _float_post(f64op(a, b), flags, dt)
    ctx.unsupported(f"float op on .{t}")


def _binary(ctx, ops, t, op, ta=None, tb=None, td=None):
    _need(ctx, ops, 3)
    w_full, _ = ctx.wr(ops[0], td or t)
    ra = ctx.rd(ops[1], ta or t)
    rb = ctx.rd(ops[2], tb or t)

    def fn(w, g, m):
        w_full(w, m, op(ra(w), rb(w)))
    return fn


def _sat_s32(r64):
    return np.clip(r64, -2 ** 31, 2 ** 31 - 1).astype(np.int32)


@handler("add", "sub")
def dec_addsub(ctx, ins, mods, ops):
    base = ins.opcode.split(".")[0]
    flags, (t,) = split_mods(ctx, mods, RND | {"ftz", "sat", "relu", "cc"})
    if "cc" in flags:
        ctx.unsupported("carry (.cc) arithmetic is not supported")
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
        return _binary(ctx, ops, t, op)
    f64op = np.add if base == "add" else np.subtract
    fast = (lambda a, b: np.add(a, b, dtype=np.float32)) if base == "add" else \
        (lambda a, b: np.subtract(a, b, dtype=np.float32))
    return _binary(ctx, ops, t, _make_float_binop(ctx, flags, t, f64op, fast))


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
    flags, (t,) = split_mods(ctx, mods, RND | {"ftz", "sat", "lo", "hi", "wide"})
    if t in INT_TYPES:
        dt = NP[t]
        if "wide" in flags:
            wt = _wide_t(t)
            wd = NP[wt]
            return _binary(ctx, ops, t, lambda a, b: np.multiply(np.asarray(a).astype(wd),
                                                                 np.asarray(b).astype(wd), dtype=wd), td=wt)
        if "hi" in flags:
            return _binary(ctx, ops, t, lambda a, b: mulhi(a, b, t))
        return _binary(ctx, ops, t, lambda a, b: np.multiply(a, b, dtype=dt))
    fast = lambda a, b: np.multiply(a, b, dtype=np.float32)
    return _binary(ctx, ops, t, _make_float_binop(ctx, flags, t, np.multiply, fast))


@handler("mul24", "mad24")
def dec_24(ctx, ins, mods, ops):
    ctx.unsupported("mul24/mad24 are not supported")


@handler("mad", "fma")
def dec_mad(ctx, ins, mods, ops):
    flags, (t,) = split_mods(ctx, mods, RND | {"ftz", "sat", "lo", "hi", "wide", "relu", "oob"})
    _need(ctx, ops, 4)
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
    if t == "f32":
        ftzf = "ftz" in flags
        simple = not (flags - {"rn"})

        def fn(w, g, m):
            a, b, c = ra(w), rb(w), rc(w)
            if ftzf:
                a, b, c = nm.ftz(np.asarray(a, dt)), nm.ftz(np.asarray(b, dt)), nm.ftz(np.asarray(c, dt))
            r = nm.fma_f32(a, b, c, mode)
            w_full(w, m, r if simple else _float_post(r, flags, dt))
        return fn
    if t == "f64":
        def fn(w, g, m):
            w_full(w, m, nm.fma_f64(ra(w), rb(w), rc(w)))
        return fn

    def hfma(a, b, c, ht):
        a64, b64, c64 = (np.asarray(x, NP[ht]).astype(np.float64) for x in (a, b, c))
        s, e = nm.two_sum(a64 * b64, c64)
        return _float_post(nm.f64_to(s, NP[ht], mode, err=e), flags, NP[ht])
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
        return _binary(ctx, ops, t, op)
    fast = lambda a, b: np.divide(a, b, dtype=np.float32)
    return _binary(ctx, ops, t, _make_float_binop(ctx, flags - {"approx", "full"}, t, np.divide, fast))


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
    return _binary(ctx, ops, t, op)


def _unary(ctx, ops, t, op, ta=None):
    _need(ctx, ops, 2)
    w_full, _ = ctx.wr(ops[0], t)
    ra = ctx.rd(ops[1], ta or t)

    def fn(w, g, m):
        w_full(w, m, op(ra(w)))
    return fn


@handler("abs", "neg")
def dec_absneg(ctx, ins, mods, ops):
    base = ins.opcode.split(".")[0]
    flags, (t,) = split_mods(ctx, mods, {"ftz"})
    dt = NP[t]
    if t in INT_TYPES:
        if base == "abs":
            return _unary(ctx, ops, t, lambda a: np.where(np.asarray(a) < 0, np.negative(a, dtype=dt), a).astype(dt))
        return _unary(ctx, ops, t, lambda a: np.negative(a, dtype=dt))
    ut = _u(t)
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
    return _unary(ctx, ops, t, op)


@handler("min", "max")
def dec_minmax(ctx, ins, mods, ops):
    base = ins.opcode.split(".")[0]
    flags, (t,) = split_mods(ctx, mods, {"ftz", "NaN", "relu", "xorsign", "abs"})
    if flags & {"xorsign", "abs"}:
        ctx.unsupported("min/max .xorsign.abs is not supported")
    dt = NP[t]
    if t in INT_TYPES:
        f = np.minimum if base == "min" else np.maximum
        op = lambda a, b: f(a, b).astype(dt)
        if "relu" in flags:
            op = lambda a, b: np.maximum(f(a, b), 0).astype(dt)
        return _binary(ctx, ops, t, op)
    f = (np.minimum if base == "min" else np.maximum) if "NaN" in flags else \
        (np.fmin if base == "min" else np.fmax)

    def scalar_op(a, b, ht=None):
        dd = NP[ht] if ht else dt
        a64 = np.asarray(a, dd).astype(np.float64)
        b64 = np.asarray(b, dd).astype(np.float64)
        r = f(a64, b64)
        # min(-0, +0) = -0, max = +0
        z = (a64 == 0) & (b64 == 0)
        if np.any(z):
            neg = np.signbit(a64) | np.signbit(b64) if base == "min" else np.signbit(a64) & np.signbit(b64)
            r = np.where(z, np.where(neg, -0.0, 0.0), r)
        r = r.astype(dd)
        return _float_post(r, flags - {"NaN"}, dd)
    if t in PACKED:
        ht = PACKED[t]

        def op(a, b):
            al, ah = unpack2(a, ht)
            bl, bh = unpack2(b, ht)
            return pack2(scalar_op(al, bl, ht), scalar_op(ah, bh, ht), ht)
        return _binary(ctx, ops, t, op)
    return _binary(ctx, ops, t, scalar_op)


# -- logic, shifts, bit manipulation ----------------------------------------------------

@handler("and", "or", "xor")
def dec_logic(ctx, ins, mods, ops):
    base = ins.opcode.split(".")[0]
    flags, (t,) = split_mods(ctx, mods, set(), INT_TYPES | {"pred"})
    f = {"and": np.bitwise_and, "or": np.bitwise_or, "xor": np.bitwise_xor}[base]
    if t == "pred":
        return _binary(ctx, ops, t, f)
    tt = "u" + t[1:] if t[0] in "bs" else t
    return _binary(ctx, ops, tt, f)


@handler("not", "cnot")
def dec_not(ctx, ins, mods, ops):
    base = ins.opcode.split(".")[0]
    flags, (t,) = split_mods(ctx, mods, set(), INT_TYPES | {"pred"})
    if t == "pred":
        return _unary(ctx, ops, t, np.logical_not)
    tt = "u" + t[1:] if t[0] in "bs" else t
    dt = NP[tt]
    if base == "cnot":
        return _unary(ctx, ops, tt, lambda a: (np.asarray(a) == 0).astype(dt))
    return _unary(ctx, ops, tt, np.invert)


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
            return np.where(b > lim, 0, np.left_shift(a, np.minimum(b, lim).astype(dt), dtype=dt)).astype(dt)
    elif dt.kind == "i":
        def op(a, b):
            b = np.minimum(np.asarray(b, np.uint32), lim).astype(dt)
            return np.right_shift(a, b, dtype=dt)
    else:
        def op(a, b):
            b = np.asarray(b, np.uint32)
            return np.where(b > lim, 0, np.right_shift(a, np.minimum(b, lim).astype(dt), dtype=dt)).astype(dt)
    return _binary(ctx, ops, t2, op, tb="u32")


@handler("bfe")
def dec_bfe(ctx, ins, mods, ops):
    flags, (t,) = split_mods(ctx, mods, set(), {"u32", "s32", "u64", "s64"})
    _need(ctx, ops, 4)
    dt = NP[t]
    nb = dt.itemsize * 8
    signed = t[0] == "s"
    w_full, _ = ctx.wr(ops[0], t)
    ra, rb, rc = ctx.rd(ops[1], t), ctx.rd(ops[2], "u32"), ctx.rd(ops[3], "u32")

    def fn(w, g, m):
        a = np.asarray(ra(w)).astype(np.int64 if signed else np.uint64)
        pos = np.asarray(rb(w)).astype(np.int64) & 0xFF
        ln = np.asarray(rc(w)).astype(np.int64) & 0xFF
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
            w_full(w, m, np.asarray(r).astype(dt))
        else:
            sh = np.minimum(pos, 63).astype(np.uint64)
            x = np.where(pos >= nb, np.uint64(0), a >> sh)
            l2 = np.minimum(ln, 64)
            msk = np.where(l2 >= 64, np.uint64(2 ** 64 - 1),
                           (np.left_shift(np.uint64(1), np.minimum(l2, 63).astype(np.uint64)) - np.uint64(1)))
            r = np.where(ln == 0, np.uint64(0), x & msk)
            w_full(w, m, np.asarray(r).astype(dt))
    return fn


@handler("bfi")
def dec_bfi(ctx, ins, mods, ops):
    flags, (t,) = split_mods(ctx, mods, set(), {"b32", "b64"})
    _need(ctx, ops, 5)
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
    _need(ctx, ops, 4)
    mode = next(iter(flags), None)
    w_full, _ = ctx.wr(ops[0], "b32")
    ra, rb, rc = ctx.rd(ops[1], "b32"), ctx.rd(ops[2], "b32"), ctx.rd(ops[3], "b32")

    def fn(w, g, m):
        a = np.broadcast_to(np.asarray(ra(w), np.uint32), (32,))
        b = np.broadcast_to(np.asarray(rb(w), np.uint32), (32,))
        c = np.broadcast_to(np.asarray(rc(w), np.uint32), (32,))
        src = np.concatenate([a[:, None], b[:, None]], axis=1).view(np.uint8)   # (32, 8) bytes
        if mode is None:
            sels = [(c >> (4 * i)) & 0xF for i in range(4)]
        else:
            s = c & 3
            tab = {"f4e": lambda i: (s + i) & 7, "b4e": lambda i: (s - i) & 7,
                   "rc8": lambda i: s, "ecl": lambda i: np.maximum(s, i) if False else np.where(i <= s, i, s),
                   "ecr": lambda i: np.where(i >= s, i, s),
                   "rc16": lambda i: ((c & 1) * 2 + (i & 1))}
            sels = [np.asarray(tab[mode](i), np.uint32) for i in range(4)]
        lanes = np.arange(32)
        out = np.zeros((32, 4), np.uint8)
        for i, sel in enumerate(sels):
            sel = np.broadcast_to(sel, (32,))
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
        return _unary(ctx, ops, "u32", lambda a: np.bitwise_count(a).astype(np.uint32), ta=t)
    if base == "clz":
        def op(a):
            a = np.asarray(a).astype(np.uint64)
            return (nb - _bitlen(a)).astype(np.uint32)
        return _unary(ctx, ops, "u32", op, ta=t)
    if base == "brev":
        def op(a):
            a = np.asarray(a).astype(np.uint64)
            r = np.zeros_like(a)
            for i in range(nb):
                r |= ((a >> np.uint64(i)) & np.uint64(1)) << np.uint64(nb - 1 - i)
            return r.astype(dt)
        return _unary(ctx, ops, t, op)
    shift = "shiftamt" in flags

    def op(a):
        a = np.asarray(a)
        if t[0] == "s":
            a = np.where(a < 0, ~a, a)
        bl = _bitlen(np.asarray(a).astype(np.int64).view(np.uint64) if t[0] == "s" else np.asarray(a).astype(np.uint64))
        pos = bl.astype(np.int64) - 1
        r = np.where(pos < 0, 0xFFFFFFFF, (nb - 1 - pos) if shift else pos)
        return r.astype(np.int64).astype(np.uint32)
    return _unary(ctx, ops, "u32", op, ta=t)


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
    return _binary(ctx, ops, t, lambda a, b: np.copysign(b, a).astype(NP[t]))


@handler("testp")
def dec_testp(ctx, ins, mods, ops):
    flags, (t,) = split_mods(ctx, mods, {"finite", "infinite", "number", "notanumber", "normal",
                                          "subnormal"}, {"f32", "f64"})
    k = next(iter(flags))
    tiny = nm.TINY[NP[t]]
    f = {"finite": np.isfinite, "infinite": np.isinf, "number": lambda a: ~np.isnan(a),
         "notanumber": np.isnan, "normal": lambda a: np.isfinite(a) & (np.abs(a) >= tiny),
         "subnormal": lambda a: (np.abs(a) < tiny) & (a != 0)}[k]
    return _unary(ctx, ops, "pred", f, ta=t)


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
        return _unary(ctx, ops, t, op)
    fz = "ftz" in flags

    def op(a):
        a = np.asarray(a, dt)
        if fz:
            a = nm.ftz(a)
        with np.errstate(all="ignore"):
            r = nm.f64_to(f(a.astype(np.float64)), dt, mode)
        return nm.ftz(r) if fz else r
    return _unary(ctx, ops, t, op)


# -- compare / select ------------------------------------------------------------------------

_CMP = {"eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal,
        "gt": np.greater, "ge": np.greater_equal, "lo": np.less, "ls": np.less_equal,
        "hi": np.greater, "hs": np.greater_equal}
_UNORD = {"equ": "eq", "neu": "ne", "ltu": "lt", "leu": "le", "gtu": "gt", "geu": "ge"}
_BOOL = {"and": np.logical_and, "or": np.logical_or, "xor": np.logical_xor}


def _compare_fn(ctx, cmp, t):
    """Return f(a, b) -> bool array with PTX compare semantics for type t."""
    if t in INT_TYPES:
        if cmp not in _CMP:
            ctx.unsupported(f"compare .{cmp} on integers")
        if t[0] == "b" and cmp not in ("eq", "ne"):
            # .b types compare as unsigned for ordered ops
            pass
        return _CMP[cmp]
    if cmp in _CMP and cmp not in ("lo", "ls", "hi", "hs"):
        f = _CMP[cmp]
        if cmp == "ne":
            return lambda a, b: np.not_equal(a, b) & ~np.isnan(a) & ~np.isnan(b)
        return f
    if cmp in _UNORD:
        f = _CMP[_UNORD[cmp]]
        return lambda a, b: f(a, b) | np.isnan(a) | np.isnan(b)
    if cmp == "num":
        return lambda a, b: ~np.isnan(a) & ~np.isnan(b)
    if cmp == "nan":
        return lambda a, b: np.isnan(a) | np.isnan(b)
    ctx.unsupported(f"compare .{cmp}")


@handler("setp")
def dec_setp(ctx, ins, mods, ops):
    cmps = set(_CMP) | set(_UNORD) | {"num", "nan"}
    cmp = boolop = None
    t = None
    ftzf = False
    for mm in mods:
        if mm in cmps and cmp is None:
            cmp = mm
        elif mm in _BOOL:
            boolop = mm
        elif mm in ALL_TYPES:
            t = mm
        elif mm == "ftz":
            ftzf = True
        else:
            ctx.unsupported(f"unsupported setp modifier .{mm}")
    if cmp is None or t is None:
        ctx.bad("setp needs a comparison and a type")
    if t in PACKED:
        ctx.unsupported("packed setp is not supported")
    dst = ops[0]
    if "|" in dst:
        p, q = [x.strip() for x in dst.split("|")]
        wp, _ = ctx.wr(p, "pred")
        wq, _ = ctx.wr(q, "pred")
    else:
        wp, _ = ctx.wr(dst, "pred")
        wq = None
    if t in ("f16", "bf16"):
        tt = t
    else:
        tt = t if t not in ("b16", "b32", "b64") else "u" + t[1:]
    ra, rb = ctx.rd(ops[1], tt), ctx.rd(ops[2], tt)
    f = _compare_fn(ctx, cmp, t)
    if t in ("f16", "bf16"):
        f0 = f
        f = lambda a, b: f0(np.asarray(a).astype(np.float32), np.asarray(b).astype(np.float32))
    rc = None
    bf = None
    if boolop:
        if len(ops) != 4:
            ctx.bad("setp with a boolean op needs a predicate operand c")
        rc = ctx.rd(ops[3], "pred")
        bf = _BOOL[boolop]
    elif len(ops) != 3:
        ctx.bad("setp takes 3 operands")
    if ftzf:
        f1 = f
        f = lambda a, b: f1(nm.ftz(np.asarray(a)), nm.ftz(np.asarray(b)))

    if rc is None and wq is None:
        def fn(w, g, m):
            wp(w, m, f(ra(w), rb(w)))
        return fn

    def fn(w, g, m):
        r = f(ra(w), rb(w))
        if rc is not None:
            c = rc(w)
            r1, r2 = bf(r, c), bf(~r, c)
        else:
            r1, r2 = r, ~r
        wp(w, m, r1)
        if wq is not None:
            wq(w, m, r2)
    return fn


@handler("selp")
def dec_selp(ctx, ins, mods, ops):
    flags, (t,) = split_mods(ctx, mods, set())
    _need(ctx, ops, 4)
    w_full, _ = ctx.wr(ops[0], t)
    ra, rb, rc = ctx.rd(ops[1], t), ctx.rd(ops[2], t), ctx.rd(ops[3], "pred")
    dt = NP[t]

    def fn(w, g, m):
        w_full(w, m, np.where(rc(w), ra(w), rb(w)).astype(dt))
    return fn


@handler("slct")
def dec_slct(ctx, ins, mods, ops):
    flags, tys = split_mods(ctx, mods, {"ftz"}, ntypes=2)
    t, ct = tys
    _need(ctx, ops, 4)
    w_full, _ = ctx.wr(ops[0], t)
    ra, rb, rc = ctx.rd(ops[1], t), ctx.rd(ops[2], t), ctx.rd(ops[3], ct)

    def fn(w, g, m):
        w_full(w, m, np.where(np.asarray(rc(w)) >= 0, ra(w), rb(w)).astype(NP[t]))
    return fn


# -- mov ----------------------------------------------------------------------------------

@handler("mov")
def dec_mov(ctx, ins, mods, ops):
    flags, (t,) = split_mods(ctx, mods, set())
    _need(ctx, ops, 2)
    d = ctx.operand(ops[0])
    s = ctx.operand(ops[1])
    if s.kind == "vec":                       # pack {a, b} -> d
        n = len(s.items)
        et = f"b{8 * NP[t].itemsize // n}"
        readers = [ctx.rd(x, et) for x in s.items]
        w_full, _ = ctx.wr(d, t)
        edt = NP[et]
        ut = _u(t)
        sh = [np.array(8 * edt.itemsize * i, dtype=np.uint64).astype(ut)[()] for i in range(n)]

        def fn(w, g, m):
            acc = np.zeros(32, ut)
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
        ut = _u(t)
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
        _need(ctx, ops, 3)
        w_full, _ = ctx.wr(ops[0], "b32" if dt_ in PACKED else "b16")
        ra, rb = ctx.rd(ops[1], "f32"), ctx.rd(ops[2], "f32")
        relu = "relu" in flags
        if dt_ in PACKED:
            ht = PACKED[dt_]

            def conv(x):
                x = np.asarray(x, np.float64)
                if relu:
                    x = np.where(np.isnan(x), x, np.maximum(x, 0.0))
                return nm.f64_to(x, NP[ht], rnd or "rn", satfinite=satf)

            def fn(w, g, m):
                w_full(w, m, pack2(conv(rb(w)), conv(ra(w)), ht))
            return fn
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
        _need(ctx, ops, 2)
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
    _need(ctx, ops, 2)
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
                    a64 = a.astype(np.float64) if S.itemsize < 8 else a
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
                r = nm.f64_to(a.astype(np.float64), D, mode, satfinite=satf)
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

    def fn(w, g, m):
        with np.errstate(all="ignore"):
            w_full(w, m, conv(ra(w)))
    return fn


# -- control flow --------------------------------------------------------------------------

def exit_fn(w, g, m):
    """``ret``/``exit``: retire the executing lanes."""
    w.exit_lanes(g, m)
    return RESCHED


@handler("ret", "exit")
def dec_exit(ctx, ins, mods, ops):
    for f in mods:
        if f != "uni":
            ctx.unsupported(f"unsupported modifier .{f}")
    return exit_fn


@handler("bra")
def dec_bra(ctx, ins, mods, ops):
    for f in mods:
        if f != "uni":
            ctx.unsupported(f"unsupported modifier .{f}")
    _need(ctx, ops, 1)
    target = ctx.label(ops[0].strip())
    ins.info = target

    def fn(w, g, m):
        if m is g.m:
            g.pc = target
            return JUMPED
        w.split(g, m, target)
        return RESCHED
    return fn


@handler("trap")
def dec_trap(ctx, ins, mods, ops):
    def fn(w, g, m):
        raise SimRuntimeError(f"trap executed at {ins.where()} (CTA {w.cta.ctaid}, warp {w.wid})")
    return fn


@handler("brkpt", "pmevent")
def dec_nop(ctx, ins, mods, ops):
    return lambda w, g, m: None


@handler("nanosleep")
def dec_nanosleep(ctx, ins, mods, ops):
    def fn(w, g, m):
        w.poll = True
        g.pc += 1
        return YIELD
    return fn
