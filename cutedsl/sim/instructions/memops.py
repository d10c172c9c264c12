"""Memory instructions: ld/ldu/st (all spaces, widths, .v2/.v4), cvta, isspacep, atom/red,
prefetch. Addresses are resolved by :meth:`cutedsl.sim.machine.machine.Warp.load`/``store``."""
from __future__ import annotations

import numpy as np

from ..engines import numerics as nm
from ..engines.alu import PACKED, direct, pack2, unpack2
from ..checks.global_hb import classify
from ..machine.memory import GLOBAL_BASE, LOCAL_WIN, PARAM_WIN, SHARED_WIN
from ..frontend.ptxtypes import CALLPARAM_BASE, NP
from ..frontend.errors import MemoryAccessError
from ..frontend.registry import SUBHANDLERS, YIELD, handler
from ..frontend.parser import TYPE_SIZES

SPACES = {"global", "shared", "param", "local", "const", "shared::cta", "shared::cluster",
          "param::entry", "param::func"}
IGNORED = {"weak", "volatile", "relaxed", "acquire", "release", "cta", "gpu", "sys", "cluster",
           "ca", "cg", "cs", "lu", "cv", "wb", "wt", "nc", "L1::evict_normal", "L1::evict_unchanged",
           "L1::evict_first", "L1::evict_last", "L1::no_allocate", "L2::evict_normal",
           "L2::evict_first", "L2::evict_last", "L2::cache_hint", "L2::64B", "L2::128B", "L2::256B",
           "mmio", "unified"}
LDTYPES = {t for t in TYPE_SIZES if t not in ("pred", "b128", "e4m3", "e5m2", "e4m3x2", "e5m2x2", "tf32")}


def parse_ldst(ctx, mods):
    space, vec, t = "generic", 1, None
    for m in mods:
        if m in SPACES:
            space = {"param::entry": "param", "param::func": "param", "shared": "shared::cta"}.get(m, m)
        elif m in ("v2", "v4", "v8"):
            vec = int(m[1])
        elif m in LDTYPES:
            t = m
        elif m in IGNORED:
            pass
        else:
            ctx.unsupported(f"unsupported ld/st modifier .{m}")
    if t is None:
        ctx.bad("ld/st needs a type")
    return space, vec, t


def _store_type(t):
    return "u" + t[1:] if t[0] in "bs" else ("u16" if t in ("f16", "bf16") else
                                              "u32" if t in ("f32", "f16x2", "bf16x2") else
                                              "u64" if t == "f64" else t)


def _data_operands(ctx, ops, i, vec, op, takes, what):
    """The register operand(s) ``ops[i]`` of an ld/st: one, or a ``{...}`` list of ``vec``."""
    if len(ops) not in (2, 3):
        ctx.bad(f"{op} takes {takes}")
    d = ctx.operand(ops[i])
    items = d.items if d.kind == "vec" else [d]
    if len(items) != vec:
        ctx.bad(f"{op}.v{vec} needs {vec} {what}")
    return items


@handler("ld", "ldu")
def dec_ld(ctx, ins, mods, ops):
    space, vec, t = parse_ldst(ctx, mods)
    dsts = _data_operands(ctx, ops, 0, vec, "ld", "a destination and an address", "destination registers")
    writers = [ctx.wr(x, t) for x in dsts]
    addr = ctx.addr(ops[1])
    esize = TYPE_SIZES[t]
    dt = NP[t]

    aop = ctx.operand(ops[1])
    per_thread = space in ("local", "generic") or (
        space == "param" and aop.base is not None and aop.base.kind == "sym"
        and ctx.prog.symbols[aop.base.name][1] >= CALLPARAM_BASE)

    strong, _rel, acq, wide = classify(mods)
    sync = strong and wide and space in ("global", "generic")

    def fn(w, g, m):
        a = addr(w)
        if sync and w.launch.ghb is not None:     # a flag or semaphore read: no weak access
            _sync_read(w, a, m, acq)
        if per_thread and np.ndim(a) == 0:
            a = np.full(32, a, np.uint64)
        if np.ndim(a) == 0:
            v = w.load(space, a, m, esize, vec, dt, ins, race=not strong)
            for j, (full, _c) in enumerate(writers):
                full(w, m, v[0, j])
            return
        v = w.load(space, a, m, esize, vec, dt, ins, race=not strong)
        for j, (_f, comp) in enumerate(writers):
            comp(w, m, v[:, j])
    if space in ("global", "generic") and ({"acquire", "volatile"} & set(mods)):
        # a load that waits for another CTA's write (a flag, a semaphore): a scheduling point,
        # so a spinning warp lets the resident CTAs it waits for run
        load = fn

        def fn(w, g, m):
            load(w, g, m)
            g.pc += 1
            return YIELD
    return fn


