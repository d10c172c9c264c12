"""Shared helpers of the ALU instruction decoders (arith, bitops, compare, convert, control).

Each decoder receives ``(ctx, ins, mods, ops)``: the :class:`~cutedsl.sim.frontend.decode_ctx.DecodeCtx`,
the :class:`~cutedsl.sim.frontend.program.Instr`, the dot-separated modifiers after the opcode base
(e.g. ``['rn', 'f32']``) and the raw operand strings, and returns the execution closure
``fn(warp, group, mask)``. Values are numpy arrays over the 32 lanes (or numpy scalars for
immediates and uniform special registers); inactive lanes compute garbage that the masked
write discards. Integer arithmetic wraps like PTX; float arithmetic follows
:mod:`cutedsl.sim.engines.numerics` for rounding modes, ``.ftz`` and ``.sat``.
"""
from __future__ import annotations

import numpy as np

from . import numerics as nm
from ..frontend.ptxtypes import NP

INT_TYPES = {"u8", "s8", "b8", "u16", "s16", "b16", "u32", "s32", "b32", "u64", "s64", "b64"}
FLOAT_TYPES = {"f32", "f64", "f16", "bf16"}
PACKED = {"f16x2": "f16", "bf16x2": "bf16"}
RND = {"rn", "rz", "rm", "rp"}
IRND = {"rni", "rzi", "rmi", "rpi"}
F32X2 = "f32x2"      #: two f32 in a 64-bit register, low half first (add/sub/mul/fma on sm_100)
ALL_TYPES = INT_TYPES | FLOAT_TYPES | set(PACKED) | {"pred"}
#: the types of add/sub/mul/fma, the only instructions with an .f32x2 form (PTX ISA 9.7.3.3-9.7.3.6)
ARITH_TYPES = ALL_TYPES | {F32X2}


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


def utype(t):
    return np.dtype(f"u{NP[t].itemsize}")


def need_ops(ctx, ops, n):
    if len(ops) != n:
        ctx.bad(f"expected {n} operands, got {len(ops)}")


# -- packed f32x2 (sm_100: add/sub/mul/fma .f32x2 on .b64 registers) --------------------------

def check_f32x2(ctx, base, flags, ops):
    """The .f32x2 forms (PTX ISA 9.7.3.3 add, 9.7.3.4 sub, 9.7.3.5 mul, 9.7.3.6 fma):
    ``{.rnd}{.ftz}`` only (``fma`` needs ``.rnd``), every operand a 64-bit register."""
    extra = flags - RND - {"ftz"}
    if extra:
        ctx.bad(f"{base}.f32x2 takes .rn/.rz/.rm/.rp and .ftz only, not .{sorted(extra)[0]} "
                f"(PTX ISA 9.7.3: {base}{{.rnd}}{{.ftz}}.f32x2)")
    for o in ops:
        r = ctx.lookup_reg(o.strip())
        if r is None or r[0] != "d":
            ctx.bad(f"{base}.f32x2 operand {o.strip()} must be a .b64 register (PTX ISA 9.7.3: operands "
                    f"of .f32x2 have .b64 type)")


def unpack_f32x2(v):
    v = np.asarray(v, np.uint64)
    return ((v & np.uint64(0xFFFFFFFF)).astype(np.uint32).view(np.float32),
            (v >> np.uint64(32)).astype(np.uint32).view(np.float32))


def pack_f32x2(lo, hi):
    lo = np.asarray(lo, np.float32).view(np.uint32).astype(np.uint64)
    hi = np.asarray(hi, np.float32).view(np.uint32).astype(np.uint64)
    return lo | (hi << np.uint64(32))


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


def half_op(f, ht):
    """Lift a float64 op to f16/bf16: compute exactly-ish in f64, round once."""
    def g(*args, mode="rn"):
        r = f(*[np.asarray(a, NP[ht]).astype(np.float64) for a in args])
        return nm.f64_to(r, NP[ht], mode)
    return g



def float_post(r, flags, dt):
    if "ftz" in flags:
        r = nm.ftz(r)
    if "sat" in flags:
        r = nm.sat01(r)
    if "relu" in flags:
        r = np.where(np.isnan(r) | (r < 0), np.zeros_like(r), r).astype(dt)
    return r


def float_binop(ctx, flags, t, f64op, f32fast):
    """Closure computing a float binary op with rounding mode handling."""
    if t == F32X2:                      # the f32 operation on each half
        half = float_binop(ctx, flags, "f32", f64op, f32fast)

        def op2(a, b):
            (al, ah), (bl, bh) = unpack_f32x2(a), unpack_f32x2(b)
            return pack_f32x2(half(al, bl), half(ah, bh))
        return op2
    mode = next((m for m in flags if m in RND), "rn")
    dt = NP[t]
    ftzf = "ftz" in flags
    if t in PACKED:
        ht = PACKED[t]
        hop = half_op(f64op, ht)

        def op(a, b):
            al, ah = unpack2(a, ht)
            bl, bh = unpack2(b, ht)
            return pack2(float_post(hop(al, bl, mode=mode), flags, NP[ht]),
                         float_post(hop(ah, bh, mode=mode), flags, NP[ht]), ht)
        return op
    if t in ("f16", "bf16"):
        hop = half_op(f64op, t)
        return lambda a, b: float_post(hop(a, b, mode=mode), flags, dt)
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
            return float_post(r, flags, dt)
        return op
    if t == "f64":
        if flags - {"rn"}:
            if mode != "rn":
                ctx.unsupported(f"directed rounding .{mode} for .f64 is not supported")
        return lambda a, b: float_post(f64op(a, b), flags, dt)
    ctx.unsupported(f"float op on .{t}")


