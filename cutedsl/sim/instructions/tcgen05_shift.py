"""``tcgen05.shift.cta_group::{1,2}.down [taddr]`` (sm_100a): shift the rows of a tensor-memory
matrix down by one (issue 23).

Source: the NVVM dialect's description of ``nvvm.tcgen05.shift`` (LLVM 22; the PTX ISA section
"tcgen05.shift" could not be consulted here): an asynchronous instruction that "initiates the
shifting of 32-byte elements downwards across all the rows, except the last, by one row", the
matrix at ``taddr``. Emulated as: the 8 32-bit columns ``column .. column + 7`` of lanes
``lane .. 126`` move to lanes ``lane + 1 .. 127`` (the last row's old value is overwritten; the
first row keeps its value -- what it holds afterwards is not stated by that source). One thread
issues it (each executing lane issues one); it is an asynchronous operation of that thread's
tcgen05 unit, in order with its ``tcgen05.mma`` / ``cp`` and tracked by its ``tcgen05.commit``
(race detection: the moved cells are read and written by it). ``cta_group::2``: issued by the
pair's even CTA, the shift happens in both CTAs' tensor memory.
"""
from __future__ import annotations

import numpy as np

from ..engines.async_engine import defer
from ..frontend.errors import SimRuntimeError
from ..frontend.registry import subhandler
from ..machine.tensor_memory import COLUMNS, lane_value, tmem_of, tmem_order, tmem_shadow

ELEMENT_COLUMNS = 8         #: a 32-byte element: 8 32-bit columns
LANES = 128


@subhandler("tcgen05", "shift")
def decode_shift(ctx, ins, mods, ops):
    group = 2 if "cta_group::2" in mods else 1
    if "down" not in mods:
        ctx.bad("tcgen05.shift needs .down")
    for m in mods[1:]:
        if m not in ("down", "cta_group::1", "cta_group::2"):
            ctx.unsupported(f"unsupported tcgen05.shift modifier .{m}")
    if len(ops) != 1:
        ctx.bad("tcgen05.shift takes [taddr]")
    taddr = ctx.addr(ops[0])

    def fn(w, g, m):
        for ln in w._lanes(m).tolist():     # a single-thread instruction
            issue(w, ln, lane_value(w, taddr, ln))

    def issue(w, ln, a):
        ctas = [w.cta]
        if group == 2:
            cl, r = w.cta.cluster, w.cta.rank
            if r % 2 or r + 1 >= len(cl.ctas):
                raise SimRuntimeError(f"tcgen05.shift.cta_group::2 is issued by the even CTA of a pair; this is "
                                      f"rank {r} of {len(cl.ctas)}\n    at {ins.where()}")
            ctas.append(cl.ctas[r + 1])
        lane0, col = a >> 16, a & 0xFFFF
        if lane0 >= LANES - 1:
            raise SimRuntimeError(f"tcgen05.shift at lane {lane0}: no row below it to shift into\n    at {ins.where()}")
        for c in ctas:
            if not tmem_of(c).covered(col, ELEMENT_COLUMNS):
                raise SimRuntimeError(f"tcgen05.shift columns {col}..{col + ELEMENT_COLUMNS - 1} are not inside one "
                                      f"tcgen05.alloc block of CTA {c.ctaid}\n    at {ins.where()}")
        src = np.arange(lane0, LANES - 1)
        cols = col + np.arange(ELEMENT_COLUMNS)
        key = (w.cta.rank, w.wid, ln)
        hb = w.cta.cluster.hb
        clock = 0
        if hb is not None and w.cta.shadow is not None:
            ag = hb.agent(("tcgen05",) + key, "tcgen05", w.cta, w.wid, f"tcgen05 unit of thread {32 * w.wid + ln}")
            ag.n += 1
            clock = ag.n
            vc, pvc = hb.async_op([w], ag.idx, clock)
            vc = tmem_order(w, hb, vc, ag.idx)
            for c in ctas:
                ts = tmem_shadow(c)
                ts.read((src[:, None] * COLUMNS + cols).reshape(-1), ag.idx, clock, vc, pvc, ins.pc, False,
                        "tcgen05.shift")
                ts.write(((src + 1)[:, None] * COLUMNS + cols).reshape(-1), ag.idx, clock, vc, ins.pc, False,
                         "tcgen05.shift")

        def perform():
            for c in ctas:
                d = tmem_of(c).data
                d[src[:, None] + 1, cols] = d[src[:, None], cols].copy()
        defer(w, perform, ("tcgen05", key, clock), ("tcgen05", key))

    return fn



__all__ = ["decode_shift"]
