"""Lockstep execution: the warps of a CTA that are at the same PC run an instruction together.

The emulator interprets one instruction at a time, so its cost is the Python and numpy overhead
per call, not the 32 lanes' arithmetic. Warps of a CTA mostly execute the same instruction
stream (the 4 warps of a warpgroup always do, up to divergent branches and waits), and their
register files are one array per register class for the whole CTA (``machine.CTA.files``), each
warp owning 32 columns. So an instruction that the decoder marked ``batch``
(``program._batchable``: arithmetic, logic, comparisons, conversions, moves and ``cvta`` on
registers; ``shfl.sync``; stores to the CTA's shared memory; ``wgmma.mma_async``; a ``bra`` every lane
takes or every lane skips, or a short forward one some lanes of every warp fall through (around a
lane's ``mbarrier.arrive``: :func:`_detour`); warp-uniform synchronisation instructions, each warp's closure in turn,
and ``ldmatrix``/``stmatrix``: ``registry.each_warp``) runs **once** for a contiguous run of warps at that PC, through a
:class:`machine.WarpBatch` whose register views span their lanes. A fused block of register
instructions (:mod:`cutedsl.sim.frontend.fusion`) that starts at the PC runs as a whole, for the
batch or for a lone warp. A chain fold (:mod:`cutedsl.sim.frontend.chain_fold`) that starts at
the PC runs the register instructions between a chain's wgmmas first, for a batch of whole
warpgroups; the batch then steps over them.

Correctness: running an instruction of several warps back to back is one of the interleavings
the scheduler may choose anyway (warps are independent between synchronisation points), and a
batched closure is written to give exactly what each warp's own call would have given (shared
stores replay the warps one by one whenever a check needs a report). Three mechanisms keep the
warps together:

* a **batch** (``lockstep``) runs the instruction for the leader and its neighbours and advances
  their PCs; the run of warps is remembered (``gang``) while the leader executes further batch
  instructions, so they are not checked again;
* after the leader runs an instruction alone (a barrier, a wait, a TMA, a branch, or one whose
  guard is false), its neighbours at the same PC are **stepped** through it one by one
  (``step_gang``), so they stay at the leader's PC;
* a neighbour a few instructions **behind** (a branch taken by one lane, a wait that ended
  later) runs alone until it reaches the leader's PC (``meets``, at most ``CATCH_UP``
  instructions) before a batch is formed.
"""
from __future__ import annotations

import numpy as np

from ..checks.hb_warp import acc_prune
from ..frontend.errors import SimError
from ..frontend.registry import (BATCH_BRANCH, BATCH_EACH, BATCH_REGS, BATCH_STORE, BATCH_WGMMA, JUMPED, NOT_BATCHED,
                                 RESCHED, YIELD)
# (CATCH_UP: how far, in instructions, a warp may be behind to catch up with a lockstep batch)
from .lockstep_alone import CATCH_UP, lone_run as _lone_run, split as _split

#: the longest run of instructions a batch's divergent forward branch may skip (:func:`_detour`)
DETOUR = 4
#: a branch that splits the batch by whole warps, the leader falling through, moves every warp
#: at once (:func:`_split`; False: the leader alone, then each neighbour stepped -- for tests)
SPLIT = True


def joins(x, pc, ins, ready=False) -> bool:
    """Warp ``x`` can join a lockstep batch at ``pc``: one runnable group of all its lanes there
    (``ready``: or one whose wait is over), and no wgmma still owning (or holding) a register
    the instruction names (those checks run per warp)."""
    gs = x.groups
    if len(gs) != 1 or not x.full:
        return False
    g = gs[0]
    if g.pc != pc or g.m is not None or _busy(x, ins.rbits):
        return False
    b = g.blocked
    return b is None or (ready and b.ready())


