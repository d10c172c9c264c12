"""Conversions to 8-bit floats (PTX ``cvt.rn.satfinite.{e4m3x2,e5m2x2}.f32``).

The PTX ISA converts f32 to fp8 in pairs: ``cvt.rn.satfinite.e4m3x2.f32 d, a, b`` rounds to
nearest even, clamps finite values past the largest normal to +-max (``satfinite``: e4m3
has no infinity, so without it an overflow would be NaN) and packs ``a`` into the upper byte
of the 16-bit ``d``, ``b`` into the lower one. The lower byte is the element at the lower
address (little-endian), so :func:`pack_fp8x2` takes ``(lo, hi)`` in address order.
"""
from __future__ import annotations

from ..ir._lazy import lazy

ir, llvm, arith = lazy("mlir.ir"), lazy("mlir.dialects.llvm"), lazy("mlir.dialects.arith")
V = lazy("cutedsl.ir.values")

FP8 = ("e4m3", "e5m2")


def pack_fp8x2(lo, hi, dtype: str):
    """Round two f32 values to ``dtype`` (e4m3 or e5m2, saturating) and pack them into one
    i16, ``lo`` in bits 0-7. ``ValueError`` for another dtype."""
    if dtype not in FP8:
        raise ValueError(f"fp8 conversion: dtype must be e4m3 or e5m2, got {dtype!r}")
    i16 = ir.IntegerType.get_signless(16)
    return V.Scalar(llvm.inline_asm(i16, [hi, lo], f"cvt.rn.satfinite.{dtype}x2.f32 $0, $1, $2;", "=h,f,f"))


def to_fp8_bits(value, dtype: str):
    """One f32 ``value`` rounded to ``dtype`` (saturating) as an i8 bit pattern."""
    zero = V.f32(0.0)
    return V.Scalar(arith.trunci(ir.IntegerType.get_signless(8), pack_fp8x2(value, zero, dtype)))


__all__ = ["FP8", "pack_fp8x2", "to_fp8_bits"]
