"""Warp-level collectives and cluster addressing: shfl/vote/elect/redux/activemask,
mapa/getctarank, setmaxnreg, griddepcontrol (stmatrix/ldmatrix: ``matrix.py``).

Collectives need every live lane named by their member mask at the same PC; a lane group
that holds only some of them waits there (``Converge``) until the others arrive.
"""
from __future__ import annotations

import numpy as np

from ..engines.fminmax import minmax_reducer
from ..machine.convergence import LANES as LANE, Converge, mask_lanes, members as _members
from ..frontend.errors import SimRuntimeError
from ..machine.memory import OFF_MASK, RANK_SHIFT, SHARED_WIN
from ..frontend.registry import BLOCKED, handler


@handler("shfl")
def dec_shfl(ctx, ins, mods, ops):
    mode = next((x for x in mods if x in ("up", "down", "bfly", "idx")), None)
    for x in mods:
        if x not in ("sync", "up", "down", "bfly", "idx", "b32"):
            ctx.unsupported(f"unsupported shfl modifier .{x}")
    if mode is None or "sync" not in mods or len(ops) != 5:
        ctx.unsupported("only shfl.sync.{up,down,bfly,idx}.b32 d[|p], a, b, c, membermask")
    dst = ops[0]
    if "|" in dst:
        d, p = [x.strip() for x in dst.split("|")]
        wp = ctx.wr(p, "pred")[0]
    else:
        d, wp = dst, None
    wd = ctx.wr(d, "b32")[0]
    ra, rb, rc, rm = (ctx.rd(ops[i], "u32") for i in range(1, 5))

    def sources(k, b, c):
        """Source lane (index into the ``32 k`` lanes) and in-range predicate per lane (PTX ISA
        9.7.9.6 shfl.sync: ``j`` per mode, clamped by ``c``'s segment mask and max lane; a lane
        whose ``j`` is out of range reads its own ``a``)."""
        n = 32 * k
        lane, base = _lane_tables(k)
        b = np.broadcast_to(np.asarray(b, np.uint32), (n,)) & 31
        c = np.broadcast_to(np.asarray(c, np.uint32), (n,))
        cval = c & 31
        seg = (c >> 8) & 31
        maxl = ((lane & seg) | (cval & ~seg & 31)).astype(np.int64)
        minl = (lane & seg).astype(np.int64)
        lane = lane.astype(np.int64)
        if mode == "up":
            j = lane - b
            ok = j >= maxl
        elif mode == "down":
            j = lane + b
            ok = j <= maxl
        elif mode == "bfly":
            j = lane ^ b.astype(np.int64)
            ok = j <= maxl
        else:
            j = minl | (b & ~seg & 31).astype(np.int64)
            ok = j <= maxl
        j = np.where(ok, j, lane)
        return np.clip(j, 0, 31) + base, ok

    perms = {}      # (k, b, c) -> sources(): warp-uniform b and c (immediates) give one permutation

    def shuffle(w, k):
        """(values, in-range predicate) for the ``k`` warps whose lanes ``w`` (a warp or a
        lockstep batch) holds, every lane active."""
        b, c = rb(w), rc(w)
        if not getattr(b, "ndim", 0) and not getattr(c, "ndim", 0):
            key = (k, int(b), int(c))
            src = perms.get(key)
            if src is None:
                src = perms[key] = sources(k, b, c)
        else:
            src = sources(k, b, c)
        a = ra(w)
        if type(a) is not np.ndarray or a.shape != (32 * k,) or a.dtype != np.uint32:
            a = np.broadcast_to(np.asarray(a, np.uint32), (32 * k,))     # (an immediate)
        return a[src[0]], src[1]

    def fn(w, g, m):
        if w.is_batch:          # a lockstep batch: every lane of its warps is here and active
            k = w.hi - w.lo
        elif _members(w, g, m, rm, ins) is None:
            return BLOCKED
        else:
            k = 1
        v, ok = shuffle(w, k)
        wd(w, m, v)
        if wp is not None:
            wp(w, m, ok)
    return fn


_LANE_TABLES = {}


def _lane_tables(k):
    """(lane id within its warp, first lane of its warp) for ``32 k`` lanes."""
    t = _LANE_TABLES.get(k)
    if t is None:
        t = _LANE_TABLES[k] = (np.tile(LANE, k), np.repeat(np.arange(k, dtype=np.int64) * 32, 32))
    return t


