"""Blackwell tensor memory (sm_100a): the per-CTA TMEM and the ``tcgen05`` instructions that
allocate it and move data between it and registers (issue 23).

**Tensor memory** of a CTA: 128 lanes x 512 columns of 32 bits. A TMEM address is ``lane << 16
| column``. **Allocation** (PTX ISA ``tcgen05.alloc/dealloc/relinquish_alloc_permit``): a warp
allocates ``ncols`` columns, a power of two in 32..512, and the column address of the block
(lane 0) is written to shared memory; blocks are placed at the first free multiple of their
size. An allocation that cannot be satisfied blocks until another warp deallocates (a wait
that nothing can end is reported as a deadlock, naming the allocation). Errors
(``SimRuntimeError`` naming the instruction): a column count outside the rule, ``dealloc`` of
a block that is not allocated (double free) or with another size, ``alloc`` after the CTA
relinquished its permit, and columns still allocated when the CTA exits (a leak).

**Data movement** (``tcgen05.ld`` / ``tcgen05.st``, shape ``32x32b``): thread ``t`` of the warp
reads or writes lane ``base lane + t``, ``.xN`` consecutive 32-bit columns into ``N`` registers.
A warp reaches only the lanes of its quarter, ``32 * (warp id % 4) .. + 31`` (the lane-quarter
rule); an access outside it, or to columns no allocation covers, is an error. ``ld``/``st``
move the data at issue; for the race detector they are accesses of the warp's ``tcgen05ld`` /
``tcgen05st`` unit, which the warp (and what it releases) knows complete only after
``tcgen05.wait::ld`` / ``wait::st`` (:class:`TmemShadow`). ``tcgen05.commit``
(``.multicast::cluster`` too) arrives once per executing thread on the mbarrier(s) after the
thread's earlier ``tcgen05.mma`` operations (:mod:`cutedsl.sim.tcgen05_mma`, registered here
through :data:`SUBOPS`) completed. ``tcgen05.fence::*`` are accepted (docs/emulator.md says
why they are not modelled). ``cta_group::2`` alloc / dealloc / relinquish act on each executing
CTA's own tensor memory (the pair's warps run them alike, so both get the same columns; an MMA
whose columns are not allocated in both CTAs is an error). The other shapes (16x64b, 16x128b,
16x256b, 16x32bx2) and ``.pack``/``.unpack`` are refused with an ``UnsupportedInstruction``.
"""
from __future__ import annotations

import numpy as np

from .errors import SimRuntimeError
from .hb import Shadow
from .mbarrier import get_mbar, hb_check_init, mbar_targets
from .registry import BLOCKED, handler
from .tma import defer

LANES, COLUMNS = 128, 512
MIN_COLS = 32
QUARTER = 32            #: lanes a warp reaches: its warp id % 4 quarter
#: tcgen05 operations decoded by other modules (``tcgen05_mma`` registers ``mma``)
SUBOPS: dict = {}


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

    def __init__(self, cta, hb):
        super().__init__(cta, hb, LANES * COLUMNS)

    def place(self, cell):
        return f"tensor memory lane {cell // COLUMNS} column {cell % COLUMNS} (CTA {self.cta.ctaid})"


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


class WaitTmem:
    """Blocking reason: an allocation the CTA's free columns cannot satisfy yet."""
    __slots__ = ("tmem", "version", "ncols", "ins")

    def __init__(self, tmem, ncols, ins):
        self.tmem, self.version, self.ncols, self.ins = tmem, tmem.version, ncols, ins

    def ready(self):
        return self.tmem.version != self.version

    def describe(self):
        used = ", ".join(f"{n} at {b}" for b, n in sorted(self.tmem.blocks.items()))
        return f"tcgen05.alloc of {self.ncols} columns waiting for free tensor memory (allocated: {used})"


def _fail(ins, msg):
    raise SimRuntimeError(f"{msg}\n    at {ins.where()}")


def _uniform(w, m, v, what, ins) -> int:
    v = np.asarray(v)
    if v.ndim:
        vals = np.unique(v[w._lanes(m)])
        if len(vals) != 1:
            _fail(ins, f"{what} differs between the lanes of the warp ({vals[:4].tolist()}); .sync.aligned "
                       f"instructions take one value")
        return int(vals[0])
    return int(v)


def _check_cols(ins, n):
    if n < MIN_COLS or n > COLUMNS or n & (n - 1):
        _fail(ins, f"tcgen05 column count {n} must be a power of two in {MIN_COLS}..{COLUMNS}")