def binary(ctx, ops, t, op, ta=None, tb=None, td=None):
    need_ops(ctx, ops, 3)
    w_full, _ = ctx.wr(ops[0], td or t)
    ra = ctx.rd(ops[1], ta or t)
    rb = ctx.rd(ops[2], tb or t)
    ctx.vector(op, w_full, (ra, rb))
    return direct(op, w_full, (ra, rb)) or (lambda w, g, m: w_full(w, m, op(ra(w), rb(w))))


def unary(ctx, ops, t, op, ta=None):
    need_ops(ctx, ops, 2)
    w_full, _ = ctx.wr(ops[0], t)
    ra = ctx.rd(ops[1], ta or t)
    ctx.vector(op, w_full, (ra,))
    return direct(op, w_full, (ra,)) or (lambda w, g, m: w_full(w, m, op(ra(w))))


def direct(op, w_full, readers):
    """The closure ``w_full(w, m, op(*[r(w) for r in readers]))`` with the register reads, the
    immediates and the unmasked write inlined (the decoder's tags, :mod:`cutedsl.sim.frontend.fusion`:
    ``("r", class, view, index, None)`` reads ``view[index]``, ``("c", v)`` is the value ``v``
    its reader returns; a destination without a conversion is ``view[index] = v``, what its
    writer does for ``m is None``) -- the same numpy operations, a few Python calls fewer per
    instruction (``tests/sim/test_sim_alu_direct.py`` compares it with the generic closures).
    None for any other form (a read that converts, a special register, a sink destination): the
    caller's generic closure then runs."""
    dst = getattr(w_full, "vec_dst", None)
    tags = [getattr(r, "vec_src", None) for r in readers]
    if dst is None or dst[3] is not None or any(s is None or (s[0] == "r" and s[4] is not None) for s in tags):
        return None
    form = "".join(s[0] for s in tags)
    make = _FORMS.get(form)
    if make is None:
        return None
    dv, di = dst[1], dst[2]
    args = [x for s in tags for x in ((s[2], s[3]) if s[0] == "r" else (s[1],))]
    return make(op, w_full, dv, di, *args)


def _r(op, w_full, dv, di, av, ai):
    def fn(w, g, m):
        v = op(getattr(w, av)[ai])
        if m is None:
            getattr(w, dv)[di] = v
        else:
            w_full(w, m, v)
    return fn


def _rr(op, w_full, dv, di, av, ai, bv, bi):
    def fn(w, g, m):
        v = op(getattr(w, av)[ai], getattr(w, bv)[bi])
        if m is None:
            getattr(w, dv)[di] = v
        else:
            w_full(w, m, v)
    return fn


def _rc(op, w_full, dv, di, av, ai, b):
    def fn(w, g, m):
        v = op(getattr(w, av)[ai], b)
        if m is None:
            getattr(w, dv)[di] = v
        else:
            w_full(w, m, v)
    return fn


def _rrr(op, w_full, dv, di, av, ai, bv, bi, cv, ci):
    def fn(w, g, m):
        v = op(getattr(w, av)[ai], getattr(w, bv)[bi], getattr(w, cv)[ci])
        if m is None:
            getattr(w, dv)[di] = v
        else:
            w_full(w, m, v)
    return fn


def _rcr(op, w_full, dv, di, av, ai, b, cv, ci):
    def fn(w, g, m):
        v = op(getattr(w, av)[ai], b, getattr(w, cv)[ci])
        if m is None:
            getattr(w, dv)[di] = v
        else:
            w_full(w, m, v)
    return fn


def _rrc(op, w_full, dv, di, av, ai, bv, bi, c):
    def fn(w, g, m):
        v = op(getattr(w, av)[ai], getattr(w, bv)[bi], c)
        if m is None:
            getattr(w, dv)[di] = v
        else:
            w_full(w, m, v)
    return fn


def _rcc(op, w_full, dv, di, av, ai, b, c):
    def fn(w, g, m):
        v = op(getattr(w, av)[ai], b, c)
        if m is None:
            getattr(w, dv)[di] = v
        else:
            w_full(w, m, v)
    return fn


def _c(op, w_full, dv, di, a):
    def fn(w, g, m):
        v = op(a)
        if m is None:
            getattr(w, dv)[di] = v
        else:
            w_full(w, m, v)
    return fn


def _cr(op, w_full, dv, di, a, bv, bi):
    def fn(w, g, m):
        v = op(a, getattr(w, bv)[bi])
        if m is None:
            getattr(w, dv)[di] = v
        else:
            w_full(w, m, v)
    return fn


def _ccr(op, w_full, dv, di, a, b, cv, ci):
    def fn(w, g, m):
        v = op(a, b, getattr(w, cv)[ci])
        if m is None:
            getattr(w, dv)[di] = v
        else:
            w_full(w, m, v)
    return fn


#: operand forms (register / immediate per source) with an inlined closure
_FORMS = {"r": _r, "rr": _rr, "rc": _rc, "rrr": _rrr, "rcr": _rcr, "rrc": _rrc, "rcc": _rcc,
          "c": _c, "cr": _cr, "ccr": _ccr}
