"""Row reductions of a WGMMA accumulator fragment: the per-row max and sum of a softmax held in
registers (FlashAttention's online softmax over S = Q K^T).

In the m64nNk* accumulator fragment (PTX ISA 9.7.15.5.1, "Matrix fragments for wgmma", D
matrix) thread ``t`` holds, per 64-row block, elements of exactly two rows: ``row0 = 16*(t//32) +
(t%32)//4`` (registers ``i`` with ``(i//2) % 2 == 0``) and ``row0 + 8`` (the others), in the
columns ``8*(i//4) + 2*(t%4) + i%2``. The 4 lanes of a quad (``t // 4`` equal) share both rows and
hold their remaining columns, so a row reduction is a reduction inside the thread followed by a
butterfly over lane masks 1 and 2 (``shfl.sync.bfly``, PTX ISA 9.7.8.6) -- the pattern of
FlashAttention-2/3's ``Allreduce<4>``. No shared memory and no barrier.

Values come back as ``rows[b][h]``: block ``b`` (64 rows each), half ``h`` (0: row0, 1: row0 + 8),
the same in all four lanes of the quad.
"""
from __future__ import annotations

from ..ir._lazy import lazy
from .wgmma import FRAG_COLS, FRAG_PAIR, FRAG_QUAD, Accumulator

V = lazy("cutedsl.ir.values")
F = lazy("cutedsl.ir.fmath")
llvm = lazy("mlir.dialects.llvm")

ROW_HALVES = 2      #: rows per thread per 64-row block (row0 and row0 + 8)


def row_half(i: int) -> int:
    """Which of the thread's two rows register ``i`` of a block belongs to (0 or 1)."""
    return (i // FRAG_PAIR) % ROW_HALVES


def row_position(i: int) -> int:
    """Position of register ``i`` among the thread's registers of its row, in column order
    (0 .. regs/2 - 1): position ``p`` holds column ``FRAG_COLS * (p // 2) + p % 2`` past the
    thread's base column (the pairs ``2*(t%4) + {0, 1}`` of every 8-column group)."""
    return FRAG_PAIR * (i // (ROW_HALVES * FRAG_PAIR)) + i % FRAG_PAIR


def row_columns_below(limit):
    """IR i32: how many of the thread's columns of one row lie below ``limit`` (an IR i32
    column relative to the thread's base column; any sign) -- positions ``0 .. n-1`` of
    :func:`row_position` are exactly those, since the columns increase with the position:
    ``FRAG_PAIR * floor(limit / FRAG_COLS) + min(limit mod FRAG_COLS, FRAG_PAIR)``, negative
    (to be clamped by the caller) for a limit below the first column. Four integer
    instructions, once per row, instead of a compare per element (FlashAttention's
    ``mask_r2p`` idea)."""
    lim = V.i32(limit)
    group = lim >> (FRAG_COLS.bit_length() - 1)            # arithmetic shift: floor division
    rest = lim & (FRAG_COLS - 1)
    return group * FRAG_PAIR + V.select(rest < FRAG_PAIR, rest, V.i32(FRAG_PAIR))


def _tree(vals, combine):
    # pairwise: independent operations the scheduler can overlap, log2(n) deep
    while len(vals) > 1:
        vals = [combine(vals[k], vals[k + 1]) if k + 1 < len(vals) else vals[k] for k in range(0, len(vals), 2)]
    return vals[0]


def quad_allreduce(v, combine):
    """``combine`` of ``v`` (f32) over the 4 lanes of this lane's quad; the result in all four."""
    m = 1
    while m < FRAG_QUAD:
        v = combine(v, V.shfl_xor(v, m))
        m *= 2
    return v


def reduce_rows(acc: Accumulator, combine) -> list:
    """``rows[b][h]``: ``combine`` (an associative, commutative f32 x f32 -> f32 IR function,
    e.g. :func:`~cutedsl.ir.fmath.fmax`) over every column of the row, for each of the thread's
    rows (see the module docstring). All 128 threads of the warpgroup must call it together
    (warp shuffles)."""
    out = []
    for b in range(acc.m_blocks):
        halves = []
        for h in range(ROW_HALVES):
            mine = [acc.get(b, i) for i in range(acc.regs) if row_half(i) == h]
            halves.append(quad_allreduce(_tree(mine, combine), combine))
        out.append(halves)
    return out


def row_max(acc: Accumulator) -> list:
    """Per-row maximum (``max.f32``; a NaN element is ignored): ``rows[b][h]``."""
    return reduce_rows(acc, F.fmax)


def row_sum(acc: Accumulator) -> list:
    """Per-row sum (f32 ``add``, pairwise within the thread, then over the quad): ``rows[b][h]``."""
    return reduce_rows(acc, lambda a, b: a + b)


def map_rows(acc: Accumulator, fn, rows) -> Accumulator:
    """New accumulator with ``fn(value, row_value)`` applied to every element, ``row_value``
    being ``rows[b][h]`` of the element's row (e.g. ``exp2((x - max) * scale)``, or a
    ``1 / sum`` rescale)."""
    out = []
    for b, s in enumerate(acc.structs):
        for i in range(acc.regs):
            s = llvm.insertvalue(s, fn(acc.get(b, i), rows[b][row_half(i)]), [i])
        out.append(s)
    return Accumulator(out, acc.n)


__all__ = ["ROW_HALVES", "row_half", "row_position", "row_columns_below", "quad_allreduce", "reduce_rows", "row_max", "row_sum", "map_rows"]
