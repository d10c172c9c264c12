"""Warpgroup MMA (``wgmma.*``): descriptor decode, fragment layouts, numerics.

``wgmma.mma_async`` is a **rendezvous of the 4 warps** of a warpgroup (warps 4g..4g+3): each
warp blocks at the instruction until all four arrived at the same PC; the last one executes
the MMA once over the 128 lanes and releases the others.

* Shared-memory descriptors (64-bit, sm_90) are decoded bit by bit: start address
  ``(d & 0x3FFF) << 4``, LBO ``((d >> 16) & 0x3FFF) << 4``, SBO ``((d >> 32) & 0x3FFF) << 4``,
  base_offset bits 49-51 (must be 0), layout bits 62-63 (0 none, 1 128B, 2 64B, 3 32B).
  Element addresses follow hopper-semantics.md §2.3 (K-major, or MN-major via imm-trans
  for 16-bit types); the swizzle XOR acts on the absolute shared address.
* D fragment (f32/s32 accumulator, m64nN): thread t, register i:
  ``row = 16*(t//32) + (t%32)//4 + 8*((i//2)%2)``, ``col = 8*(i//4) + 2*(t%4) + (i%2)``;
  an f16 accumulator packs elements 2q (low half) and 2q+1 (high half) into register q.
* A from registers (16-bit): value v of thread t at ``m = 16*(t//32) + (t%32)//4 + 8*((v>>1)&1)``,
  ``k = 8*(v>>2) + 2*(t%4) + (v&1)``, register v//2, half v%2. 8-bit types (m64nNk32, PTX ISA
  9.7.15.5.1.1, fragments for .m64nNk32): value v (0..15) at ``m = 16*(t//32) + (t%32)//4 + 8*((v>>2)&1)``,
  ``k = 16*(v>>3) + 4*(t%4) + (v&3)``, register v//4, byte v%4 (lowest byte first).
* Numerics ("exact" mode): products exact in float64, ``C + sum`` accumulated in float64 per
  instruction and rounded once to f32 (nearest-even); integer MMAs are exact (wrapping s32).
  tf32 operands drop the 13 low mantissa bits. Computation happens at issue (eager); under
  the adversarial mode (:mod:`cutedsl.sim.machine.chaos`) the shared-memory operands are read and the
  accumulator written at a random later point, at the latest by the first ``wait_group`` of
  the warpgroup that covers the group (operations of a warpgroup stay in issue order).
* Race detection (:mod:`cutedsl.sim.checks.hb`): the operations of warpgroup ``g`` are the ``wgmma``
  agent of ``g`` with clock ``1 + commit-group index``; their operand reads are recorded at
  issue, and their accumulator (and register-A) registers are *pending* in each warp until
  the warp knows the group complete. **Group rule**: ``wgmma.wait_group N`` in any one warp
  makes every group older than its N most recent complete for that warp (the group is one
  warpgroup-wide operation), so a release by that warp (e.g. an mbarrier arrive freeing a
  pipeline stage) orders the group's operand reads before what the acquirer does next.
  A lockstep run's wgmmas queue their operand reads (``Shadow.read_later``) and, with f32
  accumulators in eager mode, their products (``wgmma_acc.HeldTiles.queue``): a warpgroup's
  chain on one stage is judged and computed at once, with the verdicts, reports and bits of one
  instruction at a time (docs/emulator.md, Lockstep execution: Chains).
"""

from __future__ import annotations

import re

import numpy as np

from ..engines import numerics as nm
from ..engines.async_engine import defer
from ..machine.convergence import need_converged
from ..frontend.errors import SimRuntimeError
from ..checks.hb_warp import acc_prune
from ..engines.mbarrier_object import uniform_lanes
from ..frontend.registry import BLOCKED, NOT_BATCHED, each_warp, handler
from ..engines.wgmma_acc import HeldTiles, MmaOp, frag_to_tile, rounded, tile_to_frag
# decode_desc and operand_addrs are also this module's public names (tests, tcgen05)
from ..engines.wgmma_layout import (ETYPES, a_reg_index, a_reg_map, d_map, decode_desc,  # noqa: F401
                                     load_operand, operand_addrs, operand_words, widen)


class WarpGroupState:
    __slots__ = ("arrivals", "held")

    def __init__(self):
        self.arrivals = {}
        self.held = None        # HeldTiles (eager mode)


