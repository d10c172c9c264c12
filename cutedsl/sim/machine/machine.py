"""Machine state: lane groups, warps (register files), CTAs (shared memory) and clusters.

A :class:`Warp` owns 32 columns of its CTA's register arrays (one per register class,
``[nregs, 32 x warps]``, :mod:`cutedsl.sim.machine.warpbatch`) through typed views, its special registers, its lane groups (:class:`Group`: lanes at the same PC) and
per-thread local memory. Memory accesses of one instruction go through
:meth:`Warp.load` / :meth:`Warp.store`, vectorised over the active lanes, with bounds and
natural-alignment checks that raise :class:`MemoryAccessError` naming the PTX line, CTA,
thread and the nearest allocation.
"""
from __future__ import annotations

import numpy as np

from ..frontend.errors import MemoryAccessError
from ..checks.shadow_words import same_elements, same_words, words_of
from ..checks.hb_warp import lane_conflict
from ..checks.initcheck import report_global
from ..frontend.ptxtypes import CALLPARAM_BASE
from .addressing import targets
from .memory import (CTA_SHARED, OFF_MASK_U64, RANK_SHIFT, RANK_SHIFT_U64, as_unsigned, element_index, views,
                     write_noting_change)
from .warpbatch import WarpBatch, register_files, set_register_views

LANES = np.arange(32, dtype=np.uint32)
_ALL_LANES = np.arange(32)


class Group:
    """Lanes of one warp at the same PC. ``m`` is None when all 32 lanes are in the group."""
    __slots__ = ("pc", "mask", "count", "m", "blocked")

    def __init__(self, pc, mask):
        self.pc = pc
        self.blocked = None
        self.set_mask(mask)

    def set_mask(self, mask):
        self.mask = mask
        self.count = int(np.count_nonzero(mask))
        self.m = None if self.count == 32 else mask


