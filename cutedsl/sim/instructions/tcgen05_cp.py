"""``tcgen05.cp``: shared memory -> tensor memory copies (sm_100a; how block-scaled MMAs get their
scale factors into TMEM). Issue 23.

``tcgen05.cp.cta_group::G.SHAPE{.MULTICAST} [taddr], s-desc`` -- issued by one thread, an
asynchronous tcgen05 operation of that thread (ordered with its ``tcgen05.mma`` s, tracked by
its ``tcgen05.commit``; PTX ISA tcgen05.cp). The source is a shared-memory matrix descriptor
(:func:`~cutedsl.sim.engines.wgmma_layout.decode_desc_sm100`) over rows of 128-bit chunks in the
canonical no-swizzle layout: chunk ``c`` of row ``r`` at ``start + (r % 8) * 16 + (r // 8) * SBO
+ c * LBO`` (the swizzle XOR applied when the descriptor names one). Row ``r`` lands in TMEM lane
``lane + r`` and its 32-bit word ``w`` in column ``column + w``:

==========================  ======================================================
shape                       rows -> lanes
==========================  ======================================================
``128x256b``, ``128x128b``  128 rows -> lanes 0..127 (8 or 4 columns)
``4x256b``                  4 rows -> lanes 0..3 (8 columns)
``64x128b.warpx2::02_13``   rows 0..31 -> lane quarters 0 and 2, 32..63 -> 1 and 3
``64x128b.warpx2::01_23``   rows 0..31 -> quarters 0 and 1, 32..63 -> 2 and 3
``32x128b.warpx4``          rows 0..31 -> every lane quarter (the scale-factor copy)
==========================  ======================================================

``cta_group::2`` (a CTA pair's MMA operands): issued by the pair's even CTA, the copy happens in
both CTAs of the pair -- each from its own shared memory at the descriptor's address into its
own tensor memory at ``taddr`` (as the pair's MMA reads each CTA's operand half from that CTA;
CuTe DSL's 2-SM block-scaled GEMM has each CTA load its own factors there, and its fixture is
bit-exact with this). The decompressing forms (``.b8x16.b6x16_p32`` / ``.b4x16_p64``) are
refused with ``UnsupportedInstruction``.
"""
from __future__ import annotations

import numpy as np

from ..engines.async_engine import defer
from ..frontend.errors import SimRuntimeError
from ..frontend.registry import subhandler
from ..machine.tensor_memory import COLUMNS, QUARTER, lane_value, tmem_of, tmem_order, tmem_shadow
from ..engines.tma_box import swizzle
from ..engines.wgmma_layout import decode_desc_sm100

#: shape -> (rows, 128-bit chunks per row)
SHAPES = {"128x256b": (128, 2), "4x256b": (4, 2), "128x128b": (128, 1), "64x128b": (64, 1), "32x128b": (32, 1)}
#: multicast -> for each 32-row block of the source, the lane quarters it lands in
MULTICAST = {None: None, "warpx2::02_13": ((0, 2), (1, 3)), "warpx2::01_23": ((0, 1), (2, 3)),
             "warpx4": ((0, 1, 2, 3),)}
NEEDS = {"64x128b": ("warpx2::02_13", "warpx2::01_23"), "32x128b": ("warpx4",)}


