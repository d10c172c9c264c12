"""WGMMA operand harnesses: put a test's A / B tiles into shared memory the way a mainloop does
(TMA into 128-byte-swizzled buffers) and move accumulator fragments between registers and
global memory, so one MMA-level atom (``WarpgroupMMA``, ``stmatrix``, fragment conversions) can be
tested alone against numpy.

Layouts follow the MMA atom's traits (``cutedsl.atom.mma_traits``: K tile = swizzle bytes /
element bytes, the MN box of an MN-major operand) and the PTX ISA's wgmma shared-memory matrix
layouts; the accumulator fragment is the D register fragment of PTX ISA 9.7.15.5.1 ("Matrix
fragments for wgmma", CUTLASS's SM90 64xN C layout). Every function here emits IR inside a ``build_kernel`` body except
:func:`operand_buffer`, which declares a buffer in the plan before the build.
"""
from __future__ import annotations

from ..errors import ArgumentError


def operand_buffer(plan, name: str, rows: int, dtype: str, major: str, k_tiles: int = 1):
    """Declare in ``plan`` the shared buffer ``name`` of a WGMMA operand: ``rows`` (M or N)
    rows, ``k_tiles`` stages of one K tile each, 128-byte swizzled as a TMA box writes it.
    ``major``: ``"K"`` (global operand ``(rows, K)`` row-major) or ``"MN"`` (global ``(K, rows)``;
    ``rows`` a multiple of the traits' MN box). Returns the ``TensorMapSpec`` of one TMA box
    (for ``TmaCopy`` and ``Emulator.tensor_map``). Raises ``ArgumentError`` for another
    ``major``, ``LayoutError`` / ``ConfigError`` from the planner or the traits."""
    from ..atom.mma_traits import mma_traits
    from ..compiler import TensorMapSpec
    if major not in ("K", "MN"):
        raise ArgumentError(f"major must be 'K' or 'MN', got {major!r}")
    t = mma_traits(dtype)
    shape = ((rows // t.mn_box) * t.k_tile, t.mn_box) if major == "MN" else (rows, t.k_tile)
    plan.buffer(name, shape, dtype, stages=k_tiles, swizzle=t.swizzle, major=major)
    box = (t.k_tile, t.mn_box) if major == "MN" else (rows, t.k_tile)
    return TensorMapSpec(name, dtype, box, swizzle=t.swizzle)


def load_operands(smem, loads):
    """Thread 0 TMA-loads every K tile of each operand and every thread waits for them.

    ``loads``: ``(tma, name, rows, major, k_tiles)`` per operand -- the ``TmaCopy`` of its
    map, the buffer declared by :func:`operand_buffer` with the same ``name`` / ``rows`` /
    ``major`` / ``k_tiles``. One mbarrier (group ``"bar"``, the plan needs
    ``plan.barriers("bar", 1)``) expects all the bytes as its tx-count (PTX ISA, mbarrier
    expect-tx operation); the wait is on phase 0, so call it once per kernel."""
    from mlir.dialects import gpu
    from ..atom import MBarriers
    from ..atom.mma_traits import mma_traits
    from ..ir import If, thread_idx
    leader = thread_idx().eq(0)
    bar = MBarriers(smem.barriers("bar"), 1)
    bar.init(0, 1, predicate=leader)
    bar.fence_init()
    gpu.barrier()
    with If(leader):
        total = sum(tma.box_bytes * (rows // mma_traits(tma.spec.dtype).mn_box if major == "MN" else 1) * kts
                    for tma, _n, rows, major, kts in loads)
        bar.arrive_expect_tx(0, total)
        for tma, name, rows, major, kts in loads:
            t = mma_traits(tma.spec.dtype)
            for kt in range(kts):
                if major == "MN":             # one box per MN box of rows, side by side in the stage
                    for j in range(rows // t.mn_box):
                        dst = smem[name].tile(kt, shape=tma.spec.box, byte_offset=j * tma.box_bytes)
                        tma.load(dst, bar, 0, (kt * t.k_tile, j * t.mn_box))
                else:
                    tma.load(smem[name].tile(kt), bar, 0, (0, kt * t.k_tile))
    bar.wait(0, 0)


def store_accumulator(acc, ptr, ld: int):
    """Store every element of the f32 accumulator fragment ``acc`` (``Accumulator``) to
    ``ptr[row * ld + col]`` (``ptr``: a ``GlobalPtr`` of f32, ``ld``: row pitch in elements)."""
    from .. import ir as cir
    r0, c0 = acc.thread_coords()
    for b in range(acc.m_blocks):
        for i in range(acc.regs):
            dr, dc = acc.reg_offset(b, i)
            ptr.store(cir.i64((r0 + dr) * ld + c0 + dc), acc.get(b, i))


def accumulator_from(ptr, mma, ld: int):
    """An accumulator fragment of ``mma`` (``WarpgroupMMA``) holding ``ptr[row * ld + col]``
    (f32, ``ld`` elements per row) at each of its elements: the inverse of
    :func:`store_accumulator`, to feed a known fragment to the atom under test."""
    from .. import ir as cir
    acc = mma.zero()
    return acc.map(lambda _v, r, c: ptr.load(cir.i64(r * ld + c)))