class Warp:
    """One warp of a CTA (see module docstring)."""
    is_batch = False

    def __init__(self, cta, wid, tids, nregs, local_size, files=None):
        self.cta = cta
        self.launch = cta.launch
        self.wid = wid
        n = len(tids[0])
        valid = np.zeros(32, bool)
        valid[:n] = True
        self.valid = valid
        self.full = n == 32         # all 32 lanes exist (the fast paths index nothing)
        self.live = valid.copy()
        self.nlive = n
        self.groups = [Group(0, valid.copy())]
        self.done = n == 0
        self.poll = False
        # happens-before state (cutedsl.sim.checks.hb): agent index, vector clocks, group counters
        self.agent = -1
        self.vc = self.pvc = None
        self.mbinit = None
        self.wg_commits = self.bulk_commits = self.cp_commits = 0
        self.acc_bits = 0           # 32-bit registers an unretired wgmma may still write
        self.lazy_bits = 0          # 32-bit registers whose value a warpgroup holds (wgmma_acc)
        self.held = None
        self.acc_pending = []       # (register bits, wgmma agent, group clock, pc)
        self.spin_pcs = set()       # PCs seen at round ends while nothing changes (livelock report)
        self.last_addr = {}         # pc -> first lane's address of its last load/store (progress)
        self.insts = 0
        if files is None:           # a warp of its own (tests); CTAs pass their register files
            set_register_views(self, register_files(nregs, 32), slice(0, 32))
        else:
            set_register_views(self, files, slice(32 * wid, 32 * wid + 32))
        self.local_size = local_size
        self.local = np.zeros(32 * local_size + 16, np.uint8) if local_size else None
        self.callparam = None
        tx = np.zeros(32, np.uint32)
        ty = np.zeros(32, np.uint32)
        tz = np.zeros(32, np.uint32)
        tx[:n], ty[:n], tz[:n] = tids
        self.linear_tid = wid * 32 + LANES
        lane = LANES
        one = np.uint32(1)
        lt = (one << lane) - one
        s = dict(cta.sregs)
        s.update({"%tid.x": tx, "%tid.y": ty, "%tid.z": tz, "%laneid": lane.copy(),
                  "%warpid": np.uint32(wid), "%lanemask_eq": one << lane,
                  "%lanemask_lt": lt, "%lanemask_le": (lt << one) | one,
                  "%lanemask_ge": ~lt, "%lanemask_gt": ~((lt << one) | one)})
        self.sregs = s

    def sreg(self, name):
        v = self.sregs.get(name)
        if v is None:
            c = self.launch.insts + self.insts
            if name in ("%clock", "%globaltimer_lo"):
                return np.uint32(c & 0xFFFFFFFF)
            if name in ("%clock64", "%globaltimer"):
                return np.uint64(c)
            if name == "%globaltimer_hi":
                return np.uint32(0)
            raise MemoryAccessError(f"special register {name} is not available")
        return v

    def describe_lane(self, lane) -> str:
        t = self.sregs
        return (f"CTA {self.cta.ctaid} thread ({int(t['%tid.x'][lane])}, {int(t['%tid.y'][lane])}, "
                f"{int(t['%tid.z'][lane])}) warp {self.wid} lane {lane}")

    # -- lane groups ----------------------------------------------------------------------
    def split(self, g, m, target):
        """Lanes ``m`` of group ``g`` branch to ``target``; the rest fall through."""
        g.set_mask(g.mask & ~m)
        g.pc += 1
        self.groups.append(Group(target, m.copy()))

    def exit_lanes(self, g, m):
        lanes = g.mask if m is None or m is g.m else m
        self.live &= ~lanes
        self.nlive = int(np.count_nonzero(self.live))
        rest = g.mask & ~lanes
        if rest.any():
            g.set_mask(rest)
            g.pc += 1
        else:
            self.groups.remove(g)
        if not self.groups or self.nlive == 0:
            self.groups = []
            self.done = True
        self.cta.on_exit(self)

    # -- memory -------------------------------------------------------------------------
    def _lanes(self, m):
        # a 1-D mask's nonzero(): np.flatnonzero's ravel and dispatch cost more than the search
        if m is None:
            return _ALL_LANES if self.full else self.valid.nonzero()[0]
        return m.nonzero()[0]

    def _fail(self, what, addr, nb, space, ins, lane, detail):
        raise MemoryAccessError(
            f"{what} of {nb} B at 0x{addr:x} ({space}): {detail}\n    at {ins.where()}\n"
            f"    by {self.describe_lane(lane)}")

    def _check(self, off, limit, nb, lanes, space, ins, what, base_addr):
        bad = (off < 0) | (off + nb > limit)
        if np.count_nonzero(bad):           # (a fraction of .any()'s cost on small arrays)
            i = int(np.flatnonzero(bad)[0])
            self._fail(what, int(base_addr[i]) if np.ndim(base_addr) else int(base_addr), nb, space, ins,
                       int(lanes[i]), f"outside the {limit}-byte {space} region (offset {int(off[i])})")
        if nb > 1 and np.count_nonzero(off & (nb - 1)):
            i = int(np.flatnonzero(off & (nb - 1))[0])
            self._fail(what, int(base_addr[i]) if np.ndim(base_addr) else int(base_addr), nb, space, ins,
                       int(lanes[i]), f"misaligned (needs {nb}-byte alignment)")

    def load(self, space, addr, m, esize, n, dtype, ins, race=True, init=True):
        """Load ``n`` elements of ``esize`` bytes per active lane -> array (k, n) of dtype. ``race=False``:
        the caller records the access in the race detector itself; ``init=False``: initcheck does not
        judge it. A whole warp's kernel-parameter load at one address reuses the first one's result
        (read-only in a launch, :meth:`store`; no race or initcheck judges them), noting each access."""
        if space == "param" and m is None and getattr(addr, "ndim", None) == 0:
            key = (int(addr), esize, n, dtype)
            hit = self.launch.param_loads.get(key)
            if hit is not None:
                self.note_access(ins, hit[0])
                return hit[1].copy()
            out = self._load(space, addr, m, esize, n, dtype, ins, race, init)
            if key[0] < CALLPARAM_BASE:
                self.launch.param_loads[key] = (np.full(1, addr, np.uint64), out.copy())
            return out
        return self._load(space, addr, m, esize, n, dtype, ins, race, init)

    def _load(self, space, addr, m, esize, n, dtype, ins, race, init):
        lanes = self._lanes(m)
        a = np.asarray(addr, np.uint64)
        if a.ndim:
            a = a[lanes]
        else:                       # uniform address: one access
            lanes = lanes[:1]
            a = np.full(1, a, np.uint64)
        k = len(lanes)
        nb = esize * n
        self.note_access(ins, a)
        out = np.empty((k, n), np.dtype(f"u{esize}") if esize <= 8 else np.uint8)
        for sel, v, off, limit, cta, space in targets(self, space, a, nb, ins, lanes, "load"):
            ll = lanes if sel is None else lanes[sel]
            self._check(off, limit, nb if space != "local" else esize * n, ll, space, ins, "load",
                        a if sel is None else a[sel])
            if space == "local" or space == "callparam":
                idx = off[:, None] + np.arange(nb)
                r = v[1][idx].view(out.dtype).reshape(len(off), n)
            else:
                if race and cta is not None and cta.shadow is not None:
                    cta.race_access(off, nb, self, ins, False)
                elif space == "global":
                    al = self.launch.gmem.find(int((a if sel is None else a[sel])[0]))
                    if race and self.launch.ghb is not None:
                        self.launch.ghb.access(self, al, off, nb, False, ins)
                    if init and al.dv is not None and self.launch.initcheck:
                        self.check_defined(al, off, nb, ll, ins)
                r = v[esize][element_index(off, esize, n)].reshape(len(off), n)
            if sel is None:
                out = r
            else:
                out[sel] = r
        return out.view(dtype)

    def store(self, space, addr, m, esize, n, vals, ins, race=True):
        """Store ``vals`` ((k, n) of unsigned esize-byte ints, or broadcastable) per active lane."""
        if space in CTA_SHARED and np.ndim(addr) and self._store_own_shared(addr, m, esize, n, vals, ins, race):
            return
        lanes = self._lanes(m)
        k = len(lanes)
        a = np.asarray(addr, np.uint64)
        a = (a if a.shape == (32,) else np.broadcast_to(a, (32,)))[lanes] if a.ndim else np.full(k, a, np.uint64)
        nb = esize * n
        vals = as_unsigned(vals, esize)
        vals = vals if vals.shape == (k, n) else np.broadcast_to(vals, (k, n))
        launch = self.launch
        self.note_access(ins, a)
        for sel, v, off, limit, cta, space in targets(self, space, a, nb, ins, lanes, "store"):
            ll = lanes if sel is None else lanes[sel]
            vv = vals if sel is None else vals[sel]
            self._check(off, limit, nb, ll, space, ins, "store", a if sel is None else a[sel])
            if space == "param" and not (a >= np.uint64(CALLPARAM_BASE)).all():
                raise MemoryAccessError(f"store to kernel parameter space at {ins.where()}")
            if space == "local" or space == "callparam":
                new = np.ascontiguousarray(vv).view(np.uint8).reshape(len(off), nb)
                write_noting_change(launch, v[1], off[:, None] + np.arange(nb), new)
                continue
            ix = element_index(off, esize, n)
            full = vv
            vv = vv[:, 0] if n == 1 else vv
            if cta is not None:
                cta.check_not_mbarrier(off, nb, self, ins)
                if race and cta.shadow is not None:
                    lane_conflict(cta, off, vv, nb, ll, self, ins)
                    cta.race_access(off, nb, self, ins, True, same=same_words(v[1], off, nb, full))
            elif space == "global":
                al = launch.gmem.find(int((a if sel is None else a[sel])[0]))
                if race and launch.ghb is not None:
                    launch.ghb.access(self, al, off, nb, True, ins, same_elements(v[1], off, nb, full))
                if al.dv is not None:       # initcheck: these bytes are defined from now on
                    al.define(off, nb)
            write_noting_change(launch, v[esize], ix, vv)

    def check_defined(self, al, off, nb: int, lanes, ins, what: str = "generic proxy") -> None:
        """Initcheck of a read of ``nb`` bytes at byte offsets ``off`` (one per lane of ``lanes``)
        of global allocation ``al`` (``lanes`` None: a read by an asynchronous unit the warp
        issued): ``UninitializedReadError`` at the first byte nothing wrote."""
        b = al.undefined(off, nb)
        if b is not None:
            if lanes is None:       # an asynchronous unit's read (a TMA load the warp issued)
                who = f"CTA {self.cta.ctaid} warp {self.wid}"
            else:
                who = self.describe_lane(int(lanes[int(np.flatnonzero((off <= b) & (b < off + nb))[0])]))
            report_global(al, b, ins, who, what, self.launch.seed)

    def note_access(self, ins, a) -> None:
        """The livelock detector's notion of progress through memory (scheduler module docstring):
        an access at a new address (a loop walking an array) is progress; the same address again
        (polling a flag, rewriting a counter) is not, and it weighs as much as the cost of a memory
        access in the launch's no-progress stretch."""
        first = int(a[0]) if len(a) else 0
        if self.last_addr.get(ins.pc) != first:
            self.last_addr[ins.pc] = first
            self.launch.fresh = True
        else:
            self.launch.stale += 1

    def _store_own_shared(self, addr, m, esize, n, vals, ins, race):
        """The common case of :meth:`store` -- per-lane addresses in this CTA's own shared memory,
        in bounds and aligned -- with a few whole-warp numpy operations. Returns False (nothing
        done) when any lane needs the general path, which also produces the error messages."""
        lanes = self._lanes(m)
        a = np.asarray(addr, np.uint64)
        if len(lanes) != 32:
            a = a[lanes]
        cta = self.cta
        nb = esize * n
        off = cta.own_offsets(a, nb)
        if off is None:
            return False
        vals = np.broadcast_to(as_unsigned(vals, esize), (len(lanes), n))
        if cta.mbar:
            cta.check_not_mbarrier(off, nb, self, ins)
        v = cta.sv[esize]
        ix = element_index(off, esize, n)
        vv = vals[:, 0] if n == 1 else vals
        if race and cta.shadow is not None:
            lane_conflict(cta, off, vals, nb, lanes, self, ins)
            cta.race_access(off, nb, self, ins, True, same=same_words(cta.sv[1], off, nb, vals))
        write_noting_change(self.launch, v, ix, vv)
        return True

    def read_generic_bytes(self, addr: int, n: int, ins, lane: int = 0) -> bytes:
        """Read ``n`` bytes at one generic address as seen by ``lane`` (tensor maps, printf)."""
        a = np.array([addr], np.uint64)
        lanes = np.array([lane])
        for sel, v, off, limit, cta, sp in targets(self, "generic", a, n, ins, lanes, "read"):
            o = int(off[0])
            if o < 0 or o + n > limit:
                self._fail("read", addr, n, "generic", ins, 0, f"outside the {limit}-byte region")
            if sp == "global" and self.launch.initcheck:
                al = self.launch.gmem.find(addr)
                if al.dv is not None:
                    self.check_defined(al, off[:1], n, lanes, ins)
            return v[1][o:o + n].tobytes()


