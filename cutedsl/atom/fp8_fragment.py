"""f32 accumulator -> 8-bit (e4m3/e5m2) register A fragment of ``wgmma .m64nNk32``.

The two layouts (PTX ISA 9.7.15.5.1.1, register fragments): in each 32-column step the f32
accumulator gives thread ``t`` (``q = t % 4``) columns ``8j + 2q + {0, 1}`` (j = 0..3) of rows
``r`` and ``r + 8``; the 8-bit A fragment wants four *consecutive* K values per register,
``4q .. 4q+3`` (registers 0, 1: rows r, r+8) and ``16 + 4q .. 16 + 4q+3`` (registers 2, 3).
Every thread rounds its pairs first (``cvt.rn.satfinite.e4m3x2.f32``: 16 bits per pair
``P_j``), then one of two mappings:

* ``"exact"`` -- A's column k is the accumulator's column k. Column ``4q + b`` lies in pair
  ``j = q // 2`` (or ``2 + q // 2`` for the upper 16) of lane ``2 (q % 2) + b // 2`` of the quad:
  thread q gathers the same pair index from the two lanes ``2 (q % 2)`` and ``2 (q % 2) + 1``.
  Each lane offers ``X = P0 | P2 << 16`` or ``Y = P1 | P3 << 16``; two ``shfl.sync.idx`` per row
  and step bring both (round one: even lanes offer X, odd Y; round two the other), and two
  ``prmt`` put the halves in place (selectors per lane, computed once). FlashAttention-3's
  ``permute_Cregs_fp8`` is the same exchange.
* ``"permuted"`` -- no data moves between lanes: register ``2g + h`` of thread q is
  ``P_{2g} | P_{2g+1} << 16`` of row half h, so A's column ``l`` of each 32-step is the
  accumulator's column :data:`K_PERMUTATION` ``[l]``. ``A P`` then equals ``A' P'`` when B's K rows
  are permuted the same way -- FlashAttention-3 writes V^T with that column order in shared
  memory, so ``O = P V`` costs no shuffle.
"""
from __future__ import annotations

from ..ir._lazy import lazy
from .cvt import FP8, pack_fp8x2

ir, llvm, arith = lazy("mlir.ir"), lazy("mlir.dialects.llvm"), lazy("mlir.dialects.arith")
V = lazy("cutedsl.ir.values")

