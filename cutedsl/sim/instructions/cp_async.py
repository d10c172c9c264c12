"""Ampere ``cp.async`` (global -> shared, 4/8/16 bytes, optional src-size) and its groups:
``commit_group``, ``wait_group N``, ``wait_all``, ``mbarrier.arrive[.noinc]`` (PTX ISA
"cp.async" and following).

Copies complete at issue; in the adversarial mode (:mod:`cutedsl.sim.machine.chaos`) the shared-memory
write of each copy is deferred (the global bytes are read at issue) until a random later point,
at the latest the ``wait_group``/``wait_all`` that covers its group or the thread's
``cp.async.mbarrier.arrive``. For the race detector (:mod:`cutedsl.sim.checks.hb`) each copy is a
generic-proxy write by the issuing warp's ``cpasync`` agent (clock = 1 + group index), which
``wait_group``/``wait_all`` make known to the waiting warp and ``cp.async.mbarrier.arrive``
releases into an mbarrier.
"""
from __future__ import annotations

import numpy as np

from ..frontend.errors import SimRuntimeError
from ..checks.shadow_words import words_of
from ..engines.mbarrier_object import get_mbar, hb_check_init, lane_vals, mbar_targets
from ..frontend.registry import subhandler


def _cp_agent(w):
    hb = w.cta.cluster.hb
    return hb.agent(("cpasync", w.cta.rank, w.wid), "cpasync", w.cta, w.wid, f"cp.async copies of warp {w.wid}")


def _dec_cp_async_group(ctx, ins, op, mods, ops):
    """cp.async.commit_group / wait_group N / wait_all / mbarrier.arrive[.noinc] (PTX ISA 9.7.9.4-8):
    copies complete at issue here; the happens-before edges make them known to the thread."""
    if op == "commit_group":
        def fn(w, g, m):
            w.cp_commits += 1
        return fn
    if op in ("wait_group", "wait_all"):
        n = None
        if op == "wait_group":
            if len(ops) != 1 or ctx.operand(ops[0]).kind != "imm":
                ctx.bad("cp.async.wait_group takes an immediate group count")
            n = int(ctx.operand(ops[0]).value)

        def fn(w, g, m):
            chaos = w.cta.launch.chaos
            if chaos is not None:       # the covered groups' deferred copies land now
                last = w.cp_commits if n is None else w.cp_commits - n - 1
                key = (w.cta.rank, w.wid)
                chaos.flush(lambda t: t is not None and t[0] == "cpasync" and t[1] == key and t[2] <= last)
            hb = w.cta.cluster.hb
            if hb is not None:
                hb.observe(w, _cp_agent(w).idx, w.cp_commits + 1 if n is None else w.cp_commits - n)
        return fn
    # mbarrier.arrive: an arrive-on triggered when all prior cp.async of the thread completed
    noinc = "noinc" in mods
    space = "generic"
    for mm in mods:
        if mm in ("shared", "shared::cta"):
            space = "shared::cta"
        elif mm == "shared::cluster":
            space = "shared::cluster"
        elif mm not in ("noinc", "b64"):
            ctx.unsupported(f"unsupported cp.async.mbarrier.arrive modifier .{mm}")
    addr = ctx.addr(ops[0])

    def fn(w, g, m):
        chaos = w.cta.launch.chaos
        if chaos is not None:           # the arrive-on waits for all the thread's prior copies
            key = (w.cta.rank, w.wid)
            chaos.flush(lambda t: t is not None and t[0] == "cpasync" and t[1] == key)
        lanes = w._lanes(m)
        hb = w.cta.cluster.hb
        for cta, off, n in mbar_targets(w, lane_vals(addr(w), lanes), space, ins, lanes):
            b = get_mbar(cta, off, ins)
            if hb is not None:
                hb_check_init(w, b, ins)
                b.snap = hb.merge(b.snap, hb.async_op([w], _cp_agent(w).idx, w.cp_commits + 1))
            b.note("cp.async.mbarrier.arrive{} x{} at {}", ".noinc" if noinc else "", n, ins)
            if noinc:       # the pending count was not incremented: the arrive-on counts
                b.arrive(n, ins)
            else:
                b.cta.launch.version += 1
    return fn


