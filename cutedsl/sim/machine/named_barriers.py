"""Named-barrier state of a CTA (``bar``/``barrier`` with an id, PTX ISA "bar, barrier"): one
:class:`NamedBarrier` per id in ``cta.bars``, the blocking reason of a waiting warp, and the
release of a generation. The instructions are :mod:`cutedsl.sim.instructions.sync`; the machine calls
:func:`check_named_barriers` when a warp exits, since an exited warp no longer counts towards a
barrier that waits for every non-exited warp of the CTA.
"""
from __future__ import annotations


class NamedBarrier:
    __slots__ = ("id", "count", "arrived", "waiters", "line", "snap")

    def __init__(self, bid):
        self.id = bid
        self.count = None
        self.arrived = []
        self.waiters = []
        self.line = 0
        self.snap = None


class BarWait:
    __slots__ = ("bar", "cta", "ins")

    def __init__(self, bar, cta, ins):
        self.bar, self.cta, self.ins = bar, cta, ins

    def ready(self):
        return False

    def describe(self):
        b = self.bar
        exp = expected_warps(self.cta, b)
        return (f"named barrier {b.id}: {len(b.arrived)} of {exp} warps arrived "
                f"(warps {sorted(w.wid for w in b.arrived)})")


def expected_warps(cta, b):
    """The warps barrier ``b`` waits for: its count / 32, or every non-exited warp of the CTA."""
    if b.count is not None:
        return b.count // 32
    return sum(1 for w in cta.warps if not w.done)


def release_barrier(cta, b, current=None):
    """Complete the generation of ``b``: its waiting groups (except ``current``, which advances
    itself) acquire its snapshot and move past the barrier."""
    hb = cta.cluster.hb
    for (w, g) in b.waiters:
        if hb is not None:
            hb.acquire(w, b.snap)
        if g is current:
            continue
        g.blocked = None
        g.pc += 1
    b.arrived = []
    b.waiters = []
    b.count = None
    b.snap = None
    cta.launch.version += 1


def check_named_barriers(cta):
    """After a warp exits: release every count-less barrier the remaining warps have all reached."""
    for b in list(cta.bars.values()):
        if b.arrived and b.count is None and len(b.arrived) >= expected_warps(cta, b):
            release_barrier(cta, b)
