"""Address resolution of the emulator's memory accesses: which region (global allocation, a
cluster CTA's shared memory, kernel or call parameters, a thread's local frame) each lane's byte
address reaches, with the bounds and cross-CTA checks the PTX ISA's state spaces imply. Used by
:meth:`cutedsl.sim.machine.machine.Warp.load` / ``store`` and ``read_generic_bytes``."""
from __future__ import annotations

import numpy as np

from ..frontend.errors import MemoryAccessError
from .memory import LOCAL_WIN, OFF_MASK, PARAM_WIN, RANK_SHIFT, SHARED_WIN
from ..frontend.ptxtypes import CALLPARAM_BASE


def targets(w, space, a, nb, ins, lanes, what):
    """Yield, for the byte addresses ``a`` (uint64, one per lane of ``lanes``) of an access of ``nb``
    bytes in state space ``space`` by warp ``w``, the pieces the addresses fall into: ``(sel or
    None, view dict, byte offsets, region size, shared-memory CTA or None, space)`` -- generic
    addresses resolved through their window, global ones per allocation, shared ones per
    cluster rank (bit 24 on), parameters, call parameters and local frames. Raises
    ``MemoryAccessError`` (through ``w._fail``) for an address outside every region."""
    if space == "generic":
        hi = a >> np.uint64(40)
        u = np.unique(hi)
        for h in u:
            sel = None if len(u) == 1 else (hi == h)
            aa = a if sel is None else a[sel]
            ll = lanes if sel is None else lanes[sel]
            h = int(h)
            if h == SHARED_WIN >> 40:
                sp, aa = "shared::cluster", aa - np.uint64(SHARED_WIN)
            elif h == PARAM_WIN >> 40:
                sp, aa = "param", aa - np.uint64(PARAM_WIN)
            elif h == LOCAL_WIN >> 40:
                sp, aa = "local", aa - np.uint64(LOCAL_WIN)
            else:
                sp = "global"
            for t in targets(w, sp, aa, nb, ins, ll, what):
                s2 = t[0]
                if sel is not None:
                    full = np.zeros(len(a), bool)
                    idx = np.flatnonzero(sel)
                    full[idx if s2 is None else idx[s2]] = True
                    s2 = full
                yield (s2,) + t[1:]
        return
    if space == "global" or space == "const":
        gm = w.launch.gmem
        al = gm.region(a, nb)
        if al is None:
            # find the first bad lane
            for i, x in enumerate(np.atleast_1d(a)):
                x = int(x)
                r = gm.region(x, nb)
                if r is None:
                    w._fail(what, x, nb, space, ins, int(lanes[i]), gm.describe(x))
            # lanes in different allocations: split per allocation
            bases = np.array([gm.find(int(x)).base for x in a], np.uint64)
            for b in np.unique(bases):
                sel = bases == b
                al = gm.allocs[int(b)]
                yield sel, al.v, (a[sel] - np.uint64(al.base)).astype(np.int64), al.nbytes, None, space
            return
        yield None, al.v, (a - np.uint64(al.base)).astype(np.int64), al.nbytes, None, space
        return
    if space in ("shared", "shared::cta", "shared::cluster"):
        rk = a >> np.uint64(RANK_SHIFT)
        own = w.cta.rank
        if space != "shared::cluster" and np.any(rk != own):
            i = int(np.flatnonzero(rk != own)[0])
            w._fail(what, int(a[i]), nb, space, ins, int(lanes[i]),
                       f"shared::cta access with the address of cluster rank {int(rk[i])} (this CTA is "
                       f"rank {own}): another CTA's shared memory is reached through shared::cluster")
        u = np.unique(rk) if space == "shared::cluster" else (own,)
        for r in u:
            sel = None if len(u) == 1 else (rk == r)
            aa = a if sel is None else a[sel]
            r = int(r)
            if r == own:
                cta = w.cta
            else:
                cl = w.cta.cluster
                if r >= len(cl.ctas):
                    i = int(np.flatnonzero(rk == r)[0]) if sel is not None else 0
                    w._fail(what, int(aa.flat[0]), nb, space, ins, int(lanes[i]),
                               f"cluster rank {r} does not exist (cluster has {len(cl.ctas)} CTAs)")
                cta = cl.ctas[r]
                if cta.exited:
                    w._fail(what, int(aa.flat[0]), nb, space, ins, int(lanes[0]),
                               f"distributed shared memory of CTA rank {r}, which has exited")
            off = (aa & np.uint64(OFF_MASK)).astype(np.int64)
            yield sel, cta.sv, off, cta.smem_size, cta, space
        return
    if space == "param":
        cp = a >= np.uint64(CALLPARAM_BASE)
        if not cp.any():
            p = w.launch.param_views
            yield None, p, a.astype(np.int64), w.launch.param_size, None, space
            return
        if not cp.all():
            w._fail(what, int(a.flat[0]), nb, space, ins, int(lanes[0]), "mixed kernel/call parameter access")
        size = w.cta.launch.program.callparam_size
        stride = (size + 15) // 16 * 16
        if w.callparam is None:
            w.callparam = np.zeros(32 * stride + 16, np.uint8)
        off = a.astype(np.int64) - CALLPARAM_BASE
        bad = (off < 0) | (off + nb > size)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            w._fail(what, int(a[i]), nb, space, ins, int(lanes[i]), "outside the call parameters")
        yield None, {1: w.callparam}, off + lanes.astype(np.int64) * stride, 32 * stride, None, "callparam"
        return
    if space == "local":
        if w.local is None:
            w._fail(what, int(a.flat[0]), nb, space, ins, int(lanes[0]), "kernel declares no local memory")
        off = a.astype(np.int64)
        bad = (off < 0) | (off + nb > w.local_size)
        if np.any(bad):
            i = int(np.flatnonzero(bad)[0])
            w._fail(what, int(a[i]), nb, space, ins, int(lanes[i]),
                       f"outside the {w.local_size}-byte local frame")
        yield None, {1: w.local}, off + lanes.astype(np.int64) * w.local_size, 32 * w.local_size, None, space
        return
    raise MemoryAccessError(f"unsupported state space {space} at {ins.where()}")


__all__ = ["targets"]
