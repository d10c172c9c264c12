"""Fused epilogue nodes: ``D = act(alpha * acc * scales + beta * C + bias)`` as a sequence.

CUTLASS builds such epilogues from visitor trees (EVT): each node reads the value computed so
far and the tile coordinates, and may load its own operand. Here a fused epilogue is a tuple
of :class:`EpilogueNode` objects applied in order to every f32 accumulator element, before an
epilogue's own :meth:`~cutedsl.collective.epilogue.Epilogue.visit` hook and the store; each
node declares the kernel parameters it reads (checked per call by the Device layer like A and
B) and a float64 model (:meth:`EpilogueNode.reference`) for ``--check`` and tests. The same
nodes run on every schedule and both store paths (TMA and global), since they act on the
accumulator fragment, not on the store.

Nodes (spelled as strings in configs, JSON and the CLI):

=====================  ==========================================  ==============================
spec                   value becomes                               call arguments
=====================  ==========================================  ==============================
``alpha``              ``alpha * v``                               ``alpha`` (float)
``scale_a``            ``scale_a * v``                             ``scale_a`` (float)
``scale_a:row``        ``scale_a[row] * v``                        ``scale_a`` f32 ``(M,)``
``scale_b``            ``scale_b * v``                             ``scale_b`` (float)
``scale_b:col``        ``scale_b[col] * v``                        ``scale_b`` f32 ``(N,)``
``beta`` / ``beta:T``  ``v + beta * C[row, col]``                  ``beta`` (float), ``c`` (M, N)
                                                                   of T (default: out dtype)
``bias:row|col[:T]``   ``v + bias[row]`` / ``v + bias[col]``       ``bias`` (M,) / (N,) of T (f32)
``relu``               ``max(v, 0)``
``gelu`` (``gelu_erf``)  ``v/2 (1 + erf(v / sqrt 2))``
``gelu_tanh``          ``v/2 (1 + tanh(sqrt(2/pi) (v + 0.044715 v^3)))``
``silu``               ``v / (1 + exp(-v))``
``clamp:LO:HI``        ``min(max(v, LO), HI)``
``aux`` / ``aux:T``    stores ``v`` to ``aux[row, col]`` (unchanged)  ``aux`` (M, N) of T (default:
                                                                   out dtype): the pre-activation
=====================  ==========================================  ==============================

Per-element loads of C, vectors and the aux store go through global memory with the same
bounds rule as the store (rows >= M and columns >= N are never touched). In a batched GEMM, C
and aux are (L, M, N) and vectors and scalars apply to every batch. A user node is a
subclass of :class:`EpilogueNode` (``apply``, ``params``, ``reference``; ``spec`` for JSON).
"""
from __future__ import annotations

import math

import attrs
import numpy as np

from ..compiler.artifact import ParamSpec as Param
from ..errors import ConfigError
from ..ir._lazy import lazy

cir, fm = lazy("cutedsl.ir"), lazy("cutedsl.ir.fmath")


class EpilogueNode:
    """One step of a fused epilogue (subclass it; instances must be hashable and comparable:
    attrs ``frozen`` classes are). ``out_dtype`` is the GEMM's output type, for nodes whose
    operand defaults to it."""

    def params(self, out_dtype: str) -> list:
        """Kernel parameters this node reads (``Param``; names must be unique in an epilogue)."""
        return []

    def bind(self, out_dtype: str) -> "EpilogueNode":
        """This node for a GEMM writing ``out_dtype`` (operand types defaulting to the output's
        become explicit). Default: itself."""
        return self

    def apply(self, value, row, col, ctx):
        """IR: the f32 ``value`` at global ``(row, col)`` (unsigned i32, possibly outside the
        problem for partial tiles: clamp before loading) -> f32. ``ctx.args`` holds the
        parameters."""
        raise NotImplementedError

    def reference(self, value: np.ndarray, args: dict, out_dtype: str) -> np.ndarray:
        """float64 model on the whole ``(M, N)`` value, with the call's arguments ``args``."""
        raise NotImplementedError

    def spec(self) -> str:
        """The string this node is written as (``parse_node(node.spec()) == node``)."""
        raise NotImplementedError(f"{type(self).__name__} has no string form")


