"""Typed scalar IR values whose Python operators emit ``arith`` ops.

:class:`Scalar` is registered once per process as the value caster of integer, index and
float types, so every op result of those types comes back with operators. Integer values
carry a Python-side signedness (``signed``, default True) that selects the ``arith`` op for
``//``, ``%``, ``>>``, comparisons and int<->float conversion; MLIR integers themselves are
signless. ``x.unsigned()`` / ``x.signed_()`` return views with the other interpretation.

Python ``int``/``float``/``bool`` operands are compile-time constants: they are materialised
(``arith.constant`` of the other operand's type) only where they meet an IR value.
"""
from __future__ import annotations

from mlir import ir
from mlir.dialects import arith, gpu

_TYPES = {
    "i1": lambda: ir.IntegerType.get_signless(1), "bool": lambda: ir.IntegerType.get_signless(1),
    "i8": lambda: ir.IntegerType.get_signless(8), "i16": lambda: ir.IntegerType.get_signless(16),
    "i32": lambda: ir.IntegerType.get_signless(32), "u32": lambda: ir.IntegerType.get_signless(32),
    "i64": lambda: ir.IntegerType.get_signless(64), "u64": lambda: ir.IntegerType.get_signless(64),
    "index": lambda: ir.IndexType.get(),
    "f16": lambda: ir.F16Type.get(), "bf16": lambda: ir.BF16Type.get(),
    "f32": lambda: ir.F32Type.get(), "f64": lambda: ir.F64Type.get(),
}


def mlir_type(t) -> ir.Type:
    """An ``ir.Type`` from a cutedsl name (``"i32"``, ``"f16"``, ``"index"`` ...) or an ``ir.Type``."""
    if isinstance(t, ir.Type):
        return t
    try:
        return _TYPES[t]()
    except KeyError:
        raise TypeError(f"unknown scalar type {t!r}; known: {', '.join(_TYPES)}") from None


def _is_int(t: ir.Type) -> bool:
    return isinstance(t, (ir.IntegerType, ir.IndexType))


def _is_float(t: ir.Type) -> bool:
    return isinstance(t, (ir.F16Type, ir.BF16Type, ir.F32Type, ir.F64Type))


def _is_index(t: ir.Type) -> bool:
    return isinstance(t, ir.IndexType)


def _width(t: ir.Type) -> int:
    if isinstance(t, ir.IndexType):
        return 64
    if isinstance(t, ir.IntegerType):
        return ir.IntegerType(t).width
    return {"f16": 16, "bf16": 16, "f32": 32, "f64": 64}[str(t)]


