"""``st.async``: a store into the shared memory of a CTA of the cluster that completes on an
mbarrier there (PTX ISA 8.1, sm_90: ``st.async{.weak}{.shared::cluster}.mbarrier::complete_tx
::bytes{.v2,.v4}.type [a], b, [mbar]``; CUTLASS / CuTe DSL use it to hand a tile scheduler's
next work tile to the peer CTAs of a cluster).

Each active lane's store is asynchronous: its bytes land in the destination CTA (its own or a
peer) later -- at issue in eager mode, at a random later point under the adversarial mode -- and
then ``complete_tx`` of their size is signalled on the mbarrier, which must be in the same CTA
as the destination. The write is a generic-proxy (weak) write ordered before whoever observes
the mbarrier's phase complete (the complete-tx has release semantics at cluster scope): a
reader waiting on the barrier needs no proxy fence, and one that does not wait races with it.
"""
from __future__ import annotations

import numpy as np

from ..engines.async_engine import async_write, defer, lane_scalars
from ..frontend.errors import SimRuntimeError
from ..engines.mbarrier_object import get_mbar
from ..frontend.parser import TYPE_SIZES
from ..frontend.registry import subhandler
from ..checks.shadow_words import word_set, words_of
from ..engines.tma_box import smem_dest

_TYPES = {"b32", "u32", "s32", "f32", "b64", "u64", "s64", "f64"}
_IGNORED = {"weak", "shared::cluster", "mbarrier::complete_tx::bytes"}


@subhandler("st", "async")
def dec_st_async(ctx, ins, mods, ops):
    vec, t = 1, None
    for m in mods:
        if m in ("v2", "v4"):
            vec = int(m[1])
        elif m in _TYPES:
            t = m
        elif m not in _IGNORED and m != "async":
            ctx.unsupported(f"unsupported st.async modifier .{m}")
    if "mbarrier::complete_tx::bytes" not in mods:
        ctx.unsupported("st.async completes on an mbarrier (.mbarrier::complete_tx::bytes)")
    if t is None:
        ctx.bad("st.async needs a type")
    if vec == 4 and TYPE_SIZES[t] == 8:
        ctx.bad("st.async.v4 takes 32-bit elements")
    if len(ops) != 3:
        ctx.bad("st.async takes [address], source, [mbarrier]")
    src = ctx.operand(ops[1])
    items = src.items if src.kind == "vec" else [src]
    if len(items) != vec:
        ctx.bad(f"st.async{'.v%d' % vec if vec > 1 else ''} needs {vec} source operand(s)")
    esize = TYPE_SIZES[t]
    ut = f"u{8 * esize}"
    readers = [ctx.rd(x, ut) for x in items]
    addr, mbar = ctx.addr(ops[0]), ctx.addr(ops[2])
    nbytes = esize * vec

    def fn(w, g, m):
        vals = [addr(w), mbar(w)] + [r(w) for r in readers]
        for lv in lane_scalars(w, m, *vals):
            data = np.array([int(x) for x in lv[2:]], np.dtype(f"uint{8 * esize}")).view(np.uint8)
            dcta, doff = smem_dest(w, lv[0], ins, "st.async destination", nbytes)
            bcta, moff = smem_dest(w, lv[1], ins, "st.async mbarrier", 8)
            if bcta is not dcta:
                raise SimRuntimeError(f"st.async: the mbarrier (CTA rank {bcta.rank}) must be in the destination's "
                                      f"CTA (rank {dcta.rank})\n    at {ins.where()}")
            bar = get_mbar(dcta, moff, ins)
            snap = async_write(w, dcta, moff, word_set(words_of(np.arange(doff, doff + nbytes, 4), 4)), ins,
                               "st.async", proxy_async=False)

            def land(cta=dcta, bar=bar, snap=snap, doff=doff, data=data):
                cta.smem[doff:doff + nbytes] = data
                if snap is not None:
                    bar.snap = cta.cluster.hb.merge(bar.snap, snap)
                bar.complete_tx(nbytes)
            defer(w, land, remote=dcta is not w.cta)
    return fn
