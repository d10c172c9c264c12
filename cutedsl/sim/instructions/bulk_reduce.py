"""``cp.reduce.async.bulk``: an element-wise reduction of a shared-memory array into global memory
by the async proxy (PTX ISA 9.7.9.25.4.2, sm_90, PTX ISA 8.0); FlashAttention-3/4's backward adds
its dQ tile into an f32 workspace with it.

Form emulated: ``cp.reduce.async.bulk.global.shared::cta.bulk_group{.L2::cache_hint}.redOp{.noftz}
.type [dstMem], [srcMem], size{, cache-policy}``. The ``.shared::cluster`` destination (mbarrier
completion) and the ``.tensor`` form are refused as not emulated.

Rules (PTX ISA 9.7.9.25.4.2 unless noted):

* ``size`` is a positive multiple of 16 and both addresses are 16-byte aligned (otherwise the
  behaviour is undefined: the emulator raises); both ranges lie inside their state space.
* The (redOp, type) pairs for a global destination: ``.add`` of u32/s32/u64/f32/f64/f16/bf16,
  ``.min``/``.max`` of u32/s32/u64/s64/f16/bf16, ``.inc``/``.dec`` of u32, ``.and``/``.or``/``.xor``
  of b32/b64; ``.add.f16``/``.add.bf16`` need ``.noftz``. ``.add`` of floats rounds to nearest
  even; ``.add.f32`` flushes subnormal inputs and results to sign-preserving zero.
* Memory semantics: each element's reduction is an individually ``.relaxed.gpu`` atomic (so
  reductions from different CTAs into one array never race, as ``red`` does not); the reads of
  the source are weak; everything is performed in the async proxy.
* Completion is the bulk async-group (``cp.async.bulk.commit_group`` / ``wait_group``, PTX ISA
  9.7.9.27.2.x in the edition :mod:`cutedsl.sim.checks.rules` cites; the section numbers here are
  those of the ISA 9.1 edition): ``wait_group.read N`` says the source has been read (it may be rewritten),
  ``wait_group N`` that the writes are done and visible to the waiting thread.

Emulation: in eager mode the reduction happens at issue. Under the adversarial mode the source is
read at a random point before the warp's ``wait_group.read`` covering its group and the global
additions happen later still, before ``wait_group`` (tags ``bulkread`` / ``bulkwrite`` of
:func:`cutedsl.sim.instructions.tma.tma_store`). Race checks: the source read is recorded as the
warp's ``bulk`` agent (a generic write to it before ``wait_group.read`` is a race, in any run);
the destination is an async reduction in flight until ``wait_group``
(:meth:`cutedsl.sim.checks.global_hb.GlobalHB.async_reduce`): a weak load or store of it by any
thread before then is a race, other atomics are not.
"""
from __future__ import annotations

import numpy as np

from ..engines import numerics as nm
from ..engines.async_engine import bulk_read, defer, lane_scalars
from ..engines.tma_box import smem_dest
from ..checks.shadow_words import word_set, words_of
from ..frontend.errors import MemoryAccessError, SimRuntimeError
from ..frontend.parser import TYPE_SIZES
from ..frontend.ptxtypes import NP
from ..frontend.registry import subhandler

#: PTX ISA 9.7.9.25.4.2, valid (.redOp, .type) pairs with a .global destination
VALID = {"add": {"u32", "s32", "u64", "f32", "f64", "f16", "bf16"},
         "min": {"u32", "s32", "u64", "s64", "f16", "bf16"},
         "max": {"u32", "s32", "u64", "s64", "f16", "bf16"},
         "inc": {"u32"}, "dec": {"u32"},
         "and": {"b32", "b64"}, "or": {"b32", "b64"}, "xor": {"b32", "b64"}}
_TYPES = set().union(*VALID.values())
_IGNORED = {"global", "shared::cta", "bulk_group", "L2::cache_hint", "noftz"}


def combine(op: str, t: str, old: np.ndarray, src: np.ndarray) -> np.ndarray:
    """``old (redOp) src`` element-wise for arrays of PTX type ``t`` (the ISA's per-element
    result; floats round to nearest even, ``.add.f32`` with subnormals flushed)."""
    dt = NP[t]
    with np.errstate(all="ignore"):
        if op == "add":
            if t == "f32":
                return nm.ftz(np.add(nm.ftz(old), nm.ftz(src), dtype=np.float32)).astype(np.float32)
            if t in ("f16", "bf16"):        # the f64 sum of two halves is exact: one rounding
                return nm.f64_to(old.astype(np.float64) + src.astype(np.float64), dt)
            return np.add(old, src, dtype=dt)
        if op in ("min", "max"):
            if dt.kind == "f":              # PTX min/max: a NaN operand yields the other one
                f = np.fmin if op == "min" else np.fmax
                return f(old.astype(np.float64), src.astype(np.float64)).astype(dt)
            return (np.minimum if op == "min" else np.maximum)(old, src)
        if op == "inc":
            return np.where(old >= src, dt.type(0), old + dt.type(1)).astype(dt)
        if op == "dec":
            return np.where((old == 0) | (old > src), src, old - dt.type(1)).astype(dt)
        return {"and": np.bitwise_and, "or": np.bitwise_or, "xor": np.bitwise_xor}[op](old, src)