class Rendezvous:
    __slots__ = ("wg", "pc", "ins", "cta", "gi")

    def __init__(self, cta, gi, wg, pc, ins):
        self.cta, self.gi, self.wg, self.pc, self.ins = cta, gi, wg, pc, ins

    def ready(self):
        return False

    def describe(self):
        arrived = sorted(w.wid for w, _g in self.wg.arrivals.get(self.pc, []))
        return (f"warpgroup {self.gi} rendezvous at this wgmma: warps {arrived} arrived, "
                f"waiting for warps {[x for x in range(4 * self.gi, 4 * self.gi + 4) if x not in arrived]}")


def _wg(cta, gi):
    s = cta.warpgroups.get(gi)
    if s is None:
        s = cta.warpgroups[gi] = WarpGroupState()
    return s


def _cached(table, key, value):
    """``table[key] = value`` (a per-instruction operand cache, bounded), returning ``value``."""
    if len(table) > 1024:
        table.clear()
    table[key] = value
    return value


def _uniform(warps, reader, ins, what, batch=None):
    """The warp-uniform value ``reader`` gives for ``warps`` (``batch``: their WarpBatch, read
    at once); ``SimRuntimeError`` when lanes or warps differ."""
    if batch is not None:
        v = reader(batch)
        if not getattr(v, "ndim", 0):
            return int(v)
        if uniform_lanes(v):
            return int(v[0])
    x0 = None
    for w in warps:
        v = reader(w)
        if getattr(v, "ndim", 0):
            a = v[0]
            if not (v == a).all():
                raise SimRuntimeError(f"wgmma {what} differs between lanes\n    at {ins.where()}")
        else:
            a = v
        if x0 is None:
            x0 = a
        elif a != x0:
            raise SimRuntimeError(f"wgmma {what} differs between the warps of the warpgroup\n    at {ins.where()}")
    return int(x0)


def _note_regs(ins, didx, aidx, readers):
    """``ins.regs`` for the chain fold (:mod:`cutedsl.sim.frontend.chain_fold`): a wgmma reads its
    descriptors, scale-d predicate, register A and (accumulating) D, and writes D; left None when
    a reader is not a plain register or constant read."""
    reads = {("r", int(i)) for i in didx} | {("r", int(i)) for i in aidx}
    for r in readers:
        if r is None:
            continue
        tag = getattr(r, "vec_src", None)
        if tag is None:
            return
        if tag[0] == "r":
            reads.add((tag[1], tag[3]))
    ins.regs = (frozenset(reads), frozenset(("r", int(i)) for i in didx))