STEP = 32               #: K values of one m64nNk32 step (32 bytes of 8-bit elements)
ORDERS = ("exact", "permuted")
#: accumulator column (within a 32-column step) held by A's column l in the "permuted" order:
#: ``16 (l // 16) + 2 ((l % 16) // 4) + 8 ((l % 4) // 2) + l % 2``
K_PERMUTATION = tuple(16 * (ll // 16) + 2 * ((ll % 16) // 4) + 8 * ((ll % 4) // 2) + ll % 2 for ll in range(STEP))


def _word(lo16, hi16):
    """One i32 of two i16: ``lo16`` in bits 0-15."""
    i32 = ir.IntegerType.get_signless(32)
    lo = arith.extui(i32, lo16)
    hi = arith.shli(arith.extui(i32, hi16), V.i32(16))
    return V.Scalar(arith.ori(lo, hi), signed=False)


def prmt(a, b, selector):
    """``prmt.b32 d, a, b, selector`` (PTX ISA 9.7.8.7, default mode): byte i of ``d`` is byte
    ``selector[4i+3:4i]`` (0..7) of the 8-byte ``{b, a}``. All operands i32."""
    i32 = ir.IntegerType.get_signless(32)
    return V.Scalar(llvm.inline_asm(i32, [a, b, selector], "prmt.b32 $0, $1, $2, $3;", "=r,r,r,r"), signed=False)


def _shfl_idx(v, lane):
    """``shfl.sync.idx.b32``: ``v`` of lane ``lane`` (i32, any lane of the warp; PTX ISA 9.7.8.6)."""
    from mlir.dialects import nvvm
    i32 = ir.IntegerType.get_signless(32)
    r = nvvm.shfl_sync(i32, V.const(-1, "i32"), v, lane, V.const(31, "i32"), ir.Attribute.parse("#nvvm<shfl_kind idx>"))
    return V.Scalar(r, signed=False)


class _QuadPlan:
    """The per-thread constants of the "exact" exchange: source lanes and ``prmt`` selectors."""

    def __init__(self):
        lane = V.lane_id()
        q = lane % 4
        base = lane - q
        low = q < 2                                     # threads 0, 1 of the quad take X, 2, 3 take Y
        odd = (q % 2).eq(1)
        two = 2 * (q % 2)
        # round one pulls from lane 2q (q < 2) or 2(q-2)+1; round two from the other lane of the pair
        self.src1 = base + V.select(low, 2 * q, two + 1)
        self.src2 = base + V.select(low, 2 * q + 1, two)
        # what a lane offers: X (bytes 0,1 of W01 and W23) or Y (bytes 2,3 of each)
        self.offer1 = V.select(odd, V.i32(0x7632), V.i32(0x5410))
        self.offer2 = V.select(odd, V.i32(0x5410), V.i32(0x7632))
        # round one brought the pair's even lane for q < 2, its odd lane for q >= 2
        self.lo = V.select(low, V.i32(0x5410), V.i32(0x1054))
        self.hi = V.select(low, V.i32(0x7632), V.i32(0x3276))


def step_registers(pairs, order: str, plan: _QuadPlan | None):
    """The 4 i32 A registers of one 32-column step from ``pairs[h][j]`` (i16 rounded pairs of
    row half h = 0, 1 and column group j = 0..3 of the step)."""
    regs = [None] * 4
    for h in range(2):
        w01, w23 = _word(pairs[h][0], pairs[h][1]), _word(pairs[h][2], pairs[h][3])
        if order == "permuted":
            regs[h], regs[2 + h] = w01, w23
            continue
        r1 = _shfl_idx(prmt(w01, w23, plan.offer1), plan.src1)
        r2 = _shfl_idx(prmt(w01, w23, plan.offer2), plan.src2)
        regs[h], regs[2 + h] = prmt(r1, r2, plan.lo), prmt(r1, r2, plan.hi)
    return regs


def accumulator_to_fp8(acc, dtype: str, order: str = "exact") -> list:
    """``regs[b][s]``: the 4 i32 A registers of m-block ``b`` and 32-column step ``s`` of the f32
    accumulator ``acc`` (N a multiple of 32) rounded to ``dtype`` (e4m3/e5m2, saturating) in
    ``order`` (see the module). ``ValueError`` for another dtype, order or N."""
    if dtype not in FP8:
        raise ValueError(f"fp8 A fragment: dtype must be one of {FP8}, got {dtype!r}")
    if order not in ORDERS:
        raise ValueError(f"fp8 A fragment: order must be one of {ORDERS}, got {order!r}")
    if acc.n % STEP:
        raise ValueError(f"fp8 A fragment: the accumulator's N = {acc.n} must be a multiple of {STEP}")
    plan = _QuadPlan() if order == "exact" else None
    out = []
    for b in range(acc.m_blocks):
        steps = []
        for s in range(acc.n // STEP):
            # register 4j + 2h + e of group j holds column 8j + 2q + e of row half h (PTX ISA D layout)
            pairs = [[pack_fp8x2(acc.get(b, 16 * s + 4 * j + 2 * h), acc.get(b, 16 * s + 4 * j + 2 * h + 1), dtype)
                      for j in range(4)] for h in range(2)]
            steps.append(step_registers(pairs, order, plan))
        out.append(steps)
    return out


__all__ = ["K_PERMUTATION", "ORDERS", "STEP", "accumulator_to_fp8", "prmt"]
