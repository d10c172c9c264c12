"""Floating-point helpers with PTX rounding semantics (numpy + ml_dtypes, no ``np.fma``).

* :func:`f64_to` rounds float64 values to f32/f16/bf16/fp8 with a PTX rounding mode
  (``rn`` nearest-even, ``rz``, ``rm``, ``rp``) without double rounding: f64 -> f32 goes
  through round-to-odd first when the final format is narrower (Boldo & Melquiond).
* :func:`fma_f32` is a correctly rounded single-precision fused multiply-add: the product
  of two f32 is exact in f64, the sum's rounding error comes from TwoSum, and the f64 sum
  is made round-to-odd before the final rounding.
* :func:`ftz` flushes subnormals to signed zero.
"""
from __future__ import annotations

import ml_dtypes
import numpy as np

F16 = np.dtype(np.float16)
BF16 = np.dtype(ml_dtypes.bfloat16)
F32 = np.dtype(np.float32)
F64 = np.dtype(np.float64)
E4M3 = np.dtype(ml_dtypes.float8_e4m3fn)
E5M2 = np.dtype(ml_dtypes.float8_e5m2)
TINY = {F32: np.finfo(np.float32).tiny, F64: np.finfo(np.float64).tiny,
        F16: np.float16(6.103515625e-05), BF16: np.float32(1.1754943508222875e-38)}
MAXF = {F16: 65504.0, BF16: float(ml_dtypes.finfo(ml_dtypes.bfloat16).max), E4M3: 448.0,
        E5M2: 57344.0, F32: float(np.finfo(np.float32).max)}


def two_sum(a, b):
    """Return ``(s, e)`` with ``s = fl(a + b)`` and ``a + b = s + e`` exactly (float64)."""
    s = a + b
    bb = s - a
    e = (a - (s - bb)) + (b - bb)
    return s, e


def round_odd_f64(s, e):
    """Make ``s`` (float64) round-to-odd with respect to the exact value ``s + e``."""
    s = np.asarray(s, F64)
    e = np.asarray(e, F64)
    bits = s.view(np.int64)
    fix = (e != 0) & ((bits & 1) == 0) & np.isfinite(s)
    if not np.any(fix):
        return s
    step = np.where((e > 0) == (s > 0), 1, -1).astype(np.int64)
    return np.where(fix, (bits + step).view(F64), s)


def round_odd_f32(x):
    """float64 -> float32 with round-to-odd (exact results unchanged)."""
    x = np.asarray(x, F64)
    with np.errstate(over="ignore", invalid="ignore"):
        r = x.astype(F32)
    inexact = (r.astype(F64) != x) & np.isfinite(x)
    if not np.any(inexact):
        return r
    bits = r.view(np.int32)
    fix = inexact & ((bits & 1) == 0)
    up = np.abs(x) > np.abs(r.astype(F64))
    nb = np.where(up, bits + 1, bits - 1).astype(np.int32)
    # r == 0 with tiny x: move away from zero with the sign of x
    z = fix & (r == 0)
    if np.any(z):
        nb = np.where(z, np.where(x > 0, 1, np.int32(-2147483647)), nb).astype(np.int32)
    return np.where(fix, nb.view(F32), r)


def _directed(r, x, mode, dt):
    """Adjust RN result ``r`` (dtype dt) of exact value ``x`` (float64) for rz/rm/rp."""
    rr = r.astype(F64)
    if mode == "rz":
        bad = np.abs(rr) > np.abs(x)
        target = np.zeros_like(r)
    elif mode == "rm":
        bad = rr > x
        target = np.full_like(r, -np.inf)
    elif mode == "rp":
        bad = rr < x
        target = np.full_like(r, np.inf)
    else:
        raise ValueError(mode)
    bad &= ~np.isnan(x)
    if not np.any(bad):
        return r
    return np.where(bad, np.nextafter(r, target), r).astype(dt)


def f64_to(x, dt, mode="rn", err=None, satfinite=False):
    """Round float64 ``x`` (+ exact error term ``err``) to dtype ``dt`` with PTX mode."""
    dt = np.dtype(dt)
    if (mode == "rn" and err is None and not satfinite and (dt == F16 or dt == BF16)
            and isinstance(x, np.ndarray) and x.dtype == F32):
        # f32 in: the f64 value is exact, round-to-odd leaves it alone, and numpy / ml_dtypes
        # round f32 -> f16 / bf16 to nearest even -- the same single cast, without the round
        # trip (a NaN, whose quiet bit the round trip sets, takes the general path)
        if dt == F16:
            h = f32_to_f16_bits(x)
            if h is not None:
                return h.astype(np.uint16).view(F16)
        elif not np.isnan(x).any():    # (an f32 NaN is the only way to a NaN result)
            return x.astype(dt)
    x = np.asarray(x, F64)
    if err is not None:
        if mode == "rn":
            x = round_odd_f64(x, err)
            err = None
    if dt == F64:
        return x if err is None else x + err
    with np.errstate(over="ignore", invalid="ignore"):
        if dt == F32:
            r = x.astype(F32)
        else:
            r = round_odd_f32(x).astype(dt)
    if mode != "rn":
        exact = x if err is None else x + err
        r = _directed(r, exact, mode, dt)
    if satfinite or dt == E4M3:
        mx = MAXF.get(dt)
        if mx is not None:
            big = np.abs(x) > mx
            if np.any(big | np.isinf(r.astype(F64))):
                if satfinite:
                    r = np.where(np.isnan(x), r, np.where(big | np.isinf(r.astype(F64)),
                                                          np.copysign(mx, x), r.astype(F64))).astype(dt)
                elif dt == E4M3:   # no infinity: overflow gives NaN
                    r = np.where(big & ~np.isnan(x), np.array(np.nan, F64), r.astype(F64)).astype(dt)
    return r