@handler("wgmma")
def dec_wgmma(ctx, ins, mods, ops):
    if not mods:
        ctx.bad("wgmma needs an operation")
    op = mods[0]
    rest = [m for m in mods[1:] if m not in ("sync", "aligned")]
    if op == "fence":
        if rest:
            ctx.unsupported(f"unsupported modifiers {rest}")
        # warp-uniform (.sync.aligned), never blocks: a lockstep batch runs it per warp
        return each_warp(lambda w, g, m: None)
    if op == "commit_group":
        if rest:
            ctx.unsupported(f"unsupported modifiers {rest}")

        def fn(w, g, m):
            w.wg_commits += 1
        return each_warp(fn)
    if op == "wait_group":
        if rest:
            ctx.unsupported(f"unsupported modifiers {rest}")
        rn = ctx.rd(ops[0], "u32")
        imm = int(np.asarray(rn(None)).flat[0]) if ctx.operand(ops[0]).kind == "imm" else None   # N: a constant

        def fn(w, g, m):
            gi = w.wid // 4
            done = w.wg_commits - (imm if imm is not None else int(np.asarray(rn(w)).flat[0]))
            key = (w.cta.rank, gi)
            ch = w.launch.chaos
            if ch is not None:
                ch.flush(lambda t: t is not None and t[0] == "wgmma" and t[1] == key and t[2] < done)
            hb = w.cta.cluster.hb
            if hb is not None:
                a = hb.keys.get(("wgmma",) + key)
                if a is not None:
                    hb.observe(w, a.idx, done)
                    acc_prune(w)
        return each_warp(fn)
    if op != "mma_async":
        ctx.unsupported(f"unsupported wgmma operation .{op}")
    shape = next((m for m in rest if re.fullmatch(r"m64n\d+k\d+", m)), None)
    types = [m for m in rest if m in ETYPES or m in ("f32", "f16", "s32")]
    sat = "satfinite" in rest
    for m in rest:
        if m != shape and m not in ETYPES and m not in ("f32", "f16", "s32", "satfinite"):
            ctx.unsupported(f"unsupported wgmma modifier .{m}")
    if shape is None or len(types) != 3:
        ctx.unsupported("wgmma.mma_async needs .m64nNkK and three types")
    N, K = map(int, re.fullmatch(r"m64n(\d+)k(\d+)", shape).groups())
    dtype_d, ta, tb = types
    ea, dta = ETYPES[ta]
    eb, dtb = ETYPES[tb]
    if K * ea != 32 or K * eb != 32 or N % 8 or not 8 <= N <= 256:
        ctx.unsupported(f"wgmma shape {shape} does not match .{ta}/.{tb}")
    is_int = dtype_d == "s32"
    d = ctx.operand(ops[0])
    if d.kind != "vec" or any(x.kind != "reg" or x.cls != "r" for x in d.items):
        ctx.bad("wgmma D must be a brace list of 32-bit registers")
    nd = N // 4 if dtype_d == "f16" else N // 2
    if len(d.items) != nd:
        ctx.bad(f"wgmma {shape}.{dtype_d} needs {nd} D registers, got {len(d.items)}")
    didx = np.array([x.idx for x in d.items])
    a = ctx.operand(ops[1])
    a_regs = a.kind == "vec"
    if a_regs:
        if ea == 4:
            ctx.unsupported("register A is supported for 16- and 8-bit types only")
        if len(a.items) != 4 or any(x.kind != "reg" or x.cls != "r" for x in a.items):
            ctx.bad("register A needs 4 32-bit registers")
        aidx = np.array([x.idx for x in a.items])
        ra = None
    else:
        ra = ctx.rd(a, "u64")
    rb = ctx.rd(ops[2], "u64")
    sc = ctx.operand(ops[3])
    rscale = ctx.rd(sc, "pred") if sc.kind == "reg" else (lambda w, v=bool(sc.value): v)
    imms = []
    for s in ops[4:]:
        o = ctx.operand(s)
        if o.kind != "imm":
            ctx.bad("wgmma scale/transpose operands must be immediates")
        imms.append(o.value)
    sixteen = ea == 2
    if is_int:
        want = 0
    elif sixteen:
        want = 3 if a_regs else 4
    else:
        want = 2
    if len(imms) != want:
        ctx.bad(f"wgmma expects {want} immediate operands after scale-d, got {len(imms)}")
    sa = sb = 1
    trans_a = trans_b = 0
    if want >= 2:
        sa, sb = imms[0], imms[1]
        if sa not in (1, -1) or sb not in (1, -1):
            ctx.bad("imm-scale-a/b must be 1 or -1")
    if want == 4:
        trans_a, trans_b = imms[2], imms[3]
    elif want == 3:
        trans_b = imms[2]
    if trans_a not in (0, 1) or trans_b not in (0, 1):
        ctx.bad("imm-trans must be 0 or 1")
    dmap = d_map(N)
    sign = float(sa * sb)

    dbits = 0
    for i in didx.tolist():
        dbits |= 1 << int(i)
    rbits = dbits
    for i in (aidx.tolist() if a_regs else []):
        rbits |= 1 << int(i)
    dkey = tuple(didx.tolist())
    _note_regs(ins, didx, aidx if a_regs else (), (ra, rb, rscale if sc.kind == "reg" else None))
    hold = dtype_d == "f32"         # f32 accumulators are held as tiles between MMAs (wgmma_acc)

    # per descriptor (B) and pair (B, A): element indices, end byte and the race check's words --
    # what wgmma_layout's lru caches give, looked up once per MMA (a pipeline's stages repeat them)
    b_ops, a_ops, ra_ix = {}, {}, {}        # ra_ix: (first warp, lanes) -> register A's file indices

    def execute(warps, cta, queue=False):
        # issue: registers read now (scale-d, descriptors, register A), operand addresses;
        # ``queue`` (a lockstep batch): the operand race read waits for the run's other wgmmas
        # (Shadow.read_later: a chain on one stage is judged at once)
        st = _wg(cta, warps[0].wid // 4)
        lo = warps[0].wid
        batch = cta.batch(lo, lo + 4) if warps[0].full and warps[3].full else None
        chained = queue and hold and cta.launch.chaos is None     # wgmma_acc.HeldTiles.queue
        held = st.held
        if not chained and held is not None and held.tiles:
            other = 0
            for k, t in held.tiles.items():
                if k != dkey:
                    other |= t[3]
            if other & rbits:       # registers another held tile owns: write it back first
                held.settle(other & rbits)
        scale_d = bool(_uniform(warps, rscale, ins, "scale-d", batch))
        b_desc = _uniform(warps, rb, ins, "B descriptor", batch)
        hit = b_ops.get(b_desc)
        if hit is None:     # (indices, end byte, a token for the chain's plan: wgmma_acc.MmaOp.form)
            hit = _cached(b_ops, b_desc, operand_addrs(b_desc, N, K, eb, bool(trans_b))[2:] + (object(),))
        b_ei, b_end, form = hit
        if b_end > cta.smem_size:
            raise SimRuntimeError(f"wgmma B operand (descriptor 0x{b_desc:x}) reaches past shared memory "
                                  f"({cta.smem_size} B)\n    at {ins.where()}")
        A = None
        if a_regs:
            # the 4 registers of the warpgroup's 128 threads, gathered into the (64, K) tile
            regs = cta.files["r"]
            key = (warps[0].wid, regs.shape[1])
            ix = ra_ix.get(key) or _cached(ra_ix, key, (a_reg_index(aidx, 32 * key[0], key[1], ea),))
            A = widen(np.take(regs.reshape(-1).view(np.uint16 if ea == 2 else np.uint8), ix[0]), dta).reshape(64, K)
            a_ei, words = None, operand_words(b_desc, N, K, eb, bool(trans_b))
        else:
            a_desc = _uniform(warps, ra, ins, "A descriptor", batch)
            hit = a_ops.get((b_desc, a_desc))
            if hit is None:
                a_ei, a_end = operand_addrs(a_desc, 64, K, ea, bool(trans_a))[2:]
                hit = _cached(a_ops, (b_desc, a_desc), (a_ei, a_end, operand_words(
                    b_desc, N, K, eb, bool(trans_b), a_desc, ea, bool(trans_a)), object()))     # (words, blocks)
            a_ei, a_end, words, form = hit
            if a_end > cta.smem_size:
                raise SimRuntimeError(f"wgmma A operand (descriptor 0x{a_desc:x}) reaches past shared memory "
                                      f"({cta.smem_size} B)\n    at {ins.where()}")
        group = warps[0].wg_commits
        gi = warps[0].wid // 4
        sh = cta.shadow
        if sh is not None:
            hb = sh.hb
            akey = ("wgmma", cta.rank, gi)
            ag = hb.keys.get(akey) or hb.agent(akey, "wgmma", cta, gi, f"wgmma of warpgroup {gi}")
            clock = group + 1
            known = sh.pending_knowledge(ag.idx, clock) if queue else None
            if known is not None:       # an earlier wgmma of this run: the same warps, the same clocks
                vc, pvc, lenient = known
            else:
                # every issuing warp's knowledge orders the operand reads (PTX ISA 9.7.15.5.2: .sync
                # is per warp); what one of them knows only is reported as a missing warpgroup barrier
                vc, pvc = hb.collective_op(warps, ag.idx, clock)
                lenient = hb.async_op(warps, ag.idx, clock)
            wd, blk = words
            if queue:
                sh.read_later(wd, blk, ag.idx, clock, vc, pvc, ins.pc, "wgmma operand", lenient)
            else:
                sh.read(wd, ag.idx, clock, vc, pvc, ins.pc, True, "wgmma operand", blk, lenient=lenient)
            e = (rbits, ag.idx, clock, ins.pc)
            for w in warps:
                w.acc_pending.append(e)
                w.acc_bits |= rbits

        if chained:                 # computed with the run's other MMAs, in issue order
            if st.held is None:
                st.held = HeldTiles(cta, warps)
            st.held.queue(MmaOp(dkey, didx, dbits, rbits, N, scale_d, sign, A, a_ei, ea, dta, b_ei, eb, dtb, form))
            return

        def perform():
            lanes = slice(32 * warps[0].wid, 32 * warps[-1].wid + 32)
            B = load_operand(cta, b_ei, eb, dtb).T                              # (K, N)
            Am = A if A is not None else load_operand(cta, a_ei, ea, dta)       # (64, K)
            if hold and cta.launch.chaos is None:
                if st.held is None:
                    st.held = HeldTiles(cta, warps)
                t = st.held.tiles.get(dkey)
                c = None
                if scale_d:
                    c = t[1] if t is not None else frag_to_tile(cta.files["r"][didx, lanes].T.view(np.float32), N)
                st.held.put(dkey, didx, product(c, Am, B), N, dbits)
                return
            regs = cta.files["r"][didx, lanes].T                                 # (128, nd)
            cta.files["r"][didx, lanes] = compute(regs, Am, B, scale_d).T
        key = (cta.rank, gi)
        defer(warps[0], perform, ("wgmma", key, group), ("wgmma", key))

    def product(c, A, B):
        """The (64, N) f32 tile D = A B (+ c, an f32 tile or None), one rounding (exact mode)."""
        return rounded(A @ B, sign, c)

    def compute(regs, A, B, scale_d):
        """The accumulator registers (128 threads, nd) after D = A B (+ D)."""
        if is_int:
            prod = A.astype(np.int64) @ B.astype(np.int64)
            flat = np.empty(64 * N, np.int64)
            flat[dmap] = regs.view(np.int32).astype(np.int64) if scale_d else 0
            r = flat.reshape(64, N) + prod
            if sat:
                r = np.clip(r, -2 ** 31, 2 ** 31 - 1)
            out = r.reshape(-1)[dmap].astype(np.int64).astype(np.int32).view(np.uint32)
        else:
            prod = A @ B
            if sign != 1.0:
                prod = -prod
            if scale_d:
                if dtype_d == "f16":
                    flat = np.empty(64 * N, np.float64)
                    lo = (regs & 0xFFFF).astype(np.uint16).view(np.float16)
                    hi = (regs >> 16).astype(np.uint16).view(np.float16)
                    e = np.stack([lo, hi], axis=2).reshape(128, N // 2)
                    flat[dmap] = e.astype(np.float64)
                    r = flat.reshape(64, N) + prod
                else:
                    r = frag_to_tile(regs.view(np.float32), N).astype(np.float64) + prod
            else:
                r = prod
            if dtype_d == "f16":
                e = nm.f64_to(r.reshape(-1)[dmap], np.float16).view(np.uint16).astype(np.uint32)
                e = e.reshape(128, N // 4, 2)
                out = e[:, :, 0] | (e[:, :, 1] << 16)
            else:
                with np.errstate(over="ignore"):
                    out = tile_to_frag(r.astype(np.float32), N).view(np.uint32)
        return out

    def batch_fn(b):
        """A lockstep batch made of whole warpgroups, none of whose warps has arrived at this
        wgmma on its own: each warpgroup's rendezvous is complete at once."""
        cta = b.cta
        if b.lo % 4 or b.hi % 4:
            return NOT_BATCHED
        for gi in range(b.lo // 4, b.hi // 4):
            st = cta.warpgroups.get(gi)
            if st is not None and st.arrivals.get(ins.pc):
                return NOT_BATCHED
        for gi in range(b.lo // 4, b.hi // 4):
            execute(cta.warps[4 * gi:4 * gi + 4], cta, True)
        cta.launch.version += 1
        return None

    def fn(w, g, m):
        if w.is_batch:
            return batch_fn(w)
        if m is not g.m:
            raise SimRuntimeError(f"wgmma executed by only part of a warp\n    at {ins.where()}")
        if need_converged(w, g, ins):
            return BLOCKED
        cta = w.cta
        gi = w.wid // 4
        members = cta.warps[4 * gi:4 * gi + 4]
        if len(members) != 4:
            raise SimRuntimeError(f"wgmma needs 4 complete warps in warpgroup {gi}\n    at {ins.where()}")
        st = _wg(cta, gi)
        arr = st.arrivals.setdefault(ins.pc, [])
        arr.append((w, g))
        for x in members:
            if x.done:
                raise SimRuntimeError(f"warp {x.wid} of warpgroup {gi} exited while its partners wait at a "
                                      f"wgmma\n    at {ins.where()}")
        if len(arr) < 4:
            g.blocked = Rendezvous(cta, gi, st, ins.pc, ins)
            return BLOCKED
        del st.arrivals[ins.pc]
        execute(sorted((x for x, _ in arr), key=lambda x: x.wid), cta)
        for x, gg in arr:
            if gg is not g:
                gg.blocked = None
                gg.pc += 1
        cta.launch.version += 1
        return None
    return fn

