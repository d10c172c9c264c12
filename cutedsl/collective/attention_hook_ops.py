"""The small language attention hooks are written in: values with Python operators that act the
same on IR values (while a kernel is built) and on numpy arrays (the float64 reference and the
host-side block mask), so one hook body serves both.

Inside a kernel a hook sees :class:`HookValue` objects: the score is f32, the indices
``batch, head, q_idx, kv_idx`` are signed i32, a comparison gives a predicate (i1). On the host
the same body sees numpy arrays (float64 scores, int64 index grids that broadcast) and Python
ints. Supported, on both:

* ``+ - *`` and unary ``-``, ``abs(x)``; ``/`` (true division, always float); ``//`` and ``%`` on
  integers with Python's floor semantics (``arith.floordivsi`` / ``remsi`` + sign fix; numpy's
  ``floor_divide`` / ``mod`` agree);
* ``< <= > >= == !=`` (f32: ordered compares, ``!=`` unordered, as numpy), giving predicates;
* ``&``, ``|``, ``^``, ``~`` on predicates (and bitwise on integers);
* :func:`where` ``(pred, a, b)``, :func:`minimum`, :func:`maximum`, :func:`exp2`
  (``ex2.approx.ftz.f32``, PTX ISA 9.7.3.21: relative error 2^-22), :func:`tanh`
  (``tanh.approx.f32``, PTX ISA 9.7.3.22: relative error 2^-11).

An integer meeting a float (an IR f32 or a Python float) is converted to f32 (``cvt.rn.f32.s32``)
as Python and numpy promote it. Anything else -- ``**``, ``math.tanh(x)``, ``np.tanh(x)`` on an
IR value, Python ``if``/``and``/``or``/``min``/``max`` on IR values (they need a truth value) --
raises :class:`~cutedsl.errors.HookError` naming the hook and what to write instead.
"""
from __future__ import annotations

import numpy as np

from ..errors import HookError
from ..ir._lazy import lazy

cir, fm, _arith = lazy("cutedsl.ir"), lazy("cutedsl.ir.fmath"), lazy("mlir.dialects.arith")

#: what a hook body may use, quoted by every HookError about an unsupported operation
SUPPORTED = ("+ - * / // % (integers), unary -, abs(), comparisons, & | ^ ~ on predicates, and "
             "where(pred, a, b), minimum, maximum, exp2, tanh from cutedsl.collective.attention_hook_ops")


