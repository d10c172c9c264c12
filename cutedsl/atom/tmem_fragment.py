"""The accumulator of a tcgen05 MMA in registers (sm_100a): :class:`TmemFragment`, the columns
one ``tcgen05.ld`` brings from tensor memory, and :class:`TmemLayout`, the accumulator row and
column of each of its registers -- the Accumulator interface every epilogue and fused node reads
(PTX ISA "tcgen05 Data path layout organization"; CUTLASS's ``SM100_TMEM_LOAD_*`` copy traits).
"""
from __future__ import annotations

from ..ir._lazy import lazy
from .tcgen05 import MAX_LD_COLUMNS, QUARTER_LANES, QUARTERS, _ptr

ir = lazy("mlir.ir")
llvm, nvvm = lazy("mlir.dialects.llvm"), lazy("mlir.dialects.nvvm")
vector = lazy("mlir.dialects.vector")
V = lazy("cutedsl.ir.values")

HALF_LANES = 16             #: the lanes of a quarter a "lane" accumulator fills


#: the accumulator layouts of one CTA (PTX ISA "Data path layout organization"): None -- 128
#: rows, row r at lane r; "warp" -- a CTA pair's M = 128 MMA, the CTA's 64 rows at lanes 0..63
#: for the first N / 2 columns and at lanes 64..127 for the rest (N / 2 columns wide); "lane" --
#: one CTA's M = 64 MMA, rows 16q..16q+15 at lanes 32q..32q+15 (N columns wide)
SPLITS = (None, "warp", "lane")
SPLIT_ROWS = 64             #: the rows per CTA of a "warp" or "lane" accumulator


def accumulator_split(m: int, cta_group: int = 1):
    """The :data:`SPLITS` layout of each CTA's accumulator of a ``tcgen05.mma.cta_group::G`` with
    M = ``m`` (G = ``cta_group``): 128 rows per CTA unsplit, 64 split across warps (a pair) or
    across lanes (one CTA)."""
    if m // cta_group != SPLIT_ROWS:
        return None
    return "warp" if cta_group == 2 else "lane"


def lane_columns(n: int, split=None) -> int:
    """Accumulator columns one thread walks of an ``n``-column tile: ``n``, or ``n / 2`` when the
    other half lies in other lanes (split)."""
    return n // 2 if split else n


def tmem_columns(n: int, split=None) -> int:
    """TMEM columns an ``n``-column accumulator takes: ``n / 2`` for a "warp" split, else ``n``."""
    return n // 2 if split == "warp" else n


def check_split(split, what: str = "split") -> None:
    """``ValueError`` naming ``what`` unless ``split`` is one of :data:`SPLITS`."""
    if split not in SPLITS:
        raise ValueError(f"{what} must be None, 'warp' or 'lane', got {split!r}")