def source_offsets(desc: int, rows: int, chunks: int) -> np.ndarray:
    """Shared byte address of every source byte (rows, chunks * 16) of a tcgen05.cp."""
    start, lbo, sbo, base, span = decode_desc_sm100(desc)
    if span < 0:
        raise SimRuntimeError(f"tcgen05.cp descriptor 0x{desc:x}: the 128B_BASE32B swizzle is for MMA operands "
                              f"(MN-major), not copies")
    if base:
        raise SimRuntimeError(f"tcgen05.cp descriptor 0x{desc:x} has base_offset {base}; only 0 is supported")
    r = np.arange(rows)[:, None]
    b = np.arange(16 * chunks)[None, :]
    a = start + (r % 8) * 16 + (r // 8) * sbo + (b // 16) * lbo + b % 16
    return swizzle(a, span)


def lane_map(shape: str, multicast) -> list:
    """For each source row block: the TMEM lanes (relative to the address's lane) its rows land
    in, as a list of (source rows, destination lanes) pairs."""
    rows, _ = SHAPES[shape]
    mc = MULTICAST[multicast]
    if mc is None:
        r = np.arange(rows)
        return [(r, r)]
    out = []
    for blk, quarters in enumerate(mc):
        src = np.arange(QUARTER) + QUARTER * blk
        for q in quarters:
            out.append((src, np.arange(QUARTER) + QUARTER * q))
    return out


@subhandler("tcgen05", "cp")
def decode_cp(ctx, ins, mods, ops):
    shape = next((m for m in mods if m in SHAPES), None)
    multicast = next((m for m in mods if m in MULTICAST and m is not None), None)
    if any(m.startswith(("b8x16", "b6x16", "b4x16")) for m in mods):
        ctx.unsupported("tcgen05.cp with decompression (.b8x16.b6x16_p32 / .b4x16_p64) is not emulated yet")
    group = 2 if "cta_group::2" in mods else 1
    if shape is None:
        ctx.bad(f"tcgen05.cp needs a shape ({', '.join(SHAPES)})")
    if NEEDS.get(shape, (None,)) != (None,) and multicast not in NEEDS[shape]:
        ctx.bad(f"tcgen05.cp.{shape} needs .{' or .'.join(NEEDS[shape])}")
    if shape not in NEEDS and multicast is not None:
        ctx.bad(f"tcgen05.cp.{shape} takes no .{multicast}")
    if len(ops) != 2:
        ctx.bad("tcgen05.cp takes [taddr], s-desc")
    taddr, rdesc = ctx.addr(ops[0]), ctx.rd(ops[1], "u64")
    rows, chunks = SHAPES[shape]
    pairs = lane_map(shape, multicast)

    def fn(w, g, m):
        for ln in w._lanes(m).tolist():      # a single-thread instruction
            issue(w, ln, lane_value(w, taddr, ln), lane_value(w, rdesc, ln))

    def issue(w, ln, a, d):
        if group == 1:
            return copy(w, ln, a, d, w.cta, 0)
        cl, r = w.cta.cluster, w.cta.rank
        if r % 2 or r + 1 >= len(cl.ctas):
            raise SimRuntimeError(f"tcgen05.cp.cta_group::2 is issued by the even CTA of a pair in a cluster of an "
                                  f"even number of CTAs; this is rank {r} of {len(cl.ctas)}\n    at {ins.where()}")
        for i, cta in enumerate((w.cta, cl.ctas[r + 1])):
            copy(w, ln, a, d, cta, i)

    def copy(w, ln, a, d, cta, member):
        """The copy in ``cta`` (``member`` 0: the issuing CTA, 1: its pair peer)."""
        lane0, col = a >> 16, a & 0xFFFF
        ncols = 4 * chunks
        try:
            src = source_offsets(d, rows, chunks)
        except SimRuntimeError as e:
            raise SimRuntimeError(f"tcgen05.cp: {e}\n    at {ins.where()}") from None
        if src.max() + 1 > cta.smem_size:
            raise SimRuntimeError(f"tcgen05.cp source reaches byte {int(src.max()) + 1} past shared memory "
                                  f"({cta.smem_size} B)\n    at {ins.where()}")
        t = tmem_of(cta)
        top = max(int(dl.max()) for _s, dl in pairs) + lane0
        if top >= 128 or not t.covered(col, ncols):
            raise SimRuntimeError(f"tcgen05.cp.{shape} to lane {lane0}, columns {col}..{col + ncols - 1}: outside "
                                  f"tensor memory or not inside one tcgen05.alloc block\n    at {ins.where()}")
        key = (w.cta.rank, w.wid, ln)
        hb, sh = cta.cluster.hb, cta.shadow
        clock = 0
        if hb is not None and sh is not None:
            ag = hb.agent(("tcgen05",) + key, "tcgen05", w.cta, w.wid, f"tcgen05 unit of thread {32 * w.wid + ln}")
            ag.n += member == 0                 # one operation of the issuing thread, in both CTAs
            clock = ag.n
            vc, pvc = hb.async_op([w], ag.idx, clock)
            sh.read(np.unique(src >> 2).reshape(-1), ag.idx, clock, vc, pvc, ins.pc, True, "tcgen05.cp source")
            vc = tmem_order(w, hb, vc, ag.idx)
            cells = np.concatenate([((dl + lane0)[:, None] * COLUMNS + col + np.arange(ncols)[None, :]).reshape(-1)
                                    for _s, dl in pairs])
            tmem_shadow(cta).write(cells, ag.idx, clock, vc, ins.pc, False, "tcgen05.cp")

        def perform():
            words = cta.smem[src.reshape(-1)].reshape(rows, 16 * chunks).view(np.uint32)   # (rows, ncols)
            for s, dl in pairs:
                t.data[(dl + lane0)[:, None], col + np.arange(ncols)[None, :]] = words[s]
        defer(w, perform, ("tcgen05", key, clock), ("tcgen05", key))

    return fn



__all__ = ["decode_cp", "source_offsets", "lane_map", "SHAPES"]