def _clamped(row, col, ctx):
    """``(row, col)`` moved inside the problem: partial tiles compute (never store) elements
    outside it, and must not load outside C or a vector either."""
    m, n = ctx.m.unsigned(), ctx.n.unsigned()
    return cir.select(row < m, row, 0), cir.select(col < n, col, 0)


def _load(ctx, name, dtype, idx):
    v = cir.GlobalPtr(getattr(ctx.args, name), dtype).load(idx)
    return v if dtype == "f32" else v.to("f32")


def _rowmajor(ctx, row, col):
    """Element offset of ``(row, col)`` in a row-major (M, N) matrix, or of batch ``ctx.l`` of an
    (L, M, N) one in a batched kernel (``ctx.l`` is the Python 0 otherwise)."""
    n = cir.i64(ctx.n.unsigned())
    off = cir.i64(row.unsigned()) * n + cir.i64(col.unsigned())
    if isinstance(ctx.l, int) and ctx.l == 0:
        return off
    return off + cir.i64(cir.u32(ctx.l)) * cir.i64(ctx.m.unsigned()) * n


@attrs.frozen
class ScaleBy(EpilogueNode):
    """``name * v`` with an f32 kernel parameter ``name`` (``alpha``, ``scale_a``, ``scale_b``)."""
    name: str = "alpha"

    def params(self, out_dtype):
        return [Param(self.name, "f32")]

    def apply(self, value, row, col, ctx):
        return value * getattr(ctx.args, self.name)

    def reference(self, value, args, out_dtype):
        return value * float(np.float32(args[self.name]))

    def spec(self):
        return self.name


@attrs.frozen
class ScaleByVector(EpilogueNode):
    """``v * name[row]`` (``per="row"``, an (M,) f32 vector) or ``v * name[col]`` (``"col"``, (N,)):
    the per-row / per-column scales of ``torch._scaled_mm``."""
    name: str = "scale_a"
    per: str = "row"

    def params(self, out_dtype):
        return [Param(self.name, "ptr", shape=("m",) if self.per == "row" else ("n",), dtype="f32")]

    def apply(self, value, row, col, ctx):
        r, c = _clamped(row, col, ctx)
        return value * _load(ctx, self.name, "f32", r if self.per == "row" else c)

    def reference(self, value, args, out_dtype):
        v = np.asarray(args[self.name], np.float64)
        return value * (v[:, None] if self.per == "row" else v[None, :])

    def spec(self):
        return f"{self.name}:{self.per}"


@attrs.frozen
class AddC(EpilogueNode):
    """``v + beta * C[row, col]``: ``beta`` an f32 parameter, ``c`` a row-major (M, N) array of
    ``dtype`` (f32/f16/bf16; None: the output type). A TMA-store epilogue loads C by TMA per
    sub-tile (:mod:`cutedsl.collective.epilogue_source`); the global epilogue per element."""
    dtype: str = None

    def params(self, out_dtype):
        return [Param("beta", "f32"), Param("c", "ptr", shape=("m", "n"), dtype=self.dtype or out_dtype)]

    def __attrs_post_init__(self):
        if self.dtype is not None and self.dtype not in ("f32", "f16", "bf16"):
            raise ConfigError(f"beta's C must be f32, f16 or bf16, got {self.dtype!r}")

    def apply(self, value, row, col, ctx):
        if getattr(ctx, "c_tile", None) is not None:      # a TMA epilogue loaded this sub-tile of C
            from .epilogue_source import TmaSource
            return value + ctx.args.beta * TmaSource(self.dtype, 0, ctx.c_tile[3]).read(ctx.c_tile, row, col)
        r, c = _clamped(row, col, ctx)
        return value + ctx.args.beta * _load(ctx, "c", self.dtype, _rowmajor(ctx, r, c))

    def bind(self, out_dtype):
        """C defaults to the output type (f32 for an fp8 output)."""
        return self if self.dtype else attrs.evolve(self, dtype=out_dtype if out_dtype in ("f32", "f16", "bf16")
                                                    else "f32")

    def reference(self, value, args, out_dtype):
        return value + float(np.float32(args["beta"])) * np.asarray(args["c"]).astype(np.float64)

    def spec(self):
        return "beta" + (f":{self.dtype}" if self.dtype else "")