@handler("tcgen05")
def dec_tcgen05(ctx, ins, mods, ops):
    op = mods[0] if mods else ""
    if any(m.startswith("cta_group::") and m not in ("cta_group::1", "cta_group::2") for m in mods):
        ctx.bad("tcgen05 takes .cta_group::1 or .cta_group::2")
    if op == "alloc":
        return _alloc(ctx, ins, ops)
    if op == "dealloc":
        return _dealloc(ctx, ins, ops)
    if op == "relinquish_alloc_permit":
        def relinquish(w, g, m):
            tmem_of(w.cta).relinquished = True
        return relinquish
    if op in ("ld", "st"):
        return _ldst(ctx, ins, mods, ops, op == "st")
    if op == "commit":
        return _commit(ctx, ins, mods, ops)
    if op in SUBOPS:
        return SUBOPS[op](ctx, ins, mods, ops)
    if op in ("wait::ld", "wait::st"):
        kind = "tcgen05" + op[6:]

        def wait(w, g, m):                 # the warp's earlier loads (stores) are complete
            hb = w.cta.cluster.hb
            a = hb.keys.get((kind, w.cta.rank, w.wid)) if hb is not None else None
            if a is not None:
                hb.observe(w, a.idx, a.n)
        return wait
    if op in ("fence::before_thread_sync", "fence::after_thread_sync"):
        return lambda w, g, m: None
    ctx.unsupported(f"tcgen05.{op} is not emulated yet")


def _alloc(ctx, ins, ops):
    if len(ops) != 2:
        ctx.bad("tcgen05.alloc takes [shared address], column count")
    dst, ncols = ctx.addr(ops[0]), ctx.rd(ops[1], "u32")

    def fn(w, g, m):
        n = _uniform(w, m, ncols(w), "the column count", ins)
        _check_cols(ins, n)
        t = tmem_of(w.cta)
        if t.relinquished:
            _fail(ins, "tcgen05.alloc after tcgen05.relinquish_alloc_permit: the CTA gave up its right to allocate")
        col = t.place(n)
        if col is None:
            g.blocked = WaitTmem(t, n, ins)
            return BLOCKED
        t.blocks[col] = n
        a = _uniform(w, m, dst(w), "the shared-memory address", ins)
        one = np.zeros(32, bool)
        one[int(w._lanes(m)[0])] = True
        w.store("shared::cta", np.uint64(a), one, 4, 1, np.array([[col]], np.uint32), ins)
        return None
    return fn


def _commit(ctx, ins, mods, ops):
    """``tcgen05.commit.cta_group::1.mbarrier::arrive::one.shared::cluster[.multicast::cluster].b64
    [mbar]{, ctaMask}``: each executing thread's earlier tcgen05.mma operations are tracked by one
    arrive on the mbarrier (in every CTA of ``ctaMask``, at the same offset), made when they have
    completed (eager: at once; adversarial mode: deferred behind them). The arrive releases the
    thread's knowledge and the completion of those MMAs (their ``tcgen05`` agent's clock)."""
    multicast = "multicast::cluster" in mods
    if "mbarrier::arrive::one" not in mods or len(ops) != (2 if multicast else 1):
        ctx.bad("tcgen05.commit takes .mbarrier::arrive::one and [mbar] (and a ctaMask with .multicast::cluster)")
    addr = ctx.addr(ops[0])
    mask = ctx.rd(ops[1], "u16") if multicast else None

    def fn(w, g, m):
        lanes = w._lanes(m)
        av = np.broadcast_to(np.asarray(addr(w), np.uint64), (32,))
        mk = np.broadcast_to(np.asarray(mask(w)), (32,)) if mask is not None else None
        hb = w.cta.cluster.hb
        for ln in lanes:                   # one commit per executing thread
            key = (w.cta.rank, w.wid, int(ln))
            targets = mbar_targets(w, av[ln:ln + 1], "shared::cluster", ins, lanes[:1])
            if mk is not None:             # the same barrier offset in every CTA of the mask
                ctas = w.cta.cluster.ctas
                bits = int(mk[ln])
                if bits >> len(ctas):
                    _fail(ins, f"tcgen05.commit ctaMask {bits:#x} names CTAs beyond the cluster's {len(ctas)}")
                targets = [(c, targets[0][1], 1) for i, c in enumerate(ctas) if bits >> i & 1]
            snap = None
            if hb is not None:
                snap = hb.release(w)
                ag = hb.keys.get(("tcgen05",) + key)
                if ag is not None and ag.n:       # the MMAs this commit tracks are complete
                    v = hb.fit(snap[0])
                    v[ag.idx] = max(v[ag.idx], ag.n)
                    snap = (v, snap[1])
            bars = []
            for cta, off, _n in targets:
                b = get_mbar(cta, off, ins)
                if hb is not None:
                    hb_check_init(w, b, ins)
                bars.append(b)

            def arrive(bars=bars, snap=snap):
                for b in bars:
                    if snap is not None:
                        b.snap = hb.merge(b.snap, snap)
                    b.note(f"tcgen05.commit at line {ins.line}")
                    b.arrive(1, ins)
            defer(w, arrive, ("tcgen05-commit", key), ("tcgen05", key))
    return fn