class Scalar(ir.Value):
    """An integer, index or float SSA value with arithmetic operators (emits ``arith``)."""

    def __init__(self, v, signed: bool = True):
        super().__init__(v)
        self.signed = signed

    # -- helpers -------------------------------------------------------------------
    @property
    def is_int(self) -> bool:
        return _is_int(self.type)

    @property
    def is_float(self) -> bool:
        return _is_float(self.type)

    def _wrap(self, v, signed=None) -> "Scalar":
        s = Scalar(v)
        s.signed = self.signed if signed is None else signed
        return s

    def _coerce(self, o) -> "Scalar":
        if isinstance(o, ir.Value):
            if o.type != self.type:
                raise TypeError(f"operand types differ: {self.type} vs {o.type}; convert with .to()")
            return o if isinstance(o, Scalar) else Scalar(o)
        if isinstance(o, (bool, int, float)):
            return const(o, self.type, signed=self.signed)
        raise TypeError(f"cannot combine an IR value of type {self.type} with {type(o).__name__}")

    def unsigned(self) -> "Scalar":
        """The same value, interpreted as unsigned by ``//``, ``%``, ``>>``, comparisons, casts."""
        return self._wrap(self, signed=False)

    def signed_(self) -> "Scalar":
        """The same value, interpreted as signed."""
        return self._wrap(self, signed=True)

    def _bin(self, o, iop, fop, reverse=False):
        o = self._coerce(o)
        a, b = (o, self) if reverse else (self, o)
        if self.is_int:
            if iop is None:
                raise TypeError(f"operator not defined on integer type {self.type}")
            return self._wrap(iop(a, b))
        if fop is None:
            raise TypeError(f"operator not defined on float type {self.type}")
        return self._wrap(fop(a, b))

    # -- arithmetic ----------------------------------------------------------------
    def __add__(self, o): return self._bin(o, arith.addi, arith.addf)
    def __radd__(self, o): return self._bin(o, arith.addi, arith.addf, True)
    def __sub__(self, o): return self._bin(o, arith.subi, arith.subf)
    def __rsub__(self, o): return self._bin(o, arith.subi, arith.subf, True)
    def __mul__(self, o): return self._bin(o, arith.muli, arith.mulf)
    def __rmul__(self, o): return self._bin(o, arith.muli, arith.mulf, True)
    def __truediv__(self, o): return self._bin(o, None, arith.divf)
    def __rtruediv__(self, o): return self._bin(o, None, arith.divf, True)

    def _div(self, a, b):
        return arith.floordivsi(a, b) if self.signed else arith.divui(a, b)

    def _mod(self, a, b):
        if not self.signed:
            return arith.remui(a, b)
        # Python semantics: the result has the sign of the divisor.
        r = arith.remsi(a, b)
        zero = const(0, self.type)
        fix = arith.andi(arith.cmpi(arith.CmpIPredicate.ne, r, zero),
                         arith.xori(arith.cmpi(arith.CmpIPredicate.slt, r, zero),
                                    arith.cmpi(arith.CmpIPredicate.slt, b, zero)))
        return arith.select(fix, arith.addi(r, b), r)

    def __floordiv__(self, o): return self._bin(o, self._div, None)
    def __rfloordiv__(self, o): return self._bin(o, self._div, None, True)
    def __mod__(self, o): return self._bin(o, self._mod, arith.remf)
    def __rmod__(self, o): return self._bin(o, self._mod, arith.remf, True)
    def __and__(self, o): return self._bin(o, arith.andi, None)
    def __rand__(self, o): return self._bin(o, arith.andi, None, True)
    def __or__(self, o): return self._bin(o, arith.ori, None)
    def __ror__(self, o): return self._bin(o, arith.ori, None, True)
    def __xor__(self, o): return self._bin(o, arith.xori, None)
    def __rxor__(self, o): return self._bin(o, arith.xori, None, True)
    def __lshift__(self, o): return self._bin(o, arith.shli, None)
    def __rshift__(self, o):
        return self._bin(o, arith.shrsi if self.signed else arith.shrui, None)

    def __neg__(self):
        if self.is_float:
            return self._wrap(arith.negf(self))
        return const(0, self.type, signed=self.signed) - self

    def __abs__(self):
        """``|x|``: ``maximumf(x, -x)`` for floats (``llvm.intr.fabs`` is not legal in this
        lowering; -0.0 gives +0.0, NaN stays NaN), ``x < 0 ? -x : x`` for signed integers (the
        most negative value wraps to itself, as PTX ``abs.s32`` does), ``x`` for unsigned ones."""
        if self.is_float:
            return self._wrap(arith.maximumf(self, arith.negf(self)))
        if not self.signed:
            return self
        return select(self < 0, -self, self)

    def __pos__(self):
        return self

    def __invert__(self):
        return self ^ const(-1 if _width(self.type) > 1 else 1, self.type)

    # -- comparisons (return i1) ---------------------------------------------------
    def _cmp(self, o, name):
        o = self._coerce(o)
        if self.is_int:
            if name in ("eq", "ne"):
                p = name
            else:
                p = ("s" if self.signed else "u") + name
            return Scalar(arith.cmpi(getattr(arith.CmpIPredicate, p), self, o), signed=False)
        fp = {"eq": "OEQ", "ne": "UNE", "lt": "OLT", "le": "OLE", "gt": "OGT", "ge": "OGE"}[name]
        return Scalar(arith.cmpf(getattr(arith.CmpFPredicate, fp), self, o), signed=False)

    def __lt__(self, o): return self._cmp(o, "lt")
    def __le__(self, o): return self._cmp(o, "le")
    def __gt__(self, o): return self._cmp(o, "gt")
    def __ge__(self, o): return self._cmp(o, "ge")
    def eq(self, o): return self._cmp(o, "eq")
    def ne(self, o): return self._cmp(o, "ne")

    def __bool__(self):
        raise TypeError("an IR value has no Python truth value: use cutedsl.ir.If / select, "
                        "or plain Python `if` on compile-time values")

    __hash__ = ir.Value.__hash__

    # -- conversions ---------------------------------------------------------------
    def to(self, t, signed: bool | None = None) -> "Scalar":
        """Convert to type ``t`` (name or ``ir.Type``): int<->int (ext/trunc, ``index_cast``),
        int<->float (``sitofp``/``uitofp``, ``fptosi``/``fptoui``), float<->float (``extf``/``truncf``,
        round to nearest even)."""
        return to_type(self, t, signed)