def lockstep(launch, w, g, ins, gang, budget):
    """Run batch instruction ``ins`` for ``w`` (at ``g.pc``, all lanes) and for the neighbouring
    warps of its CTA at the same PC -- and then, while the instructions that follow are batch
    instructions every lane of the batch takes or skips, those too (at most ``budget``).
    ``gang`` is the run of warps known to be at the PC (or None). Returns ``(status, gang,
    more)``: the status for the main loop (``JUMPED``: the PCs are set), the run of warps now at
    ``w``'s PC, and how many instructions past the first were run."""
    if launch._stepping:        # w is being stepped for a leader that is itself at an instruction
        return ins.fn(w, g, None), None, 0
    ws = w.cta.warps
    if gang is not None:
        lo, hi = gang
        if ins.rbits and _owned(ws[lo:hi], ins.rbits):
            gang = None
    if gang is None:
        pc = g.pc
        # a warp-uniform synchronisation instruction: a neighbour whose wait there is over joins
        # (step_gang would have run it for that neighbour)
        ready = ins.batch == BATCH_EACH
        lo = w.wid
        while lo > 0 and meets(launch, ws[lo - 1], pc, ins, ready):
            lo -= 1
        hi = w.wid + 1
        while hi < len(ws) and meets(launch, ws[hi], pc, ins, ready):
            hi += 1
        if ready:
            for x in ws[lo:hi]:
                x.groups[0].blocked = None      # (a wait that is over: run_warp clears it too)
        if hi - lo == 1:
            fb = ins.fused
            if fb is None and ins.batch == BATCH_REGS:
                return _lone_run(launch, w, g, ins, budget)
            if fb is None or fb.n > budget or (fb.rbits and _owned((w,), fb.rbits)):
                return ins.fn(w, g, None), None, 0
            fb.run(w)               # a fused block (frontend/fusion.py) for w alone
            g.pc += fb.n
            return JUMPED, None, fb.n - 1
    cta = w.cta
    part = ws[lo:hi]
    preds = cta.files["p"]
    lanes = slice(32 * lo, 32 * hi)
    nlanes = 32 * (hi - lo)
    b = cta.batch(lo, hi)
    b.leader = w.wid
    code = launch.code
    pc = g.pc
    done = 0
    sh = cta.shadow
    owned = _bits(part)         # a superset of the registers a wgmma owns or holds in the batch
    folded = None               # the register PCs of a chain fold whose plan ran (frontend/chain_fold.py)
    split = None                # a branch that each warp takes or skips whole, w skipping it (_split)
    try:
        while True:
            cf = ins.fold
            if cf is not None:
                # the MMAs decline a batch that is not whole warpgroups (wgmma batch_fn): the
                # plan runs only when the batch will issue every MMA of the run
                folded = None
                if (done + cf.n <= budget and not (lo | hi) & 3
                        and not (cf.rbits & owned and _owned(part, cf.rbits))):
                    cf.run(b)
                    folded = cf.regpcs
            fb = ins.fused
            if folded is not None and pc in folded:
                pc += 1             # ran in the fold's plan
                done += 1
            elif fb is not None and done + fb.n <= budget and not (fb.rbits & owned and _owned(part, fb.rbits)):
                fb.run(b)           # a fused block of register instructions (frontend/fusion.py)
                pc += fb.n
                done += fb.n
            else:
                gi = ins.guard
                take = True
                if gi >= 0:         # every lane of the batch takes it, or none skips it
                    c = int(np.count_nonzero(preds[gi, lanes]))
                    some, every = c > 0, c == nlanes
                    take, skip = (not some, every) if ins.neg else (every, not some)
                    if not (take or skip):
                        if SPLIT and ins.batch == BATCH_BRANCH and done:
                            # (a split has a warp that jumps whole: _detour would decline it)
                            split = _split(preds[gi, lanes], ins.neg, w.wid - lo, hi - lo)
                            if split is not None:
                                break
                        k = ins.batch == BATCH_BRANCH and _detour(launch, b, part, w, pc, ins, owned, budget - done)
                        if not k:
                            break       # some lanes only: w alone, through the main loop
                        pc = ins.info   # each warp's lanes that fell through ran up to the target
                        done += k - 1   # (and the 1 below)
                        take = None
                kind = ins.batch
                if take is None:
                    pass
                elif kind == BATCH_BRANCH:
                    pc = ins.info if take else pc + 1       # what bra does for each warp (control.py)
                else:
                    if take:
                        if kind == BATCH_WGMMA:
                            b.flush()       # a wgmma reads shared memory: the run's deferred stores first
                        elif kind == BATCH_EACH:
                            # it may advance the warps' clocks: what the run queued was judged
                            # with the clocks of its issue, so it is settled first
                            if sh is not None and sh.pending:
                                sh.flush_reads()
                            _run_chains(cta)
                            b.flush()
                        elif kind == BATCH_STORE and cta.mma_chains:
                            _run_chains(cta)    # the run's queued MMAs read their operands before a store
                        if ins.fn(b, None, None) == NOT_BATCHED:
                            break
                        if kind == BATCH_WGMMA:
                            owned = _bits(part)
                    pc += 1
                done += 1
            if done >= budget:
                break
            ins = code[pc]
            if not ins.batch or (ins.rbits & owned and _owned(part, ins.rbits)
                                 and not (folded is not None and pc in folded)):
                break
    except SimError:
        if sh is not None and sh.pending:
            sh.flush_reads()    # the run's earlier wgmma operand reads come first (program order)
        raise
    if sh is not None and sh.pending:
        sh.flush_reads()        # the run's wgmma operand reads (Shadow.read_later), judged at once
    _run_chains(cta)
    b.flush()                   # the run's shared stores, checked at once
    if done == 0:               # the first instruction declined the batch
        r = ins.fn(w, g, None)
        if ins.batch == BATCH_EACH and r != YIELD and (r != RESCHED or len(w.groups) > 1):
            step_gang(launch, w, pc, ins)       # as run_warp does after a non-batch instruction
        return r, None, 0
    if split is not None:
        # what follows in the main loop: w's guard is false for all its lanes (it moves on) and
        # step_gang steps its neighbours through the bra one by one, each jumping or not whole
        # (run_warp(x, 1), which also clears x.poll) -- a bra changes nothing but the PCs
        t = ins.info
        for x, jumps in zip(part, split):
            x.groups[0].pc = t if jumps else pc + 1
            if x is not w:
                x.insts += done + 1
                x.poll = False
        launch.insts += (hi - lo - 1) * (done + 1)
        _step_out(launch, ws, lo - 1, hi, pc, ins)      # any beyond the batch, as step_gang would
        return JUMPED, None, done
    for x in part:
        x.groups[0].pc = pc
        if x is not w:
            x.insts += done
    launch.insts += (hi - lo - 1) * done
    return JUMPED, (lo, hi), done - 1


