"""Launch state and the warp scheduler.

**Placement of shared memory** (a design decision; ptxas/the driver decide on hardware):
static ``.shared`` variables first, in declaration order with their alignment (from offset
0), then dynamic shared memory (``__dynamic_shmem__N`` / unsized ``extern`` arrays) at the
next multiple of 1024 B plus an optional stress offset. ``%dynamic_smem_size`` is the
launched dynamic size.

**Residency.** As on the GPU, every cluster that fits at once is live together
(:func:`cutedsl.sim.machine.residency.resident_clusters`: ``sm_count`` SMs, each holding at most 32 CTAs, 2048 threads,
228 KiB of shared memory (1 KiB reserved per CTA) and 64 K registers at ``.maxnreg``; then
what the emulator's ``SimLimits.memory_bytes`` allows); when a cluster exits the next one in
launch order takes its place. So CTAs that synchronise through global memory (semaphores,
work queues, grid-wide barriers) make progress; a wait on a CTA that cannot become resident
is a deadlock whose report says how many clusters are waiting to become resident.
The scheduler visits the live warps (all live clusters) round-robin and runs each until it blocks, yields
(a failed ``test_wait`` poll or ``nanosleep``) or a quantum of instructions passes. Inside a
warp (:mod:`cutedsl.sim.machine.warp_run`), lane groups follow the **min-PC** rule: the runnable group with the lowest PC runs,
and groups whose PCs meet merge (reconvergence). A round in which no instruction executes is
a **deadlock**; every blocked lane group is listed in the :class:`DeadlockError`.

**Livelock.** A round that changes no memory and no barrier state is fingerprinted (every
warp's PCs, masks and registers) and the next rounds run short quanta; when a fingerprint
repeats before anything changes, the cluster cycles forever and a :class:`LivelockError` names
the spinning warps and the PTX lines of their loops. Loops whose state changes (a counter in a
register or in memory) are caught by **progress**: a round in which some warp synchronised (a
barrier, mbarrier, wgmma or cp.async state change: ``Launch.version``), a warp exited or a
cluster started is progress; a launch that runs ``progress_limit`` warp-instructions with none
is stopped with :class:`LivelockError`. A warp polling a flag while another warp still
synchronises is waiting, not livelocked: only the launch as a whole is judged. A wall-clock
limit (``time_limit`` seconds, default 60, env ``CUTEDSL_SIM_TIME_LIMIT``) stops any launch with
:class:`TimeLimitExceeded`, and a grid that cannot finish within it even if every CTA did
nothing is refused before it starts (:class:`GridTooLarge`).

**Adversarial mode** (``chaos=SEED``, :mod:`cutedsl.sim.machine.chaos`): random warp order (across
clusters too) and run lengths per round, deferred asynchronous operations (all completed when
a cluster exits); **race detection** (``race_check``,
:mod:`cutedsl.sim.checks.hb`): one happens-before state per cluster and one shadow per CTA.
"""
from __future__ import annotations

import time

import numpy as np

from ...arch import DEFAULT_SM_COUNT
from ...runtime.backend import SMEM_LIMIT
from .chaos import Chaos
from ..frontend.errors import (DeadlockError, InstructionBudgetExceeded, LivelockError, SimLaunchError,
                               TimeLimitExceeded)
from ..checks.hb import HB
from ..checks.shadow import Shadow
from ..frontend.limits import DEFAULT_LIMITS
from .machine import CTA, Cluster
from .memory import views
from .residency import cluster_bytes, resident_clusters
from .warp_run import run_warp
# the limits are also this module's names (the backend, tests and older callers import them here)
from .launch_limits import (DEFAULT_BUDGET, DEFAULT_PROGRESS_LIMIT, DEFAULT_TIME_LIMIT,  # noqa: F401
                            MIN_CANCELLED_SECONDS, MIN_CTA_SECONDS, MIN_WARP_SECONDS, STALE_WEIGHT,
                            check_grid_fits, default_initcheck, default_progress_limit, launch_dims,
                            default_time_limit)


def _dispose(cl) -> None:
    """Break the cluster's reference cycles (warp <-> CTA <-> cluster <-> race-check state) once
    it has run, so its memory (shared memory, register files, shadows) goes by reference
    counting when the launch returns instead of waiting for Python's cyclic collector."""
    for c in cl.ctas:
        for w in c.warps:
            w.__dict__.clear()
        c.__dict__.clear()
    cl.__dict__.clear()


