"""``exp2`` on the FMA pipes (FlashAttention-4's software exponential): a Cody-Waite range reduction
and a degree-3 polynomial, evaluated two lanes at a time with ``.f32x2`` instructions, so that a
share of a softmax row's exponentials leaves the MUFU unit (16 results per clock per SM on
sm_100a) for the FMA pipes (128 per clock).

For one f32 ``x`` (PTX ISA 9.7.3 ``max``, ``add``/``fma`` ``.f32x2``; 9.7.1 ``mad.lo``):

1. ``x = max(x, -127)`` -- below it the result is below f32's normal range anyway;
2. ``t = x + 1.5 * 2^23`` (``add.rn``: the ulp at ``1.5 * 2^23`` is 1, so ``t`` holds
   ``n = round(x)`` exactly, and ``n`` sits in the low bits of ``t``'s encoding),
   ``n = t - 1.5 * 2^23`` (exact), ``f = x - n`` in ``[-1/2, 1/2]`` (one ``fma``, exact);
3. ``p = 1 + f (c1 + f (c2 + f c3))`` ~ ``2^f`` (three ``fma``; ``p(0) = 1`` exactly);
4. ``bits(2^x) = bits(p) + bits(t) * 2^23`` (one ``mad.lo.s32``: the shift moves ``n`` into the
   exponent field; ``bits(1.5 * 2^23) << 23`` is 0 modulo 2^32).

``x = -127`` (hence ``-inf``) gives ``n = -127, f = 0, p = 1``: the bits of 1.0 minus ``127 << 23`` are
``+0.0`` -- a masked score's P is exactly 0, as ``ex2.approx.ftz`` gives. Between -127 and -126 the
result is a subnormal encoding (< 2^-126; harmless: the row sum it joins is >= 1).

**Coefficients** (:func:`coefficients`): derived here, not copied -- the minimax of the *relative*
error ``p(f) / 2^f - 1`` over ``[-1/2, 1/2]`` with ``c0 = 1`` fixed, by Lawson's algorithm
(iteratively reweighted least squares on 2001 Chebyshev-spaced points, numpy ``lstsq``, 200
rounds), rounded to f32. **Accuracy**: max relative error 1.01e-4 (2^-13.3) against float64
``2^x`` over ``[-126, 16]`` for the polynomial in exact arithmetic; the f32 evaluation adds at most
a few ulp (``tests/ir/test_fexp2.py`` measures the emulated PTX: below 1.1e-4). A bf16 / f16 P is
rounded to 2^-9 / 2^-12 relative anyway, so O moves by far less than its bf16 tolerance
(docs/measurements.md).
"""
from __future__ import annotations

import functools

from mlir import ir
from mlir.dialects import llvm

from .fmath import _f32, add_x2, fma_x2, fmax
from .values import Scalar

DEGREE = 3
MAGIC = 12582912.0            #: 1.5 * 2^23: adding it rounds an f32 of magnitude < 2^22 to an integer
LOW = -127.0                  #: inputs are clamped here (2^-127: the result's exponent field is 0)


@functools.cache
def coefficients(degree: int = DEGREE) -> tuple:
    """``(c1, ..., c_degree)`` of ``p(f) = 1 + f (c1 + f (c2 + ...))`` minimising the maximum
    relative error against ``2^f`` on ``[-1/2, 1/2]`` (see the module docstring), as Python floats
    rounded to f32; and nothing else is stored: the derivation runs once per process."""
    import numpy as np
    f = np.cos(np.linspace(0.0, np.pi, 2001)) * 0.5
    y = np.exp2(f)
    a = np.stack([f ** k for k in range(1, degree + 1)], 1) / y[:, None]    # p / 2^f - 1 = a c - b
    b = 1.0 - 1.0 / y
    w = np.full(f.size, 1.0 / f.size)
    for _ in range(200):                      # Lawson: weights grow where the error is largest
        sw = np.sqrt(w)
        c = np.linalg.lstsq(a * sw[:, None], b * sw, rcond=None)[0]
        w = w * np.abs(a @ c - b)
        w /= w.sum()
    return tuple(float(np.float32(x)) for x in c)


def _scale_bits(t, p) -> Scalar:
    """``bits(p) + bits(t) * 2^23`` as an f32 (``mad.lo.s32``)."""
    asm = "{ .reg .b32 a, b; mov.b32 a, $1; mov.b32 b, $2; mad.lo.s32 a, a, 8388608, b; mov.b32 $0, a; }"
    return Scalar(llvm.inline_asm(ir.F32Type.get(), [t, p], asm, "=f,f,f"))


def exp2_poly_x2(pair: tuple) -> tuple:
    """``(2^x0, 2^x1)`` for an f32 pair by the polynomial (module docstring): 2 ``max``, 2
    ``add.f32x2``, 4 ``fma.f32x2`` and 2 ``mad.lo`` (SASS FMNMX, FADD2, FFMA2, IMAD) -- no MUFU."""
    c = coefficients()
    x = tuple(fmax(v, LOW) for v in pair)
    t = add_x2(x, (_f32(MAGIC), _f32(MAGIC)))
    n = add_x2(t, (_f32(-MAGIC), _f32(-MAGIC)))
    f = fma_x2(n, (_f32(-1.0), _f32(-1.0)), x)
    q = (_f32(c[-1]), _f32(c[-1]))
    for ck in reversed((1.0,) + c[:-1]):      # Horner: c2 + f c3, c1 + f (..), 1 + f (..)
        q = fma_x2(f, q, (_f32(ck), _f32(ck)))
    return tuple(_scale_bits(t[i], q[i]) for i in range(2))


__all__ = ["exp2_poly_x2", "coefficients", "DEGREE", "MAGIC", "LOW"]
