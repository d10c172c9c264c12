"""mbarrier objects (PTX ISA "mbarrier"): the per-CTA side table of barrier state that the
mbarrier instructions (:mod:`cutedsl.sim.instructions.mbarrier`) and every asynchronous operation completing on
a barrier (TMA, bulk copies, ``st.async``, ``cp.async.mbarrier.arrive``, ``tcgen05.commit``,
``clusterlaunchcontrol.try_cancel``) use.

State ``(phase, pending, expected, tx)`` is kept per CTA keyed by the shared-memory offset (the 8
bytes themselves are not written). ``phase`` counts completed phases; a phase completes when
``pending == 0 and tx == 0``, then ``pending = expected``. For the race detector a barrier keeps
the join of every release into it (``snap``) and its snapshot at the latest phase completion
(``done``); every use must come after the ``mbarrier.init`` (:func:`hb_check_init`).
"""
from __future__ import annotations

import numpy as np

from ..frontend.errors import SimRuntimeError
from ..checks.rules import raise_unless_allowed
from ..machine.memory import OFF_MASK, RANK_SHIFT, SHARED_WIN


class MBarrier:
    __slots__ = ("cta", "offset", "phase", "pending", "expected", "tx", "line", "log", "snap", "done",
                 "init")

    def __init__(self, cta, offset, count, line):
        self.cta, self.offset = cta, offset
        self.phase = 0
        self.pending = self.expected = count
        self.tx = 0
        self.line = line
        self.log = []
        self.snap = None        # join of every release into this barrier (happens-before)
        self.done = None        # ``snap`` when the latest phase completed
        self.init = None        # (agent, clock, pc) of the mbarrier.init

    @property
    def name(self):
        c = self.cta
        return f"{c.launch.program.smem_symbol(self.offset, c.dyn_base)} (CTA {c.ctaid}, smem offset {self.offset})"

    def note(self, fmt, *args):
        """Record an event of the barrier (the latest 20-40 are kept) for :meth:`history` (the
        deadlock report); the text is formatted only when read -- notes are taken on every
        arrive and complete_tx. An argument with an ``at`` method (an instruction) is shown as
        its ``at()``."""
        log = self.log
        if len(log) > 40:
            del log[:20]
        log.append((self.phase, fmt, args))

    def history(self) -> list:
        """The recorded events, oldest first, as ``"phase P: <event>"``."""
        return [f"phase {p}: " + fmt.format(*(a.at() if hasattr(a, "at") else a for a in args))
                for p, fmt, args in self.log]

    def _check(self):
        if self.pending == 0 and self.tx == 0:
            self.phase += 1
            self.done = self.snap
            self.pending = self.expected
            self.cta.launch.version += 1

    def arrive(self, n, ins, count=1, nocomplete=False, drop=False):
        total = n * count
        while total > 0:
            if self.pending <= 0:
                raise SimRuntimeError(
                    f"mbarrier {self.name}: over-arrival ({total} arrivals left, pending 0, tx {self.tx}) "
                    f"in phase {self.phase}\n    at {ins.where()}")
            take = min(total, self.pending)
            self.pending -= take
            total -= take
            if drop:
                self.expected -= take
            if nocomplete and self.pending == 0 and self.tx == 0:
                raise SimRuntimeError(f"mbarrier {self.name}: arrive.noComplete completed the phase\n"
                                      f"    at {ins.where()}")
            self._check()
        self.cta.launch.version += 1

    def expect_tx(self, n):
        self.tx += n
        self.cta.launch.version += 1

    def complete_tx(self, n):
        self.tx -= n
        self._check()
        self.cta.launch.version += 1

    def describe(self):
        return (f"phase {self.phase} (parity {self.phase & 1}), pending arrivals {self.pending}/"
                f"{self.expected}, tx-count {self.tx} B")


