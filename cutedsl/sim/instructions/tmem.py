"""Blackwell tensor memory (sm_100a): the ``tcgen05`` instructions that allocate the per-CTA TMEM
(its state: :mod:`cutedsl.sim.machine.tensor_memory`) and move data between it and registers (issue 23).

**Tensor memory** of a CTA: 128 lanes x 512 columns of 32 bits. A TMEM address is ``lane << 16
| column``. **Allocation** (PTX ISA ``tcgen05.alloc/dealloc/relinquish_alloc_permit``): a warp
allocates ``ncols`` columns, a power of two in 32..512, and the column address of the block
(lane 0) is written to shared memory; blocks are placed at the first free multiple of their
size. An allocation that cannot be satisfied blocks until another warp deallocates (a wait
that nothing can end is reported as a deadlock, naming the allocation). Errors
(``SimRuntimeError`` naming the instruction): a column count outside the rule, ``dealloc`` of
a block that is not allocated (double free) or with another size, ``alloc`` after the CTA
relinquished its permit, and columns still allocated when the CTA exits (a leak).

**Data movement** (``tcgen05.ld`` / ``tcgen05.st``, shapes 32x32b, 16x64b, 16x128b, 16x256b,
16x32bx2, ``.xN``; :func:`ldst_layout` says which lane and column each register of each thread
maps to). A warp reaches only the lanes of its quarter, ``32 * (warp id % 4) .. + 31`` (the
lane-quarter rule; 16-lane shapes at its first or second half); an access outside it, or to
columns no allocation covers, is an error. ``ld``/``st``
move the data at issue; for the race detector they are accesses of the warp's ``tcgen05ld`` /
``tcgen05st`` unit, which the warp (and what it releases) knows complete only after
``tcgen05.wait::ld`` / ``wait::st`` (:class:`~cutedsl.sim.machine.tensor_memory.TmemShadow`). ``tcgen05.commit``
(``.multicast::cluster`` too) arrives once per executing thread on the mbarrier(s) after the
thread's earlier ``tcgen05.mma`` operations (:mod:`cutedsl.sim.instructions.tcgen05_mma`, registered here
through :func:`cutedsl.sim.frontend.registry.subhandler`) completed. ``tcgen05.fence::*`` are accepted (docs/emulator.md says
why they are not modelled). ``cta_group::2`` alloc / dealloc / relinquish act on each executing
CTA's own tensor memory (the pair's warps run them alike, so both get the same columns; an MMA
whose columns are not allocated in both CTAs is an error). ``ld.pack::16b`` loads the low 16
bits of two adjacent columns into one register (column ``2c`` in the low half, ``2c + 1`` in the
high half, where ``c`` is the column the register has without packing: CUTLASS's
``SM100_TMEM_LOAD_*_16b`` traits); ``st.unpack::16b`` stores the halves the same way, zero-
extended (the ISA leaves the upper 16 bits of each column unspecified; the emulator writes 0).
With 16x32bx2 the half-split immediate stays a column offset: the second 16 lanes' registers
pack columns ``split + 2c, split + 2c + 1``.
"""
from __future__ import annotations

import numpy as np

from ..engines.async_engine import defer
from ..frontend.errors import SimRuntimeError
from ..engines.mbarrier_object import get_mbar, hb_check_init, mbar_targets
from ..frontend.registry import BLOCKED, SUBHANDLERS, handler
from ..machine.tensor_memory import COLUMNS, QUARTER, tmem_of, tmem_order, tmem_shadow

MIN_COLS = 32


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
    if ("tcgen05", op) in SUBHANDLERS:
        return SUBHANDLERS[("tcgen05", op)](ctx, ins, mods, ops)
    if op in ("wait::ld", "wait::st"):
        kind = "tcgen05" + op[6:]

        def wait(w, g, m):                 # the warp's earlier loads (stores) are complete
            hb = w.cta.cluster.hb
            a = hb.keys.get((kind, w.cta.rank, w.wid)) if hb is not None else None
            if a is not None:
                hb.observe(w, a.idx, a.n)
        return wait
    if op == "fence::after_thread_sync":
        def after(w, g, m):                 # what the warp knows now orders its later tcgen05 ops
            hb = w.cta.cluster.hb
            if hb is not None:
                w.tc_after = hb.warp_vc(w).copy()
        return after
    if op == "fence::before_thread_sync":
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
                    b.note("tcgen05.commit at {}", ins)
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


#: registers per repetition and TMEM lanes each data-movement shape reaches
SHAPES = {"32x32b": (1, 32), "16x64b": (1, 16), "16x128b": (2, 16), "16x256b": (4, 16), "16x32bx2": (1, 16)}


