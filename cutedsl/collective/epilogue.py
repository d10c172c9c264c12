"""Epilogues: write a warpgroup's f32 accumulator tile to the output D (``M x N``, row-major).

Subclasses customise the math through :meth:`Epilogue.visit` (``value, row, col -> value``,
called per element in f32 with global coordinates) and may add kernel parameters through
:meth:`Epilogue.extra_params` (e.g. a bias vector), read in ``visit`` through its ``ctx``
argument (``ctx.args``).

* :class:`GlobalEpilogue` — registers -> global memory with per-element bounds checks
  (``st.global``); no shared memory. Its per-element :meth:`GlobalEpilogue.write` is a hook.
* :class:`AtomicAddEpilogue` — like ``GlobalEpilogue`` but adds into D with
  ``red.global.add.f32`` (several CTAs may reduce into one tile: split-K without a workspace);
  ``accumulates = True`` makes the Device layer zero-fill D before the launch.
* :class:`TmaStoreEpilogue` (in :mod:`.epilogue_tma`) — registers -> 128-byte-swizzled shared sub-tiles of
  ``64 x (128 B)`` (``stmatrix`` for 16-bit outputs) -> ``fence.proxy.async`` + warpgroup
  named barrier -> TMA store by one thread, pipelined over several sub-tile buffers; the
  TMA unit clips elements outside ``M x N``.
"""
from __future__ import annotations

import attrs
from ..atom.cvt import FP8, to_fp8_bits
from ..compiler.artifact import ParamSpec as Param
from ..errors import one_of
from ..ir._lazy import lazy

cir = lazy("cutedsl.ir")


@attrs.define
class EpilogueContext:
    """Where the tile goes: tile origin ``(m0, n0)`` and problem ``(m, n)`` (IR i32),
    ``row_base`` rows added for this warpgroup (int or IR i32), the kernel ``args`` and bound
    ``smem``; ``warpgroup``: index (int or IR i32) of the storing warpgroup among those that
    store concurrently (selects its epilogue buffers and named barrier); ``l``: the batch index
    of the tile (0 today); ``problem``: the whole ``GemmProblem`` (M, N, K, L) when the kernel
    knows it."""
    m0: object
    n0: object
    m: object
    n: object
    args: object
    smem: object = None
    row_base: int = 0
    warpgroup: object = 0
    l: object = 0
    problem: object = None
    #: set by a TMA epilogue while it processes a sub-tile whose C it loaded by TMA:
    #: ``(shared address (i64), first row, first column, columns)`` of the C sub-tile
    c_tile: object = None


def _takes_ctx(fn) -> bool:
    """``visit(self, value, row, col, ctx)`` (the context as an argument) or the earlier
    ``visit(self, value, row, col)``."""
    import inspect
    params = list(inspect.signature(fn).parameters.values())
    return len(params) >= 5 or any(p.kind is p.VAR_POSITIONAL for p in params)