def _detour(launch, b, part, w, pc, ins, owned, room) -> int:
    """A forward ``bra`` at ``pc`` that splits every warp of the batch (e.g. ``@p bra L`` with ``p``
    false in lane 0 only, around a lane-0 ``mbarrier.arrive``): run, for each warp in the order
    ``step_gang`` and ``meets`` would (the leader, the warps below it, those above), what that
    warp's own run would -- the branch splits it, the lanes that fall through run the few
    instructions up to the target with their mask (PTX ISA 9.7.12.3 ``bra``: divergent lanes
    reconverge at the target; the emulator's min-PC rule), and the lanes merge there. Returns the
    warp-instructions each warp executed (target - pc), or 0 when it declines: a backward or long
    detour, an instruction in it that is not a register instruction or ``mbarrier.arrive``, a warp
    whose lanes all take the branch, registers a wgmma owns, or a target instruction the per-warp
    run would not have batched at once (then the neighbours would have caught up later, and the
    order of the arrivals against the leader's next instructions would differ)."""
    t = ins.info
    k = t - pc
    if k < 2 or k > DETOUR + 1 or k > room:
        return 0
    code = launch.code
    nxt = code[t]
    if not nxt.batch or nxt.guard >= 0 or _owned(part, nxt.rbits):
        return 0
    region = code[pc + 1:t]
    for r in region:
        if r.batch != BATCH_REGS and not r.opcode.startswith("mbarrier.arrive"):
            return 0
        if r.rbits & owned and _owned(part, r.rbits):
            return 0
    preds = b.cta.files["p"]
    gi = ins.guard
    i = w.wid - b.lo
    order = [w] + (part[i - 1::-1] if i else []) + part[i + 1:]      # step_gang's order
    falls = []
    raw = preds[gi, 32 * b.lo:32 * b.hi].tobytes()     # a byte (0 or 1) per lane of the batch
    fall = 1 if ins.neg else 0              # the byte of a lane whose guard skips the branch
    for x in order:
        j = 32 * (x.wid - b.lo)
        c = raw[j:j + 32].count(fall)
        if c == 0:
            return 0                        # this warp jumps whole: it runs one instruction, not k
        if c == 32:
            falls.append(None)
        else:
            pv = preds[gi, 32 * x.wid:32 * x.wid + 32]
            falls.append(pv if ins.neg else ~pv)        # the lanes that fall through
    cta = b.cta
    sh = cta.shadow
    # an arrive releases the warps' clocks: what the run queued is settled first (as for BATCH_EACH)
    if sh is not None and sh.pending:
        sh.flush_reads()
    _run_chains(cta)
    b.flush()
    # an unguarded mbarrier.arrive ending the detour runs for all the warps in one call after
    # their register instructions (its ``detour``: the arrivals in this order): those read and
    # write only their own warp's registers, so what each arrival and each warp sees is the same
    last = region[-1]
    one = getattr(last.fn, "detour", None) if last.guard < 0 else None
    body = region
    if one is not None and all(r.batch == BATCH_REGS for r in region[:-1]):
        body = region[:-1]
    for x, f in zip(order, falls):
        g = x.groups[0]
        nf = 32 if f is None else int(np.count_nonzero(f))
        for r in body:
            m = f
            gr = r.guard
            if gr >= 0:
                pv = x.p[gr]
                em = ~pv if r.neg else pv
                if f is not None:
                    em = em & f
                c = int(np.count_nonzero(em))
                if c == 0:
                    continue                # guard false for every lane: a skipped instruction
                if c < (32 if f is None else nf):
                    m = em
            if r.fn(x, g, m) is not None:
                raise SimError(f"internal emulator error: {r.where()} changed control flow in a lockstep detour")
    if body is not region:
        one(b, order, falls)
    return k


