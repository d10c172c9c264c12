"""Comparisons and selection: setp (all comparisons, unordered, boolean combine), selp, slct.

Decoders receive ``(ctx, ins, mods, ops)`` and return the execution closure ``fn(warp, group,
mask)``; see :mod:`cutedsl.sim.engines.alu` for the shared conventions.
"""
from __future__ import annotations

import numpy as np

from ..engines import numerics as nm
from ..engines.alu import ALL_TYPES, INT_TYPES, PACKED, direct, need_ops, split_mods
from ..frontend.registry import handler
from ..frontend.ptxtypes import NP


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
        ctx.vector(f, wp, (ra, rb))
        return direct(f, wp, (ra, rb)) or fn

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
    need_ops(ctx, ops, 4)
    w_full, _ = ctx.wr(ops[0], t)
    ra, rb, rc = ctx.rd(ops[1], t), ctx.rd(ops[2], t), ctx.rd(ops[3], "pred")
    dt = NP[t]

    def select(a, b, c):
        return np.where(c, a, b).astype(dt)

    def fn(w, g, m):
        w_full(w, m, select(ra(w), rb(w), rc(w)))
    ctx.vector(select, w_full, (ra, rb, rc))
    return direct(select, w_full, (ra, rb, rc)) or fn


@handler("slct")
def dec_slct(ctx, ins, mods, ops):
    flags, tys = split_mods(ctx, mods, {"ftz"}, ntypes=2)
    t, ct = tys
    need_ops(ctx, ops, 4)
    w_full, _ = ctx.wr(ops[0], t)
    ra, rb, rc = ctx.rd(ops[1], t), ctx.rd(ops[2], t), ctx.rd(ops[3], ct)

    def select(a, b, c):
        return np.where(np.asarray(c) >= 0, a, b).astype(NP[t])

    def fn(w, g, m):
        w_full(w, m, select(ra(w), rb(w), rc(w)))
    ctx.vector(select, w_full, (ra, rb, rc))
    return fn