def to_type(v, t, signed: bool | None = None) -> Scalar:
    """Convert IR value ``v`` to type ``t``; see :meth:`Scalar.to`."""
    t = mlir_type(t)
    v = v if isinstance(v, Scalar) else Scalar(v)
    sg = v.signed if signed is None else signed
    src = v.type
    if src == t:
        return Scalar(v, signed=sg)
    if _is_int(src) and _is_int(t):
        if _is_index(src) or _is_index(t):
            r = (arith.index_cast if v.signed else arith.index_castui)(t, v)
        elif _width(t) > _width(src):
            r = (arith.extsi if v.signed else arith.extui)(t, v)
        else:
            r = arith.trunci(t, v)
    elif _is_int(src) and _is_float(t):
        if _is_index(src):
            v = to_type(v, "i64")
        r = (arith.sitofp if v.signed else arith.uitofp)(t, v)
    elif _is_float(src) and _is_int(t):
        r = (arith.fptosi if sg else arith.fptoui)(t, v)
    elif _is_float(src) and _is_float(t):
        r = arith.extf(t, v) if _width(t) > _width(src) else arith.truncf(t, v)
    else:
        raise TypeError(f"cannot convert {src} to {t}")
    return Scalar(r, signed=sg)


def const(x, t="i32", signed: bool = True) -> Scalar:
    """An ``arith.constant`` of type ``t`` (name or ``ir.Type``) holding the Python number ``x``."""
    t = mlir_type(t)
    if _is_float(t):
        attr = ir.FloatAttr.get(t, float(x))
    else:
        w = _width(t)
        x = int(x)
        if not -(1 << (w - 1)) <= x < (1 << w) and w > 1:
            raise OverflowError(f"constant {x} does not fit {t}")
        if w > 1 and x >= (1 << (w - 1)):
            x -= 1 << w
        if w == 1:
            x = -1 if x else 0
        attr = ir.IntegerAttr.get(t, x)
    return Scalar(arith.constant(t, attr), signed=signed)


def index(x) -> Scalar:
    """``x`` as an ``index`` value (Python int or IR integer)."""
    return const(x, "index") if isinstance(x, int) else to_type(x, "index")


def i32(x) -> Scalar:
    return const(x, "i32") if isinstance(x, int) else to_type(x, "i32", signed=True)


def u32(x) -> Scalar:
    return const(x, "i32", signed=False) if isinstance(x, int) else to_type(x, "i32", signed=False)


def i64(x) -> Scalar:
    return const(x, "i64") if isinstance(x, int) else to_type(x, "i64")


def f32(x) -> Scalar:
    return const(x, "f32") if isinstance(x, (int, float)) else to_type(x, "f32")


def select(cond, a, b) -> Scalar:
    """``cond ? a : b`` (``arith.select``); a Python bool ``cond`` picks at compile time."""
    if isinstance(cond, bool):
        return a if cond else b
    if not isinstance(a, ir.Value):
        a = Scalar(b)._coerce(a)
    if not isinstance(b, ir.Value):
        b = Scalar(a)._coerce(b)
    s = a.signed if isinstance(a, Scalar) else True
    return Scalar(arith.select(cond, a, b), signed=s)


def _sreg(fn, dim) -> Scalar:
    # special registers are non-negative: unsigned i32 gives the cheapest division/remainder
    return Scalar(arith.index_castui(ir.IntegerType.get_signless(32), fn(getattr(gpu.Dimension, dim))),
                  signed=False)


def thread_idx(dim="x") -> Scalar:
    """``%tid.<dim>`` as an unsigned i32."""
    return _sreg(gpu.thread_id, dim)


def block_idx(dim="x") -> Scalar:
    """``%ctaid.<dim>`` (CTA index in the grid) as an unsigned i32."""
    return _sreg(gpu.block_id, dim)


