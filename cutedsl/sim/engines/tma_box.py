"""Tensor-map boxes for the TMA instructions (:mod:`cutedsl.sim.instructions.tma`): the 128-byte swizzle, a
box's placement in shared memory, its global elements with the bounds checks and out-of-bounds
fill mask, the tensor-map operand (decoded once per launch when it is a kernel parameter), and
shared-memory destinations of the cluster. Placement rules: hopper-semantics.md section 1.2-1.4
(summarised in :mod:`cutedsl.sim.instructions.tma`)."""
from __future__ import annotations

from functools import lru_cache

import numpy as np

from ...errors import TensorMapError
from ..frontend.errors import MemoryAccessError, SimRuntimeError
from ..machine.memory import OFF_MASK, PARAM_WIN, RANK_SHIFT
from ..checks.shadow_words import word_set
from .tensormap import decode


def swizzle(a, span):
    """Absolute-address swizzle of TMA/wgmma (span 0, 32, 64 or 128 bytes)."""
    if not span:
        return a
    m = span // 16 - 1
    return a ^ (((a >> 7) & m) << 4)


@lru_cache(maxsize=256)
def box_layout(box, esize, span, dst_mod):
    """(xs, rel, words): element coordinates (rank, n) innermost first, swizzled byte
    offsets relative to ``dst - dst_mod`` (dst_mod = dst % 1024), and the 4-B word ids."""
    r = len(box)
    idx = np.indices(box[::-1]).reshape(r, -1)[::-1].astype(np.int64)
    pitch = span if span else box[0] * esize
    rows = np.zeros(idx.shape[1], np.int64)
    mul = 1
    for i in range(1, r):
        rows += idx[i] * mul
        mul *= box[i]
    lin = idx[0] * esize + pitch * rows
    rel = swizzle(dst_mod + lin, span)
    rel.flags.writeable = False
    idx.flags.writeable = False
    ch = np.unique(rel >> 2)
    ch.flags.writeable = False
    return idx, rel, ch


@lru_cache(maxsize=256)
def _goff(box, strides):
    """(byte offsets of a box's elements from its first, their min, their max, the offsets in
    elements when every stride is a multiple of the element size (else None))."""
    idx, _r, _c = box_layout(box, strides[0], 0, 0)
    off = np.zeros(idx.shape[1], np.int64)
    for i, s in enumerate(strides):
        off += idx[i] * s
    off.flags.writeable = False
    es = strides[0]
    eoff = None
    if not (off % es).any():
        eoff = off // es
        eoff.flags.writeable = False
    return off, int(off.min()), int(off.max()), eoff


@lru_cache(maxsize=256)
def box_span(box, esize, span, dst_mod):
    """``(min, max, rel // esize)`` of :func:`box_layout`'s ``rel``: the box's extent in shared
    memory and its element indices (``rel`` is a multiple of ``esize``: the destination is
    128-byte aligned and the swizzle moves 16-byte chunks)."""
    rel = box_layout(box, esize, span, dst_mod)[1]
    e = rel // esize
    e.flags.writeable = False
    return int(rel.min()), int(rel.max()), e


def whole_words(off, esize):
    """``(offsets, element size)`` for the race detector: 2-/1-byte elements that fill whole
    4-byte words in order (a box whose rows span whole words) as the words themselves."""
    k = 4 // esize if esize < 4 else 1
    if k == 1 or len(off) % k:
        return off, esize
    first = off[::k]
    if (first & 3).any() or not all(np.array_equal(off[j::k], first + j * esize) for j in range(1, k)):
        return off, esize
    return first, 4


def tmap_of(w, tm_addr, ins):
    a = int(tm_addr)
    launch = w.launch
    # a map in the kernel parameters cannot change during the launch: decode it once
    cacheable = PARAM_WIN <= a < PARAM_WIN + launch.param_size
    if cacheable:
        cache = launch.tmap_cache
        tm = cache.get(a)
        if tm is not None:
            return tm
    blob = w.read_generic_bytes(a, 128, ins)
    try:
        tm = decode(blob)
        if cacheable:
            cache[a] = tm
        return tm
    except TensorMapError as e:
        raise SimRuntimeError(f"tensor-map operand at 0x{int(tm_addr):x} holds neither a tensor map encoded by "
                              f"SimBackend.encode_tensor_map nor a valid device-built one ({e})\n"
                              f"    at {ins.where()}") from None