class CTA:
    """One thread block: shared memory, mbarriers, named barriers, warps."""

    def __init__(self, launch, ctaid, cluster, rank, cluster_ctaid):
        prog = launch.program
        self.launch = launch
        self.ctaid = ctaid
        self.cluster = cluster
        self.rank = rank
        self.rank_bits = np.uint64(rank << RANK_SHIFT)    #: in every shared address of this CTA
        self.exited = False
        self.dyn_base = launch.dyn_base
        self.smem_size = launch.smem_total
        self.smem = np.zeros((self.smem_size + 15) // 16 * 16 + 16, np.uint8)
        self.sv = views(self.smem)
        self.mbar = {}
        self.bars = {}
        self.warpgroups = {}
        self.mma_chains = []        # wgmma_acc.HeldTiles with MMAs queued in the current lockstep run
        bx, by, bz = launch.block
        gx, gy, gz = launch.grid
        cx, cy, cz = launch.cluster
        self.sregs = {
            "%ntid.x": np.uint32(bx), "%ntid.y": np.uint32(by), "%ntid.z": np.uint32(bz),
            "%ctaid.x": np.uint32(ctaid[0]), "%ctaid.y": np.uint32(ctaid[1]), "%ctaid.z": np.uint32(ctaid[2]),
            "%nctaid.x": np.uint32(gx), "%nctaid.y": np.uint32(gy), "%nctaid.z": np.uint32(gz),
            "%cluster_ctaid.x": np.uint32(cluster_ctaid[0]), "%cluster_ctaid.y": np.uint32(cluster_ctaid[1]),
            "%cluster_ctaid.z": np.uint32(cluster_ctaid[2]),
            "%cluster_nctaid.x": np.uint32(cx), "%cluster_nctaid.y": np.uint32(cy),
            "%cluster_nctaid.z": np.uint32(cz),
            "%clusterid.x": np.uint32(ctaid[0] // cx), "%clusterid.y": np.uint32(ctaid[1] // cy),
            "%clusterid.z": np.uint32(ctaid[2] // cz),
            "%nclusterid.x": np.uint32(gx // cx), "%nclusterid.y": np.uint32(gy // cy),
            "%nclusterid.z": np.uint32(gz // cz),
            "%cluster_ctarank": np.uint32(rank), "%cluster_nctarank": np.uint32(cx * cy * cz),
            "%is_explicit_cluster": np.uint32(1 if launch.explicit_cluster else 0),
            "%dynamic_smem_size": np.uint32(launch.dyn_smem),
            "%total_smem_size": np.uint32(self.smem_size), "%aggr_smem_size": np.uint32(self.smem_size),
            "%nwarpid": np.uint32(64), "%smid": np.uint32(launch.cta_serial % 132),
            "%nsmid": np.uint32(132), "%gridid": np.uint32(launch.serial),
        }
        nthreads = bx * by * bz
        lin = np.arange(nthreads)
        tx, ty, tz = lin % bx, (lin // bx) % by, lin // (bx * by)
        self.warps = []
        nw = (nthreads + 31) // 32
        # one register array per class for the whole CTA; each warp owns 32 columns of it, so
        # warps at the same PC can run a register-only instruction as one (WarpBatch)
        self.files = register_files(prog.nregs, 32 * nw)
        self.batches = {}
        # warpbatch._store_plan: checked lane addresses. A plan depends only on the CTA's rank and
        # shared-memory size (own_offsets), the same for every CTA of a rank in the launch: they
        # share one table (an epilogue's stores repeat from tile to tile)
        self.store_plans = launch.store_plans.setdefault(rank, {})
        for wi in range(nw):
            s = slice(32 * wi, min(32 * wi + 32, nthreads))
            self.warps.append(Warp(self, wi, (tx[s], ty[s], tz[s]), prog.nregs, prog.local_size, self.files))
        self.shadow = None          # hb.Shadow, set by the scheduler when race checks are on

    def batch(self, lo, hi):
        """The :class:`WarpBatch` of warps ``lo .. hi - 1`` (cached)."""
        b = self.batches.get((lo, hi))
        if b is None:
            b = self.batches[(lo, hi)] = WarpBatch(self, lo, hi)
        return b

    def on_exit(self, warp):
        from .named_barriers import check_named_barriers
        check_named_barriers(self)
        if all(w.done for w in self.warps) and not self.exited:
            self.exited = True
            if getattr(self, "tmem", None) is not None:
                from .tensor_memory import leak_check
                leak_check(self)
            if self.shadow is not None:
                self.shadow.exit_check()
            if self.launch.chaos is not None:
                # the CTA's shared memory goes to the next CTA: reads that are still pending see garbage
                self.launch.chaos.flush(lambda t: t is not None and t[0] == "wgmma" and t[1][0] == self.rank)
                self.smem[:] = 0xFF

    def own_offsets(self, a, nb: int):
        """Byte offsets (int64) of shared addresses ``a`` (uint64, one per lane) when every one is
        this CTA's own, in bounds for ``nb`` bytes and ``nb``-aligned; else None (the general
        path then reports which lane is wrong)."""
        if ((a >> RANK_SHIFT_U64) != self.rank).any():
            return None
        off = (a & OFF_MASK_U64).astype(np.int64)
        if int(off.max()) + nb > self.smem_size or (nb > 1 and int(np.bitwise_or.reduce(off)) & (nb - 1)):
            return None
        return off

    def overlaps_mbarrier(self, lo, hi) -> bool:
        """Whether bytes ``lo .. hi - 1`` reach an initialised mbarrier of this CTA."""
        mb = self.mbar
        if not mb or lo >= max(mb) + 8 or hi <= min(mb):   # (an epilogue's tile lies past them all)
            return False
        return any(o < hi and o + 8 > lo for o in mb)

    def check_not_mbarrier(self, off, nb, w, ins):
        if not self.mbar:
            return
        lo = int(off.min())
        hi = int(off.max()) + nb
        for o in self.mbar:
            if o < hi and o + 8 > lo:
                hit = (off < o + 8) & (off + nb > o)
                if hit.any():
                    from ..frontend.errors import SimRuntimeError
                    raise SimRuntimeError(
                        f"generic store over the initialised mbarrier at "
                        f"{self.launch.program.smem_symbol(o, self.dyn_base)} (CTA {self.ctaid})"
                        f"\n    at {ins.where()}\n    by warp {w.wid}")

    def race_access(self, off, nb, w, ins, write, what=None, same=None):
        """Record a generic-proxy access of warp ``w`` to this CTA's shared memory (``same``: which
        words a write leaves unchanged, :func:`~cutedsl.sim.checks.shadow_words.same_words`)."""
        sh = self.shadow
        vc = sh.hb.warp_vc(w)
        words = words_of(off, nb)
        if write:
            sh.write(words, w.agent, vc[w.agent], vc, ins.pc, False, what or "st.shared", same)
        else:
            if what is None and ins.opcode.startswith("tensormap.replace"):
                what = ins.opcode           # reads the rest of the object (initcheck exempts it)
            sh.read(words, w.agent, vc[w.agent], vc, w.pvc, ins.pc, False, what or "ld.shared")


class Cluster:
    """CTAs of one cluster (co-scheduled), with the cluster barrier state."""

    def __init__(self, cid):
        self.cid = cid
        self.ctas = []
        self.barrier_arrived = {}   # (cta rank, warp id) -> generation arrived
        self.barrier_gen = 0
        self.barrier_snap = self.barrier_done = None    # happens-before snapshots
        self.hb = None              # hb.HB when race checks are on
