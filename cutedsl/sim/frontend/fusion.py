"""Fused register blocks: a straight-line run of register-only instructions executed as a few
numpy operations over ``(instructions x lanes)`` arrays instead of one closure call each.

The emulator's cost is the Python and numpy overhead of each closure call, not the lanes'
arithmetic. FlashAttention-style softmax code is long straight-line runs of the same operation
on different registers (per KV block: 64 ``fma`` then 64 ``ex2``, interleaved, trees of ``max``
and ``add``, 32 ``cvt.rn.f16x2.f32``), each one an independent instruction. A block here is a
maximal run of consecutive unguarded lockstep-batchable register instructions (``BATCH_REGS``)
that no label splits, every one of which its decoder described by a :class:`VecForm` (an
elementwise operation, the source registers or constants it reads, the register it writes).

**Exactness.** The block is scheduled by its register dependences: an instruction follows
every earlier instruction whose result it reads (RAW), whose register it overwrites (WAW) or
which reads a register it writes (WAR). Each step runs instructions with the same
:attr:`VecForm.key` (opcode with its modifiers, source kinds and constants, destination view)
all of whose predecessors ran in earlier steps -- so none of them depends on another -- as one
operation: their source rows are gathered into ``(k, lanes)`` arrays, the decoder's own
elementwise operation is applied once, and the rows are scattered to the destinations
(:func:`_schedule` picks the steps so that same-key instructions merge where the dependences
let them, e.g. the two rows of a softmax whose maxima come from chains of different lengths).
Running independent instructions in another order leaves the same registers (no
memory, no control flow, no clock, nothing observable in between: the PTX ISA's register
semantics are per instruction, PTX ISA 9.7), and an elementwise numpy operation gives each
element what it gives it in a ``(lanes,)`` array, so every register holds bit for bit what the
instructions one by one would have written. A step of one instruction calls its own
closure. Blocks are run by :mod:`cutedsl.sim.machine.lockstep` for one warp or a lockstep batch,
only from their first instruction and only when no unretired ``wgmma`` owns one of the block's
registers; otherwise the instructions run one by one as before.
"""
from __future__ import annotations

import numpy as np

#: a block is worth fusing when it saves at least this many closure calls
MIN_SAVED = 2


class VecForm:
    """What the fusion pass needs of one instruction: ``op`` (elementwise over arrays of any
    shape), ``dst`` = ``(cls, view, idx, pre)`` (``pre``: conversion before the write, or None),
    ``srcs`` = per operand ``("r", cls, view, idx, post)`` or ``("c", value)``."""
    __slots__ = ("op", "dst", "srcs", "key")

    def __init__(self, op, dst, srcs, opcode):
        self.op, self.dst, self.srcs = op, dst, srcs
        self.key = (opcode, dst[1], _post_key(dst[3]),
                    tuple(("r", s[2], _post_key(s[4])) if s[0] == "r" else ("c", _const_key(s[1])) for s in srcs))


def _post_key(post):
    return None if post is None else post.key


def _const_key(v):
    a = np.asarray(v)
    return (a.dtype.str, a.tobytes())


class Post:
    """An elementwise conversion that a reader applies after the register read (``.view``,
    ``.astype``, ``~``) or a writer before the write; ``key`` identifies it for grouping."""
    __slots__ = ("fn", "key")

    def __init__(self, fn, key):
        self.fn, self.key = fn, key


def vector_form(ins, op, writer, readers):
    """Record ``ins.vec`` when the writer and every reader are plain register or constant
    accesses (tagged by :class:`~cutedsl.sim.frontend.decode_ctx.DecodeCtx`); else leave it None."""
    dst = getattr(writer, "vec_dst", None)
    srcs = [getattr(r, "vec_src", None) for r in readers]
    if dst is None or any(s is None for s in srcs):
        return
    ins.vec = VecForm(op, dst, srcs, ins.opcode)


class FusedBlock:
    """Instructions ``pc .. pc + n - 1`` as ``steps`` (callables of the warp or batch), ``rbits``
    the 32-bit registers they name (wgmma ownership checks)."""
    __slots__ = ("n", "rbits", "steps")

    def __init__(self, n, rbits, steps):
        self.n, self.rbits, self.steps = n, rbits, steps

    def run(self, b):
        for s in self.steps:
            s(b)


def _regs(v: VecForm):
    """(registers read, register written) of a vector form, as (class, index) pairs."""
    reads = {(s[1], s[3]) for s in v.srcs if s[0] == "r"}
    return reads, (v.dst[0], v.dst[2])


def _group_step(vs):
    """One numpy operation for instructions ``vs`` (same key, mutually independent)."""
    v0 = vs[0]
    op = v0.op
    _cls, dview, _i, pre = v0.dst
    didx = _rows([v.dst[2] for v in vs])
    gets = []
    for j, s in enumerate(v0.srcs):
        if s[0] == "c":
            cs = [v.srcs[j][1] for v in vs]
            if all(_const_key(c) == _const_key(s[1]) for c in cs):
                gets.append(_const(s[1]))
            else:                   # per-row constants (a plan keyed by chain_fold._key)
                gets.append(_const(np.array(cs, np.asarray(s[1]).dtype).reshape(-1, 1)))
            continue
        idxs = [v.srcs[j][3] for v in vs]
        one = all(i == idxs[0] for i in idxs)      # one register for all: a row, broadcast
        gets.append(_fetch(s[2], idxs[0] if one else _rows(idxs), s[4]))
    conv = pre.fn if pre is not None else None

    def write(b, r):
        if conv is not None:
            r = conv(r)
        getattr(b, dview)[didx] = r
    if len(gets) == 1:
        g0, = gets
        return lambda b: write(b, op(g0(b)))
    if len(gets) == 2:
        g0, g1 = gets
        return lambda b: write(b, op(g0(b), g1(b)))
    if len(gets) == 3:
        g0, g1, g2 = gets
        return lambda b: write(b, op(g0(b), g1(b), g2(b)))
    return lambda b: write(b, op(*[g(b) for g in gets]))