def _dealloc(ctx, ins, ops):
    if len(ops) != 2:
        ctx.bad("tcgen05.dealloc takes a tensor-memory address, column count")
    taddr, ncols = ctx.rd(ops[0], "u32"), ctx.rd(ops[1], "u32")

    def fn(w, g, m):
        a = _uniform(w, m, taddr(w), "the tensor-memory address", ins)
        n = _uniform(w, m, ncols(w), "the column count", ins)
        _check_cols(ins, n)
        t, col = tmem_of(w.cta), a & 0xFFFF
        if t.blocks.get(col) != n:
            have = t.blocks.get(col)
            _fail(ins, f"tcgen05.dealloc of {n} columns at column {col}, " +
                  ("which is not allocated (double free?)" if have is None else f"allocated with {have} columns"))
        del t.blocks[col]
        t.version += 1
    return fn


def _ldst(ctx, ins, mods, ops, store):
    name = "st" if store else "ld"
    shape = next((m for m in mods if "x" in m and m[0].isdigit()), None)
    num = next((m for m in mods if m.startswith("x") and m[1:].isdigit()), None)
    if any(m.startswith(("pack", "unpack")) for m in mods):
        ctx.unsupported(f"tcgen05.{name} with .pack/.unpack is not emulated yet")
    if shape != "32x32b":
        ctx.unsupported(f"tcgen05.{name} shape .{shape} is not emulated yet (32x32b is)")
    if num is None:
        ctx.bad(f"tcgen05.{name} needs a .xN repetition count")
    n = int(num[1:])
    if len(ops) != 2:
        ctx.bad(f"tcgen05.{name} takes {'[taddr], registers' if store else 'registers, [taddr]'}")
    regs_op = ctx.operand(ops[0 if not store else 1])
    items = regs_op.items if regs_op.kind == "vec" else [regs_op]
    if len(items) != n:
        ctx.bad(f"tcgen05.{name}.x{n} needs {n} registers, got {len(items)}")
    taddr = ctx.addr(ops[1] if not store else ops[0])
    regs = [ctx.rd(x, "b32") for x in items] if store else [ctx.wr(x, "b32")[1] for x in items]

    def fn(w, g, m):
        a = _uniform(w, m, taddr(w), "the tensor-memory address", ins)
        lane, col = a >> 16, a & 0xFFFF
        q = QUARTER * (w.wid % 4)
        if lane != q:
            _fail(ins, f"tcgen05.{name}.32x32b by warp {w.wid} at lane {lane}: a warp reaches only lanes "
                       f"{q}..{q + QUARTER - 1} (warp id % 4 = {w.wid % 4}; PTX ISA: tcgen05 data movement, "
                       f"lane access restrictions)")
        t = tmem_of(w.cta)
        if not t.covered(col, n):
            _fail(ins, f"tcgen05.{name} of columns {col}..{col + n - 1}: not inside one tcgen05.alloc block "
                       f"(allocated: {sorted(t.blocks.items())})")
        lanes = w._lanes(m)
        rows = lane + lanes
        sh = tmem_shadow(w.cta)
        if sh is not None:                 # an access of the warp's tcgen05.ld (st) unit, known to
            hb = sh.hb                     # the warp (and its later releases) after tcgen05.wait::ld (st)
            a = hb.agent(("tcgen05" + name, w.cta.rank, w.wid), "tcgen05" + name, w.cta, w.wid,
                         f"tcgen05.{name} unit of warp {w.wid}")
            a.n += 1
            vc = hb.warp_vc(w)
            cells = (rows[:, None] * COLUMNS + col + np.arange(n)[None, :]).reshape(-1)
            if store:
                sh.write(cells, a.idx, a.n, vc, ins.pc, False, f"tcgen05.{name}")
            else:
                sh.read(cells, a.idx, a.n, vc, w.pvc, ins.pc, False, f"tcgen05.{name}")
        if store:
            for j, rd in enumerate(regs):
                v = np.broadcast_to(np.asarray(rd(w)).astype(np.uint32, copy=False), (32,))
                t.data[rows, col + j] = v[lanes]
        else:
            for j, wr in enumerate(regs):
                wr(w, m, t.data[rows, col + j])
    return fn


__all__ = ["TensorMemory", "TmemShadow", "tmem_of", "tmem_shadow", "leak_check", "LANES", "COLUMNS"]