@handler("st")
def dec_st(ctx, ins, mods, ops):
    if mods[:1] == ["async"]:
        return SUBHANDLERS[("st", "async")](ctx, ins, mods, ops)
    space, vec, t = parse_ldst(ctx, mods)
    srcs = _data_operands(ctx, ops, 1, vec, "st", "an address and a source", "source operands")
    st_t = _store_type(t)
    readers = [ctx.rd(x, st_t) for x in srcs]
    addr = ctx.addr(ops[0])
    esize = TYPE_SIZES[t]
    ut = np.dtype(f"u{esize}")

    strong, rel, _acq, wide = classify(mods)
    sync = strong and wide and space in ("global", "generic")

    def fn(w, g, m):
        a = addr(w)
        lanes_m = m
        if vec == 1:
            v = np.asarray(readers[0](w))
            vals = v[:, None] if v.ndim else v
            if v.ndim:
                vals = vals[w._lanes(lanes_m)]
        else:
            vals = np.empty((w.p.shape[1], vec), ut)     # 32 lanes, or a lockstep batch
            for j, r in enumerate(readers):
                vals[:, j] = r(w)
            if lanes_m is not None or not w.full:
                vals = vals[w._lanes(lanes_m)]
        w.store(space, a, lanes_m, esize, vec, np.asarray(vals).astype(ut, copy=False), ins, race=not strong)
        if sync and w.launch.ghb is not None:     # after the store: it publishes what came before
            _sync_write(w, a, lanes_m, rel, rmw=False)
    return fn


def _global_addrs(w, a, m):
    """The distinct global addresses (ints) of the active lanes' accesses at ``a``."""
    a = np.asarray(a, np.uint64)
    if a.ndim:
        a = a[w._lanes(m)]
    return [int(x) for x in np.unique(a) if int(x) >= GLOBAL_BASE]


def _sync_read(w, a, m, acquire: bool) -> None:
    """A strong global read at gpu/sys scope: acquire (``.acquire``) or hold for the next fence."""
    ghb = w.launch.ghb
    for x in _global_addrs(w, a, m):
        (ghb.acquire if acquire else ghb.strong_read)(w, x)


def _sync_write(w, a, m, release: bool, rmw: bool) -> None:
    """A strong global write at gpu/sys scope: release (``.release``) or carry the last fence."""
    ghb = w.launch.ghb
    for x in _global_addrs(w, a, m):
        (ghb.release if release else ghb.strong_write)(w, x, rmw)


@handler("cvta")
def dec_cvta(ctx, ins, mods, ops):
    to = False
    space = None
    size = None
    for m in mods:
        if m == "to":
            to = True
        elif m in ("shared", "shared::cta", "shared::cluster", "global", "param", "param::entry",
                   "local", "const"):
            space = m.split("::")[0] if m != "shared::cluster" else "shared"
        elif m in ("u32", "u64"):
            size = m
        else:
            ctx.unsupported(f"unsupported cvta modifier .{m}")
    if space is None or size is None:
        ctx.bad("cvta needs a state space and a size")
    base = {"shared": SHARED_WIN, "param": PARAM_WIN, "local": LOCAL_WIN, "global": 0, "const": 0}[space]
    b = np.uint64(base)
    w_full, _ = ctx.wr(ops[0], size)
    ra = ctx.rd(ops[1], "u64")
    dt = NP[size]
    if to:
        def op(a):
            return (np.asarray(a, np.uint64) - b).astype(dt)
    else:
        def op(a):
            return (np.asarray(a, np.uint64) + b).astype(dt)

    def fn(w, g, m):
        w_full(w, m, op(ra(w)))
    # a register computation (PTX ISA 9.7.9, cvta: the generic address is the window's base plus
    # the state-space address): a lockstep batch or a fused block may run it (program._batchable)
    ctx.vector(op, w_full, (ra,))
    return direct(op, w_full, (ra,)) or fn