def _mask_of(lanes):
    m = np.zeros(32, bool)
    m[lanes] = True
    return m


@subhandler("cp", "async")
def dec_cp_async(ctx, ins, mods, ops):
    """Ampere ``cp.async`` (executed eagerly; a generic-proxy write by the warp's ``cpasync``
    agent for the race detector) and its group/arrive forms."""
    if mods and mods[0] in ("commit_group", "wait_group", "wait_all", "mbarrier"):
        rest = mods[1:]
        if mods[0] == "mbarrier":
            if not rest or rest[0] != "arrive":
                ctx.unsupported("unsupported cp.async.mbarrier form")
            rest = rest[1:]
        return _dec_cp_async_group(ctx, ins, mods[0], rest, ops)
    for mm in mods:
        if mm not in ("ca", "cg", "shared", "shared::cta", "global", "L2::128B", "L2::256B", "L2::64B",
                      "L2::cache_hint"):
            ctx.unsupported(f"unsupported cp.async modifier .{mm}")
    dst, src = ctx.addr(ops[0]), ctx.addr(ops[1])
    size = ctx.operand(ops[2])
    if size.kind != "imm" or size.value not in (4, 8, 16):
        ctx.bad("cp.async size must be 4, 8 or 16")
    n = size.value
    rsrc = ctx.rd(ops[3], "u32") if len(ops) > 3 and ctx.operand(ops[3]).kind in ("imm", "reg") else None

    def fn(w, g, m):
        if rsrc is None:
            _cp_store(w, dst(w), m, n, w.load("global", src(w), m, 1, n, np.uint8, ins), ins)
            return
        fn_partial(w, g, m)

    def fn_partial(w, g, m):
        # PTX: only src-size bytes are read from global memory, the rest of cp-size is zero-filled;
        # a lane with src-size 0 reads nothing (its address may point anywhere).
        lanes = w._lanes(m)
        ss = np.broadcast_to(np.asarray(rsrc(w), np.uint32), (32,))[lanes].astype(np.int64)
        if (ss > n).any():
            raise SimRuntimeError(f"cp.async src-size {int(ss.max())} exceeds cp-size {n}\n    at {ins.where()}")
        a = np.broadcast_to(np.asarray(src(w), np.uint64), (32,))
        v = np.zeros((len(lanes), n), np.uint8)
        full = ss == n
        if full.any():
            v[full] = w.load("global", a, _mask_of(lanes[full]), 1, n, np.uint8, ins)
        part = (ss > 0) & ~full
        for j in range(int(ss[part].max()) if part.any() else 0):     # rare partial reads, bytewise
            sel = part & (ss > j)
            v[sel, j] = w.load("global", a + np.uint64(j), _mask_of(lanes[sel]), 1, 1, np.uint8, ins)[:, 0]
        _cp_store(w, dst(w), m, n, v, ins)
    return fn


def _cp_store(w, d, m, n, v, ins):
    """cp.async's shared-memory write: a generic-proxy write by the warp's ``cpasync`` agent
    (race detector), ordered for the warp by cp.async.wait_group / wait_all; deferred in the
    adversarial mode (tag ``("cpasync", (rank, warp), group)``)."""
    chaos = w.cta.launch.chaos
    if chaos is None:
        _cp_write(w, d, m, n, v, ins, w.cp_commits + 1)
        return
    d = np.array(d, copy=True)               # the registers may change before it lands
    m = None if m is None else np.array(m, copy=True)
    group, clock = w.cp_commits, w.cp_commits + 1
    chaos.defer(lambda: _cp_write(w, d, m, n, v, ins, clock), tag=("cpasync", (w.cta.rank, w.wid), group))


def _cp_write(w, d, m, n, v, ins, clock):
    w.store("shared::cta", d, m, 1, n, v, ins, race=False)
    sh = w.cta.shadow
    if sh is not None:
        a = _cp_agent(w)
        offs = np.broadcast_to(np.asarray(d, np.int64), (32,))[w._lanes(m)]
        sh.write(words_of(offs, n), a.idx, clock, sh.hb.async_op([w], a.idx, clock)[0], ins.pc, False,
                 "cp.async")