def quarter_row():
    """IR: the accumulator row a thread reads with ``tcgen05.ld.32x32b`` -- lane ``l`` of warp
    ``w`` reaches TMEM lane ``32 * (w % 4) + l`` (the lane-quarter rule)."""
    t = V.thread_idx()
    return (t // QUARTER_LANES) % QUARTERS * QUARTER_LANES + t % QUARTER_LANES


def store_columns(taddr, col0: int, words, wait: bool = True) -> None:
    """``tcgen05.st.sync.aligned.32x32b.x{n}`` of ``words`` (n i32 or f32 values, a power of two 1..128)
    into columns ``col0 .. col0 + n - 1`` of the TMEM region at ``taddr`` (i32), each warp into
    its lane quarter (lane ``l`` of warp ``w``: TMEM lane ``32 (w % 4) + l``, register ``i`` at
    column ``col0 + i``), then (``wait``) ``tcgen05.wait::st`` -- the store must be complete
    before another thread (an MMA reading the columns) is told of it (PTX ISA 9.7.16.8.4
    tcgen05.st, 9.7.16.8.5 tcgen05.wait; rule ``tcgen05-st-without-wait``). Whole warps execute
    it (``.sync.aligned``). ``ValueError`` for another count."""
    n = len(words)
    if n < 1 or n > MAX_LD_COLUMNS or n & (n - 1):
        raise ValueError(f"tcgen05.st 32x32b stores a power of two 1..{MAX_LD_COLUMNS} columns, got {n}")
    quarter = (V.thread_idx() // QUARTER_LANES) % QUARTERS
    addr = taddr + (quarter * QUARTER_LANES << 16) + col0
    i32 = ir.IntegerType.get_signless(32)
    vals = [w if str(w.type) == "i32" else llvm.bitcast(i32, w) for w in words]     # f32 values: their bits
    val = vals[0] if n == 1 else vector.from_elements(ir.VectorType.get([n], i32), vals)
    nvvm.tcgen05_st(ir.Attribute.parse("#nvvm.tcgen05_ldst_shape<shape_32x32b>"), _ptr(addr, 6), val)
    if wait:
        nvvm.tcgen05_wait(ir.Attribute.parse("#nvvm.tcgen05_wait<store>"))


class TmemLayout:
    """Element coordinates of a :class:`TmemFragment`: lane ``l`` of warp ``w`` holds row
    ``32 * (w % 4) + l`` (:func:`quarter_row`), register ``i`` column ``col0 + i``; any four
    consecutive warps cover the 128 rows. A 64-row accumulator (``split``, :data:`SPLITS`) has
    its second ``half`` columns in other lanes: ``"warp"`` -- lane ``l`` of warp ``w`` holds row
    ``32 (w % 2) + l``, register ``i`` column ``col0 + half ((w % 4) // 2) + i``; ``"lane"``
    (loaded by ``tcgen05.ld.16x32bx2`` with half-split ``half``) -- row ``16 (w % 4) + l % 16``,
    column ``col0 + half (l // 16) + i``."""

    def __init__(self, cols: int, col0: int = 0, split=None, half: int = 0):
        check_split(split, "TmemLayout split")
        self.cols, self.col0, self.split, self.half = cols, col0, split, half
        self.m_blocks = 1

    @property
    def regs(self) -> int:
        return self.cols

    def thread_base(self, warpgroup_thread=None) -> tuple:
        if warpgroup_thread is not None or not self.split:
            return (quarter_row() if warpgroup_thread is None else warpgroup_thread), V.u32(self.col0)
        t = V.thread_idx()
        quarter, lane = (t // QUARTER_LANES) % QUARTERS, t % QUARTER_LANES
        if self.split == "lane":
            return quarter * HALF_LANES + lane % HALF_LANES, lane // HALF_LANES * self.half + self.col0
        return quarter % 2 * QUARTER_LANES + lane, quarter // 2 * self.half + self.col0

    @staticmethod
    def offset(b: int, i: int) -> tuple:
        return 0, i


class TmemFragment:
    """Accumulator columns ``col0 .. col0 + cols - 1`` in registers (f32 values), loaded by
    :meth:`load`; the Accumulator interface epilogues use (``layout``, ``m_blocks``, ``regs``,
    ``get``, ``lazy_map``)."""

    def __init__(self, values, col0: int, fn=None, split=None, half: int = 0):
        self.values, self.col0, self._fn = list(values), col0, fn
        self.layout = TmemLayout(len(self.values), col0, split, half)

    @property
    def m_blocks(self) -> int:
        return 1

    @property
    def regs(self) -> int:
        return len(self.values)

    @classmethod
    def load(cls, taddr, col0: int, cols: int, split=None, half: int = 0, wait: bool = True) -> "TmemFragment":
        """``tcgen05.ld.sync.aligned.32x32b.x{cols}`` of columns ``col0..`` of the accumulator at
        TMEM address ``taddr`` (i32), each warp from its lane quarter, then ``tcgen05.wait::ld``.
        ``cols``: a power of two, 1..128. ``split`` / ``half``: the fragment of a 64-row
        accumulator (:class:`TmemLayout`); ``"lane"`` loads ``tcgen05.ld.16x32bx2`` with
        half-split ``half`` (lanes 0..15 of the quarter, both column halves). ``wait`` False: no
        ``wait::ld`` (the caller waits once after several loads, before any value is used)."""
        if cols < 1 or cols > MAX_LD_COLUMNS or cols & (cols - 1):
            raise ValueError(f"tcgen05.ld 32x32b loads a power of two 1..{MAX_LD_COLUMNS} columns, got {cols}")
        quarter = (V.thread_idx() // QUARTER_LANES) % QUARTERS
        addr = taddr + (quarter * QUARTER_LANES << 16) + col0
        i32 = ir.IntegerType.get_signless(32)
        res = ir.VectorType.get([cols], i32) if cols > 1 else i32
        if split == "lane":                 # threads 16..31 read the same 16 lanes, ``half`` columns on
            v = nvvm.tcgen05_ld(res, ir.Attribute.parse("#nvvm.tcgen05_ldst_shape<shape_16x32bx2>"), _ptr(addr, 6),
                                offset=V.const(half, "i64"))
        else:
            v = nvvm.tcgen05_ld(res, ir.Attribute.parse("#nvvm.tcgen05_ldst_shape<shape_32x32b>"), _ptr(addr, 6))
        if wait:
            nvvm.tcgen05_wait(ir.Attribute.parse("#nvvm.tcgen05_wait<load>"))
        f32 = ir.F32Type.get()
        if cols == 1:
            vals = [V.Scalar(llvm.bitcast(f32, v))]
        else:
            vals = [V.Scalar(llvm.bitcast(f32, llvm.extractelement(v, V.i32(i)))) for i in range(cols)]
        return cls(vals, col0, split=split, half=half)

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
        out = TmemFragment(self.values, self.col0, fn, self.layout.split, self.layout.half)
        out._base = base or self.layout.thread_base()
        return out


__all__ = ["TmemFragment", "store_columns", "TmemLayout", "quarter_row", "SPLITS", "SPLIT_ROWS", "accumulator_split", "lane_columns",
           "tmem_columns", "check_split"]