def mbar_targets(w, a, space, ins, lanes):
    """Map shared(::cluster) addresses ``a`` (a Python int, or one uint64 per lane) to
    ``[(cta, offset, lane count)]``."""
    if isinstance(a, int):
        a = (a,)
    elif getattr(a, "ndim", 0) != 1:
        a = np.atleast_1d(np.asarray(a, np.uint64))
    if len(a) == 1 or uniform_lanes(a):     # the usual case: one barrier for every lane (as Python ints)
        v = int(a[0])
        if space == "generic":
            if v >> 40 != SHARED_WIN >> 40:
                raise SimRuntimeError(f"mbarrier operand is not a shared-memory address\n    at {ins.where()}")
            v -= SHARED_WIN
        pairs = ((v, len(a)),)
    else:
        a = np.asarray(a, np.uint64)
        if space == "generic":
            if np.any((a >> np.uint64(40)) != np.uint64(SHARED_WIN >> 40)):
                raise SimRuntimeError(f"mbarrier operand is not a shared-memory address\n    at {ins.where()}")
            a = a - np.uint64(SHARED_WIN)
        vals, counts = np.unique(a, return_counts=True)
        pairs = zip(vals.tolist(), counts.tolist())
    out = []
    for v, c in pairs:
        rank = v >> RANK_SHIFT
        off = v & OFF_MASK
        cta = w.cta
        if rank != cta.rank:
            if space not in ("shared::cluster", "generic"):
                raise SimRuntimeError(f"mbarrier address of cluster rank {rank} with .{space} (this CTA is rank "
                                      f"{cta.rank})\n    at {ins.where()}")
            cl = w.cta.cluster
            if rank >= len(cl.ctas):
                raise SimRuntimeError(f"mbarrier address names cluster rank {rank}, cluster has "
                                      f"{len(cl.ctas)} CTAs\n    at {ins.where()}")
            cta = cl.ctas[rank]
        if off % 8 or off + 8 > cta.smem_size:
            raise SimRuntimeError(f"mbarrier address offset {off} is misaligned or outside shared memory "
                                  f"({cta.smem_size} B)\n    at {ins.where()}")
        out.append((cta, off, c))
    return out


def get_mbar(cta, off, ins):
    b = cta.mbar.get(off)
    if b is None:
        raise SimRuntimeError(
            f"mbarrier at {cta.launch.program.smem_symbol(off, cta.dyn_base)} (CTA {cta.ctaid}) used before "
            f"mbarrier.init\n    at {ins.where()}")
    return b


def hb_check_init(w, b, ins):
    """Race check: the mbarrier.init of ``b`` must happen before this use by warp ``w``."""
    hb = w.cta.cluster.hb
    if hb is None or b.init is None:
        return
    agent, clock, pc = b.init
    if hb.warp_vc(w)[agent] < clock:
        c = b.cta
        raise_unless_allowed(hb.allow, "mbarrier-init",
            f"data race on mbarrier {b.name}:\n    mbarrier.init by {hb.describe(agent, pc, c.launch)}\n"
            f"    use by {hb.describe(w.agent, ins.pc, c.launch)}\n    are not ordered by "
            f"synchronisation; missing: fence.mbarrier_init (or a release) and a barrier between the "
            f"init and other threads' uses (PTX ISA: membar/fence (fence.mbarrier_init), mbarrier.init)"
            + hb.seed_note())


def uniform_lanes(v) -> bool:
    """Every element of 1-D ``v`` equals the first (compared as bytes: cheaper than a ufunc)."""
    raw = v.tobytes()
    return raw == raw[:v.itemsize] * len(v)


def lane_int(v, lane: int) -> int:
    """The int value at ``lane`` of operand value ``v`` (a scalar, or one value per lane of a warp,
    which broadcasts to its 32 lanes) -- what ``int(np.broadcast_to(v, (32,))[lane])`` gives,
    without building the broadcast view for the usual scalar or (32,) operand."""
    shape = getattr(v, "shape", ())
    if shape == ():
        return int(v)
    if shape == (32,):
        return int(v[lane])
    return int(np.broadcast_to(v, (32,))[lane])


def lane_vals(v, lanes):
    """The uint64 values of operand value ``v`` (a scalar or one per lane) at ``lanes``."""
    v = np.asarray(v, np.uint64)
    return v[lanes] if v.ndim else np.full(len(lanes), v, np.uint64)