@lru_cache(maxsize=256)
def box_chunks(box, strides, esize, span, dst_mod):
    """A box whose rows are whole 16-byte chunks (row bytes and every global stride multiples of
    16) as chunks: (offsets of its chunks in global memory, in 16-byte units from the box's first
    byte; their places in shared memory, in 16-byte units from ``dst - dst_mod``), in box order;
    None for other boxes. The swizzle moves 16-byte chunks whole (PTX ISA 5.5, tensors: swizzling
    modes), so a chunk's bytes stay together -- one index per 16 bytes instead of per element."""
    if (box[0] * esize) % 16 or any(s % 16 for s in strides[1:]):
        return None
    per = 16 // esize
    g = _goff(box, strides)[0][::per] // 16
    s = box_layout(box, esize, span, dst_mod)[1][::per] // 16
    g.flags.writeable = False
    s.flags.writeable = False
    return g, s


@lru_cache(maxsize=256)
def load_plan(box, strides, esize, span, dst_mod):
    """What a TMA load of a box with destination ``dst`` (``dst_mod = dst % 1024``) needs of the
    cached layouts, in one lookup per issue: ``(words, rmin, rmax, erel, chunk_dst)`` --
    :func:`box_layout`'s word ids, :func:`box_span`, and the chunks' places in shared memory
    (:func:`box_chunks`; None when the box's rows are not whole chunks)."""
    rmin, rmax, erel = box_span(box, esize, span, dst_mod)
    bc = box_chunks(box, strides, esize, span, dst_mod)
    return box_layout(box, esize, span, dst_mod)[2], rmin, rmax, erel, None if bc is None else bc[1]


@lru_cache(maxsize=256)
def box_rows(box, strides, esize):
    """``(rows, pitch, n)`` in 4-byte words of a chunked box (:func:`box_chunks`) whose rows lie at one
    global pitch -- word ``start + r * pitch + j`` (``r < rows``, ``j < n``) from its first word, in box
    order -- so its global words are a strided 2-D block (:class:`~cutedsl.sim.checks.global_hb.Rows`);
    None otherwise (a 3-D box whose planes are not a whole number of rows apart)."""
    bc = box_chunks(box, strides, esize, 0, 0)
    if bc is None:
        return None
    g = bc[0] - bc[0][0]
    per_row = box[0] * esize // 16
    rows = len(g) // per_row
    g = g.reshape(rows, per_row)
    pitch = int(g[1, 0]) if rows > 1 else per_row
    if pitch < per_row or not (g == pitch * np.arange(rows)[:, None] + np.arange(per_row)).all():
        return None
    return rows, 4 * pitch, 4 * per_row


def _origin(w, tm, coords, ins):
    """(allocation, byte offset of the box's first element in it, in-bounds mask of its elements
    or None when every coordinate is inside the tensor)."""
    gm = w.launch.gmem
    al = gm.find(tm.address)
    if al is None:
        raise MemoryAccessError(f"tensor map global address 0x{tm.address:x} is not allocated "
                                f"({gm.describe(tm.address)})\n    at {ins.where()}")
    base = tm.address - al.base
    inb = None
    for i, c in enumerate(coords):
        if c < 0 or c + tm.box[i] > tm.dims[i]:
            xs = box_layout(tm.box, tm.esize, 0, 0)[0]
            g = xs[i] + c
            ok = (g >= 0) & (g < tm.dims[i])
            inb = ok if inb is None else inb & ok
        base += c * tm.strides[i]
    return al, base, inb


