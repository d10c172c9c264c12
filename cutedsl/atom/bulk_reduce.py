"""Bulk reduction atom: ``cp.reduce.async.bulk.global.shared::cta.bulk_group.add`` (PTX ISA
cp.reduce.async.bulk, 9.7.9.25.4.2 of the ISA 9.1 edition; sm_90).

One thread adds ``size`` bytes of shared memory element-wise into global memory through the async
proxy: FlashAttention-3/4's backward sends each dQ block (staged in shared memory) to an f32
accumulator with one such instruction instead of thousands of ``red.global.add``. Completion is the
bulk async-group: :func:`~cutedsl.atom.tma.bulk_commit_group` after it, then
:func:`~cutedsl.atom.tma.bulk_wait_group` with ``read=True`` before the shared source is rewritten,
``read=False`` before anyone reads the destination with ordinary loads. The source must have been
written through the generic proxy before a ``fence.proxy.async`` (:func:`~cutedsl.atom.sync.
fence_proxy_async`) that the issuing thread is ordered after. Each element's addition is a
``.relaxed.gpu`` atomic, so reductions from many CTAs into one array need no other ordering.

There is no MLIR NVVM op for the non-tensor form; it is emitted as inline PTX.
"""
from __future__ import annotations

from ..ir._lazy import lazy

V = lazy("cutedsl.ir.values")

#: element types of ``.add`` into global memory (PTX ISA 9.7.9.25.4.2), with the qualifier each needs
ADD_TYPES = {"f32": "f32", "f64": "f64", "f16": "noftz.f16", "bf16": "noftz.bf16", "u32": "u32", "s32": "s32",
             "u64": "u64"}
ALIGN = 16      #: bytes: both addresses and the size (PTX ISA 9.7.9.25.4.2)


def bulk_reduce_add(dst, src, size, dtype: str = "f32", predicate=None) -> None:
    """Issue ``cp.reduce.async.bulk.global.shared::cta.bulk_group.add.{dtype}``.

    ``dst``: an ``!llvm.ptr<1>`` (e.g. ``GlobalPtr.address(i)``), 16-byte aligned; ``src``: the
    shared-window byte address (IR i32/i64, 16-byte aligned; e.g. ``SmemTile.address()``);
    ``size``: bytes, a Python int multiple of 16 or an IR i32 the caller keeps so; ``dtype``: one
    of :data:`ADD_TYPES`; ``predicate`` (IR i1): issue only where it holds (a predicated
    instruction, no branch). Raises ``ValueError`` for a dtype the ISA has no ``.add`` for or a
    constant size that is not a positive multiple of 16."""
    from mlir.dialects import llvm
    if dtype not in ADD_TYPES:
        raise ValueError(f"bulk_reduce_add: dtype must be one of {sorted(ADD_TYPES)} (PTX ISA cp.reduce.async.bulk "
                         f".add into .global), got {dtype!r}")
    if isinstance(size, int) and (size <= 0 or size % ALIGN):
        raise ValueError(f"bulk_reduce_add: size must be a positive multiple of {ALIGN} bytes, got {size}; "
                         f"pad the staged array")
    instr = f"cp.reduce.async.bulk.global.shared::cta.bulk_group.add.{ADD_TYPES[dtype]} [$0], [$1], $2;"
    ops = [dst, V.i32(src), V.i32(size)]
    if predicate is None:
        llvm.inline_asm(None, ops, instr, "l,r,r", has_side_effects=True)
        return
    p = V.Scalar(predicate).to("i32", signed=False)
    llvm.inline_asm(None, ops + [p], "{\n\t.reg .pred p;\n\tsetp.ne.b32 p, $3, 0;\n\t@p " + instr + "\n\t}",
                    "l,r,r,r", has_side_effects=True)


__all__ = ["bulk_reduce_add", "ADD_TYPES", "ALIGN"]