@handler("vote")
def dec_vote(ctx, ins, mods, ops):
    mode = next((x for x in mods if x in ("all", "any", "uni", "ballot")), None)
    if mode is None or "sync" not in mods:
        ctx.unsupported("only vote.sync.{all,any,uni,ballot}")
    t = "b32" if mode == "ballot" else "pred"
    wd = ctx.wr(ops[0], t)[0]
    ra = ctx.rd(ops[1], "pred")
    rm = ctx.rd(ops[2], "u32")

    def fn(w, g, m):
        act = _members(w, g, m, rm, ins)
        if act is None:
            return BLOCKED
        v = np.broadcast_to(np.asarray(ra(w)), (32,)) & act
        if mode == "ballot":
            wd(w, m, np.uint32(int(np.sum(v.astype(np.uint64) << LANE.astype(np.uint64)))))
        elif mode == "all":
            wd(w, m, np.bool_(np.all(v[act])))
        elif mode == "any":
            wd(w, m, np.bool_(np.any(v)))
        else:
            x = v[act]
            wd(w, m, np.bool_(np.all(x) or not np.any(x)))
    return fn


@handler("activemask")
def dec_activemask(ctx, ins, mods, ops):
    wd = ctx.wr(ops[0], "b32")[0]

    def fn(w, g, m):
        act = w.valid if m is None else m
        wd(w, m, np.uint32(int(np.sum(act.astype(np.uint64) << LANE.astype(np.uint64)))))
    return fn


@handler("elect")
def dec_elect(ctx, ins, mods, ops):
    if mods != ["sync"] or len(ops) != 2:
        ctx.unsupported("only elect.sync d|p, membermask")
    d, p = [x.strip() for x in ops[0].split("|")] if "|" in ops[0] else (ops[0], None)
    wd = ctx.wr(d, "b32")[0]
    wp = ctx.wr(p, "pred")[0] if p else None
    rm = ctx.rd(ops[1], "u32")
    mop = ctx.operand(ops[1])
    every = mop.kind == "imm" and int(mop.value) & 0xFFFFFFFF == 0xFFFFFFFF     # membermask -1

    def fn(w, g, m):
        if every and m is None and w.nlive == 32:
            # every lane live, active and named (the usual elect.sync _|p, -1; PTX ISA 9.7.13.14):
            # what the general path below finds -- members() returns all 32 lanes without
            # blocking, lane 0 is the leader
            wd(w, None, _ZERO32)
            if wp is not None:
                wp(w, None, _LANE0)
            return None
        act = _members(w, g, m, rm, ins)
        if act is None:
            return BLOCKED
        cand = (act & mask_lanes(rm, w)).nonzero()[0]
        leader = int(cand[0]) if len(cand) else 0
        wd(w, m, np.uint32(leader))
        if wp is not None:
            wp(w, m, LANE == leader)
    return fn


_ZERO32 = np.uint32(0)
_LANE0 = LANE == 0


#: the forms of redux.sync (PTX ISA 9.7.13.12): operation -> the types it takes; only .f32 takes
#: .abs / .NaN
_REDUX_FORMS = {"add": ("u32", "s32"), "min": ("u32", "s32", "f32"), "max": ("u32", "s32", "f32"),
                "and": ("b32",), "or": ("b32",), "xor": ("b32",)}
_REDUX_SYNTAX = ("redux.sync.{add,min,max}.{u32,s32}, redux.sync.{and,or,xor}.b32 or "
                 "redux.sync.{min,max}{.abs}{.NaN}.f32 (PTX ISA 9.7.13.12)")
_REDUX_INT = {"add": lambda v: np.sum(v.astype(np.int64)).astype(v.dtype),   # truncated to 32 bits
              "min": np.min, "max": np.max, "and": np.bitwise_and.reduce,
              "or": np.bitwise_or.reduce, "xor": np.bitwise_xor.reduce}


def _redux_form(ctx, mods, ops):
    """``(op, type, f32 flags)`` of a ``redux`` statement; the ISA's own forms only, else
    ``PTXParseError`` naming them."""
    ops_, types, flags, other = [], [], [], []
    for x in mods:
        (ops_ if x in _REDUX_FORMS else types if x in ("u32", "s32", "b32", "f32")
         else flags if x in ("abs", "NaN") else other).append(x)
    if mods.count("sync") != 1 or set(other) - {"sync"} or len(ops_) != 1 or len(types) != 1:
        ctx.bad(f"redux.{'.'.join(mods)} is not a redux.sync form; the ISA has {_REDUX_SYNTAX}")
    (op,), (t,) = ops_, types
    if t not in _REDUX_FORMS[op]:
        ctx.bad(f"redux.sync.{op} takes .{'/.'.join(_REDUX_FORMS[op])}, not .{t} (PTX ISA 9.7.13.12)")
    if flags and t != "f32":
        ctx.bad(f"redux.sync .{flags[0]} exists only for .f32 (min/max), not .{t} (PTX ISA 9.7.13.12)")
    if len(set(flags)) != len(flags):
        ctx.bad(f"redux.sync repeats .{next(x for x in flags if flags.count(x) > 1)} (PTX ISA 9.7.13.12)")
    if len(ops) != 3:
        ctx.bad(f"redux.sync takes d, a, membermask; got {len(ops)} operands (PTX ISA 9.7.13.12)")
    return op, t, set(flags)