def _chunk_plan(tm):
    """``(chunk offsets, min byte offset, max byte offset + element size)`` of a map whose box rows
    are whole 16-byte chunks (:func:`box_chunks`, :func:`_goff`), else None; kept in the map's own
    ``plans`` (a parameter map is decoded once per launch; the plans die with it) instead of two
    cached lookups per issue."""
    try:
        return tm.plans["chunks"]
    except KeyError:
        pass
    bc = None if tm.group else box_chunks(tm.box, tm.strides, tm.esize, 0, 0)
    if bc is not None:
        _off, omin, omax, _e = _goff(tm.box, tm.strides)
        bc = (bc[0], omin, omax + tm.esize)
    tm.plans["chunks"] = bc
    return bc


def chunk_source(w, tm, coords, ins):
    """``(allocation, 16-byte chunk indices)`` of a box inside its tensor and allocation whose
    rows are whole 16-byte chunks starting at a 16-byte boundary (:func:`box_chunks`); None for
    any other box (then :func:`elements`)."""
    plan = _chunk_plan(tm)
    if plan is None:
        return None
    al, base, inb = _origin(w, tm, coords, ins)
    g, omin, oend = plan
    if inb is not None or base % 16 or base + omin < 0 or base + oend > al.nbytes:
        return None
    return al, g + base // 16


def box_dest(tm, off):
    """What the box of map ``tm`` (unpadded: ``tm.box`` in shared memory) at shared-memory byte
    offset ``off`` needs of :func:`load_plan`, once per map and offset (a pipeline's stages repeat
    them): ``(its word set, its chunk indices in the CTA's shared memory or None when its rows are
    not whole chunks, lowest byte, end byte, bytes)`` -- the words as
    :func:`~cutedsl.sim.checks.shadow_words.word_set` gives them; arrays read-only."""
    hit = tm.plans.get(off)         # kept in the map's own plans, as :func:`_chunk_plan`
    if hit is None:
        dmod = off % 1024
        base = off - dmod               # a multiple of 1024: the swizzle pattern's period
        words, rmin, rmax, erel, cdst = load_plan(tm.box, tm.strides, tm.esize, tm.swizzle, dmod)
        wset = word_set(words, base >> 2)
        sidx = None if cdst is None else cdst + base // 16
        for x in (wset, sidx):
            if isinstance(x, np.ndarray):
                x.flags.writeable = False
        hit = tm.plans[off] = (wset, sidx, base + rmin, base + rmax + tm.esize, tm.esize * len(erel))
    return hit


def elements(w, tm, coords, ins):
    """Global element indices and in-bounds mask for a box at ``coords``."""
    al, base, inb = _origin(w, tm, coords, ins)
    off, omin, omax, eoff = _goff(tm.box, tm.strides)
    if inb is None:
        lo, hi = base + omin, base + omax
        if lo >= 0 and hi + tm.esize <= al.nbytes and eoff is not None and base % tm.esize == 0:
            return al, eoff + base // tm.esize, None        # in bounds: the cached extent decides
    gb = base + off
    if inb is None:
        pass
    elif inb.any():
        lo, hi = int(gb[inb].min()), int(gb[inb].max())
    else:
        lo = hi = 0
    if lo < 0 or hi + tm.esize > al.nbytes:
        bad = al.base + (lo if lo < 0 else hi)
        raise MemoryAccessError(f"TMA box at coordinates {tuple(coords)} reaches global address 0x{bad:x} outside "
                                f"the tensor's allocation ({gm.describe(bad)})\n    at {ins.where()}")
    return al, gb // tm.esize, inb


def smem_dest(w, addr, ins, what, align=128):
    """(cta, offset) of a shared::cluster address."""
    a = int(addr)
    rank = a >> RANK_SHIFT
    off = a & OFF_MASK
    cta = w.cta
    if rank != cta.rank:
        cl = w.cta.cluster
        if rank >= len(cl.ctas):
            raise SimRuntimeError(f"{what}: cluster rank {rank} does not exist\n    at {ins.where()}")
        cta = cl.ctas[rank]
    if off % align:
        raise SimRuntimeError(f"{what}: shared-memory address {off} is not {align}-byte aligned\n    at {ins.where()}")
    return cta, off
