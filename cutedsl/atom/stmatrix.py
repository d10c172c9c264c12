"""stmatrix / ldmatrix atoms: warp-collective store and load of 8x8 matrices of 16-bit elements
to / from shared memory (PTX ``stmatrix.sync.aligned.m8n8.x{1,2,4}[.trans].shared.b16``, sm_90, and
``ldmatrix.sync.aligned.m8n8.x{1,2,4}[.trans].shared.b16``, sm_75+; PTX ISA "Warp-level matrix store instruction:
stmatrix" / "Warp-level matrix load instruction: ldmatrix").

Fragment (PTX ISA "Warp-level matrix store instruction: stmatrix"): for matrix ``k`` of the
``x{n}`` instruction, lane ``l`` holds register ``k`` = two packed 16-bit elements, row
``l // 4``, columns ``2 * (l % 4)`` and ``+1`` — exactly the pair of adjacent accumulator
registers ``(2i, 2i+1)`` of a WGMMA D fragment. Lane ``l`` supplies the shared address of
row ``l % 8`` of matrix ``l // 8`` (lanes ``8n..31`` are ignored for ``x{n<4}``); each row is
16 contiguous bytes, 16-byte aligned. ``.trans`` stores each matrix transposed (column-major
output).

So one ``x4`` stores a 16 x 16 block of a warp's accumulator rows: matrices
``(rows 0-7, cols 0-7), (rows 8-15, cols 0-7), (rows 0-7, cols 8-15), (rows 8-15, cols 8-15)``
from registers ``8j .. 8j+7`` of column group ``j`` (see :func:`accumulator_x4_rows`).
"""
from __future__ import annotations

from ..ir._lazy import lazy

ir = lazy("mlir.ir")
arith, llvm, nvvm, vector = (lazy("mlir.dialects.arith"), lazy("mlir.dialects.llvm"),
                             lazy("mlir.dialects.nvvm"), lazy("mlir.dialects.vector"))
V = lazy("cutedsl.ir.values")

PACKED = ("f16", "bf16")


def pack_b16x2(lo, hi, dtype: str):
    """Round two f32 values to ``dtype`` (f16 or bf16, round to nearest even) and pack them
    into one i32, ``lo`` in bits 0-15 (``cvt.rn.{f16x2,bf16x2}.f32``)."""
    if dtype not in PACKED:
        raise ValueError(f"stmatrix stores 16-bit elements: dtype must be f16 or bf16, got {dtype!r}")
    f32, t = V.mlir_type("f32"), V.mlir_type(dtype)
    v = vector.from_elements(ir.VectorType.get([2], f32), [lo, hi])
    h = arith.truncf(ir.VectorType.get([2], t), v)
    return V.Scalar(llvm.bitcast(ir.IntegerType.get_signless(32), h))


def stmatrix(address, regs, trans: bool = False) -> None:
    """``stmatrix.sync.aligned.m8n8.x{len(regs)}[.trans].shared.b16 [address], {regs}``.

    ``address``: this lane's row address, an i32/i64 shared-window byte address (16-byte
    aligned) or an ``!llvm.ptr<3>``; ``regs``: 1, 2 or 4 i32 values (packed pairs, see
    :func:`pack_b16x2`). All 32 lanes of the warp execute it (``.sync.aligned``).
    Raises ``ValueError`` for another register count."""
    regs = list(regs)
    if len(regs) not in (1, 2, 4):
        raise ValueError(f"stmatrix stores 1, 2 or 4 matrices, got {len(regs)} registers")
    if not str(address.type).startswith("!llvm.ptr"):
        address = llvm.inttoptr(ir.Type.parse("!llvm.ptr<3>"), V.i32(address))
    layout = ir.Attribute.parse("#nvvm.mma_layout<%s>" % ("col" if trans else "row"))
    shape = ir.Attribute.parse("#nvvm.ld_st_matrix_shape<m = 8, n = 8>")
    elt = ir.Attribute.parse("#nvvm.ld_st_matrix_elt_type<b16>")
    nvvm.stmatrix(address, regs, layout, shape, elt)


def ldmatrix(address, count: int = 4, trans: bool = False) -> list:
    """``ldmatrix.sync.aligned.m8n8.x{count}[.trans].shared.b16``: ``count`` (1, 2, 4) i32 values.

    The mirror of :func:`stmatrix`: lane ``l`` supplies ``address`` (i32/i64 shared-window byte
    address, 16-byte aligned) of row ``l % 8`` of matrix ``l // 8``, and receives register ``k``
    = matrix ``k``'s row ``l // 4``, 16-bit columns ``2 (l % 4)``, ``+1``; with ``trans`` it
    receives column ``l // 4``, rows ``2 (l % 4)`` (bits 0-15) and ``+1`` (bits 16-31) instead.
    The elements are only bits: 8-bit data moves as byte pairs. All 32 lanes execute it.
    Raises ``ValueError`` for another count."""
    if count not in (1, 2, 4):
        raise ValueError(f"ldmatrix loads 1, 2 or 4 matrices, got {count!r}")
    if not str(address.type).startswith("!llvm.ptr"):
        address = llvm.inttoptr(ir.Type.parse("!llvm.ptr<3>"), V.i32(address))
    i32 = ir.IntegerType.get_signless(32)
    layout = ir.Attribute.parse("#nvvm.mma_layout<%s>" % ("col" if trans else "row"))
    shape = ir.Attribute.parse("#nvvm.ld_st_matrix_shape<m = 8, n = 8>")
    elt = ir.Attribute.parse("#nvvm.ld_st_matrix_elt_type<b16>")
    if count == 1:
        return [V.Scalar(nvvm.ldmatrix(i32, address, 1, layout, shape, elt), signed=False)]
    res = nvvm.ldmatrix(llvm.StructType.get_literal([i32] * count), address, count, layout, shape, elt)
    return [V.Scalar(llvm.extractvalue(i32, res, [k]), signed=False) for k in range(count)]


def accumulator_x4_rows(lane, trans: bool = False) -> tuple:
    """For an ``x4`` store of a 16 x 16 accumulator block: ``(row, col)`` offsets (IR i32,
    within the destination block) of the row this ``lane`` (IR i32, 0..31) addresses. Matrix
    ``q = lane // 8`` holds accumulator rows ``8 * (q % 2) ..`` and columns ``8 * (q // 2) ..``;
    row-major it lands there, with ``trans`` (the block stored transposed, i.e. column-major)
    at rows ``8 * (q // 2)`` and columns ``8 * (q % 2)``; the lane addresses row ``lane % 8``
    of it."""
    q = lane // 8
    r, c = (q // 2, q % 2) if trans else (q % 2, q // 2)
    return r * 8 + lane % 8, c * 8


__all__ = ["pack_b16x2", "stmatrix", "ldmatrix", "accumulator_x4_rows", "PACKED"]