class HookValue:
    """An IR scalar inside a hook: f32 (scores), signed i32 (indices, integer tensor elements) or
    i1 (predicates). ``value.v`` is the underlying :class:`~cutedsl.ir.Scalar`; ``value.kind``
    is ``"f32"``, ``"i32"`` or ``"i1"``. Python numbers combine with it as constants."""

    __slots__ = ("v",)
    __hash__ = None         # == builds a predicate, so values cannot be dict keys

    def __init__(self, v):
        self.v = v.signed_() if v.is_int else v

    @property
    def kind(self) -> str:
        t = str(self.v.type)
        return {"i1": "i1", "i32": "i32", "f32": "f32"}.get(t, t)

    def __repr__(self):
        return f"HookValue({self.kind})"

    # -- operands -----------------------------------------------------------------------
    def _pair(self, o, want_float=False):
        """``(a, b)``: self and ``o`` as Scalars of one type (ints promoted to f32 when either
        side is a float or ``want_float``)."""
        if isinstance(o, HookValue):
            b = o.v
        elif isinstance(o, (bool, int, float, np.integer, np.floating)) and not isinstance(o, np.bool_):
            b = o.item() if isinstance(o, np.generic) else o
        elif isinstance(o, np.bool_):
            b = bool(o)
        else:
            raise TypeError(f"a hook value cannot be combined with {type(o).__name__}")
        a = self.v
        b_float = isinstance(b, float) or (not isinstance(b, (bool, int)) and b.is_float)
        fl = want_float or a.is_float or b_float
        if fl:
            a = _float(a)
            b = _float(b) if not isinstance(b, (int, float)) else float(b)
        elif not isinstance(b, (bool, int)) and str(a.type) != str(b.type):
            raise TypeError(f"cannot combine {self.kind} with {HookValue(b).kind}")
        return a, b

    def _op(self, o, name, reverse=False, want_float=False):
        a, b = self._pair(o, want_float)
        if reverse:
            if isinstance(b, (bool, int, float)):
                b = cir.const(b, a.type)
            a, b = b, a
        return HookValue(getattr(a, name)(b))

    def _int_only(self, o, name, reverse=False):
        if self.v.is_float or (isinstance(o, HookValue) and o.v.is_float) or isinstance(o, float):
            raise TypeError(f"{'//' if 'floordiv' in name else '%'} is defined on integers only in a hook (float // and % would not "
                            f"match numpy's floor semantics): use where() / a float expression")
        return self._op(o, name, reverse)

    # -- arithmetic ---------------------------------------------------------------------
    def __add__(self, o): return self._op(o, "__add__")
    def __radd__(self, o): return self._op(o, "__add__", True)
    def __sub__(self, o): return self._op(o, "__sub__")
    def __rsub__(self, o): return self._op(o, "__sub__", True)
    def __mul__(self, o): return self._op(o, "__mul__")
    def __rmul__(self, o): return self._op(o, "__mul__", True)
    def __truediv__(self, o): return self._op(o, "__truediv__", want_float=True)
    def __rtruediv__(self, o): return self._op(o, "__truediv__", True, want_float=True)
    def __floordiv__(self, o): return self._int_only(o, "__floordiv__")
    def __rfloordiv__(self, o): return self._int_only(o, "__floordiv__", True)
    def __mod__(self, o): return self._int_only(o, "__mod__")
    def __rmod__(self, o): return self._int_only(o, "__mod__", True)
    def __and__(self, o): return self._op(o, "__and__")
    def __rand__(self, o): return self._op(o, "__and__", True)
    def __or__(self, o): return self._op(o, "__or__")
    def __ror__(self, o): return self._op(o, "__or__", True)
    def __xor__(self, o): return self._op(o, "__xor__")
    def __rxor__(self, o): return self._op(o, "__xor__", True)

    def __neg__(self): return HookValue(-self.v)
    def __pos__(self): return self
    def __abs__(self): return HookValue(abs(self.v))

    def __invert__(self):
        if self.v.is_float:
            raise TypeError("~ is defined on predicates and integers, not on f32")
        return HookValue(~self.v)

    # -- comparisons (predicates) -------------------------------------------------------
    def __lt__(self, o): return self._op(o, "__lt__")
    def __le__(self, o): return self._op(o, "__le__")
    def __gt__(self, o): return self._op(o, "__gt__")
    def __ge__(self, o): return self._op(o, "__ge__")
    def __eq__(self, o): return self._op(o, "eq")
    def __ne__(self, o): return self._op(o, "ne")

    # -- what hooks cannot do -----------------------------------------------------------
    def __bool__(self):
        raise TypeError("an IR value has no truth value while the kernel is built: Python `if`, "
                        "`and`, `or`, `not`, min() and max() need one -- use where(pred, a, b), &, |, ~, "
                        "minimum(), maximum()")

    def __float__(self):
        raise TypeError("an IR value is no Python float: math.* and float() cannot take it -- use exp2() / "
                        "tanh() from cutedsl.collective.attention_hook_ops")

    __int__ = __index__ = __float__

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        raise TypeError(f"numpy's {ufunc.__name__} cannot take an IR value -- use the functions of "
                        f"cutedsl.collective.attention_hook_ops (where, minimum, maximum, exp2, tanh)")

    def __pow__(self, o):
        raise TypeError("** is not supported in a hook: write x * x, or exp2(y * log2(x)) for a float power")

    __rpow__ = __pow__