@handler("isspacep")
def dec_isspacep(ctx, ins, mods, ops):
    sp = mods[0] if mods else None
    wins = {"shared": [SHARED_WIN], "shared::cta": [SHARED_WIN], "shared::cluster": [SHARED_WIN],
            "param": [PARAM_WIN], "local": [LOCAL_WIN], "const": None, "global": None}
    if sp not in wins or len(mods) != 1:
        ctx.unsupported(f"isspacep .{sp}")
    w_full, _ = ctx.wr(ops[0], "pred")
    ra = ctx.rd(ops[1], "u64")
    hi_set = {SHARED_WIN >> 40, PARAM_WIN >> 40, LOCAL_WIN >> 40}
    win = wins[sp]

    def fn(w, g, m):
        h = np.asarray(ra(w), np.uint64) >> np.uint64(40)
        if win is None:
            r = ~np.isin(h, list(hi_set))
        else:
            r = h == np.uint64(win[0] >> 40)
        w_full(w, m, r)
    return fn


@handler("prefetch", "prefetchu")
def dec_prefetch(ctx, ins, mods, ops):
    for m in mods:
        if m not in ("global", "local", "L1", "L2", "tensormap", "param", "const",
                     "L2::evict_last", "L2::evict_normal", "shared", "generic"):
            ctx.unsupported(f"unsupported prefetch modifier .{m}")
    ctx.addr(ops[0])
    return lambda w, g, m: None


_ATOM_OPS = {"add", "min", "max", "inc", "dec", "and", "or", "xor", "exch", "cas"}
_NOT_GLOBAL = {SHARED_WIN >> 40, PARAM_WIN >> 40, LOCAL_WIN >> 40}     #: generic windows of other spaces


def _add_f32_global(old, b):
    """``atom/red.add.f32`` on global memory: PTX ISA 9.7.13.5 (atom) and 9.7.13.6 (red) say the
    current implementation flushes subnormal inputs and results to sign-preserving zero there
    (SASS ``REDG.E.ADD.F32.FTZ.RN``), rounding to nearest even; on shared memory it keeps them."""
    return nm.ftz(np.add(nm.ftz(np.float32(old)), nm.ftz(np.float32(b)), dtype=np.float32))


def _global(space, addr) -> bool:
    """Whether an ``atom``/``red`` address of ``space`` lands in global memory (a generic one
    outside the shared, param and local windows)."""
    return space == "global" or (space == "generic" and int(addr) >> 40 not in _NOT_GLOBAL)