@handler("redux")
def dec_redux(ctx, ins, mods, ops):
    """``redux.sync.op.type d, a, membermask`` (PTX ISA 9.7.13.12): every member lane gets the
    reduction of ``a`` over the live lanes ``membermask`` names. The lanes wait for each other
    (``Converge``); a lane that executes it outside ``membermask``, or lanes giving different
    ``membermask`` values, is undefined behaviour the ISA names and is reported. ``.f32`` min/max
    follow :func:`~cutedsl.sim.engines.fminmax.minmax_reducer` (NaN rules, ``.abs``, -0.0 < +0.0)."""
    op, t, flags = _redux_form(ctx, mods, ops)
    wd = ctx.wr(ops[0], t)[0]
    ra = ctx.rd(ops[1], t)
    rm = ctx.rd(ops[2], "u32")
    f = minmax_reducer(op == "min", flags) if t == "f32" else _REDUX_INT[op]

    def fn(w, g, m):
        act = w.valid if m is None else m
        mv = np.broadcast_to(np.asarray(rm(w), np.uint32), (32,))[act]
        if np.any(mv != mv[0]):
            raise SimRuntimeError(f"redux.sync lanes give different membermask values "
                                  f"{sorted({hex(int(x)) for x in mv})}; the ISA requires one "
                                  f"(PTX ISA 9.7.13.12)\n    at {ins.where()}")
        lanes = ((int(mv[0]) >> LANE) & 1).astype(bool)
        if np.any(act & ~lanes):
            raise SimRuntimeError(f"redux.sync executed by lanes {np.flatnonzero(act & ~lanes).tolist()} that its "
                                  f"membermask {int(mv[0]):#010x} does not name; the ISA leaves that undefined "
                                  f"(PTX ISA 9.7.13.12)\n    at {ins.where()}")
        if _members(w, g, m, lambda w: mv[0], ins) is None:   # the executing lanes' mask, not lane 0's
            return BLOCKED
        v = np.broadcast_to(np.asarray(ra(w)), (32,))[act]
        wd(w, m, np.asarray(f(v)).astype(v.dtype))
    return fn


@handler("mapa")
def dec_mapa(ctx, ins, mods, ops):
    generic = "shared::cluster" not in mods
    t = next((x for x in mods if x in ("u32", "u64")), None)
    for x in mods:
        if x not in ("shared::cluster", "u32", "u64"):
            ctx.unsupported(f"unsupported mapa modifier .{x}")
    if t is None:
        ctx.bad("mapa needs .u32 or .u64")
    wd = ctx.wr(ops[0], t)[0]
    ra = ctx.rd(ops[1], "u64")
    rb = ctx.rd(ops[2], "u32")

    def fn(w, g, m):
        a = np.asarray(ra(w), np.uint64)
        if generic:
            a = a - np.uint64(SHARED_WIN)
        # a rank outside the cluster is not an error here: the address is only computed (CuTe
        # DSL maps every lane's rank and lets the lanes below the cluster size use theirs); an
        # access through it is reported as naming a CTA the cluster does not have
        b = np.asarray(rb(w), np.uint64)
        r = (b << np.uint64(RANK_SHIFT)) | (a & np.uint64(OFF_MASK))
        if generic:
            r = r + np.uint64(SHARED_WIN)
        wd(w, m, r.astype(np.dtype(t.replace("u", "uint"))))
    return fn


@handler("getctarank")
def dec_getctarank(ctx, ins, mods, ops):
    generic = "shared::cluster" not in mods
    wd = ctx.wr(ops[0], "u32")[0]
    ra = ctx.rd(ops[1], "u64")

    def fn(w, g, m):
        a = np.asarray(ra(w), np.uint64)
        if generic:
            a = a - np.uint64(SHARED_WIN)
        wd(w, m, (a >> np.uint64(RANK_SHIFT)).astype(np.uint32))
    return fn


@handler("setmaxnreg")
def dec_setmaxnreg(ctx, ins, mods, ops):
    for x in mods:
        if x not in ("inc", "dec", "sync", "aligned", "u32"):
            ctx.unsupported(f"unsupported setmaxnreg modifier .{x}")
    o = ctx.operand(ops[0])
    if o.kind != "imm" or o.value % 8 or not 24 <= o.value <= 256:
        ctx.bad("setmaxnreg count must be a multiple of 8 in [24, 256]")

    def fn(w, g, m):
        if g.count != w.nlive:
            g.blocked = Converge(ins, w)
            return BLOCKED
    return fn


@handler("griddepcontrol")
def dec_griddep(ctx, ins, mods, ops):
    if mods not in (["launch_dependents"], ["wait"]):
        ctx.unsupported("griddepcontrol form")
    return lambda w, g, m: None
