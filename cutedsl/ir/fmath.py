"""f32 math for epilogues, built from PTX's fast instructions (no libdevice to link).

* :func:`exp2` -- ``ex2.approx.ftz.f32`` (PTX ISA: max relative error 2^-22 over the normal
  range); :func:`exp` scales by log2(e) first.
* :func:`tanh` -- ``1 - 2 / (exp(2x) + 1)``: absolute error ~1e-7, far tighter than
  ``tanh.approx.f32`` (relative 2^-11), and saturating to +-1 without NaN for large |x|.
* :func:`tanh_approx` -- ``tanh.approx.f32`` itself (PTX ISA 9.7.3.22: maximum relative error
  2^-11 over the whole range; one MUFU instruction): FlashAttention-3's softcap.
* :func:`log2_approx` -- ``lg2.approx.ftz.f32`` (PTX ISA 9.7.3, lg2: maximum absolute error 2^-22 for
  inputs in [0.5, 2], relative elsewhere): the log-sum-exp of an attention row.
* :func:`erf` -- Abramowitz & Stegun 7.1.26 (absolute error <= 1.5e-7), odd-symmetric.
* :func:`minimum` / :func:`maximum` -- ``arith.minimumf`` / ``maximumf`` (NaN-propagating,
  ``min.NaN.f32`` / ``max.NaN.f32``); :func:`fmin` / :func:`fmax` -- ``min.f32`` / ``max.f32``
  (a NaN operand yields the other one, PTX ISA 9.7.3 min/max): the running max of online softmax.
* :func:`rcp_approx` -- ``rcp.approx.ftz.f32`` (PTX ISA: max relative error 2^-23 over the normal
  range; subnormals flush to zero): the 1/rowsum of a softmax.
* :func:`fma` -- ``fma.rn.f32`` (one rounding): ``x * scale - max * scale`` in one instruction.
* :func:`max3` -- ``max.f32 d, a, b, c`` (three inputs; PTX ISA 9.7.3 max, PTX 8.8, sm_100+; SASS
  FMNMX3); :func:`fma_x2` / :func:`add_x2` -- ``fma.rn.f32x2`` / ``add.rn.f32x2`` on two f32 pairs
  (PTX ISA 9.7.3 fma / add ``.f32x2``, PTX 8.6, sm_100+; SASS FFMA2 / FADD2: two lanes' worth of
  work per instruction, each lane rounded as its scalar form).

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


def tanh_approx(x) -> Scalar:
    """``tanh(x)`` by ``tanh.approx.f32`` (PTX ISA 9.7.3.22, sm_75+: relative error <= 2^-11;
    +-inf gives +-1)."""
    x = _f32(x)
    return Scalar(llvm.inline_asm(ir.F32Type.get(), [x], "tanh.approx.f32 $0, $1;", "=f,f"))


def log2_approx(x) -> Scalar:
    """``log2(x)`` by ``lg2.approx.ftz.f32`` (``log2(0) = -inf``, ``log2(+inf) = +inf``)."""
    x = _f32(x)
    return Scalar(llvm.inline_asm(ir.F32Type.get(), [x], "lg2.approx.ftz.f32 $0, $1;", "=f,f"))


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


def max3(a, b, c) -> Scalar:
    """``max.f32 d, a, b, c``: the largest of three f32 (NaN rules as :func:`fmax`; sm_100+)."""
    return Scalar(llvm.inline_asm(ir.F32Type.get(), [_f32(a), _f32(b), _f32(c)], "max.f32 $0, $1, $2, $3;",
                                  "=f,f,f,f"))


def _x2(op: str, pairs) -> tuple:
    """``op.rn.f32x2`` on f32 pairs ``pairs`` (each ``(lo, hi)``): the result pair. The pairs
    are packed into 64-bit registers with ``mov.b64 {lo, hi}`` (a register pair in SASS: free)."""
    f32t = ir.F32Type.get()
    regs = ", ".join(f"x{i}" for i in range(len(pairs)))
    packs = "".join(f"mov.b64 x{i}, {{${2 + 2 * i}, ${3 + 2 * i}}}; " for i in range(len(pairs)))
    asm = (f"{{ .reg .b64 d, {regs}; {packs}{op}.rn.f32x2 d, {regs}; mov.b64 {{$0, $1}}, d; }}")
    ops = [_f32(x) for pair in pairs for x in pair]
    st = llvm.inline_asm(ir.Type.parse("!llvm.struct<(f32, f32)>"), ops, asm, "=f,=f," + ",".join("f" * len(ops)))
    return Scalar(llvm.extractvalue(f32t, st, [0])), Scalar(llvm.extractvalue(f32t, st, [1]))


def fma_x2(a: tuple, b: tuple, c: tuple) -> tuple:
    """``(a0 b0 + c0, a1 b1 + c1)``, each rounded once, by one ``fma.rn.f32x2`` (sm_100+)."""
    return _x2("fma", (a, b, c))


def add_x2(a: tuple, b: tuple) -> tuple:
    """``(a0 + b0, a1 + b1)`` by one ``add.rn.f32x2`` (sm_100+)."""
    return _x2("add", (a, b))


__all__ = ["exp2", "exp", "tanh", "tanh_approx", "log2_approx", "erf", "minimum", "maximum", "fmin", "fmax",
           "rcp_approx", "fma", "max3", "fma_x2", "add_x2", "LOG2E"]
