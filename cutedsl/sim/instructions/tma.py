"""Tensor Memory Accelerator: box placement with swizzle, bulk copies, Ampere ``cp.async``.

**Tensor maps** (:mod:`cutedsl.sim.engines.tensormap`). TMA instructions read the 128-byte object
through the generic address of their tensor-map operand (param, or global memory), so a
wrong pointer is caught, and decode it: a host-encoded blob (``MAGIC`` + registry id) or a
map built on the device with ``tensormap.replace``, validated with the driver's rules.

**Placement** (hopper-semantics.md §1.2-1.4). Box element ``x`` (innermost first) with
coordinates ``c`` reads global element ``g = c + x`` (zero / NaN fill when any ``g_i`` is
outside ``[0, dim_i)``) and lands at shared byte ``swz(dst + lin(x))`` with
``lin(x) = x_0*e + pitch*(x_1 + n_1*(x_2 + ...))``, ``pitch = S`` when swizzled else
``n_0*e``, ``swz(a) = a ^ (((a >> 7) & (S/16 - 1)) << 4)`` on the absolute address.
The mbarrier gets ``complete_tx`` of the full box bytes (out-of-bounds elements included).
A box (loaded or stored) inside its tensor that starts on a 16-byte boundary moves as 16-byte
chunks: the box's rows and the global strides are multiples of 16 bytes (tensor-map rules) and
the swizzle permutes whole chunks, so this gives the element rule's bytes with one index per 16.
Stores clip out-of-bounds elements. Copies complete at issue ("eager"); under the adversarial
mode (:mod:`cutedsl.sim.machine.chaos`) loads land later in random order and stores read their source
up to ``wait_group.read`` and write global memory up to ``wait_group``.

Race detection (:mod:`cutedsl.sim.checks.hb`): a load's shared-memory writes are recorded at issue as
the epoch of its ``tma`` agent (issuing warp, mbarrier) and released into the mbarrier with
its ``complete_tx``; a store's source reads as the epoch of the warp's ``bulk`` agent (clock =
bulk group), which ``cp.async.bulk.wait_group[.read]`` makes known to the waiting warp.
"""
from __future__ import annotations

import numpy as np

from ..engines.async_engine import async_write, bulk_read, defer, lane_scalars
from ..frontend.errors import MemoryAccessError, SimRuntimeError
from ..machine.memory import PARAM_WIN
from ..frontend.registry import SUBHANDLERS, handler
from ..checks.shadow_words import word_set, words_of
from ..engines.mbarrier_object import get_mbar, hb_check_init
from ..checks.global_hb import Rows
from ..engines.tma_box import (box_rows, box_dest, chunk_source, elements, load_plan, smem_dest, tmap_of,
                               whole_words)