def _float(s):
    """Scalar ``s`` as f32 (signed ints converted, i1 refused)."""
    if s.is_float:
        return s if str(s.type) == "f32" else s.to("f32")
    if str(s.type) == "i1":
        raise TypeError("a predicate is no number: use where(pred, 1.0, 0.0)")
    return s.signed_().to("f32")


def _ir(*xs) -> bool:
    return any(isinstance(x, HookValue) for x in xs)


def lift(x, like=None) -> HookValue:
    """``x`` (a HookValue, an IR Scalar, a Python number or bool) as a HookValue; a number
    becomes a constant of ``like``'s type (f32 for a float, i1 for a bool, else i32)."""
    if isinstance(x, HookValue):
        return x
    if hasattr(x, "type") and hasattr(x, "is_int"):
        return HookValue(x)
    if isinstance(x, (bool, np.bool_)):
        return HookValue(cir.const(bool(x), "i1", signed=False))
    if isinstance(x, float) or (like is not None and like.v.is_float):
        return HookValue(cir.const(float(x), "f32"))
    return HookValue(cir.const(int(x), "i32"))


def _unify(a, b):
    """``a`` and ``b`` (HookValues or Python numbers, at least one a HookValue) as two Scalars of
    one type."""
    if isinstance(a, HookValue):
        x, y = a._pair(b)
    else:
        y, x = b._pair(a)
    if not hasattr(x, "type"):
        x = cir.const(x, y.type)
    if not hasattr(y, "type"):
        y = cir.const(y, x.type)
    return x, y


def where(pred, a, b):
    """``pred ? a : b`` element by element (``selp`` / ``np.where``); ``a`` and ``b`` are
    promoted to one type (an int meeting a float becomes f32)."""
    if not _ir(pred, a, b):
        return np.where(pred, a, b)
    p = lift(pred)
    if p.kind != "i1":
        raise TypeError(f"where() takes a predicate (a comparison) first, got {p.kind}")
    if not _ir(a, b):
        a = lift(a, like=lift(b) if isinstance(b, float) else None)
    x, y = _unify(a, b)
    return HookValue(cir.select(p.v, x, y))


def _minmax(a, b, fop, iop, np_fn):
    if not _ir(a, b):
        return np_fn(a, b)
    x, y = _unify(a, b)
    if x.is_float:
        return HookValue(fop(x, y))
    if str(x.type) == "i1":
        raise TypeError("minimum/maximum take numbers, not predicates")
    return HookValue(cir.Scalar(iop(x, y)))


def minimum(a, b):
    """Element-wise minimum (f32: NaN-propagating ``min.NaN.f32``, as ``np.minimum``; i32:
    signed ``min.s32``)."""
    return _minmax(a, b, fm.minimum, _arith.minsi, np.minimum)


def maximum(a, b):
    """Element-wise maximum (f32: NaN-propagating ``max.NaN.f32``, as ``np.maximum``; i32:
    signed ``max.s32``)."""
    return _minmax(a, b, fm.maximum, _arith.maxsi, np.maximum)


def _unary(x, ir_fn, np_fn):
    if not _ir(x):
        return np_fn(x)
    return HookValue(ir_fn(_float(x.v)))


def exp2(x):
    """``2^x``: ``ex2.approx.ftz.f32`` in a kernel (PTX ISA 9.7.3.21: relative error 2^-22 over
    the normal range, subnormal results flush to 0), ``np.exp2`` on the host."""
    return _unary(x, fm.exp2, np.exp2)


def tanh(x):
    """``tanh(x)``: ``tanh.approx.f32`` in a kernel (PTX ISA 9.7.3.22: relative error 2^-11),
    ``np.tanh`` on the host."""
    return _unary(x, fm.tanh_approx, np.tanh)


__all__ = ["HookValue", "where", "minimum", "maximum", "exp2", "tanh", "lift", "SUPPORTED"]