def _const(v):
    return lambda b: v


def _fetch(view, rows, post):
    """Reader of register ``rows`` (an index, a slice or an index array) of ``view``."""
    if post is None:
        return lambda b: getattr(b, view)[rows]
    f = post.fn
    return lambda b: f(getattr(b, view)[rows])


def _rows(idxs):
    """Register rows as a slice when they are evenly spaced (a view: no gather, no scatter
    copy), else an index array."""
    d = idxs[1] - idxs[0]
    if d and all(b - a == d for a, b in zip(idxs, idxs[1:])):
        stop = idxs[-1] + d
        return slice(idxs[0], stop if stop >= 0 else None, d)
    return np.array(idxs, np.intp)


def _single_step(ins):
    fn = ins.fn
    return lambda b: fn(b, None, None)


def _plan(block, keyf=None):
    """Steps for a run of instructions (each with a VecForm): one step per group of mutually
    independent instructions of one key -- ``keyf(vec)`` in place of :attr:`VecForm.key` when
    given -- in an order that respects every dependence (:func:`_schedule`)."""
    keys = [ins.vec.key if keyf is None else keyf(ins.vec) for ins in block]
    steps = []
    for g in _schedule(_dependences(block), keys):
        steps.append(_single_step(block[g[0]]) if len(g) == 1 else _group_step([block[i].vec for i in g]))
    return steps


def _dependences(block):
    """Per instruction, the earlier ones it must follow: the last writer of each register it
    reads (RAW) or writes (WAW), and every reader of the register it writes since that
    register's last write (WAR: the reads come first)."""
    last_w, readers = {}, {}        # register -> its last writer / the readers since then
    preds = []
    for i, ins in enumerate(block):
        reads, wr = _regs(ins.vec)
        p = set()
        for r in reads:             # RAW
            j = last_w.get(r)
            if j is not None:
                p.add(j)
        j = last_w.get(wr)          # WAW
        if j is not None:
            p.add(j)
        p.update(readers.get(wr, ()))       # WAR
        p.discard(i)
        for r in reads:
            readers.setdefault(r, []).append(i)
        last_w[wr] = i
        readers[wr] = []            # a later writer follows this one (WAW), hence its readers
        preds.append(p)
    return preds


def _schedule(preds, keys):
    """Groups of instruction indices, in execution order: each group is instructions of one key
    whose predecessors all ran in earlier groups (so no two of a group depend on each other).

    A list schedule that merges what it can: at each step it runs, for some key, every ready
    instruction of that key. It prefers a key none of whose waiting instructions could still
    join that group -- every one depends on a ready instruction of the key -- so running it now
    loses nothing (a chain of single operations, the last level of a tree); a key with an
    independent instruction still waiting for other work (the second row's ``fma`` of a softmax
    while the first row's are ready) is delayed until that one is ready too, while anything
    else can run. When every ready key would wait, the one with the earliest instruction runs.
    Ties go to program order, so the plan is deterministic."""
    n = len(preds)
    anc = [0] * n                   # bit j: instruction j must run before (transitively)
    succ = [[] for _ in range(n)]
    npred = [len(p) for p in preds]
    for i, p in enumerate(preds):
        a = 0
        for j in p:
            a |= anc[j] | (1 << j)
            succ[j].append(i)
        anc[i] = a
    waiting = {}                    # key -> its instructions not yet run
    for i, k in enumerate(keys):
        waiting.setdefault(k, set()).add(i)
    ready = {i for i in range(n) if not npred[i]}
    groups = []
    while ready:
        byk = {}
        for i in sorted(ready):
            byk.setdefault(keys[i], []).append(i)
        pick = None
        for k, g in byk.items():            # in order of each key's first ready instruction
            rb = 0
            for i in g:
                rb |= 1 << i
            if all(anc[j] & rb for j in waiting[k] if j not in ready):
                pick = g
                break
        if pick is None:
            pick = next(iter(byk.values()))
        groups.append(pick)
        for i in pick:
            ready.discard(i)
            waiting[keys[i]].discard(i)
            for s in succ[i]:
                npred[s] -= 1
                if not npred[s]:
                    ready.add(s)
    return groups


def fuse(code, label_pcs, batch_regs):
    """Attach a :class:`FusedBlock` to the first instruction of every maximal fusible run in
    ``code`` (no label inside, unguarded, ``Instr.batch == batch_regs``, a ``VecForm``) that
    saves at least :data:`MIN_SAVED` calls."""
    n = len(code)
    pc = 0
    while pc < n:
        start = pc
        while pc < n and _fusible(code[pc], batch_regs) and (pc == start or pc not in label_pcs):
            pc += 1
        if pc == start:
            pc += 1
            continue
        block = code[start:pc]
        if len(block) >= 2:
            steps = _plan(block)
            if len(block) - len(steps) >= MIN_SAVED:
                rbits = 0
                for ins in block:
                    rbits |= ins.rbits
                code[start].fused = FusedBlock(len(block), rbits, steps)


def _fusible(ins, batch_regs) -> bool:
    return ins.vec is not None and ins.guard < 0 and ins.batch == batch_regs