@attrs.frozen
class Bias(EpilogueNode):
    """``v + bias[row]`` (``per="row"``, (M,)) or ``v + bias[col]`` (``"col"``, (N,)) of ``dtype``."""
    per: str = "col"
    dtype: str = "f32"

    def params(self, out_dtype):
        return [Param("bias", "ptr", shape=("m",) if self.per == "row" else ("n",), dtype=self.dtype)]

    def apply(self, value, row, col, ctx):
        r, c = _clamped(row, col, ctx)
        return value + _load(ctx, "bias", self.dtype, r if self.per == "row" else c)

    def reference(self, value, args, out_dtype):
        v = np.asarray(args["bias"]).astype(np.float64)
        return value + (v[:, None] if self.per == "row" else v[None, :])

    def spec(self):
        return f"bias:{self.per}" + ("" if self.dtype == "f32" else f":{self.dtype}")


_SQRT1_2, _GELU_C = 1.0 / math.sqrt(2.0), math.sqrt(2.0 / math.pi)


def _erf64(x):
    return np.vectorize(math.erf, otypes=[np.float64])(x)


@attrs.frozen
class Activation(EpilogueNode):
    """``relu``, ``gelu`` (erf form; ``gelu_erf`` is the same), ``gelu_tanh``, ``silu`` or
    ``clamp`` to ``[lo, hi]``."""
    kind: str = "relu"
    lo: float = None
    hi: float = None

    KINDS = ("relu", "gelu", "gelu_tanh", "silu", "clamp")

    def __attrs_post_init__(self):
        if self.kind not in self.KINDS:
            raise ConfigError(f"activation must be one of {', '.join(self.KINDS)}, got {self.kind!r}")
        if self.kind == "clamp" and not (self.lo is not None and self.hi is not None and self.lo <= self.hi):
            raise ConfigError(f"clamp needs lo <= hi (clamp:LO:HI), got lo={self.lo}, hi={self.hi}")

    def apply(self, value, row, col, ctx):
        v, k = value, self.kind
        if k == "relu":
            return fm.maximum(v, 0.0)
        if k == "clamp":
            return fm.minimum(fm.maximum(v, float(self.lo)), float(self.hi))
        if k == "silu":
            return v / (fm.exp(-v) + 1.0)
        if k == "gelu":
            return v * 0.5 * (fm.erf(v * _SQRT1_2) + 1.0)
        return v * 0.5 * (fm.tanh((v + v * v * v * 0.044715) * _GELU_C) + 1.0)

    def reference(self, value, args, out_dtype):
        v, k = value, self.kind
        if k == "relu":
            return np.maximum(v, 0.0)
        if k == "clamp":
            return np.minimum(np.maximum(v, self.lo), self.hi)
        if k == "silu":
            with np.errstate(over="ignore"):        # exp(-v) = inf for v < -709: v / inf = -0, exact
                return v / (np.exp(-v) + 1.0)
        if k == "gelu":
            return v * 0.5 * (_erf64(v * _SQRT1_2) + 1.0)
        return v * 0.5 * (np.tanh((v + 0.044715 * v ** 3) * _GELU_C) + 1.0)

    def spec(self):
        return f"clamp:{self.lo:g}:{self.hi:g}" if self.kind == "clamp" else self.kind


@attrs.frozen
class Aux(EpilogueNode):
    """Store the value so far to ``aux[row, col]`` (a row-major (M, N) array of ``dtype``,
    None: the output type) -- the pre-activation a backward pass needs -- and pass it on."""
    dtype: str = None

    def params(self, out_dtype):
        return [Param("aux", "ptr", shape=("m", "n"), dtype=self.dtype or out_dtype, output=True)]

    def apply(self, value, row, col, ctx):
        dt = self.dtype
        with cir.If((row < ctx.m.unsigned()) & (col < ctx.n.unsigned())):
            cir.GlobalPtr(ctx.args.aux, dt).store(_rowmajor(ctx, row, col), value if dt == "f32" else value.to(dt))
        return value

    def bind(self, out_dtype):
        return self if self.dtype else attrs.evolve(self, dtype=out_dtype)

    def reference(self, value, args, out_dtype):
        args.setdefault("_aux", value.copy())      # what the kernel must have written
        return value

    def spec(self):
        return "aux" + (f":{self.dtype}" if self.dtype else "")


