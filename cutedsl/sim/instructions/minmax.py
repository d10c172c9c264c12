"""``min``/``max``: integer (PTX ISA 9.7.1.13/14), single and double precision (9.7.3.11/12,
with sm_100's three-input form ``max{.ftz}{.NaN}{.abs}.f32 d, a, b, c``) and half precision
(9.7.4.7/8: ``f16``, ``bf16``, ``f16x2``, ``bf16x2``, two inputs only).

Floating-point rules, as the ISA's semantics pseudo-code states them:

* without ``.NaN`` a NaN input is ignored (the other input is the result), NaN only when every
  input is NaN; with ``.NaN`` any NaN input makes the result the canonical NaN
  (``0x7fffffff`` for f32, ``0x7fff`` for f16/bf16);
* ``-0.0 < +0.0``;
* ``.abs`` takes the magnitude of every input first; ``.xorsign.abs`` (two inputs only) then gives
  the result the XOR of the inputs' sign bits, unless the result is NaN;
* the three-input form is ``two(two(a, b), c)``; ``.xorsign`` is refused there (the ISA forbids it),
  and ``.abs`` alone only exists in the three-input form;
* ``.ftz`` flushes subnormal inputs and results to sign-preserving zero.

Decoders receive ``(ctx, ins, mods, ops)``; see :mod:`cutedsl.sim.engines.alu`.
"""
from __future__ import annotations

import numpy as np

from ..engines import numerics as nm
from ..engines.alu import INT_TYPES, PACKED, binary, float_post, pack2, split_mods, unpack2
from ..frontend.registry import handler
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
    return f


@handler("min", "max")
def dec_minmax(ctx, ins, mods, ops):
    base = ins.opcode.split(".")[0]
    is_min = base == "min"
    flags, (t,) = split_mods(ctx, mods, {"ftz", "NaN", "relu", "xorsign", "abs"})
    dt = NP[t]
    if t in INT_TYPES:
        if flags - {"relu"}:
            ctx.unsupported(f"integer {base} takes no .{sorted(flags - {'relu'})[0]} (PTX ISA 9.7.1)")
        f = np.minimum if is_min else np.maximum
        op = lambda a, b: f(a, b).astype(dt)
        if "relu" in flags:
            op = lambda a, b: np.maximum(f(a, b), 0).astype(dt)
        return binary(ctx, ops, t, op)
    three = len(ops) == 4
    if three:
        if t != "f32":
            ctx.unsupported(f"{base} with three inputs exists only for .f32 (PTX ISA 9.7.3.11/12; the "
                            f"half-precision {base}, 9.7.4.7/8, takes two)")
        if "xorsign" in flags:
            ctx.bad(f"{base}.xorsign cannot be used with three inputs (PTX ISA 9.7.3.11/12)")
    elif len(ops) != 3:
        ctx.bad(f"expected 3 or 4 operands, got {len(ops)}")
    if ("xorsign" in flags) != ("abs" in flags) and not three:
        ctx.bad(f"{base}: .xorsign and .abs go together in the two-input form (PTX ISA 9.7.3.11/12, 9.7.4.7/8)")
    if "abs" in flags and t == "f64":
        ctx.unsupported(f"{base}.f64 takes no .abs/.xorsign (PTX ISA 9.7.3.11/12)")
    if t in PACKED:
        ht = PACKED[t]
        half = float_minmax(ht, is_min, flags, 2)

        def op(a, b):
            (al, ah), (bl, bh) = unpack2(a, ht), unpack2(b, ht)
            return pack2(half(al, bl), half(ah, bh), ht)
        return binary(ctx, ops, t, op)
    f = float_minmax(t, is_min, flags, 3 if three else 2)
    if not three:
        return binary(ctx, ops, t, f)
    w_full, _ = ctx.wr(ops[0], t)
    ra, rb, rc = (ctx.rd(o, t) for o in ops[1:])

    def fn(w, g, m):
        w_full(w, m, f(ra(w), rb(w), rc(w)))
    return fn
