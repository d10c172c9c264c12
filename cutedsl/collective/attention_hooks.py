"""FlexAttention-style hooks of the attention kernel: a ``score_mod`` that rewrites each score and
a ``mask_mod`` that says which (query, key) pairs are kept, written once in Python and used by
the kernel (as IR), by the float64 reference and by the host-side block mask (as numpy).

Signatures (FlexAttention's)::

    score_mod(score, batch, head, q_idx, kv_idx) -> score      # f32 in, f32 out
    mask_mod(batch, head, q_idx, kv_idx) -> predicate          # True: keep the pair

``score`` is the scaled score ``S = q . k * softmax_scale`` (natural-log units, before any
masking); indices are signed i32: ``batch`` the sequence, ``head`` the query head (0 ..
heads - 1; with GQA the K/V head is ``head // group``), ``q_idx`` / ``kv_idx`` the query and key
positions in their sequences. A hook body uses the operators and functions of
:mod:`cutedsl.collective.attention_hook_ops`. A plain function (or any callable) is wrapped into
a :class:`ScoreMod` / :class:`MaskMod`; a subclass may also declare kernel parameters
(:meth:`ScoreMod.params`: tensors indexed by the problem sizes ``batch``, ``heads``, ``seqlen_q``,
``seqlen_k``, or f32 / i32 scalars) and read them from a last ``ctx`` argument
(``ctx.<name>[i, j]`` loads an element; ``ctx.seqlen_k`` ... are the sizes), and a numpy
``reference`` when its kernel body cannot run on numpy arrays. Built-ins:
:mod:`cutedsl.collective.attention_hook_builtins`; block masks:
:mod:`cutedsl.collective.attention_block_mask`.

How the attention kernel calls them (FlexAttention's order: score_mod, then mask)::

    hooks = AttentionHooks(score_mod, mask_mod)        # host, no MLIR
    params += hooks.kernel_params()                    # the hooks' tensors and scalars
    config["hooks"] = hooks.identity()                 # their code in the cache key
    ...                                                # while building the kernel:
    bound = hooks.bind(args, problem)                  # once: args namespace, sizes as IR i32
    s = bound.apply(s, b, h, q_idx, kv_idx)            # per accumulator element -> f32, -inf if masked
    s = bound.apply(s, b, h, q_idx, kv_idx, mask=False)   # on a block the block mask calls full

then the online softmax scales by log2(e) and runs ``exp2``. The FA3-style kernel
(:mod:`cutedsl.kernel.attention`, through ``AttentionConfig(score_mod=, mask_mod=)``) calls the
two halves of ``apply`` at their own places: ``bound.score`` after softcap, ``bound.keep`` anded
into its band mask in the blocks it masks. The kernel masks keys past
``seqlen_k`` itself; hooks may be evaluated on padding rows/columns of partial tiles (their
tensor loads are clamped into bounds, results there are discarded). Errors in a hook
(signature, return type, an unsupported operation) are :class:`~cutedsl.errors.HookError` naming
the hook, where it is defined and the fix, raised while the kernel is built.
"""
from __future__ import annotations

import inspect
import types

import numpy as np

from ..compiler.artifact import ParamSpec as Param
from ..errors import ArgumentError, ConfigError, HookError
from ..ir._lazy import lazy
from .attention_hook_ops import SUPPORTED, HookValue, lift

cir = lazy("cutedsl.ir")

#: problem sizes a hook reads from ``ctx`` and a parameter's ``shape`` may name
DIMS = ("batch", "heads", "seqlen_q", "seqlen_k")
#: element types of hook tensors (loaded as f32, or i32 for i32)
TENSOR_DTYPES = ("f32", "f16", "bf16", "i32")


def _where_defined(fn) -> str:
    try:
        return f"{inspect.getsourcefile(fn) or '?'}:{inspect.getsourcelines(fn)[1]}"
    except (OSError, TypeError):
        return getattr(getattr(fn, "__code__", None), "co_filename", "<unknown>")


