"""The accumulator of a tcgen05 MMA in registers (sm_100a): :class:`TmemFragment`, the columns
one ``tcgen05.ld`` brings from tensor memory, and :class:`TmemLayout`, the accumulator row and
column of each of its registers -- the Accumulator interface every epilogue and fused node reads
(PTX ISA "tcgen05 Data path layout organization"; CUTLASS's ``SM100_TMEM_LOAD_*`` copy traits).
"""
from __future__ import annotations

from ..ir._lazy import lazy
from .tcgen05 import HALF_LANES, MAX_LD_COLUMNS, QUARTER_LANES, QUARTERS, _ptr

ir = lazy("mlir.ir")
llvm, nvvm = lazy("mlir.dialects.llvm"), lazy("mlir.dialects.nvvm")
V = lazy("cutedsl.ir.values")


def quarter_row():
    """IR: the accumulator row a thread reads with ``tcgen05.ld.32x32b`` -- lane ``l`` of warp
    ``w`` reaches TMEM lane ``32 * (w % 4) + l`` (the lane-quarter rule)."""
    t = V.thread_idx()
    return (t // QUARTER_LANES) % QUARTERS * QUARTER_LANES + t % QUARTER_LANES


class TmemLayout:
    """Element coordinates of a :class:`TmemFragment`: lane ``l`` of warp ``w`` holds row
    ``32 * (w % 4) + l`` (:func:`quarter_row`), register ``i`` column ``col0 + i``; any four
    consecutive warps cover the 128 rows. With ``split``, a 64-row accumulator whose second
    ``split`` columns lie in other lanes: ``by="warp"`` (a CTA pair's M = 128, 64 rows per CTA,
    the second half in lanes 64..127): lane ``l`` of warp ``w`` holds row ``32 (w % 2) + l``,
    register ``i`` column ``col0 + split ((w % 4) // 2) + i``; ``by="lane"`` (one CTA's M = 64,
    rows 16q.. at lanes 32q.., loaded by ``tcgen05.ld.16x32bx2`` with half-split ``split``): row
    ``16 (w % 4) + l % 16``, column ``col0 + split (l // 16) + i``."""

    def __init__(self, cols: int, col0: int = 0, split: int = 0, by: str = "warp"):
        if by not in ("warp", "lane"):
            raise ValueError(f"TmemLayout by must be 'warp' or 'lane', got {by!r}")
        self.cols, self.col0, self.split, self.by = cols, col0, split, by
        self.m_blocks = 1

    @property
    def regs(self) -> int:
        return self.cols

    def thread_base(self, warpgroup_thread=None) -> tuple:
        if warpgroup_thread is not None or not self.split:
            return (quarter_row() if warpgroup_thread is None else warpgroup_thread), V.u32(self.col0)
        t = V.thread_idx()
        quarter, lane = (t // QUARTER_LANES) % QUARTERS, t % QUARTER_LANES
        if self.by == "lane":
            return quarter * HALF_LANES + lane % HALF_LANES, lane // HALF_LANES * self.split + self.col0
        return quarter % 2 * QUARTER_LANES + lane, quarter // 2 * self.split + self.col0

    @staticmethod
    def offset(b: int, i: int) -> tuple:
        return 0, i


class TmemFragment:
    """Accumulator columns ``col0 .. col0 + cols - 1`` in registers (f32 values), loaded by
    :meth:`load`; the Accumulator interface epilogues use (``layout``, ``m_blocks``, ``regs``,
    ``get``, ``lazy_map``)."""

    def __init__(self, values, col0: int, fn=None, split: int = 0, by: str = "warp"):
        self.values, self.col0, self._fn = list(values), col0, fn
        self.layout = TmemLayout(len(self.values), col0, split, by)

    @property
    def m_blocks(self) -> int:
        return 1

    @property
    def regs(self) -> int:
        return len(self.values)

    @classmethod
    def load(cls, taddr, col0: int, cols: int, split: int = 0, by: str = "warp") -> "TmemFragment":
        """``tcgen05.ld.sync.aligned.32x32b.x{cols}`` of columns ``col0..`` of the accumulator at
        TMEM address ``taddr`` (i32), each warp from its lane quarter, then ``tcgen05.wait::ld``.
        ``cols``: a power of two, 1..128. ``split`` / ``by``: the fragment of a 64-row
        accumulator (:class:`TmemLayout`); ``by="lane"`` loads ``tcgen05.ld.16x32bx2`` with
        half-split ``split`` (lanes 0..15 of the quarter, both column halves)."""
        if cols < 1 or cols > MAX_LD_COLUMNS or cols & (cols - 1):
            raise ValueError(f"tcgen05.ld 32x32b loads a power of two 1..{MAX_LD_COLUMNS} columns, got {cols}")
        quarter = (V.thread_idx() // QUARTER_LANES) % QUARTERS
        addr = taddr + (quarter * QUARTER_LANES << 16) + col0
        i32 = ir.IntegerType.get_signless(32)
        res = ir.VectorType.get([cols], i32) if cols > 1 else i32
        if by == "lane" and split:          # threads 16..31 read the same 16 lanes, ``split`` columns on
            v = nvvm.tcgen05_ld(res, ir.Attribute.parse("#nvvm.tcgen05_ldst_shape<shape_16x32bx2>"), _ptr(addr, 6),
                                offset=V.const(split, "i64"))
        else:
            v = nvvm.tcgen05_ld(res, ir.Attribute.parse("#nvvm.tcgen05_ldst_shape<shape_32x32b>"), _ptr(addr, 6))
        nvvm.tcgen05_wait(ir.Attribute.parse("#nvvm.tcgen05_wait<load>"))
        f32 = ir.F32Type.get()
        if cols == 1:
            vals = [V.Scalar(llvm.bitcast(f32, v))]
        else:
            vals = [V.Scalar(llvm.bitcast(f32, llvm.extractelement(v, V.i32(i)))) for i in range(cols)]
        return cls(vals, col0, split=split, by=by)

    def get(self, b: int, i: int):
        v = self.values[i]
        if self._fn is None:
            return v
        r0, c0 = self._base
        return self._fn(v, r0, c0 + i)

    def lazy_map(self, fn, base=None) -> "TmemFragment":
        """``fn(value, row, col)`` applied when an element is read (as ``Accumulator.lazy_map``)."""
        if self._fn is not None:              # compose with the mapping already applied
            inner, outer = self._fn, fn
            fn = lambda v, r, c: outer(inner(v, r, c), r, c)      # noqa: E731
        out = TmemFragment(self.values, self.col0, fn, self.layout.split, self.layout.by)
        out._base = base or self.layout.thread_base()
        return out


__all__ = ["TmemFragment", "TmemLayout", "quarter_row"]