class Launch:
    """One kernel launch on the emulator (see module docstring)."""

    serial_counter = 0
    #: one warp's turn (cutedsl.sim.machine.warp_run; lockstep.py steps neighbours through it too)
    _run_warp = run_warp

    def __init__(self, program, gmem, grid, block, params, *, cluster=(1, 1, 1), smem=0,
                 budget=DEFAULT_BUDGET, race_check=True, dyn_smem_offset=0, quantum=20000,
                 global_syms=None, chaos=None, time_limit=None, limits=None, sm_count=DEFAULT_SM_COUNT,
                 progress_limit=None, initcheck=None):
        Launch.serial_counter += 1
        self.serial = Launch.serial_counter
        self.program = program
        self.gmem = gmem
        self.grid = launch_dims(grid, "grid")
        self.block = launch_dims(block, "block")
        cl = launch_dims(cluster, "cluster")
        d = program.directives
        req = d.get("reqnctapercluster")
        if req is not None:
            if cl == (1, 1, 1):
                cl = tuple(req)
            elif cl != tuple(req):
                raise SimLaunchError(f"kernel {program.name!r} requires cluster {tuple(req)} (.reqnctapercluster), "
                                     f"launched with {cl}")
        self.cluster = cl
        self.explicit_cluster = req is not None or "explicitcluster" in d or cl != (1, 1, 1)
        nthreads = self.block[0] * self.block[1] * self.block[2]
        if nthreads > 1024:
            raise SimLaunchError(f"block {self.block} has {nthreads} threads; the limit is 1024")
        if "reqntid" in d and tuple(d["reqntid"]) != self.block:
            raise SimLaunchError(f"kernel {program.name!r} requires block {tuple(d['reqntid'])} (.reqntid), "
                                 f"launched with {self.block}")
        if "maxntid" in d:
            mx = d["maxntid"]
            if nthreads > mx[0] * mx[1] * mx[2]:
                raise SimLaunchError(f"block {self.block} exceeds .maxntid {tuple(mx)}")
        for i in range(3):
            if self.grid[i] % cl[i]:
                raise SimLaunchError(f"grid {self.grid} is not divisible by cluster {cl}")
        ncl = cl[0] * cl[1] * cl[2]
        if ncl > 16 or ("maxclusterrank" in d and ncl > d["maxclusterrank"]):
            raise SimLaunchError(f"cluster {cl} has {ncl} CTAs (limit {d.get('maxclusterrank', 16)})")
        # parameters
        if len(params) != len(program.params):
            raise SimLaunchError(f"kernel {program.name!r} takes {len(program.params)} parameters "
                                 f"({', '.join(p.name for p in program.params)}), got {len(params)}")
        size = (program.param_size + 15) // 16 * 16 + 16
        buf = np.zeros(size, np.uint8)
        for p, b in zip(program.params, params):
            b = bytes(b)
            if len(b) != p.size:
                raise SimLaunchError(f"parameter {p.name!r} is {p.size} bytes (.{p.type}"
                                     f"{'[%d]' % (p.size // max(1, 1)) if p.size > 8 else ''}), got {len(b)} bytes")
            buf[p.offset:p.offset + p.size] = np.frombuffer(b, np.uint8)
        self.param_buf = buf
        self.param_views = views(buf)
        self.param_size = program.param_size
        # shared memory
        smem = int(smem)
        if smem < 0:
            raise SimLaunchError("negative dynamic shared memory size")
        static = program.static_smem
        if smem + static > SMEM_LIMIT:
            raise SimLaunchError(f"dynamic shared memory {smem} B + static {static} B exceeds the sm_90 limit "
                                 f"of {SMEM_LIMIT} B per CTA")
        self.dyn_smem = smem
        al = program.dyn_align
        self.dyn_base = (static + al - 1) // al * al + int(dyn_smem_offset)
        self.smem_total = self.dyn_base + smem
        memory_bytes = (limits or DEFAULT_LIMITS).memory_bytes
        need = cluster_bytes(program, nthreads, ncl, self.smem_total, race_check, memory_bytes)
        self.sm_count = int(sm_count)
        self.resident, self.resident_limit = resident_clusters(
            program, nthreads, ncl, self.smem_total, self.sm_count, need, memory_bytes)
        self.budget = int(budget)
        self.race_check = bool(race_check)
        #: reads of memory nothing wrote are errors (cutedsl.sim.checks.initcheck)
        self.initcheck = bool(initcheck) if initcheck is not None else default_initcheck()
        self.ghb = None             # GlobalHB (global-memory races between clusters), with race checks
        self.quantum = int(quantum)
        self.chaos = Chaos(chaos) if chaos is not None else None
        self.seed = chaos
        if self.race_check:
            from ..checks.global_hb import GlobalHB
            self.ghb = GlobalHB(self, chaos)
        self.time_limit = float(time_limit) if time_limit is not None else default_time_limit()
        self.progress_limit = int(progress_limit) if progress_limit is not None else default_progress_limit()
        check_grid_fits(self, nthreads, ncl)
        self.changed = False     # a store changed memory this round (see _run_resident)
        self.fresh = False       # a load/store reached a new address this round (Warp.note_access)
        self.stale = 0           # loads/stores that repeated their address (Warp.note_access)
        self.insts = 0
        self._stepping = False       # a warp runs for lockstep.meets / step_gang (no nesting)
        self.tmap_cache = {}         # param-space address -> decoded tensor map (tma.py)
        self.store_plans = {}        # CTA rank -> its batched st.shared plans (machine.CTA.store_plans)
        self.plans = {}              # plan caches keyed by kind and the identities of cached arrays
                                     # (deferred-store flushes, chain products, chain reads): die with the launch
        self.param_loads = {}        # kernel-parameter loads at one address (machine.Warp.load)
        self.printf = []
        self.version = 0
        self.cta_serial = 0
        self.strict_tcgen05_fences = False      # SimBackend(strict_tcgen05_fences=...): tmem.tmem_order
        self.allow = frozenset()                # SimBackend(allow=...): race rules opted out of (checks/rules.py)
        self.global_syms = global_syms if global_syms is not None else {}
        self.code = program.code

    def global_addr(self, name):
        a = self.global_syms.get(name)
        if a is None:
            var = next(v for v in self.program.globals if v.name == name)
            al = self.gmem.alloc(max(var.size, 1), tag=f"module variable {name}")
            if var.init:
                esz = max(1, var.size // max(1, var.count))
                data = b"".join(int(x & ((1 << (8 * esz)) - 1)).to_bytes(esz, "little") for x in var.init)
                al.data[:len(data)] = np.frombuffer(data, np.uint8)
            a = self.global_syms[name] = al.base
        return a

    # -- running -----------------------------------------------------------------------
    def _clusters(self):
        """The launch's clusters in launch order (x fastest), created when they become resident;
        clusters cancelled by cluster launch control (:func:`cutedsl.sim.instructions.clc.cancel_cluster`) are skipped."""
        gx, gy, gz = self.grid
        cx, cy, cz = self.cluster
        cid = 0
        for kz in range(gz // cz):
            for ky in range(gy // cy):
                for kx in range(gx // cx):
                    self.next_cluster = cid + 1
                    if cid in self.cancelled:
                        cid += 1
                        continue
                    cl = Cluster(cid)
                    for z in range(cz):
                        for y in range(cy):
                            for x in range(cx):
                                ctaid = (kx * cx + x, ky * cy + y, kz * cz + z)
                                rank = x + cx * (y + cy * z)
                                cl.ctas.append(CTA(self, ctaid, cl, rank, (x, y, z)))
                                self.cta_serial += 1
                    if self.race_check:
                        cl.hb = HB(cl, self.seed)
                        cl.hb.allow = self.allow
                        for c in cl.ctas:
                            c.shadow = Shadow(c, cl.hb)
                    yield cl
                    cid += 1

    def run(self):
        self._t0 = time.perf_counter()
        gx, gy, gz = self.grid
        cx, cy, cz = self.cluster
        self.clusters_total = (gx // cx) * (gy // cy) * (gz // cz)
        self.clusters_started = 0
        self.next_cluster = 0           # clusters from here on have not started
        self.cancelled = set()          # ids of clusters cancelled by cluster launch control
        self.live = []
        pending = self._clusters()
        with np.errstate(all="ignore"):
            try:
                self._run_resident(pending)
            finally:
                for cl in self.live:
                    _dispose(cl)
                self.live = []
                self.gmem.settle()      # initcheck bitmaps this launch's writes completed go

    def _admit(self, pending) -> None:
        while len(self.live) < self.resident:
            cl = next(pending, None)
            if cl is None:
                return
            self.live.append(cl)
            self.clusters_started += 1

    def _run_resident(self, pending):
        chaos = self.chaos
        seen = set()
        t_end = self._t0 + self.time_limit
        self._admit(pending)
        quiet_from = 0              # self.insts at the last progress (see the module docstring)
        nactive = -1
        while self.live:
            done = [cl for cl in self.live if all(w.done for c in cl.ctas for w in c.warps)]
            if done:                   # exited clusters make room for the next ones in launch order
                if chaos is not None:
                    chaos.drain()
                for cl in done:
                    self.live.remove(cl)
                    _dispose(cl)
                self._admit(pending)
                seen.clear()
                quiet_from, nactive = self._quiet_clock(), -1
                continue
            warps = [w for cl in self.live for c in cl.ctas for w in c.warps]
            active = [w for w in warps if not w.done]
            if len(active) != nactive:      # a warp exited
                quiet_from, nactive = self._quiet_clock(), len(active)
            executed = 0
            v0 = vq = self.version
            self.changed = self.fresh = False
            if chaos is not None:
                active = chaos.order(active)
            for w in active:
                if chaos is not None:
                    chaos.step()
                    n = self._run_warp(w, chaos.quantum())
                else:
                    # short runs while nothing changes, so a spinning loop repeats its state soon
                    n = self._run_warp(w, 256 if seen else self.quantum)
                executed += n
                if self.version != vq or self.fresh or w.done:      # progress (module docstring)
                    quiet_from, vq, self.fresh = self._quiet_clock(), self.version, False
                elif self._quiet_clock() - quiet_from > self.progress_limit:
                    if chaos is not None and chaos.run_one():   # a deferred operation may be awaited
                        quiet_from = self._quiet_clock()
                    else:
                        raise LivelockError(self._no_progress_report(quiet_from))
                if self.insts > self.budget:
                    raise InstructionBudgetExceeded(
                        f"instruction budget of {self.budget} warp-instructions exceeded in kernel "
                        f"{self.program.name!r} (cluster {w.cta.cluster.cid}); last warp: CTA {w.cta.ctaid} warp "
                        f"{w.wid} at {self._where(w)}" + self._seed_note())
            if time.perf_counter() > t_end:
                raise TimeLimitExceeded(
                    f"kernel {self.program.name!r} ran longer than the emulator's wall-clock limit of "
                    f"{self.time_limit:g} s (time_limit= / CUTEDSL_SIM_TIME_LIMIT) after {self.insts} "
                    f"warp-instructions\n" + self.deadlock_report(self.live, livelock=True, head=False))
            if executed == 0:
                if chaos is not None and chaos.run_one():
                    continue
                raise DeadlockError(self.deadlock_report(self.live))
            if self.version == v0 and not self.changed:     # nothing observable changed
                if chaos is not None and chaos.run_one():
                    seen.clear()
                    continue
                fp = self._fingerprint(active)
                if fp in seen:
                    raise LivelockError(self.deadlock_report(self.live, livelock=True))
                seen.add(fp)
                for w in active:
                    w.spin_pcs.update(g.pc for g in w.groups)
            else:
                if seen:
                    seen.clear()
                    for w in warps:
                        w.spin_pcs.clear()

    def _quiet_clock(self) -> int:
        """Warp-instructions, a load or store that repeats its address counting as
        ``STALE_WEIGHT`` (its cost in emulation time relative to a register instruction)."""
        return self.insts + STALE_WEIGHT * self.stale

    def _no_progress_report(self, since: int) -> str:
        return (f"livelock: kernel {self.program.name!r} executed {self._quiet_clock() - since} warp-instructions "
                f"(loads/stores at a repeated address weigh {STALE_WEIGHT}; the emulator's progress limit is "
                f"{self.progress_limit}) with no synchronisation (barrier, mbarrier, wgmma or cp.async state "
                f"change), no load or store at a new address, no warp exit and no cluster start: the live warps "
                f"loop without progress (a counter that only grows, a poll nothing will answer). If this is a "
                f"long stretch of real work, raise the limit (SimBackend(progress_limit=...) / "
                f"CUTEDSL_SIM_PROGRESS_LIMIT)" + self._seed_note() + "\n"
                + self.deadlock_report(self.live, livelock=True, head=False))

    @staticmethod
    def _fingerprint(active):
        """State of the live warps: PCs, lane masks, blocking reasons and register files."""
        parts = []
        for w in sorted(active, key=lambda x: (x.cta.cluster.cid, x.cta.rank, x.wid)):
            parts.append((w.cta.cluster.cid, w.cta.rank, w.wid, tuple((g.pc, g.mask.tobytes(), g.blocked is not None)
                                                   for g in w.groups),
                          hash(w.u32.tobytes()), hash(w.u64.tobytes()), hash(w.p.tobytes()),
                          hash(w.u16.tobytes())))
        return hash(tuple(parts))

    def _seed_note(self):
        return (f"\n    (adversarial mode, seed {self.seed}; replay with CUTEDSL_SIM_CHAOS={self.seed})"
                if self.seed is not None else "")

    def _where(self, w):
        if not w.groups:
            return "exit"
        g = min(w.groups, key=lambda x: x.pc)
        return self.code[g.pc].where()

    # -- diagnostics (cutedsl.sim.checks.deadlock) ------------------------------------------------
    def deadlock_report(self, live, livelock=False, head=True):
        """See :func:`cutedsl.sim.checks.deadlock.report`."""
        from ..checks.deadlock import report
        return report(self, live, livelock, head)