def tma_load(w, ins, dst, tm_addr, coords, mbar, mask=None, pair=False):
    """A TMA tile load into ``dst`` (and, with ``mask``, the same offset of every CTA in it),
    completing on the mbarrier at ``mbar``: in the destination CTA, or with ``pair``
    (``.cta_group::2``) in the CTA of the destination's pair that the barrier address's rank bit 0
    names -- each destination ``d`` signals CTA ``(d & ~1) | (rank & 1)`` (PTX ISA
    cp.async.bulk.tensor; CUTLASS's and CuTe DSL's 2-SM loads name the even CTA's barrier, and a
    pair multicasting factors to both of its CTAs arms the even CTA's barrier with all four
    deliveries)."""
    tm = tmap_of(w, tm_addr, ins)
    if len(coords) != len(tm.box):
        raise SimRuntimeError(f"TMA with {len(coords)} coordinates on a rank-{len(tm.box)} tensor map\n"
                              f"    at {ins.where()}")
    coords = packed_coords(tm, coords, ins)
    ghb = w.launch.ghb
    src = chunk_source(w, tm, coords, ins)
    if src is not None and ((ghb is not None and ghb.written(src[0])) or (src[0].dv is not None
                                                                          and w.launch.initcheck)):
        src = None                          # the checks of box_values want element indices
    if src is None:
        vals, sbox = box_values(w, tm, coords, ins, ghb)
    else:                                   # in bounds, whole 16-byte chunks: copied as chunks
        vals, sbox = src[0].v[16][src[1]], tm.box
    dcta, doff = smem_dest(w, dst, ins, "TMA load destination")
    mcta, moff = smem_dest(w, mbar, ins, "TMA mbarrier", 8)
    peer_bit = mcta.rank ^ w.cta.rank       # 0: each destination's own barrier; 1: its pair peer's
    if peer_bit and not (pair and peer_bit == 1):
        raise SimRuntimeError(f"TMA load signals the mbarrier of cluster rank {mcta.rank}, not the destination "
                              f"CTA's" + ("" if pair else " (only .cta_group::2 may signal the pair peer's)")
                              + f"\n    at {ins.where()}")
    if mask is None:
        targets = [dcta]
    else:
        cl = w.cta.cluster
        mask = int(mask)
        if mask == 0 or mask >> len(cl.ctas):
            raise SimRuntimeError(f"TMA multicast mask 0x{mask:x} is empty or names ranks outside the "
                                  f"{len(cl.ctas)}-CTA cluster\n    at {ins.where()}")
        targets = [cl.ctas[i] for i in range(len(cl.ctas)) if mask >> i & 1]
    if src is None:
        dmod = doff % 1024
        words, rmin, rmax, erel, _c = load_plan(sbox, tm.strides, tm.esize, tm.swizzle, dmod)
        base = doff - dmod                  # a multiple of 1024
        unit, sidx, wset = tm.esize, erel + base // tm.esize, word_set(words, base >> 2)
        lo, end, nbytes = base + rmin, base + rmax + tm.esize, tm.esize * len(erel)
    else:                                   # the same, once per map and destination
        unit = 16
        wset, sidx, lo, end, nbytes = box_dest(tm, doff)
    for cta in targets:
        if end > cta.smem_size or lo < 0:
            raise MemoryAccessError(f"TMA load box ({nbytes} B) at smem offset {doff} overruns the CTA's "
                                    f"{cta.smem_size} B of shared memory\n    at {ins.where()}")
        bcta = cta.cluster.ctas[(cta.rank & ~1) | (mcta.rank & 1)] if pair else cta
        bar = get_mbar(bcta, moff, ins)
        snap = async_write(w, cta, moff, wset, ins, "TMA load", bcta)
        hb_check_init(w, bar, ins)

        def land(cta=cta, bar=bar, snap=snap, bcta=bcta):
            cta.sv[unit][sidx] = vals
            bar.note("complete_tx {} B (TMA load at {}, coords {})", nbytes, ins, tuple(coords))
            if snap is not None:
                bar.snap = bcta.cluster.hb.merge(bar.snap, snap)
            bar.complete_tx(nbytes)
        defer(w, land, remote=cta is not w.cta)


