"""f32 math for epilogues, built from PTX's fast instructions (no libdevice to link).

* :func:`exp2` -- ``ex2.approx.ftz.f32`` (PTX ISA: max relative error 2^-22 over the normal
  range); :func:`exp` scales by log2(e) first.
* :func:`tanh` -- ``1 - 2 / (exp(2x) + 1)``: absolute error ~1e-7, far tighter than
  ``tanh.approx.f32`` (relative 2^-11), and saturating to +-1 without NaN for large |x|.
* :func:`erf` -- Abramowitz & Stegun 7.1.26 (absolute error <= 1.5e-7), odd-symmetric.
* :func:`minimum` / :func:`maximum` -- ``arith.minimumf`` / ``maximumf`` (NaN-propagating,
  ``min.NaN.f32`` / ``max.NaN.f32``); :func:`fmin` / :func:`fmax` -- ``min.f32`` / ``max.f32``
  (a NaN operand yields the other one, PTX ISA 9.7.3 min/max): the running max of online softmax.
* :func:`rcp_approx` -- ``rcp.approx.ftz.f32`` (PTX ISA: max relative error 2^-23 over the normal
  range; subnormals flush to zero): the 1/rowsum of a softmax.
* :func:`fma` -- ``fma.rn.f32`` (one rounding): ``x * scale - max * scale`` in one instruction.

Each takes and returns an f32 :class:`~cutedsl.ir.Scalar`; the emulator runs the same PTX.
"""
from __future__ import annotations

import math as _pymath

from mlir import ir
from mlir.dialects import arith, llvm, math

from .values import Scalar, f32, select

LOG2E = 1.0 / _pymath.log(2.0)
#: Abramowitz & Stegun 7.1.26: erf(x) = 1 - t (a1 + t (a2 + ...)) exp(-x^2), t = 1 / (1 + p x)
_AS_P = 0.3275911
_AS_A = (0.254829592, -0.284496736, 1.421413741, -1.453152027, 1.061405429)


def _f32(x) -> Scalar:
    return x if isinstance(x, Scalar) else f32(x)


def exp2(x) -> Scalar:
    """``2^x`` by ``ex2.approx.ftz.f32``."""
    x = _f32(x)
    return Scalar(llvm.inline_asm(ir.F32Type.get(), [x], "ex2.approx.ftz.f32 $0, $1;", "=f,f"))


def exp(x) -> Scalar:
    """``e^x`` as ``2^(x log2 e)``."""
    return exp2(_f32(x) * LOG2E)


def tanh(x) -> Scalar:
    """``tanh(x) = 1 - 2 / (e^(2x) + 1)``: e^(2x) overflowing to inf gives 1, underflowing to 0
    gives -1."""
    return 1.0 - 2.0 / (exp(_f32(x) * 2.0) + 1.0)


def erf(x) -> Scalar:
    """Error function (Abramowitz & Stegun 7.1.26 on |x|, sign restored)."""
    x = _f32(x)
    ax = maximum(x, -x)        # |x| (llvm.intr.fabs is not legal in this lowering)
    t = 1.0 / (ax * _AS_P + 1.0)
    poly = f32(_AS_A[-1])
    for a in reversed(_AS_A[:-1]):
        poly = poly * t + a
    y = 1.0 - poly * t * exp(-(ax * ax))
    return select(x < 0.0, -y, y)


def minimum(a, b) -> Scalar:
    return Scalar(arith.minimumf(_f32(a), _f32(b)))


def maximum(a, b) -> Scalar:
    return Scalar(arith.maximumf(_f32(a), _f32(b)))


def fmin(a, b) -> Scalar:
    """``min.f32``: the smaller of two f32; NaN only when both are NaN."""
    return Scalar(arith.minnumf(_f32(a), _f32(b)))


def fmax(a, b) -> Scalar:
    """``max.f32``: the larger of two f32; NaN only when both are NaN."""
    return Scalar(arith.maxnumf(_f32(a), _f32(b)))


def rcp_approx(x) -> Scalar:
    """``1 / x`` by ``rcp.approx.ftz.f32`` (relative error <= 2^-23; 1/0 = +inf)."""
    x = _f32(x)
    return Scalar(llvm.inline_asm(ir.F32Type.get(), [x], "rcp.approx.ftz.f32 $0, $1;", "=f,f"))


def fma(a, b, c) -> Scalar:
    """``a * b + c`` rounded once (``fma.rn.f32``)."""
    return Scalar(math.fma(_f32(a), _f32(b), _f32(c)))


__all__ = ["exp2", "exp", "tanh", "erf", "minimum", "maximum", "fmin", "fmax", "rcp_approx", "fma", "LOG2E"]