class Epilogue:
    """Base epilogue. ``out_dtype``: f32, f16, bf16, e4m3 or e5m2 (fp8 outputs round to nearest
    even and saturate to the largest finite value, ``cvt.rn.satfinite``); tile ``tile_m x tile_n``.

    Class attributes read by the Device layer: ``kind`` (``"global"``: D is a pointer
    parameter, C-contiguous; ``"tma"``: D is a tensor map; must match ``GemmConfig.epilogue``)
    and ``accumulates`` (True: the kernel adds into D, so D is zero-filled before the launch)."""

    kind = None
    accumulates = False
    OUT_DTYPES = ("f32", "f16", "bf16", "e4m3", "e5m2")   #: output types (fp8: round to nearest, saturate)
    KINDS = ("tma", "global")                #: the ``kind`` values an epilogue can have
    #: placement options a kernel's plan may set through :meth:`configure` (none here)
    OPTIONS = ()
    #: fused nodes (:mod:`cutedsl.collective.fusion`) applied before :meth:`visit`; set by :meth:`fuse`
    fusion = ()
    #: set by a batched kernel: D is (L, M, N) and ``ctx.l`` selects the batch
    batched = False

    def __init__(self, tile_m: int, tile_n: int, out_dtype: str = "f32"):
        if out_dtype not in self.OUT_DTYPES:
            raise ValueError(f"epilogue output dtype must be {one_of(self.OUT_DTYPES, quote=False)}, got {out_dtype}")
        self.tile_m, self.tile_n, self.out_dtype = tile_m, tile_n, out_dtype

    def configure(self, **options):
        """Apply a kernel plan's placement options (only names in :attr:`OPTIONS`; ``None``
        keeps the current value). Returns self."""
        unknown = sorted(set(options) - set(self.OPTIONS))
        if unknown:
            raise ValueError(f"{type(self).__name__} takes no epilogue option {unknown[0]!r} "
                             f"(it has {', '.join(self.OPTIONS) or 'none'})")
        return self

    def fuse(self, nodes) -> "Epilogue":
        """Apply the fused ``nodes`` (``EpilogueNode`` objects, :mod:`cutedsl.collective.fusion`)
        to every accumulator element, in order, before :meth:`visit`. ``ValueError`` for an
        accumulating epilogue (a node would act on each partial sum) or a parameter name that
        :meth:`extra_params` declares too. Returns self."""
        nodes = tuple(nd.bind(self.out_dtype) for nd in nodes)
        if nodes and self.accumulates:
            raise ValueError(f"{type(self).__name__} adds partial sums into D: fused epilogue nodes "
                             f"would apply to each partial sum, not to the result")
        self.fusion = nodes
        names = [p.name for p in self.kernel_params()]
        dup = sorted({x for x in names if names.count(x) > 1})
        if dup:
            raise ValueError(f"epilogue parameter {dup[0]!r} is declared twice (a fused node and "
                             f"{type(self).__name__}.extra_params)")
        return self

    def init(self, smem, leader) -> None:
        """IR: initialise this epilogue's mbarriers from the threads where ``leader`` holds;
        kernels call it with their own barrier inits (before the init fence). None here."""

    def kernel_params(self) -> list:
        """Every kernel parameter besides D: the fused nodes', then :meth:`extra_params`. In a
        batched kernel a node's (M, N) matrix (C, aux) is (L, M, N)."""
        nodes = [p for nd in self.fusion for p in nd.params(self.out_dtype)]
        if self.batched:
            nodes = [attrs.evolve(p, shape=("l",) + p.shape) if p.shape == ("m", "n") else p for p in nodes]
        return nodes + list(self.extra_params())

    # -- extension points ----------------------------------------------------------
    def extra_params(self) -> list:
        """Kernel parameters this epilogue needs besides D (list of ``Param``)."""
        return []

    def visit(self, value, row, col, ctx):
        """Elementwise hook: f32 ``value`` at global ``(row, col)`` (unsigned i32) -> f32.

        Identity here. ``ctx`` is the tile's :class:`EpilogueContext` (``ctx.args``: the kernel
        arguments, extra parameters included; ``ctx.m``/``ctx.n``/``ctx.problem``: the problem;
        ``ctx.l``: the batch). ``row``/``col`` may lie outside the problem for partial tiles
        (those elements are not stored), so clamp any index you load with. (A ``visit(self,
        value, row, col)`` written for the earlier contract still works: it finds the context
        in ``self.ctx`` and ``self.args``.)"""
        return value

    # -- used by kernels -----------------------------------------------------------
    def d_param(self) -> Param:
        raise NotImplementedError

    def tensor_maps(self) -> list:
        return []

    def plan(self, plan) -> None:
        """Declare shared memory (none by default)."""

    def store(self, acc, ctx: EpilogueContext) -> None:
        raise NotImplementedError

    def _convert(self, v):
        if self.out_dtype in FP8:
            return to_fp8_bits(v, self.out_dtype)        # i8 bits (stored through an i8 pointer)
        return v if self.out_dtype == "f32" else v.to(self.out_dtype)

    def _visit_all(self, acc, ctx, base):
        """Apply the fused nodes, then ``visit``, with global coordinates; returns the new
        accumulator."""
        visit = type(self).visit is not Epilogue.visit
        if not visit and not self.fusion:
            return acc
        with_ctx = _takes_ctx(type(self).visit)
        if visit and not with_ctx:
            self.args, self.ctx = ctx.args, ctx          # the earlier three-argument contract

        def element(v, r, c):
            row, col = ctx.m0 + ctx.row_base + r, ctx.n0 + c
            for nd in self.fusion:
                v = nd.apply(v, row, col, ctx)
            if visit:
                v = self.visit(v, row, col, ctx) if with_ctx else self.visit(v, row, col)
            return v
        return acc.lazy_map(element, base)      # computed where the store reads each element


class GlobalEpilogue(Epilogue):
    """Registers -> global memory, each element guarded by ``row < M and col < N``."""

    kind = "global"

    def write(self, d, offset, value) -> None:
        """Write one element: ``value`` (``out_dtype``) at element ``offset`` (i64) of D
        (a ``GlobalPtr``); ``st.global`` here. Called under the bounds check."""
        d.store(offset, value)

    def d_param(self) -> Param:
        return Param("d", "ptr")

    def store(self, acc, ctx: EpilogueContext) -> None:
        frag = acc.layout                           # where each register's element lives
        base = frag.thread_base()
        acc = self._visit_all(acc, ctx, base)
        r0, c0 = base
        d = cir.GlobalPtr(ctx.args.d, "i8" if self.out_dtype in FP8 else self.out_dtype)
        grow = ctx.m0 + ctx.row_base + r0          # this thread's first global row / col
        gcol = ctx.n0 + c0
        ld = cir.i64(ctx.n.unsigned())
        if self.batched:                            # D is a contiguous (L, M, N) array
            d = cir.GlobalPtr(d.address(cir.i64(ctx.l) * cir.i64(ctx.m.unsigned()) * ld), d.dtype.name)
        for b in range(acc.m_blocks):
            for i in range(acc.regs):
                dr, dc = frag.offset(b, i)
                row, col = grow + dr, gcol + dc
                with cir.If((row < ctx.m.unsigned()) & (col < ctx.n.unsigned())):
                    self.write(d, cir.i64(row.unsigned()) * ld + cir.i64(col.unsigned()),
                               self._convert(acc.get(b, i)))


class AtomicAddEpilogue(GlobalEpilogue):
    """``D += tile`` with ``red.global.add.f32`` per element (``GlobalPtr.atomic_add``): CTAs
    that compute partial sums of the same tile (split-K) reduce into D without a workspace.
    f32 output only (a pair-wise f16x2 reduction needs even, in-bounds column pairs).
    The Device layer zero-fills D first (``accumulates``). Summation order across CTAs is not
    fixed, so results may differ in the last bits from run to run."""

    accumulates = True

    def __init__(self, tile_m: int, tile_n: int, out_dtype: str = "f32"):
        if out_dtype != "f32":
            raise ValueError(f"AtomicAddEpilogue reduces in f32: out_dtype must be f32, got {out_dtype}")
        super().__init__(tile_m, tile_n, out_dtype)

    def write(self, d, offset, value) -> None:
        d.atomic_add(offset, value)


# the TMA-store epilogue lives in its own module; imported here so every existing import works
from .epilogue_tma import TmaStoreEpilogue  # noqa: E402,F401