class _Hook:
    role = ""               #: "score_mod" or "mask_mod": the method a subclass implements
    ARGS = ()               #: its arguments, besides an optional last ``ctx``

    def params(self) -> list:
        """Kernel parameters this hook reads (``Param``): ``ptr`` with ``dtype`` (f32, f16, bf16,
        i32) and ``shape`` (ints or the names in :data:`DIMS`, row-major), or ``f32`` / ``i32``
        scalars. Default: none."""
        return []

    def _fn(self):
        fn = getattr(self, self.role, None)
        if fn is None:
            raise HookError(f"{type(self).__qualname__} is a {self.role} class without a {self.role} "
                            f"method: define {self.role}(self, "
                            f"{', '.join(self.ARGS)}[, ctx])")
        return fn

    def describe(self) -> str:
        """``role name (file:line)``: how errors name this hook."""
        fn = self._fn()
        name = getattr(fn, "__qualname__", type(self).__qualname__)
        return f"{self.role} {name} ({_where_defined(getattr(fn, '__func__', fn))})"

    def _takes_ctx(self) -> bool:
        """Check the signature: ``len(ARGS)`` arguments, optionally ``ctx`` last."""
        fn = self._fn()
        try:
            sig = inspect.signature(fn)
        except (TypeError, ValueError):
            return False            # a builtin callable: called with the plain arguments
        ps = list(sig.parameters.values())
        if any(p.kind is p.VAR_POSITIONAL for p in ps):
            return False
        pos = [p for p in ps if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        required = [p for p in ps if p.default is p.empty and p.kind is not p.VAR_KEYWORD]
        n = len(self.ARGS)
        if len(pos) in (n, n + 1) and len(required) <= len(pos):
            return len(pos) == n + 1
        got = ", ".join(p.name for p in ps)
        raise HookError(f"{self.describe()} takes ({got}); a {self.role} takes ({', '.join(self.ARGS)}) "
                        f"and optionally a last ctx (its parameters and the problem sizes): change its "
                        f"signature to that")

    def reference(self, *args):
        """numpy version (``args``: the hook's arguments then ``ctx``): float64 score arrays,
        int64 index arrays that broadcast, ints. Default: the kernel body itself, run on numpy."""
        *plain, ctx = args
        return self._fn()(*plain, ctx) if self._takes_ctx() else self._fn()(*plain)

    def identity(self) -> dict:
        """JSON-able identity of the code and state that generate this hook (cache key)."""
        from ..compiler.identity import code_identity
        return {"hook": f"{type(self).__module__}.{type(self).__qualname__}", "state": _state(self),
                "code": code_identity(self)}

    def evaluate(self, args: tuple, ctx, host: bool):
        """Call the hook (IR: ``args`` are HookValues; host: numpy); errors become HookError."""
        try:
            if host:
                return self.reference(*args, ctx)
            fn = self._fn()
            return fn(*args, ctx) if self._takes_ctx() else fn(*args)
        except HookError:
            raise
        except (TypeError, AttributeError, OverflowError, IndexError) as e:
            raise HookError(f"{self.describe()} failed {'on the host' if host else 'while the kernel was built'}: "
                            f"{e}. A hook may use {SUPPORTED}") from e


def _state(obj) -> str:
    """Deterministic text of an instance's own data (attrs repr, or its plain attributes)."""
    import attrs
    if attrs.has(type(obj)):
        return repr(obj)
    from ..compiler.identity import function_identity
    out = []
    for k, v in sorted(getattr(obj, "__dict__", {}).items()):
        if isinstance(v, types.FunctionType):
            out.append((k, function_identity(v)["code"]))
        elif isinstance(v, (int, float, str, bytes, bool, tuple, type(None))):
            out.append((k, repr(v)))
        else:
            out.append((k, type(v).__qualname__))
    return repr(out)


class ScoreMod(_Hook):
    """A score modification: subclass it and define ``score_mod(self, score, batch, head, q_idx,
    kv_idx[, ctx])`` returning the new f32 score (FlexAttention's ``score_mod``); optionally
    :meth:`params` and a numpy :meth:`reference` with the same arguments."""
    role, ARGS = "score_mod", ("score", "batch", "head", "q_idx", "kv_idx")


class MaskMod(_Hook):
    """A mask: subclass it and define ``mask_mod(self, batch, head, q_idx, kv_idx[, ctx])``
    returning a predicate, True where the pair is kept (FlexAttention's ``mask_mod``)."""
    role, ARGS = "mask_mod", ("batch", "head", "q_idx", "kv_idx")


class _Function:
    """A plain callable as a hook."""

    def __init__(self, fn):
        self.fn = fn

    def _fn(self):
        return self.fn

    def identity(self) -> dict:
        from ..compiler.identity import code_identity, function_identity
        if isinstance(self.fn, types.FunctionType):
            return {"hook": "function", "function": function_identity(self.fn)}
        return {"hook": "callable", "state": _state(self.fn), "code": code_identity(self.fn)}

    def __repr__(self):
        return f"{type(self).__name__}({getattr(self.fn, '__qualname__', self.fn)!r})"


class FunctionScoreMod(_Function, ScoreMod):
    """A plain ``score_mod(score, batch, head, q_idx, kv_idx)`` callable."""


class FunctionMaskMod(_Function, MaskMod):
    """A plain ``mask_mod(batch, head, q_idx, kv_idx)`` callable."""


def _as_hook(x, cls, wrapper, other):
    if x is None or isinstance(x, cls):
        h = x
    elif isinstance(x, other):
        raise HookError(f"{x.describe()} is a {x.role}, passed as the {cls.role}: swap the two")
    elif isinstance(x, type):
        raise HookError(f"{cls.role} {x.__qualname__} is a class: pass an instance, {x.__qualname__}(...)")
    elif callable(x):
        h = wrapper(x)
    else:
        raise HookError(f"{cls.role} must be a callable or a {cls.__name__} instance, got {type(x).__name__}")
    if h is not None:
        h._takes_ctx()          # the signature, checked now
    return h


def as_score_mod(x) -> ScoreMod | None:
    """``x`` (None, a :class:`ScoreMod`, or a callable) as a ScoreMod; HookError otherwise."""
    return _as_hook(x, ScoreMod, FunctionScoreMod, MaskMod)


def as_mask_mod(x) -> MaskMod | None:
    """``x`` (None, a :class:`MaskMod`, or a callable) as a MaskMod; HookError otherwise."""
    return _as_hook(x, MaskMod, FunctionMaskMod, ScoreMod)


class HookTensor:
    """A hook's tensor parameter inside the kernel: ``t[i, j, ...]`` loads the row-major element
    (``ld.global``) as f32 (f16/bf16 converted) or i32. Each index is clamped into ``0 .. size -
    1``: the kernel evaluates hooks on the padding of partial tiles, whose results it discards."""

    def __init__(self, name: str, ptr, dtype: str, shape: tuple):
        self.name, self.ptr, self.dtype, self.shape = name, ptr, dtype, shape

    def __getitem__(self, idx):
        from .attention_hook_ops import maximum, minimum
        idx = idx if isinstance(idx, tuple) else (idx,)
        if len(idx) != len(self.shape):
            raise TypeError(f"tensor {self.name!r} has {len(self.shape)} dimensions, indexed with {len(idx)}")
        off = None
        for i, n in zip(idx, self.shape):
            i = maximum(minimum(lift(i), n - 1), 0)
            i64 = cir.i64(i.v)
            off = i64 if off is None else off * (cir.i64(n.v) if isinstance(n, HookValue) else n) + i64
        v = cir.GlobalPtr(self.ptr, self.dtype).load(off)
        return HookValue(v if self.dtype in ("f32", "i32") else v.to("f32"))


class HookContext:
    """What a hook reads besides its arguments: ``batch``, ``heads``, ``seqlen_q``, ``seqlen_k``
    (IR i32 or ints; numpy: ints) and each declared parameter by name (a :class:`HookTensor` /
    numpy array, a scalar)."""

    def __init__(self, values: dict):
        self.__dict__.update(values)

    def __getattr__(self, name):
        raise AttributeError(f"ctx has no {name!r}: it holds {', '.join(sorted(self.__dict__))}; declare "
                             f"a parameter in the hook's params()")


def _size(problem, name):
    v = problem.get(name) if isinstance(problem, dict) else getattr(problem, name, None)
    if v is None:
        raise ArgumentError(f"the attention problem gives no {name!r} (hooks read {', '.join(DIMS)})")
    return v


class AttentionHooks:
    """A ``score_mod`` and a ``mask_mod`` (either may be None) as the attention kernel uses them:
    see the module docstring. ``ConfigError`` when two hooks declare one parameter name, a
    parameter is named like a problem size, or its kind, dtype or shape is not one hooks read;
    ``HookError`` for a hook of the wrong kind or signature."""

    def __init__(self, score_mod=None, mask_mod=None):
        self.score_mod, self.mask_mod = as_score_mod(score_mod), as_mask_mod(mask_mod)
        seen = {}
        for h in self.hooks():
            for p in h.params():
                where = h.describe()
                if p.name in DIMS or p.name in seen:
                    raise ConfigError(f"{where} declares parameter {p.name!r}, already "
                                      f"{'a problem size' if p.name in DIMS else 'declared by ' + seen[p.name]}: "
                                      f"rename it")
                if p.kind == "ptr":
                    if p.dtype not in TENSOR_DTYPES or not p.shape or any(
                            not (isinstance(s, int) or s in DIMS) for s in p.shape):
                        raise ConfigError(f"{where}: tensor {p.name!r} needs dtype in {', '.join(TENSOR_DTYPES)} "
                                          f"and a shape of ints or {', '.join(DIMS)}, got {p.dtype}, {p.shape}")
                elif p.kind not in ("f32", "i32"):
                    raise ConfigError(f"{where}: parameter {p.name!r} is a {p.kind}; hooks read ptr, f32 or i32")
                seen[p.name] = where

    def hooks(self) -> tuple:
        return tuple(h for h in (self.score_mod, self.mask_mod) if h is not None)

    @property
    def has_mask(self) -> bool:
        return self.mask_mod is not None

    def kernel_params(self) -> list:
        """The hooks' parameters (``Param``), score_mod's first."""
        return [p for h in self.hooks() for p in h.params()]

    def identity(self) -> dict:
        """JSON-able identity of both hooks' code and state: put it in the kernel's config."""
        return {h.role: h.identity() for h in self.hooks()}

    # -- kernel side --------------------------------------------------------------------
    def bind(self, args, problem) -> "BoundHooks":
        """IR: the hooks over kernel ``args`` (a namespace with each :meth:`kernel_params` name)
        and ``problem`` (``AttentionProblem`` or dict with ``batch, heads, seqlen_q, seqlen_k``
        as IR i32 or ints)."""
        dims = {n: lift(_size(problem, n)) for n in DIMS}     # ints too: `~(ctx.x == y)` must be a predicate
        vals = dict(dims)
        for p in self.kernel_params():
            a = getattr(args, p.name)
            vals[p.name] = HookTensor(p.name, a, p.dtype, tuple(dims.get(s, s) for s in p.shape)) \
                if p.kind == "ptr" else lift(a)
        return BoundHooks(self, HookContext(vals))

    # -- host side ----------------------------------------------------------------------
    def host_context(self, args: dict, problem) -> HookContext:
        """numpy context: the sizes as ints and each parameter from ``args`` (by name), checked:
        ``ArgumentError`` for a missing one or a shape that disagrees with the declaration."""
        dims = {n: int(_size(problem, n)) for n in DIMS}
        vals = {n: np.int64(v) for n, v in dims.items()}     # numpy scalars: ~(x == y) is a logical not
        for p in self.kernel_params():
            if p.name not in args:
                raise ArgumentError(f"the attention hooks read {p.name!r}: pass it")
            v = args[p.name]
            if p.kind == "ptr":
                v = np.asarray(v)
                want = tuple(dims.get(s, s) for s in p.shape)
                if v.shape != want:
                    raise ArgumentError(f"{p.name} must have shape {p.shape} = {want}, got {v.shape}")
                v = v.astype(np.int64 if p.dtype == "i32" else np.float64)
            vals[p.name] = v
        return HookContext(vals)

    def reference_mods(self, args: dict, problem) -> tuple:
        """``(score_mod, mask_mod)`` numpy callables (None where absent) with the signatures
        :func:`cutedsl.device.attention_reference.attention_reference` takes."""
        ctx = self.host_context(args, problem)
        sm = mm = None
        if self.score_mod is not None:
            def sm(s, b, h, qi, kj):
                return host_score(self.score_mod, s, b, h, qi, kj, ctx)
        if self.mask_mod is not None:
            def mm(b, h, qi, kj):
                return host_keep(self.mask_mod, b, h, qi, kj, ctx)
        return sm, mm


def _np(*xs) -> tuple:
    """Indices as int64 numpy values: on a Python int, ``~(h == 1)`` would be the integer -2."""
    return tuple(np.asarray(x, np.int64) if not isinstance(x, np.ndarray) else x for x in xs)


def host_score(hook, s, b, h, qi, kj, ctx) -> np.ndarray:
    """numpy: ``hook`` (a ScoreMod) on float64 scores ``s``; HookError for a predicate result."""
    out = hook.evaluate((np.asarray(s, np.float64),) + _np(b, h, qi, kj), ctx, host=True)
    if isinstance(out, (bool, np.bool_)) or getattr(out, "dtype", None) == np.bool_:
        raise HookError(f"{hook.describe()} returned a predicate: a score_mod returns the score (f32); "
                        f"to mask, use a mask_mod or where(pred, score, float('-inf'))")
    return np.asarray(out, np.float64)


def host_keep(hook, b, h, qi, kj, ctx) -> np.ndarray:
    """numpy: ``hook`` (a MaskMod) -> bool array; HookError for a result that is no predicate."""
    out = hook.evaluate(_np(b, h, qi, kj), ctx, host=True)
    if not (isinstance(out, (bool, np.bool_)) or getattr(out, "dtype", None) == np.bool_):
        raise HookError(f"{hook.describe()} returned {type(out).__name__} "
                        f"{getattr(out, 'dtype', '')}: a mask_mod returns a predicate, e.g. q_idx >= kv_idx")
    return np.asarray(out, bool)


class BoundHooks:
    """The hooks of one kernel being built (from :meth:`AttentionHooks.bind`)."""

    def __init__(self, hooks: AttentionHooks, ctx: HookContext):
        self.hooks, self.ctx = hooks, ctx

    @staticmethod
    def _idx(*xs):
        return tuple(x if isinstance(x, int) else lift(x) for x in xs)

    def keep(self, batch, head, q_idx, kv_idx):
        """IR predicate (i1 Scalar): mask_mod at this element; Python True without a mask_mod."""
        m = self.hooks.mask_mod
        if m is None:
            return True
        out = m.evaluate(self._idx(batch, head, q_idx, kv_idx), self.ctx, host=False)
        if isinstance(out, (bool, np.bool_)):
            return bool(out)
        if not isinstance(out, HookValue) or out.kind != "i1":
            got = out.kind if isinstance(out, HookValue) else type(out).__name__
            raise HookError(f"{m.describe()} returned {got}: a mask_mod returns a predicate (a comparison, "
                            f"e.g. q_idx >= kv_idx, combined with & | ~)")
        return out.v

    def score(self, value, batch, head, q_idx, kv_idx):
        """IR f32: score_mod at this element (``value`` itself without one)."""
        s = self.hooks.score_mod
        if s is None:
            return value
        out = s.evaluate((lift(value),) + self._idx(batch, head, q_idx, kv_idx), self.ctx, host=False)
        if isinstance(out, (int, float)) and not isinstance(out, bool):
            return cir.const(float(out), "f32")
        if not isinstance(out, HookValue) or out.kind != "f32":
            got = out.kind if isinstance(out, HookValue) else type(out).__name__
            hint = " (a predicate): to mask, use a mask_mod or where(pred, score, float('-inf'))" \
                if got == "i1" else ""
            raise HookError(f"{s.describe()} returned {got}{hint}; a score_mod returns the f32 score")
        return out.v

    def apply(self, value, batch, head, q_idx, kv_idx, mask: bool = True):
        """IR f32: score_mod, then ``-inf`` where mask_mod drops the pair (``mask=False``: a block
        the block mask calls full, no mask evaluated). ``value`` f32 Scalar; indices i32 or ints."""
        v = self.score(value, batch, head, q_idx, kv_idx)
        if not mask or self.hooks.mask_mod is None:
            return v
        k = self.keep(batch, head, q_idx, kv_idx)
        if isinstance(k, bool):
            return v if k else cir.const(float("-inf"), "f32")
        return cir.select(k, v, cir.const(float("-inf"), "f32"))


__all__ = ["ScoreMod", "MaskMod", "FunctionScoreMod", "FunctionMaskMod", "AttentionHooks", "BoundHooks",
           "HookContext", "HookTensor", "as_score_mod", "as_mask_mod", "DIMS", "Param"]
