"""Structured control flow as Python (emits ``scf``).

Loops::

    loop = Loop(0, k_tiles, carry=[acc])      # bounds: Python ints or IR integers
    for k, (acc,) in loop:                    # the body is traced once
        acc = acc + 1
        loop.next(acc)                        # values carried into the next iteration
    acc, = loop.results

While loops (``scf.while``; the condition is evaluated on the carried values before each
iteration)::

    lo, hi = While([lo0, hi0], cond=lambda lo, hi: hi - lo > 1, body=lambda lo, hi: (lo, mid)).results

Branches (the condition must be an IR ``i1``; branch on Python bools with plain ``if``)::

    br = If(tid.eq(0), results=["i32"])
    with br.then_():
        br.yield_(a)
    with br.else_():
        br.yield_(b)
    x, = br.results
"""
from __future__ import annotations

from mlir import ir
from mlir.dialects import scf

from .values import Scalar, const, index, mlir_type, to_type


class Loop:
    """An ``scf.for`` over ``[start, stop)`` with ``step`` and loop-carried values.

    The induction variable is an ``i32`` :class:`Scalar` (``signed`` as given, default unsigned
    since loop counters are non-negative). Carried values keep their types. Iterating the
    loop object yields exactly once (the body is traced, not executed).

    ``counter``: the type the loop counts in, ``"index"`` (64-bit after lowering) or
    ``"i32"`` (a 32-bit counter and compare: fewer instructions per iteration in hot loops;
    the bounds must fit in i32).
    """

    def __init__(self, start, stop=None, step=1, carry=(), signed=False, counter="index"):
        if stop is None:
            start, stop = 0, start
        if counter not in ("index", "i32"):
            raise ValueError(f"Loop counter type must be 'index' or 'i32', got {counter!r}")
        cv = index if counter == "index" else (lambda x: const(x, "i32") if isinstance(x, int) else to_type(x, "i32"))
        self._carry = list(carry)
        self._op = scf.ForOp(cv(start), cv(stop), cv(step), self._carry)
        self._signed = signed
        self._yielded = False
        self._entered = False

    def __iter__(self):
        if self._entered:
            raise RuntimeError("a Loop can be iterated only once")
        self._entered = True
        with ir.InsertionPoint(self._op.body):
            iv = Scalar(self._op.induction_variable).to("i32", signed=self._signed)
            iv.signed = self._signed
            args = [_rewrap(a, c) for a, c in zip(self._op.inner_iter_args, self._carry)]
            yield (iv, tuple(args)) if self._carry else iv
            if not self._yielded:
                if self._carry:
                    raise RuntimeError("Loop with carried values: call loop.next(...) at the end of the body")
                scf.YieldOp([])
                self._yielded = True

    def next(self, *values):
        """Yield the values carried into the next iteration (same count and types as ``carry``)."""
        if len(values) != len(self._carry):
            raise ValueError(f"Loop carries {len(self._carry)} values, next() got {len(values)}")
        for v, c in zip(values, self._carry):
            if v.type != c.type:
                raise TypeError(f"carried value type changed: {c.type} -> {v.type}")
        scf.YieldOp(list(values))
        self._yielded = True

    @property
    def results(self) -> tuple:
        """The carried values after the last iteration."""
        return tuple(_rewrap(r, c) for r, c in zip(self._op.results, self._carry))


def _rewrap(v, like):
    if isinstance(like, Scalar) and isinstance(v, Scalar):
        v.signed = like.signed
    return v


class If:
    """An ``scf.if`` on an IR ``i1`` condition, optionally with results and an else branch.

    Without results, ``with If(c): ...`` builds the then-branch; ``then_()``/``else_()`` may
    each be used once. With results, both branches must end with ``yield_(...)``.
    """

    def __init__(self, cond, results=()):
        if isinstance(cond, bool):
            raise TypeError("If() needs an IR condition; for a compile-time bool use a plain Python `if`")
        self._types = [mlir_type(t) for t in results]
        self._op = scf.IfOp(cond, self._types, has_else=True)
        self._done = set()
        if not self._types:   # empty branches are valid: pre-terminate both blocks
            for b in (self._op.then_block, self._op.else_block):
                with ir.InsertionPoint(b):
                    scf.YieldOp([])

    class _Branch:
        def __init__(self, owner, block, which):
            self.owner, self.block, self.which = owner, block, which

        def __enter__(self):
            if self.which in self.owner._done:
                raise RuntimeError(f"the {self.which} branch of this If was already built")
            o = self.owner
            self._ip = (ir.InsertionPoint(self.block) if o._types
                        else ir.InsertionPoint.at_block_terminator(self.block))
            self._ip.__enter__()
            o._yielded = False
            return self

        def __exit__(self, et, ev, tb):
            o = self.owner
            self._ip.__exit__(et, ev, tb)
            if et is None and o._types and not o._yielded:
                raise RuntimeError("If with results: call yield_(...) at the end of each branch")
            o._done.add(self.which)
            return False

    def then_(self):
        return If._Branch(self, self._op.then_block, "then")

    def else_(self):
        return If._Branch(self, self._op.else_block, "else")

    def yield_(self, *values):
        if not self._types:
            raise RuntimeError("yield_() is only for an If with results")
        scf.YieldOp(list(values))
        self._yielded = True

    def __enter__(self):
        if self._types:
            raise RuntimeError("If with results: use then_() and else_()")
        self._short = self.then_()
        return self._short.__enter__()

    def __exit__(self, et, ev, tb):
        return self._short.__exit__(et, ev, tb)

    @property
    def results(self) -> tuple:
        if self._types and self._done != {"then", "else"}:
            raise RuntimeError("If results are available after both branches are built")
        return tuple(self._op.results)


class While:
    """An ``scf.while`` over carried values ``init`` (IR values): ``cond(*values)`` (an IR i1)
    is traced in the before-region, ``body(*values)`` (returning the next values, same count
    and types) in the after-region; :attr:`results` are the values when ``cond`` fails."""

    def __init__(self, init, cond, body):
        init = list(init)
        types = [v.type for v in init]
        self._init = init
        self._op = scf.WhileOp(types, init)
        before = self._op.before.blocks.append(*types)
        with ir.InsertionPoint(before):
            args = [_rewrap(Scalar(a), c) for a, c in zip(before.arguments, init)]
            scf.ConditionOp(cond(*args), list(before.arguments))
        after = self._op.after.blocks.append(*types)
        with ir.InsertionPoint(after):
            args = [_rewrap(Scalar(a), c) for a, c in zip(after.arguments, init)]
            nxt = list(body(*args))
            if len(nxt) != len(init):
                raise ValueError(f"While carries {len(init)} values, body returned {len(nxt)}")
            scf.YieldOp(nxt)

    @property
    def results(self) -> tuple:
        return tuple(_rewrap(Scalar(r), c) for r, c in zip(self._op.results, self._init))