def ldst_layout(shape: str, n: int, split: int = 0) -> tuple:
    """``(lanes, columns)``, each (32 threads, registers), of a ``tcgen05.ld/st.SHAPE.xN``:
    where register ``r`` of thread ``t`` lives, relative to the address's lane and column (the
    CuTe ``Copy_Traits`` of CUTLASS's ``SM100_TMEM_LOAD_*``; repetition ``j`` moves along the
    columns): 32x32b lane ``t``, column ``j``; 16x64b lane ``8 (t % 2) + t // 4``, column
    ``(t // 2) % 2 + 2 j``; 16x128b lanes ``t // 4`` and ``+ 8``, column ``t % 4 + 4 j``;
    16x256b lanes ``t // 4`` and ``+ 8``, columns ``2 (t % 4) + {0, 1} + 8 j``; 16x32bx2 lane
    ``t % 16``, column ``(t // 16) * split + j`` (``split``: the instruction's immediate)."""
    per, _ = SHAPES[shape]
    t = np.arange(32)[:, None]
    r = np.arange(per * n)[None, :]
    j, q = r // per, r % per
    if shape == "32x32b":
        lanes, cols = t + 0 * r, j + 0 * t
    elif shape == "16x64b":
        lanes, cols = 8 * (t % 2) + t // 4 + 0 * r, (t // 2) % 2 + 2 * j
    elif shape == "16x128b":
        lanes, cols = t // 4 + 8 * q, t % 4 + 4 * j
    elif shape == "16x256b":
        lanes, cols = t // 4 + 8 * (q // 2), 2 * (t % 4) + q % 2 + 8 * j
    else:
        lanes, cols = t % 16 + 0 * r, (t // 16) * split + j
    return lanes, cols


def _ldst(ctx, ins, mods, ops, store):
    name = "st" if store else "ld"
    shape = next((m for m in mods if m in SHAPES), None)
    num = next((m for m in mods if m.startswith("x") and m[1:].isdigit()), None)
    packs = [m for m in mods if m.startswith(("pack", "unpack"))]
    if packs and packs != ["unpack::16b" if store else "pack::16b"]:
        ctx.bad(f"tcgen05.{name} takes .{'unpack' if store else 'pack'}::16b, not .{'.'.join(packs)}")
    packed = bool(packs)
    if shape is None:
        ctx.bad(f"tcgen05.{name} needs a shape ({', '.join(SHAPES)})")
    if num is None:
        ctx.bad(f"tcgen05.{name} needs a .xN repetition count")
    n = int(num[1:])
    split_op = shape == "16x32bx2"
    if len(ops) != 2 + split_op:
        imm = ", immHalfSplitoff" if split_op else ""
        form = f"[taddr]{imm}, registers" if store else f"registers, [taddr]{imm}"
        ctx.bad(f"tcgen05.{name}.{shape} takes {form}")
    addr_op = ops[0] if store else ops[1]
    split = 0
    if split_op:
        o = ctx.operand(ops[1] if store else ops[2])
        if o.kind != "imm":
            ctx.bad(f"tcgen05.{name}.16x32bx2 takes an immediate half-split offset")
        split = int(o.value)
    regs_op = ctx.operand(ops[-1] if store else ops[0])
    items = regs_op.items if regs_op.kind == "vec" else [regs_op]
    per, span = SHAPES[shape]
    if len(items) != per * n:
        ctx.bad(f"tcgen05.{name}.{shape}.x{n} needs {per * n} registers, got {len(items)}")
    taddr = ctx.addr(addr_op)
    regs = [ctx.rd(x, "b32") for x in items] if store else [ctx.wr(x, "b32")[1] for x in items]
    lane_off, col_off = ldst_layout(shape, n, split)
    if packed:                  # each 32-bit register <-> the low halves of columns 2c and 2c + 1
        half = col_off - ldst_layout(shape, n, 0)[1]        # 16x32bx2: the second half's column offset
        col_off = 2 * (col_off - half) + half
    width = int(col_off.max()) + 1 + packed

    def fn(w, g, m):
        a = _uniform(w, m, taddr(w), "the tensor-memory address", ins)
        lane, col = a >> 16, a & 0xFFFF
        q = QUARTER * (w.wid % 4)
        if not (q <= lane and lane + span <= q + QUARTER and (lane - q) % span == 0):
            _fail(ins, f"tcgen05.{name}.{shape} by warp {w.wid} at lane {lane}: a warp reaches only lanes "
                       f"{q}..{q + QUARTER - 1} (warp id % 4 = {w.wid % 4}; PTX ISA: tcgen05 data movement, "
                       f"lane access restrictions)")
        t = tmem_of(w.cta)
        if not t.covered(col, width):
            _fail(ins, f"tcgen05.{name} of columns {col}..{col + width - 1}: not inside one tcgen05.alloc block "
                       f"(allocated: {sorted(t.blocks.items())})")
        lanes = w._lanes(m)
        rows, cols = lane + lane_off, col + col_off          # (32 threads, registers)
        sh = tmem_shadow(w.cta)
        if sh is not None:                 # an access of the warp's tcgen05.ld (st) unit, known to
            hb = sh.hb                     # the warp (and its later releases) after tcgen05.wait::ld (st)
            ag = hb.agent(("tcgen05" + name, w.cta.rank, w.wid), "tcgen05" + name, w.cta, w.wid,
                          f"tcgen05.{name} unit of warp {w.wid}")
            ag.n += 1
            vc = tmem_order(w, hb, hb.warp_vc(w))
            cells = np.unique(rows[lanes] * COLUMNS + cols[lanes])
            if packed:
                cells = np.union1d(cells, cells + 1)
            if store:
                sh.write(cells, ag.idx, ag.n, vc, ins.pc, False, f"tcgen05.{name}")
            else:
                sh.read(cells, ag.idx, ag.n, vc, w.pvc, ins.pc, False, f"tcgen05.{name}")
        low = np.uint32(0xFFFF)
        if store:
            for k, rd in enumerate(regs):
                v = np.broadcast_to(np.asarray(rd(w)).astype(np.uint32, copy=False), (32,))[lanes]
                r, c = rows[lanes, k], cols[lanes, k]
                if packed:                      # the halves, zero-extended, into two columns
                    t.data[r, c], t.data[r, c + 1] = v & low, v >> np.uint32(16)
                else:
                    t.data[r, c] = v
        else:
            for k, wr in enumerate(regs):       # the writer takes the executing lanes' values
                r, c = rows[lanes, k], cols[lanes, k]
                v = t.data[r, c]
                if packed:
                    v = (v & low) | ((t.data[r, c + 1] & low) << np.uint32(16))
                wr(w, m, v)
    return fn


__all__ = ["dec_tcgen05", "ldst_layout"]