def block_dim(dim="x") -> Scalar:
    """``%ntid.<dim>`` (threads per CTA) as an unsigned i32."""
    return _sreg(gpu.block_dim, dim)


def grid_dim(dim="x") -> Scalar:
    """``%nctaid.<dim>`` (CTAs in the grid) as an unsigned i32."""
    return _sreg(gpu.grid_dim, dim)


def lane_id() -> Scalar:
    """Lane within the warp, 0..31 (unsigned i32)."""
    return thread_idx() % 32


def warp_idx() -> Scalar:
    """Warp index within the CTA (``tid.x // 32``), unsigned i32."""
    return thread_idx() // 32


def warp_uniform(v) -> Scalar:
    """``v`` (i32) broadcast from lane 0 (``shfl.sync.idx``, CUTLASS's ``canonical_warp_idx_sync``):
    the same value, but one ptxas knows is uniform across the warp, so warp-collective code
    guarded by it (``tcgen05.alloc``) stays on the uniform datapath instead of a divergent branch."""
    from mlir.dialects import nvvm
    i32 = ir.IntegerType.get_signless(32)
    r = nvvm.shfl_sync(i32, const(-1, "i32"), to_type(v, "i32"), const(0, "i32"), const(31, "i32"),
                       ir.Attribute.parse("#nvvm<shfl_kind idx>"))
    return Scalar(r, signed=False)


def opaque(v) -> Scalar:
    """``v`` (i32, or an i64 IR value) through an opaque ``mov.b32`` / ``mov.b64`` (inline PTX with
    side effects): the same value where it is called, but one LLVM can neither hoist above a
    branch or loop nor merge with another read of ``v`` -- so each branch (e.g. a warp role after
    its ``setmaxnreg``) computes what it derives from ``v`` itself, instead of keeping (or
    spilling) a shared copy across the others, and a value made in a loop stays there."""
    from mlir.dialects import llvm
    wide = isinstance(v, ir.Value) and str(v.type) == "i64"
    bits, cons = (64, "=l,l") if wide else (32, "=r,r")
    r = llvm.inline_asm(ir.IntegerType.get_signless(bits), [to_type(v, f"i{bits}")], f"mov.b{bits} $0, $1;", cons,
                        has_side_effects=True)
    return Scalar(r, signed=getattr(v, "signed", True))


def shfl_xor(v, lane_mask: int, width: int = 32) -> Scalar:
    """``shfl.sync.bfly.b32``: the value ``v`` (i32 or f32) of lane ``lane ^ lane_mask`` (all 32
    lanes take part, member mask 0xffffffff). ``lane_mask``: Python int in 1..``width - 1``;
    ``width`` (power of two <= 32) limits the exchange to segments of ``width`` lanes (PTX ISA
    9.7.8.6 shfl.sync: ``c = ((32 - width) << 8) | 31``). A butterfly over masks 1, 2, .. reduces
    within a segment (e.g. the 4 lanes of a quad that share a WGMMA accumulator row).
    Raises ``ValueError`` for a mask or width outside those ranges."""
    from mlir.dialects import nvvm
    if width not in (2, 4, 8, 16, 32):
        raise ValueError(f"shfl_xor width must be a power of two in 2..32, got {width}")
    if not isinstance(lane_mask, int) or not 0 < lane_mask < width:
        raise ValueError(f"shfl_xor lane_mask must be an int in 1..{width - 1}, got {lane_mask!r}")
    signed = v.signed if isinstance(v, Scalar) else True
    r = nvvm.shfl_sync(v.type, const(-1, "i32"), v, const(lane_mask, "i32"), const(((32 - width) << 8) | 31, "i32"),
                       ir.Attribute.parse("#nvvm<shfl_kind bfly>"))
    return Scalar(r, signed=signed)


_REGISTERED = False


def register_casters() -> None:
    """Register :class:`Scalar` as the value caster of int/index/float types (once per process)."""
    global _REGISTERED
    if _REGISTERED:
        return
    for cls in (ir.IntegerType, ir.IndexType, ir.F16Type, ir.BF16Type, ir.F32Type, ir.F64Type):
        ir.register_value_caster(cls.static_typeid, replace=True)(Scalar)
    _REGISTERED = True


register_casters()
