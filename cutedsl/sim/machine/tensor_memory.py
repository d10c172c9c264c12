"""Blackwell tensor memory (sm_100a) state: one CTA's TMEM (128 lanes x 512 columns of 32 bits,
PTX ISA "tensor memory"), its block allocations, its happens-before shadow for the race detector,
and the helpers every ``tcgen05`` instruction module shares (:func:`tmem_order`, :func:`lane_value`).
The instructions are :mod:`cutedsl.sim.instructions.tmem` (alloc/dealloc/ld/st/wait/commit),
:mod:`cutedsl.sim.instructions.tcgen05_mma`, :mod:`cutedsl.sim.instructions.tcgen05_cp` and :mod:`cutedsl.sim.instructions.tcgen05_shift`;
the machine calls :func:`leak_check` when a CTA exits.
"""
from __future__ import annotations

import numpy as np

from ..frontend.errors import SimRuntimeError
from ..checks.shadow import Shadow


LANES, COLUMNS = 128, 512
QUARTER = 32            #: lanes a warp reaches: its warp id % 4 quarter


class TensorMemory:
    """One CTA's TMEM: ``data`` (lanes x columns, u32), ``blocks`` {first column: columns},
    ``relinquished``; ``version`` counts deallocations (what a blocked allocation waits for)."""

    def __init__(self):
        self.data = np.zeros((LANES, COLUMNS), np.uint32)
        self.blocks = {}
        self.relinquished = False
        self.version = 0

    def place(self, ncols: int):
        """The first free column multiple of ``ncols`` with ``ncols`` free columns, or None."""
        for c in range(0, COLUMNS, ncols):
            if all(c + ncols <= b or b + n <= c for b, n in self.blocks.items()):
                return c
        return None

    def covered(self, col: int, n: int) -> bool:
        return any(b <= col and col + n <= b + m for b, m in self.blocks.items())


def tmem_of(cta) -> TensorMemory:
    t = getattr(cta, "tmem", None)
    if t is None:
        t = cta.tmem = TensorMemory()
    return t


class TmemShadow(Shadow):
    """Happens-before shadow of one CTA's TMEM: one cell per (lane, column), ``lane * 512 + column``."""

    #: initcheck (cutedsl.sim.checks.initcheck) judges only the tensor core's reads -- the
    #: accumulator of an accumulating tcgen05.mma, its A operand and scale factors -- not
    #: tcgen05.ld, which reads whole 32-lane quarters whatever lanes an MMA wrote (M = 64 layouts,
    #: lane masks) into registers the kernel may discard
    initcheck_reads = "tcgen05.mma"

    def __init__(self, cta, hb):
        super().__init__(cta, hb, LANES * COLUMNS)

    def place(self, cell):
        return f"tensor memory lane {cell // COLUMNS} column {cell % COLUMNS} (CTA {self.cta.ctaid})"

    def origin(self, cell) -> str:
        """Where the cell's contents come from (initcheck reports)."""
        return ("tensor memory allocated by tcgen05.alloc, which leaves the columns undefined (PTX ISA, "
                "tcgen05.alloc); only tcgen05.mma (enable-input-d false), tcgen05.st or tcgen05.cp define them")


def tmem_shadow(cta):
    """The CTA's :class:`TmemShadow` (race detection on), created on first use; else None."""
    if cta.shadow is None:
        return None
    s = getattr(cta, "tmem_shadow", None)
    if s is None:
        s = cta.tmem_shadow = TmemShadow(cta, cta.shadow.hb)
    return s


def leak_check(cta) -> None:
    """At CTA exit: every allocated column must have been deallocated."""
    t = getattr(cta, "tmem", None)
    if t is not None and t.blocks:
        cols = ", ".join(f"{n} at column {b}" for b, n in sorted(t.blocks.items()))
        raise SimRuntimeError(f"CTA {cta.ctaid} exits with tensor memory still allocated ({cols}): every "
                              f"tcgen05.alloc needs a tcgen05.dealloc before the CTA exits (PTX ISA: tcgen05.alloc)")


def tmem_order(w, hb, vc, *own):
    """The vector clock a tcgen05 operation of warp ``w`` orders its tensor-memory accesses by:
    ``vc``; with the launch's strict tcgen05 fences, what the warp knew at its last
    ``tcgen05.fence::after_thread_sync`` (nothing before one) plus its own program order and the
    entries ``own`` (agent indices, e.g. the operation's tcgen05 unit) of ``vc`` -- PTX ISA: a
    thread synchronisation orders later asynchronous tcgen05 operations only through that fence."""
    if not w.launch.strict_tcgen05_fences:
        return vc
    out = hb.fit(getattr(w, "tc_after", None)).copy()
    for a in (w.agent, *own):
        out[a] = vc[a]
    return out


def lane_value(w, reader, lane: int) -> int:
    """The value operand ``reader`` has in ``lane`` of warp ``w`` (a single-thread tcgen05
    instruction executed by several lanes issues once per lane)."""
    v = np.asarray(reader(w))
    return int(v.reshape(-1)[lane]) if v.ndim else int(v)


__all__ = ["TensorMemory", "TmemShadow", "tmem_of", "tmem_shadow", "tmem_order", "leak_check",
           "lane_value", "LANES", "QUARTER", "COLUMNS"]