def _run_chains(cta):
    """Compute the MMAs the run queued (:meth:`cutedsl.sim.engines.wgmma_acc.HeldTiles.queue`)."""
    while cta.mma_chains:
        cta.mma_chains[0].run_chain()


def _bits(warps) -> int:
    """The registers some wgmma may own or hold in one of ``warps`` (acc_bits | lazy_bits)."""
    r = 0
    for x in warps:
        r |= x.acc_bits | x.lazy_bits
    return r


def _owned(warps, rbits) -> bool:
    """Some warp has a register of ``rbits`` that an unretired wgmma still owns (:func:`_busy`)."""
    for x in warps:
        if (x.acc_bits | x.lazy_bits) & rbits and _busy(x, rbits):
            return True
    return False


def _busy(x, rbits) -> bool:
    """Warp ``x`` cannot run an instruction naming the registers ``rbits`` in a batch: an
    unretired wgmma may still write one of them (a race the warp's own run reports). What the
    scheduler does before a warp's own instruction is done here first, for the neighbours too:
    ownership by groups ``x`` knows complete is dropped (``acc_prune``: the bits stay set until
    the warp names a register, so a neighbour's are usually stale) and held accumulator tiles are
    written to the registers (``wgmma_acc.HeldTiles.settle``; the registers then hold what the
    eager writes would have, so doing it a little early is not observable)."""
    if x.acc_bits & rbits:
        acc_prune(x)
        if x.acc_bits & rbits:
            return True
    if x.lazy_bits & rbits:
        x.held.settle(rbits)
    return False


def meets(launch, x, pc, ins, ready=False) -> bool:
    """Warp ``x`` is at ``pc`` ready to join a batch (``ready``: or waiting there on a wait that is
    over), possibly after running alone for up to ``CATCH_UP`` instructions (it is a little behind)."""
    if joins(x, pc, ins, ready):
        return True
    gs = x.groups
    if launch._stepping or not gs:
        return False
    low = gs[0].pc if len(gs) == 1 else min(g.pc for g in gs)
    if low < pc - CATCH_UP or low >= pc:
        return False
    launch._stepping = True
    try:
        for _ in range(CATCH_UP):
            if not launch._run_warp(x, 1) or x.poll or x.done:
                return False
            if joins(x, pc, ins, ready):
                return True
            if min(g.pc for g in x.groups) >= pc:
                return False
    finally:
        launch._stepping = False
    return False


def _at(x, pc) -> bool:
    """What :func:`joins` checks first, before anything with a side effect: one group of all of
    ``x``'s lanes, at ``pc``. When neither neighbour of ``w`` passes this, both loops of
    :func:`step_gang` stop at their first ``joins`` and nothing changes in between."""
    gs = x.groups
    return len(gs) == 1 and x.full and gs[0].pc == pc


def step_gang(launch, w, pc, ins):
    """``w`` (one group of all its lanes) just ran ``ins`` (at ``pc``) alone: the neighbouring
    warps waiting at the same PC (a contiguous run) run it too, each on its own, so they stay
    together for the next batch. Nothing when ``w`` is itself being stepped."""
    if launch._stepping or not w.full:
        return
    ws = w.cta.warps
    i = w.wid
    if not ((i and _at(ws[i - 1], pc)) or (i + 1 < len(ws) and _at(ws[i + 1], pc))):
        return          # neither neighbour can join (the usual case for a lone warp)
    _step_out(launch, ws, i - 1, i + 1, pc, ins)


def _step_out(launch, ws, below, above, pc, ins):
    """Step the warps waiting at ``pc`` one by one through ``ins``: downwards from ``below``,
    then upwards from ``above``, each side while they can join (:func:`step_gang`'s order)."""
    launch._stepping = True
    try:
        i = below
        while i >= 0 and joins(ws[i], pc, ins, True):
            launch._run_warp(ws[i], 1)
            i -= 1
        i = above
        while i < len(ws) and joins(ws[i], pc, ins, True):
            launch._run_warp(ws[i], 1)
            i += 1
    finally:
        launch._stepping = False