def parse_node(spec) -> EpilogueNode:
    """A node from its string (see the module table) or a node itself; ``ConfigError`` naming
    the spellings otherwise."""
    if isinstance(spec, EpilogueNode):
        return spec
    if not isinstance(spec, str):
        raise ConfigError(f"an epilogue node is an EpilogueNode or a string such as 'bias:col', got {spec!r}")
    head, *rest = spec.strip().split(":")
    try:
        if head in ("alpha", "scale_a", "scale_b") and not rest:
            return ScaleBy(head)
        if head == "scale_a" and rest == ["row"] or head == "scale_b" and rest == ["col"]:
            return ScaleByVector(head, rest[0])
        if head == "beta" and len(rest) <= 1:
            return AddC(*rest)
        if head == "bias" and 1 <= len(rest) <= 2 and rest[0] in ("row", "col"):
            return Bias(*rest)
        if head == "aux" and len(rest) <= 1:
            return Aux(*rest)
        if head == "gelu_erf" and not rest:
            return Activation("gelu")
        if head == "clamp" and len(rest) == 2:
            return Activation("clamp", float(rest[0]), float(rest[1]))
        if head in Activation.KINDS and head != "clamp" and not rest:
            return Activation(head)
    except ConfigError:
        raise
    except ValueError:              # a LO/HI that is no number
        pass
    raise ConfigError(f"unknown epilogue node {spec!r}: use alpha, scale_a[:row], scale_b[:col], beta[:DTYPE], "
                      f"bias:row|col[:DTYPE], aux[:DTYPE], relu, gelu, gelu_tanh, silu or clamp:LO:HI")


def parse_nodes(items) -> tuple:
    """A tuple of nodes from a sequence (or one comma-separated string) of specs / nodes;
    ``ConfigError`` when two nodes declare the same kernel parameter."""
    if isinstance(items, str):
        items = [s for s in items.split(",") if s.strip()]
    nodes = tuple(parse_node(s) for s in items)
    seen = {}
    for nd in nodes:
        for p in nd.params("f32"):
            if p.name in seen:
                raise ConfigError(f"epilogue nodes {seen[p.name]!r} and {_spell(nd)!r} both read the "
                                  f"argument {p.name!r}")
            seen[p.name] = _spell(nd)
    return nodes


def spell(node):
    """``node.spec()``, or the node itself when it has no string form (a user node)."""
    try:
        return node.spec()
    except NotImplementedError:
        return node


def _spell(node) -> str:
    s = spell(node)
    return s if isinstance(s, str) else type(node).__name__


def random_args(params, m: int, n: int, rng, l: int = 1) -> dict:
    """Host call arguments for epilogue ``params`` (``Param`` list) on an ``m x n`` problem:
    f32 scalars are powers of two in [1/4, 4] (exact scaling), arrays standard normal in their
    dtype (shapes from ``"m"``/``"n"``/``"l"``), outputs zero-filled. For ``--check`` and tests."""
    from ..dtypes import dtype as _dtype
    out = {}
    for p in params:
        if p.kind == "f32":
            out[p.name] = float(2.0 ** int(rng.integers(-2, 3)))
        elif p.kind in ("ptr", "tensormap"):
            shape = tuple({"m": m, "n": n, "l": l}.get(x, x) for x in p.shape)
            npd = _dtype(p.dtype).numpy
            out[p.name] = np.zeros(shape, npd) if p.output else \
                rng.standard_normal(shape, dtype=np.float32).astype(npd)
    return out


def reference(nodes, acc: np.ndarray, args: dict, out_dtype: str) -> np.ndarray:
    """float64 value the fused epilogue computes from the float64 accumulator ``acc`` (before
    the output rounding); an ``aux`` node's expected contents land in ``args["_aux"]``."""
    v = np.asarray(acc, np.float64)
    for nd in nodes:
        v = nd.reference(v, args, out_dtype)
    return v


__all__ = ["EpilogueNode", "ScaleBy", "ScaleByVector", "AddC", "Bias", "Activation", "Aux", "parse_node",
           "parse_nodes", "random_args", "reference", "spell"]
