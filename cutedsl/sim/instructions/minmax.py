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

The rules themselves live in :mod:`cutedsl.sim.engines.fminmax` (``redux.sync``'s f32 form shares
them). Decoders receive ``(ctx, ins, mods, ops)``; see :mod:`cutedsl.sim.engines.alu`.
"""
from __future__ import annotations

import numpy as np

from ..engines.alu import INT_TYPES, PACKED, binary, pack2, split_mods, unpack2
from ..engines.fminmax import float_minmax
from ..frontend.registry import handler
from ..frontend.ptxtypes import NP


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
    ctx.vector(f, w_full, (ra, rb, rc))
    return fn