@handler("atom", "red")
def dec_atom(ctx, ins, mods, ops):
    is_red = ins.opcode.startswith("red")
    space, op, t, vec = "generic", None, None, 1
    for m in mods:
        if m in ("v2", "v4") and is_red:
            vec = int(m[1])
        elif m in SPACES:
            space = {"shared": "shared::cta"}.get(m, m)
        elif m in _ATOM_OPS:
            op = m
        elif m in LDTYPES:
            t = m
        elif m in IGNORED or m in ("noftz", "acq_rel"):
            pass
        else:
            ctx.unsupported(f"unsupported atom/red modifier .{m}")
    if op is None or t is None:
        ctx.bad("atom/red needs an operation and a type")
    if t in ("f16", "bf16", "f16x2", "bf16x2") and op not in ("add", "min", "max", "exch"):
        ctx.unsupported(f"atom .{op} on .{t}")
    if vec > 1:
        # PTX ISA 9.7.13.6 (red): a vector reduction is .add of .f32 (.v2/.v4, sm_90, PTX ISA 8.1)
        # on .global (or a generic address into it) -- one access of vec consecutive elements,
        # each element's addition atomic on its own
        if op != "add" or t != "f32":
            ctx.unsupported(f"red.v{vec} with .{op}.{t} (vector red of 32-bit elements is .add.f32)")
        if space not in ("global", "generic"):
            ctx.bad(f"red.v{vec} takes a .global address, not .{space}")
        return _red_vec(ctx, ins, mods, ops, vec, space)
    k = 0 if is_red else 1
    wd = None if is_red else ctx.wr(ops[0], t)[1]
    addr = ctx.addr(ops[k])
    rb = ctx.rd(ops[k + 1], t)
    rc = ctx.rd(ops[k + 2], t) if op == "cas" else None
    esize = TYPE_SIZES[t]
    dt = NP[t]
    ut = np.dtype(f"u{esize}")

    def combine(old, b, c, gl):
        if op == "add":
            if t == "f32" and gl:
                return _add_f32_global(old, b)
            if t in PACKED:
                ht = PACKED[t]
                ol, oh = unpack2(old, ht)
                bl, bh = unpack2(b, ht)
                f = lambda x, y: nm.f64_to(np.float64(x) + np.float64(y), NP[ht])
                return pack2(f(ol, bl), f(oh, bh), ht)
            if t in ("f16", "bf16"):
                return nm.f64_to(np.float64(old) + np.float64(b), dt)
            return np.add(old, b, dtype=dt)
        if op == "min":
            return np.fmin(old, b).astype(dt) if dt.kind == "f" else np.minimum(old, b)
        if op == "max":
            return np.fmax(old, b).astype(dt) if dt.kind == "f" else np.maximum(old, b)
        if op == "inc":
            return dt.type(0) if old >= b else dt.type(old + dt.type(1))
        if op == "dec":
            return b if (old == 0 or old > b) else dt.type(old - dt.type(1))
        if op == "and":
            return old & b
        if op == "or":
            return old | b
        if op == "xor":
            return old ^ b
        if op == "exch":
            return b
        return c if old == b else old

    _strong, rel, acq, wide = classify(mods)
    sync = wide and space in ("global", "generic")

    def fn(w, g, m):
        lanes = w._lanes(m)
        a = np.broadcast_to(np.asarray(addr(w), np.uint64), (32,))
        if sync and w.launch.ghb is not None:     # atomics are strong: synchronising, never racing
            _sync_read(w, a, m, acq)
            _sync_write(w, a, m, rel, rmw=True)
        b = np.broadcast_to(np.asarray(rb(w), dt), (32,))
        c = np.broadcast_to(np.asarray(rc(w), dt), (32,)) if rc is not None else None
        olds = np.zeros(32, dt)
        with np.errstate(all="ignore"):
            for ln in lanes:
                lm = np.zeros(32, bool)
                lm[ln] = True
                # atomics never race with each other (the detector does not track them)
                # initcheck: the combined value needs the old one, but atom.exch's new value
                # does not, and the old it returns may be discarded (an uninitialised register)
                old = w.load(space, a[ln], lm, esize, 1, dt, ins, race=False, init=op != "exch")[0, 0]
                new = combine(old, b[ln], None if c is None else c[ln], _global(space, a[ln]))
                w.store(space, a[ln], lm, esize, 1, np.asarray(new, dt).view(ut).reshape(1, 1), ins,
                         race=False)
                olds[ln] = old
        if wd is not None:
            wd(w, m, olds[lanes] if m is not None else olds)
    return fn


def _red_vec(ctx, ins, mods, ops, vec, space):
    """``red{.global}.add{.sem}{.scope}.v2/.v4.f32 [a], {b0, ..}``: ``vec`` f32 additions at ``a``,
    ``a + 4``, ..; ``a`` aligned to the vector's size (PTX ISA 9.7.13.6)."""
    items = _data_operands(ctx, ops, 1, vec, f"red.v{vec}", "an address and a source", "source operands")
    addr = ctx.addr(ops[0])
    srcs = [ctx.rd(x, "f32") for x in items]
    _strong, rel, acq, wide = classify(mods)
    sync = wide

    def fn(w, g, m):
        lanes = w._lanes(m)
        a = np.broadcast_to(np.asarray(addr(w), np.uint64), (32,))
        bad = [ln for ln in lanes if int(a[ln]) % (4 * vec)]
        if bad:
            raise MemoryAccessError(f"red.v{vec}.f32 address {int(a[bad[0]]):#x} is misaligned (needs "
                                    f"{4 * vec} bytes)\n    at {ins.where()}")
        vals = [np.broadcast_to(np.asarray(r(w), np.float32), (32,)) for r in srcs]
        for j in range(vec):
            aj = a + np.uint64(4 * j)
            if sync and w.launch.ghb is not None:     # atomics are strong: synchronising, never racing
                _sync_read(w, aj, m, acq)
                _sync_write(w, aj, m, rel, rmw=True)
            with np.errstate(all="ignore"):
                for ln in lanes:
                    lm = np.zeros(32, bool)
                    lm[ln] = True
                    old = w.load(space, aj[ln], lm, 4, 1, np.float32, ins, race=False)[0, 0]
                    new = _add_f32_global(old, vals[j][ln])       # .global only (checked above)
                    w.store(space, aj[ln], lm, 4, 1, np.asarray(new, np.float32).view(np.uint32).reshape(1, 1),
                            ins, race=False)
    return fn
