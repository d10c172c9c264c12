"""The floating-point min/max datapath: the PTX ISA's ``min_num``/``max_num`` (and, with ``.NaN``,
``min_nan``/``max_nan``) with ``.abs``, ``.xorsign`` and ``.ftz``, shared by ``min``/``max``
(PTX ISA 9.7.3.11/12, 9.7.4.7/8) and the warp reduction ``redux.sync.{min,max}.f32`` (9.7.13.12).

Rules (the ISA's semantics pseudo-code): a NaN input is ignored unless every input is NaN; with
``.NaN`` any NaN input gives the canonical NaN; ``-0.0 < +0.0``; ``.abs`` takes magnitudes first;
``.xorsign`` gives the result the XOR of the two inputs' signs; ``.ftz`` flushes subnormals.
Every result is one of the inputs (or its magnitude), so the float64 detour is exact.
"""
from __future__ import annotations

import numpy as np

from . import numerics as nm
from .alu import float_post
from ..frontend.ptxtypes import NP

#: canonical NaN bit patterns (PTX ISA 9.7.3.11: ".NaN ... the result is canonical NaN")
_CANON = {"f32": np.uint32(0x7FFFFFFF), "f16": np.uint16(0x7FFF), "bf16": np.uint16(0x7FFF)}


def _two(x, y, is_min: bool, nan: bool):
    """The ISA's ``min_num``/``max_num`` (``min_nan``/``max_nan`` with ``nan``) on float64 arrays."""
    sx, sy = np.signbit(x), np.signbit(y)
    with np.errstate(invalid="ignore"):
        if is_min:
            pick_x = (x < y) | ((x == y) & sx & ~sy)        # -0.0 < +0.0
        else:
            pick_x = (x > y) | ((x == y) & ~sx & sy)
    xn, yn = np.isnan(x), np.isnan(y)
    r = np.where(pick_x, x, y)
    r = np.where(xn, y, np.where(yn, x, r))
    if nan:
        r = np.where(xn | yn, np.nan, r)
    return r


def float_minmax(t: str, is_min: bool, flags: set, n_inputs: int):
    """``f(*inputs)`` for scalar float type ``t`` (f32/f64/f16/bf16): typed arrays in, typed out."""
    dt = NP[t]
    fz = "ftz" in flags
    nan, ab, xs = "NaN" in flags, "abs" in flags, "xorsign" in flags
    post = flags - {"NaN", "abs", "xorsign"}
    canon = _CANON.get(t)
    #: no modifiers on f32/f64: numpy's maximum/minimum are the ISA's rule except for NaN inputs
    #: and the sign of a zero result, which take the general path
    simple = t in ("f32", "f64") and not (fz or nan or ab or xs or post)
    pick = np.minimum if is_min else np.maximum

    def f(*vals):
        vals = [np.asarray(v, dt) for v in vals]
        if simple:
            r = pick(vals[0], vals[1])
            for v in vals[2:]:
                r = pick(r, v)
            if not ((r == 0) | np.isnan(r)).any():
                return r
        if fz:
            vals = [nm.ftz(v) for v in vals]
        x = [v.astype(np.float64) for v in vals]
        if xs:
            sign = np.signbit(x[0]) ^ np.signbit(x[1])
        if ab:
            x = [np.abs(v) for v in x]
        r = _two(x[0], x[1], is_min, nan)
        for v in x[2:]:
            r = _two(r, v, is_min, nan)
        if xs:
            r = np.where(np.isnan(r), r, np.where(sign, -np.abs(r), np.abs(r)))
        out = r.astype(dt)          # exact: r is one of the inputs (or its magnitude)
        isn = np.isnan(r)
        if canon is not None and np.any(isn):
            out = np.where(isn, canon, out.view(canon.dtype)).astype(canon.dtype).view(dt)
        return float_post(out, post, dt)
    if not (simple and n_inputs == 2):
        return f

    def two(a, b):
        """The two-input form without modifiers: numpy's, unless a NaN or a zero is involved
        (``abs(r) > 0`` is false for both), or an input is not already of type ``t``. (The
        count of the true ones: a fraction of ``.all()``'s cost on small arrays.)"""
        r = pick(a, b)
        if getattr(r, "dtype", None) == dt and np.count_nonzero(np.abs(r) > 0) == r.size:
            return r
        return f(a, b)
    return two



def minmax_reducer(is_min: bool, flags: set):
    """``reduce(v)``: the ``min``/``max`` of every element of the 1-D f32 array ``v`` (one value
    per member lane) as ``redux.sync.{min,max}{.abs}{.NaN}.f32`` defines it (PTX ISA 9.7.13.12),
    ``flags`` a subset of ``{"abs", "NaN"}``: NaNs are ignored and the result is the canonical NaN
    only if every value is NaN, or, with ``.NaN``, the canonical NaN if any is; ``+0.0 > -0.0``;
    ``.abs`` reduces magnitudes; nothing is flushed (the instruction has no ``.ftz``). ``reduce``
    returns a 0-d float32 array.

    The two-input rule is commutative and associative, so a pairwise tree (log2 of the lane
    count numpy steps) gives the ISA's set-wide result."""
    two = float_minmax("f32", is_min, set(flags), 2)

    def reduce(v):
        v = np.asarray(v, np.float32).reshape(-1)
        if v.size == 1:              # .abs and the canonical NaN apply to a lone member too
            v = two(v, v)
        while v.size > 1:
            h = v.size // 2
            v = np.concatenate([two(v[:h], v[h:2 * h]), v[2 * h:]])
        return v.reshape(())
    return reduce