def box_values(w, tm, coords, ins, ghb):
    """(the box's elements in box order, the box's shape in shared memory) read element by
    element: out-of-bounds elements filled, the global race and initcheck checks of the read."""
    al, gidx, inb = elements(w, tm, coords, ins)
    if ghb is not None and ghb.written(al):     # generic writes of these bytes: ordered and proxy-fenced?
        ghb.async_read(w, al, *whole_words((gidx if inb is None else gidx[inb]) * tm.esize, tm.esize), ins)
    if al.dv is not None and w.launch.initcheck:
        # initcheck: only in-bounds elements read memory; the zero / NaN fill of the others
        # reads nothing (PTX ISA cp.async.bulk.tensor; CUDA driver API, tensor map OOB fill)
        g = gidx if inb is None else gidx[inb]
        if len(g):
            w.check_defined(al, g * tm.esize, tm.esize, None, ins, "TMA load, async proxy")
    v = al.v[tm.esize]
    if inb is None:
        vals = v[gidx]
    else:
        vals = np.full(len(gidx), tm.nan_bits, v.dtype)
        vals[inb] = v[gidx[inb]]
    sbox = tm.box
    if tm.group:                            # padded sub-byte types: 16-byte slots in shared memory
        vals = padded_rows(tm, vals)
        sbox = (tm.box[0] // tm.group * 16,) + tm.box[1:]
    return vals, sbox


_WORD_BYTES = np.arange(0, 16, 4)       # the 4-byte words of a 16-byte chunk


def _s32(x):
    """A coordinate register's low 32 bits as a signed int (``.s32`` coordinates, PTX ISA
    cp.async.bulk.tensor), in plain int arithmetic: numpy scalar casts cost more per issue."""
    x &= 0xFFFFFFFF
    return x - (1 << 32) if x & 0x80000000 else x


def packed_coords(tm, coords, ins):
    """``coords`` in the map's byte units: a packed sub-byte map's innermost coordinate counts
    elements -- on a byte for 16U4_ALIGN8B, on a group of 16 for the ALIGN16B types."""
    if not tm.bits:
        return coords
    step = 16 if tm.group else 8 // tm.bits
    if coords[0] % step:
        raise SimRuntimeError(f"TMA coordinate {coords[0]} of a packed {tm.bits}-bit tensor map is not a multiple "
                              f"of {step} elements\n    at {ins.where()}")
    return [coords[0] * tm.bits // 8] + list(coords[1:])


def padded_rows(tm, vals):
    """A padded (ALIGN16B) box's global bytes spread into shared memory: each group of
    ``tm.group`` bytes (16 elements) in a 16-byte slot, the rest of the slot zero."""
    g = vals.reshape(-1, tm.group)
    out = np.zeros((g.shape[0], 16), vals.dtype)
    out[:, :tm.group] = g
    return out.reshape(-1)


def tma_store(w, ins, tm_addr, coords, src):
    tm = tmap_of(w, tm_addr, ins)
    if len(coords) != len(tm.box):
        raise SimRuntimeError(f"TMA with {len(coords)} coordinates on a rank-{len(tm.box)} tensor map\n"
                              f"    at {ins.where()}")
    if tm.group:
        raise SimRuntimeError(f"TMA store through a padded {tm.bits}-bit tensor map (ALIGN16B) is not emulated\n"
                              f"    at {ins.where()}")
    coords = packed_coords(tm, coords, ins)
    chunks = chunk_source(w, tm, coords, ins)       # (allocation, chunk indices): as for loads
    if chunks is None:
        al, gidx, inb = elements(w, tm, coords, ins)
    else:
        al, gidx, inb = chunks[0], chunks[1], None
    scta, soff = smem_dest(w, src, ins, "TMA store source")
    wset, csidx, _lo, end, _n = box_dest(tm, soff)        # (its words and extent: any store box)
    if end > scta.smem_size:
        raise MemoryAccessError(f"TMA store box at smem offset {soff} overruns shared memory\n    at {ins.where()}")
    bulk_read(w, scta, wset, ins, "TMA store source")
    ghb = w.launch.ghb                  # the global side: a write in flight until wait_group
    if chunks is None:
        dmod = soff % 1024
        erel = load_plan(tm.box, tm.strides, tm.esize, tm.swizzle, dmod)[3]
        unit, sidx = tm.esize, erel + (soff - dmod) // tm.esize
        first = int(gidx[0])
        if ghb is not None:
            ghb.async_write(w, al, *whole_words((gidx if inb is None else gidx[inb]) * tm.esize, tm.esize), ins)
    else:
        unit, sidx = 16, csidx
        first = int(gidx[0]) * 16 // tm.esize
        rows = None if ghb is None else box_rows(tm.box, tm.strides, tm.esize)
        if rows is not None:            # the box's rows at one pitch: its words as row ranges
            ghb.async_write_rows(w, al, Rows(4 * int(gidx[0]), *rows), ins)
        elif ghb is not None:           # the chunks' words in box order: what whole_words gives
            ghb.async_write(w, al, (16 * gidx[:, None] + _WORD_BYTES).reshape(-1), 4, ins)
    v = al.v[unit]
    if al.dv is not None:               # initcheck: the in-bounds elements are defined (at issue:
        if inb is None:                 # reading them early is the race detector's business)
            al.define_box(first, tm.esize, tm.box, tm.strides)
        else:
            al.define_elements(gidx[inb], tm.esize)
    group = w.bulk_commits
    key = (w.cta.rank, w.wid)

    def read():
        vals = scta.sv[unit][sidx]

        def write():
            if inb is None:
                v[gidx] = vals
            else:
                v[gidx[inb]] = vals[inb]
        defer(w, write, ("bulkwrite", key, group))
    defer(w, read, ("bulkread", key, group))


def _bulk_copy(w, ins, dst_space, dst, src_space, src, size, mbar=None, mask=None):
    if size % 16 or size <= 0:
        raise SimRuntimeError(f"bulk copy size {size} is not a positive multiple of 16\n    at {ins.where()}")
    one = np.zeros(32, bool)
    one[int(np.flatnonzero(w.live)[0]) if w.live.any() else 0] = True
    data = w.load(src_space, np.uint64(src), one, 1, size, np.uint8, ins, race=False)[0]
    if src_space != "global":
        scta, soff = smem_dest(w, src, ins, "bulk copy source", 16)
        bulk_read(w, scta, word_set(words_of(np.arange(soff, soff + size, 4), 4)), ins, "bulk copy source")
    if dst_space == "global":
        w.store("global", np.uint64(dst), one, 1, size, data[None, :], ins, race=False)
        if w.launch.ghb is not None:
            al = w.launch.gmem.find(int(dst))
            w.launch.ghb.async_write(w, al, np.arange(int(dst) - al.base, int(dst) - al.base + size, 4), 4, ins)
        return
    dcta, doff = smem_dest(w, dst, ins, "bulk copy destination", 16)
    _c, moff = smem_dest(w, mbar, ins, "bulk copy mbarrier", 8)
    targets = [dcta] if mask is None else [c for i, c in enumerate(w.cta.cluster.ctas) if int(mask) >> i & 1]
    for cta in targets:
        if doff + size > cta.smem_size:
            raise MemoryAccessError(f"bulk copy of {size} B at smem offset {doff} overruns shared memory\n"
                                    f"    at {ins.where()}")
        bar = get_mbar(cta, moff, ins)
        snap = async_write(w, cta, moff, word_set(words_of(np.arange(doff, doff + size, 4), 4)), ins, "bulk copy")

        def land(cta=cta, bar=bar, snap=snap):
            cta.smem[doff:doff + size] = data
            if snap is not None:
                bar.snap = cta.cluster.hb.merge(bar.snap, snap)
            bar.complete_tx(size)
        defer(w, land, remote=cta is not w.cta)


_IGN = {"tile", "L2::cache_hint", "cta_group::1", "cta_group::2", "bulk_group", "im2col_no_offs"}


@handler("cp")
def dec_cp(ctx, ins, mods, ops):
    if mods[:2] == ["async", "bulk"]:
        rest = mods[2:]
        if rest and rest[0] == "tensor":
            return _dec_tensor(ctx, ins, rest[1:], ops)
        if rest in (["commit_group"],) or rest[:1] == ["wait_group"]:
            for mm in rest[1:]:
                if mm != "read":
                    ctx.unsupported(f"unsupported modifier .{mm}")
            if rest[0] == "commit_group":
                def commit(w, g, m):
                    w.bulk_commits += 1
                return commit
            return _dec_bulk_wait(ctx, ins, "read" in rest, ops)
        if rest and rest[0] == "prefetch":
            return lambda w, g, m: None
        return _dec_bulk(ctx, ins, rest, ops)
    if mods and mods[0] == "async":
        return SUBHANDLERS[("cp", "async")](ctx, ins, mods[1:], ops)
    if mods and mods[0] == "reduce":         # cp.reduce.async.bulk: instructions/bulk_reduce.py
        return SUBHANDLERS[("cp", "reduce")](ctx, ins, mods, ops)
    ctx.unsupported("unsupported cp.* instruction")


def _tmap_reader(ctx, base):
    if base.kind == "sym":
        sp, off = ctx.prog.symbols[base.name]
        if sp == "param":
            v = np.uint64(PARAM_WIN + off)
            return lambda w: v
        return ctx.sym_addr(base.name)
    return ctx.rd(base, "u64")


def _dec_tensor(ctx, ins, mods, ops):
    dim = None
    direction = None
    multicast = False
    pair = False
    for mm in mods:
        if mm.endswith("d") and mm[:-1].isdigit():
            dim = int(mm[:-1])
        elif mm in ("shared::cluster", "shared::cta"):
            direction = direction or "load"
        elif mm == "global":
            direction = direction or "store"
        elif mm == "mbarrier::complete_tx::bytes":
            direction = "load"
        elif mm == "multicast::cluster":
            multicast = True
        elif mm == "L2::cache_hint":
            pass            # its cache-policy operand (the last one) is a performance hint: ignored
        elif mm == "cta_group::2":
            pair = True
        elif mm in _IGN or mm == "cta_group::1":
            pass
        else:
            ctx.unsupported(f"unsupported cp.async.bulk.tensor modifier .{mm}")
    if "im2col" in mods or dim is None:
        ctx.unsupported("cp.async.bulk.tensor needs .Nd and tile mode")
    if direction == "load":
        dst = ctx.addr(ops[0])
        t = ctx.operand(ops[1])
        if t.kind != "addr" or t.coords is None:
            ctx.bad("expected [tensorMap, {coordinates}]")
        if len(t.coords) != dim:
            ctx.bad(f".{dim}d needs {dim} coordinates")
        tmr = _tmap_reader(ctx, t.base)
        crs = [ctx.rd(c, "s32") for c in t.coords]
        mbar = ctx.addr(ops[2])
        rmask = ctx.rd(ops[3], "u16") if multicast else None
        if multicast and len(ops) < 4:
            ctx.bad("multicast needs a ctaMask operand")

        def fn(w, g, m):
            vals = [dst(w), tmr(w), mbar(w)] + [c(w) for c in crs] + ([rmask(w)] if rmask else [])
            for lv in lane_scalars(w, m, *vals):
                d, ta, mb = lv[:3]
                coords = [_s32(x) for x in lv[3:3 + dim]]
                mk = lv[3 + dim] if rmask else None
                tma_load(w, ins, d, ta, coords, mb, mk, pair)
        return fn
    t = ctx.operand(ops[0])
    if t.kind != "addr" or t.coords is None:
        ctx.bad("expected [tensorMap, {coordinates}]")
    tmr = _tmap_reader(ctx, t.base)
    crs = [ctx.rd(c, "s32") for c in t.coords]
    src = ctx.addr(ops[1])

    def fn(w, g, m):
        vals = [tmr(w), src(w)] + [c(w) for c in crs]
        seen = set()
        for lv in lane_scalars(w, m, *vals):
            # lanes storing the same box from the same source (CuTe DSL issues its epilogue's TMA
            # stores from a whole warp) write the same bytes: one store, as the warp's bulk
            # group holds it either way (docs/emulator.md, "Redundant TMA stores")
            key = tuple(int(x) for x in lv)
            if key in seen:
                continue
            seen.add(key)
            coords = [_s32(x) for x in lv[2:]]
            tma_store(w, ins, lv[0], coords, lv[1])
    return fn


def _dec_bulk(ctx, ins, mods, ops):
    spaces = [mm for mm in mods if mm in ("shared::cluster", "shared::cta", "global")]
    multicast = "multicast::cluster" in mods
    for mm in mods:
        if mm not in spaces and mm not in _IGN and mm not in ("mbarrier::complete_tx::bytes", "multicast::cluster"):
            ctx.unsupported(f"unsupported cp.async.bulk modifier .{mm}")
    if len(spaces) != 2:
        ctx.unsupported("cp.async.bulk needs destination and source spaces")
    dsp, ssp = spaces
    dst, src, rs = ctx.addr(ops[0]), ctx.addr(ops[1]), ctx.rd(ops[2], "u32")
    mbar = ctx.addr(ops[3]) if dsp != "global" else None
    rmask = ctx.rd(ops[4], "u16") if multicast else None
    ssp = "shared::cluster" if ssp == "shared::cta" else ssp

    def fn(w, g, m):
        vals = [dst(w), src(w), rs(w)] + ([mbar(w)] if mbar else []) + ([rmask(w)] if rmask else [])
        for lv in lane_scalars(w, m, *vals):
            _bulk_copy(w, ins, dsp if dsp == "global" else "shared", lv[0], ssp, lv[1], lv[2],
                       lv[3] if mbar else None, lv[4] if rmask else None)
    return fn


def _dec_bulk_wait(ctx, ins, read_only, ops):
    """``cp.async.bulk.wait_group[.read] N``: the warp's bulk groups older than the N most recent
    are complete (their source reads, and without .read their writes)."""
    if len(ops) != 1 or ctx.operand(ops[0]).kind != "imm":
        ctx.bad("cp.async.bulk.wait_group takes an immediate group count")
    n = int(ctx.operand(ops[0]).value)

    def fn(w, g, m):
        done = w.bulk_commits - n
        ch = w.launch.chaos
        if ch is not None:
            key = (w.cta.rank, w.wid)
            kinds = ("bulkread",) if read_only else ("bulkread", "bulkwrite")
            ch.flush(lambda t: t is not None and t[0] in kinds and t[1] == key and t[2] < done)
        hb = w.cta.cluster.hb
        if hb is not None:
            a = hb.keys.get(("bulk", w.cta.rank, w.wid))
            if a is not None:
                hb.observe(w, a.idx, done)
        if not read_only and w.launch.ghb is not None:
            w.launch.ghb.async_complete(w, done)
    return fn