@subhandler("cp", "reduce")
def dec_cp_reduce(ctx, ins, mods, ops):
    """Decode ``cp.reduce.async.bulk...`` (``mods`` after ``cp``)."""
    if mods[:3] != ["reduce", "async", "bulk"]:
        ctx.unsupported("unsupported cp.reduce instruction (only cp.reduce.async.bulk)")
    rest = mods[3:]
    if "tensor" in rest:
        ctx.unsupported("cp.reduce.async.bulk.tensor is not emulated")
    if "shared::cluster" in rest or "mbarrier::complete_tx::bytes" in rest:
        ctx.unsupported("cp.reduce.async.bulk into .shared::cluster (mbarrier completion) is not emulated")
    op = t = None
    for m in rest:
        if m in VALID:
            op = m
        elif m in _TYPES:
            t = m
        elif m not in _IGNORED:
            ctx.unsupported(f"unsupported cp.reduce.async.bulk modifier .{m}")
    if not {"global", "shared::cta", "bulk_group"} <= set(rest):
        ctx.bad("cp.reduce.async.bulk with a .global destination names .global.shared::cta.bulk_group")
    if op is None or t is None:
        ctx.bad("cp.reduce.async.bulk needs a reduction operation and a type")
    if t not in VALID[op]:
        ctx.bad(f"cp.reduce.async.bulk .{op} does not take .{t} (PTX ISA 9.7.9.25.4.2: "
                f".{op} takes {', '.join('.' + x for x in sorted(VALID[op]))})")
    if op == "add" and t in ("f16", "bf16") and "noftz" not in rest:
        ctx.bad(f"cp.reduce.async.bulk .add.{t} requires .noftz (PTX ISA 9.7.9.25.4.2)")
    hinted = "L2::cache_hint" in rest
    if len(ops) != 3 + hinted:
        ctx.bad("cp.reduce.async.bulk takes [dstMem], [srcMem], size" + (", cache-policy" if hinted else ""))
    dst, src, size = ctx.addr(ops[0]), ctx.addr(ops[1]), ctx.rd(ops[2], "u32")

    def fn(w, g, m):
        for d, s, n in lane_scalars(w, m, dst(w), src(w), size(w)):
            bulk_reduce(w, ins, op, t, d, s, n)
    return fn


def bulk_reduce(w, ins, op: str, t: str, dst: int, src: int, size: int) -> None:
    """One thread's ``cp.reduce.async.bulk`` of ``size`` bytes at shared ``src`` into global ``dst``."""
    if size <= 0 or size % 16:
        raise SimRuntimeError(f"cp.reduce.async.bulk size {size} is not a positive multiple of 16 "
                              f"(PTX ISA 9.7.9.25.4.2)\n    at {ins.where()}")
    if dst % 16:
        raise SimRuntimeError(f"cp.reduce.async.bulk destination {dst:#x} is not 16-byte aligned "
                              f"(PTX ISA 9.7.9.25.4.2)\n    at {ins.where()}")
    scta, soff = smem_dest(w, src, ins, "cp.reduce.async.bulk source (PTX ISA 9.7.9.25.4.2)", 16)
    if scta is not w.cta:
        raise SimRuntimeError(f"cp.reduce.async.bulk source is in cluster rank {scta.rank}'s shared memory; "
                              f".shared::cta names the executing CTA's\n    at {ins.where()}")
    if soff + size > scta.smem_size:
        raise MemoryAccessError(f"cp.reduce.async.bulk source [{soff}, {soff + size}) overruns the CTA's "
                                f"{scta.smem_size} B of shared memory\n    at {ins.where()}")
    al = w.launch.gmem.find(dst)
    if al is None or dst + size > al.end:
        raise MemoryAccessError(f"cp.reduce.async.bulk destination [{dst:#x}, +{size}) is not inside one global "
                                f"allocation ({w.launch.gmem.describe(dst)})\n    at {ins.where()}")
    esize = TYPE_SIZES[t]
    off = dst - al.base
    if al.dv is not None and w.launch.initcheck:        # the reduction reads the old values
        w.check_defined(al, np.array([off]), size, None, ins, "cp.reduce.async.bulk destination, async proxy")
    bulk_read(w, scta, word_set(words_of(np.arange(soff, soff + size, 4), 4)), ins, "cp.reduce.async.bulk source")
    if w.launch.ghb is not None:
        w.launch.ghb.async_reduce(w, al, np.arange(off, off + size, 4), 4, ins)
    dt = NP[t]
    gview = al.data[off:off + size].view(dt)            # a view: the write lands in the allocation
    group, key = w.bulk_commits, (w.cta.rank, w.wid)

    def read():
        vals = scta.smem[soff:soff + size].copy().view(dt)

        def write():
            gview[:] = combine(op, t, gview.copy(), vals)
        defer(w, write, ("bulkwrite", key, group))
    defer(w, read, ("bulkread", key, group))


__all__ = ["dec_cp_reduce", "bulk_reduce", "combine", "VALID"]