def _f16_tables():
    """Per f32 sign and exponent field (the top 9 bits): the f32 addend ``M`` and the bit offset
    ``O`` of :func:`f32_to_f16_bits`."""
    top = np.arange(512, dtype=np.int64)
    sign, eb = top >> 8, top & 255
    ec = np.maximum(eb, 113)                        # below 2^-14: the subnormals' spacing 2^-24
    over = eb >= 143                                # 2^16 and up, and inf: infinity
    mbits = np.where(over, 0x7F800000, (ec + 13) << 23) | (sign << 31)
    field = np.where(over, 0x7C00, (ec - 113) << 10) | (sign << 15)
    return mbits.astype(np.uint32).view(np.float32), ((mbits - field) & 0xFFFFFFFF).astype(np.uint32)


_F16_ADD, _F16_OFF = _f16_tables()


def f32_to_f16_bits(x):
    """The f16 bit patterns (uint32 array) of float32 array ``x`` rounded to nearest even -- what
    ``x.astype(float16)`` gives, in six numpy calls (numpy's cast is slow on values that become
    f16 subnormals, as softmax probabilities do; on 32-lane rows the cost is per call, not per
    element); None when ``x`` holds a NaN.

    With ``2^e`` the binade of ``|x|`` (``e`` at least -14), ``M = 2^(e+13)`` with the sign of
    ``x``: the f32 sum ``x + M`` stays in ``M``'s binade, whose f32 spacing ``2^(e-10)`` is the
    f16 spacing at ``2^e`` (``2^-24`` for the subnormals), so the addition itself rounds ``x`` to
    f16 precision, to nearest even and symmetrically in the sign; the sum's bit pattern minus
    ``M``'s is the rounded magnitude in f16 steps, to which the f16 exponent field
    ``(e + 14) << 10`` and the sign bit are added (a carry into the next binade, or to infinity
    from 65520 up, comes out of the count). From ``2^16`` up, and for infinity, ``M`` is an
    infinity of the sign of ``x``: the sum is that infinity, which the offset maps to the f16
    infinity. A NaN stays a NaN in the sum (quieted), whose pattern lies far above ``0xFFFF``
    after the offset, so the maximum detects it. Both ``M`` and the offset are looked up by the
    top 9 bits of ``x`` (:func:`_f16_tables`)."""
    top = x.view(np.uint32) >> 23
    h = (x + _F16_ADD.take(top)).view(np.uint32)
    h -= _F16_OFF.take(top)
    if h.size and h.max() > 0xFFFF:
        return None
    return h


#: f64 bit pattern of 2^-126, the smallest normal f32
_F32_NORMAL_BITS = np.int64(np.float64(2.0 ** -126).view(np.int64))
_F32_NORMAL_M1 = np.uint64(_F32_NORMAL_BITS - 1)


def fma_f32(a, b, c, mode="rn"):
    """Correctly rounded f32 ``a*b + c`` (inputs float32 arrays/scalars)."""
    if mode == "rn":
        # the product of two f32 is exact in f64 (the ufunc casts both inputs first). The f64 sum
        # rounds to f32 correctly unless it is exactly halfway between two f32 (low 29 bits
        # 0x10000000: its own rounding may have made the tie) or an f32 subnormal (rounded at a
        # higher bit); only those need the error term and round-to-odd. (count_nonzero: a
        # fraction of the cost of .any() on these small arrays.)
        p = np.multiply(a, b, dtype=F64)
        s = p + np.asarray(c, F64)
        bits = s.view(np.int64)
        # 0 < |s| < 2^-126 as one unsigned compare: |s|'s bits minus one wrap around for 0
        mag1 = (bits & np.int64(0x7FFFFFFFFFFFFFFF)).view(np.uint64) - np.uint64(1)
        if not np.count_nonzero(((bits & 0x1FFFFFFF) == 0x10000000) | (mag1 < _F32_NORMAL_M1)):
            return s.astype(F32)
    else:
        p = np.multiply(a, b, dtype=F64)                  # exact
    s, e = two_sum(p, np.asarray(c, F64))
    if mode == "rn":
        with np.errstate(over="ignore", invalid="ignore"):
            return round_odd_f64(s, e).astype(F32)
    return f64_to(s, F32, mode, err=e)


def fma_f64(a, b, c):
    """f64 fma via Dekker's product (close to, not always exactly, correctly rounded)."""
    a = np.asarray(a, F64)
    b = np.asarray(b, F64)
    p = a * b
    sp = 134217729.0
    ah = a * sp - (a * sp - a)
    al = a - ah
    bh = b * sp - (b * sp - b)
    bl = b - bh
    pe = ((ah * bh - p) + ah * bl + al * bh) + al * bl
    s, e = two_sum(p, np.asarray(c, F64))
    return s + (e + pe)


def ftz(x):
    """Flush subnormal values to zero of the same sign (f32/f64/f16)."""
    x = np.asarray(x)
    t = TINY.get(x.dtype)
    if t is None:
        return x
    small = np.abs(x) < t
    if not np.count_nonzero(small):         # (a fraction of .any()'s cost on small arrays)
        return x
    sub = small & (x != 0)
    if not np.count_nonzero(sub):
        return x
    return np.where(sub, np.copysign(np.zeros_like(x), x), x).astype(x.dtype)


def sat01(x):
    """Clamp to [0, 1]; NaN -> 0 (PTX ``.sat`` on floats)."""
    x = np.asarray(x)
    r = np.clip(x, 0, 1)
    return np.where(np.isnan(x), np.zeros_like(x), r).astype(x.dtype)
