"""Instruction-handler registry of the emulator.

Handler modules (``arith``, ``bitops``, ``compare``, ``convert``, ``control``, ``memops``,
``sync``, ``tma``, ``wgmma``, ``warpops``, ``matrix``, ``vprintf``) register a decode function per opcode base
with :func:`handler`; the decoder (:mod:`cutedsl.sim.frontend.program`) looks them up in
:data:`HANDLERS`. This module imports none of them: :mod:`cutedsl.sim.handlers` imports them all
(once, from the package ``__init__``), so there is no import cycle between the decoder and its
handlers. A new instruction family is a new small module listed in :mod:`cutedsl.sim.handlers`.
An opcode whose operations are decoded in several modules (``tcgen05.mma`` apart from
``tcgen05.alloc``, ``cp.async`` apart from ``cp.async.bulk``, ``st.async`` apart from ``st``)
registers those operations with :func:`subhandler`; the base handler finds them in
:data:`SUBHANDLERS`, so no instruction module imports another.

It also defines the status codes an execution closure ``fn(warp, group, mask)`` returns:
``None`` (fall through), ``JUMPED`` (it set ``group.pc``), ``BLOCKED`` (the group waits and
re-executes the instruction when ready), ``RESCHED`` (lane groups changed; the scheduler
re-picks) and ``YIELD`` (the closure advanced the PC and the warp should let others run).
Called with a lockstep batch of warps (``machine.WarpBatch``), a closure may return
``NOT_BATCHED`` (having done nothing): the scheduler then runs the warps one at a time.
"""
from __future__ import annotations

JUMPED, BLOCKED, RESCHED, YIELD, NOT_BATCHED = 1, 2, 3, 4, 5

#: ``Instr.batch``: how warps at the same PC may run an instruction together
#: (:mod:`cutedsl.sim.machine.lockstep`): not at all, register-only, a shared-memory store, a wgmma
#: issue, a ``bra`` (the batch jumps together when all its lanes take it or none does), a
#: warp-uniform synchronisation instruction run for each warp of the batch in turn (:func:`each_warp`)
NO_BATCH, BATCH_REGS, BATCH_STORE, BATCH_WGMMA, BATCH_BRANCH, BATCH_EACH = 0, 1, 2, 3, 4, 5

#: opcode base (text before the first dot) -> decode function ``f(ctx, ins, mods, ops)``
HANDLERS: dict = {}


def handler(*names):
    """Register a decode function ``f(ctx, ins, mods, ops) -> closure`` for opcode bases.

    Registering a name twice is a programming error (two modules claiming one opcode)."""
    def deco(f):
        for n in names:
            if n in HANDLERS and HANDLERS[n] is not f:
                raise RuntimeError(f"opcode {n!r} registered twice ({HANDLERS[n].__module__}, "
                                   f"{f.__module__})")
            HANDLERS[n] = f
        return f
    return deco


#: (opcode base, operation) -> decode function ``f(ctx, ins, mods, ops)`` that the base's handler
#: dispatches to (filled when :mod:`cutedsl.sim.handlers` imports the modules)
SUBHANDLERS: dict = {}


def subhandler(base, *ops):
    """Register a decode function for operations ``ops`` of opcode ``base`` (``("tcgen05", "mma")``).

    Registering one twice is a programming error, as for :func:`handler`."""
    def deco(f):
        for op in ops:
            key = (base, op)
            if key in SUBHANDLERS and SUBHANDLERS[key] is not f:
                raise RuntimeError(f"operation {base}.{op} registered twice ({SUBHANDLERS[key].__module__}, "
                                   f"{f.__module__})")
            SUBHANDLERS[key] = f
        return f
    return deco


def each_warp(fn, batch=None):
    """Mark the closure ``fn(warp, group, mask)`` of a warp-uniform instruction (``wgmma.fence``,
    ``wgmma.commit_group``/``wait_group``, ``fence.proxy.async``, ``mbarrier.try_wait``) or a
    warp-collective one (``ldmatrix``/``stmatrix``) as a
    lockstep batch instruction (``BATCH_EACH``). Called with a batch, the
    returned closure runs ``batch(b)`` when given (which may decline: ``NOT_BATCHED``), else
    ``fn`` for each warp of the batch in turn, in the order the scheduler would have stepped
    them (``WarpBatch.members``) -- so ``fn`` must never block there. The lockstep run settles
    its queued wgmma reads, MMAs and shared stores before it (they were judged with the warps'
    clocks of their issue, which such an instruction may advance)."""
    def run(w, g, m):
        if w.is_batch:
            if batch is not None:
                return batch(w)
            for x in w.members():
                fn(x, x.groups[0], None)
            return None
        return fn(w, g, m)
    run.each_warp = True
    return run
