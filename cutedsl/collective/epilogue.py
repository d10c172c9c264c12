"""Epilogues: write a warpgroup's f32 accumulator tile to the output D (``M x N``, row-major).

Subclasses customise the math through :meth:`Epilogue.visit` (``value, row, col -> value``,
called per element in f32 with global coordinates) and may add kernel parameters through
:meth:`Epilogue.extra_params` (e.g. a bias vector), read in ``visit`` via ``self.args``.

* :class:`GlobalEpilogue` — registers -> global memory with per-element bounds checks
  (``st.global``); no shared memory. Its per-element :meth:`GlobalEpilogue.write` is a hook.
* :class:`AtomicAddEpilogue` — like ``GlobalEpilogue`` but adds into D with
  ``red.global.add.f32`` (several CTAs may reduce into one tile: split-K without a workspace);
  ``accumulates = True`` makes the Device layer zero-fill D before the launch.
* :class:`TmaStoreEpilogue` — registers -> shared memory (sub-tiles of ``tile_m x epi_n``)
  -> ``fence.proxy.async`` + CTA barrier -> TMA store by one thread -> bulk commit/wait;
  the TMA unit clips elements outside ``M x N``.
"""
from __future__ import annotations

import attrs
from ..atom.tma import TmaCopy, bulk_commit_group, bulk_wait_group, tma_store_fence
from ..compiler.artifact import ParamSpec as Param, TensorMapSpec
from ..dtypes import dtype as _dtype
from ..ir._lazy import lazy

gpu, memref = lazy("mlir.dialects.gpu"), lazy("mlir.dialects.memref")
cir = lazy("cutedsl.ir")


@attrs.define
class EpilogueContext:
    """Where the tile goes: tile origin ``(m0, n0)`` and problem ``(m, n)`` (IR i32),
    ``row_base`` rows added for this warpgroup (int), the kernel ``args`` and bound ``smem``.
    ``sync``: emits the barrier among the threads storing this tile (default ``bar.sync 0``,
    the whole CTA; warp-specialized kernels pass a named barrier over their consumer
    threads); ``leader``: i1, the one thread that issues TMA stores (default thread 0)."""
    m0: object
    n0: object
    m: object
    n: object
    args: object
    smem: object = None
    row_base: int = 0
    sync: object = None
    leader: object = None

    def barrier(self) -> None:
        if self.sync is None:
            gpu.barrier()
        else:
            self.sync()


class Epilogue:
    """Base epilogue. ``out_dtype``: f32, f16 or bf16; tile ``tile_m x tile_n``.

    Class attributes read by the Device layer: ``kind`` (``"global"``: D is a pointer
    parameter, C-contiguous; ``"tma"``: D is a tensor map; must match ``GemmConfig.epilogue``)
    and ``accumulates`` (True: the kernel adds into D, so D is zero-filled before the launch)."""

    kind = None
    accumulates = False

    def __init__(self, tile_m: int, tile_n: int, out_dtype: str = "f32"):
        if out_dtype not in ("f32", "f16", "bf16"):
            raise ValueError(f"epilogue output dtype must be f32, f16 or bf16, got {out_dtype}")
        self.tile_m, self.tile_n, self.out_dtype = tile_m, tile_n, out_dtype

    # -- extension points ----------------------------------------------------------
    def extra_params(self) -> list:
        """Kernel parameters this epilogue needs besides D (list of ``Param``)."""
        return []

    def visit(self, value, row, col):
        """Elementwise hook: f32 ``value`` at global ``(row, col)`` (unsigned i32) -> f32.

        Identity here. ``self.args`` (kernel arguments) and ``self.ctx`` (``EpilogueContext``:
        problem ``m``, ``n``) are available; ``row``/``col`` may lie outside the problem for
        partial tiles (those elements are not stored), so clamp any index you load with."""
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
        return v if self.out_dtype == "f32" else v.to(self.out_dtype)

    def _visit_all(self, acc, ctx, base):
        """Apply ``visit`` with global coordinates; returns the new accumulator."""
        if type(self).visit is Epilogue.visit:
            return acc
        self.args, self.ctx = ctx.args, ctx
        return acc.map(lambda v, r, c: self.visit(v, ctx.m0 + ctx.row_base + r, ctx.n0 + c), base)


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
        base = acc.thread_coords()
        acc = self._visit_all(acc, ctx, base)
        r0, c0 = base
        d = cir.GlobalPtr(ctx.args.d, self.out_dtype)
        grow = ctx.m0 + ctx.row_base + r0          # this thread's first global row / col
        gcol = ctx.n0 + c0
        ld = cir.i64(ctx.n.unsigned())
        for b in range(acc.m_blocks):
            for i in range(acc.regs):
                dr, dc = acc.reg_offset(b, i)
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


class TmaStoreEpilogue(Epilogue):
    """Registers -> shared ``[tile_m x epi_n]`` sub-tiles -> TMA store (clipped at M, N).

    ``epi_n`` (columns per sub-tile) defaults to the widest of 64/128/256 dividing ``tile_n``
    whose sub-tile fits 32 KiB.
    """

    def __init__(self, tile_m: int, tile_n: int, out_dtype: str = "f32", epi_n: int | None = None):
        super().__init__(tile_m, tile_n, out_dtype)
        e = _dtype(out_dtype).nbytes
        if epi_n is None:
            epi_n = max(c for c in (8, 16, 32, 64, 128, 256)
                        if tile_n % c == 0 and tile_m * c * e <= 32768 and c * e % 16 == 0)
        if tile_n % epi_n or epi_n > 256 or (epi_n * e) % 16:
            raise ValueError(f"epi_n {epi_n} must divide tile_n {tile_n}, be <= 256 and span a multiple of 16 B")
        self.epi_n = epi_n

    kind = "tma"

    def d_param(self) -> Param:
        return Param("d", "tensormap")

    def tensor_maps(self) -> list:
        return [TensorMapSpec("d", self.out_dtype, (self.tile_m, self.epi_n), swizzle=0)]

    def plan(self, plan) -> None:
        plan.buffer("epilogue", (self.tile_m, self.epi_n), self.out_dtype, 1, align=128)

    def store(self, acc, ctx: EpilogueContext) -> None:
        base = acc.thread_coords()
        acc = self._visit_all(acc, ctx, base)
        r0, c0 = base
        tma = TmaCopy(self.tensor_maps()[0], ctx.args.d)
        tile = ctx.smem["epilogue"].tile(0)
        view = tile.memref()
        leader = ctx.leader if ctx.leader is not None else cir.thread_idx().eq(0)
        regs_per_sub = self.epi_n // 8 * 4         # 4 registers per 8 columns
        for sub in range(self.tile_n // self.epi_n):
            for b in range(acc.m_blocks):
                for i in range(sub * regs_per_sub, (sub + 1) * regs_per_sub):
                    dr, dc = acc.reg_offset(b, i)
                    row = cir.index(r0 + (ctx.row_base + dr))
                    col = cir.index(c0 + (dc - sub * self.epi_n))
                    memref.store(self._convert(acc.get(b, i)), view, [row, col])
            tma_store_fence()          # generic smem writes -> visible to the TMA (async proxy)
            ctx.barrier()
            with cir.If(leader):
                tma.store(tile, (ctx.m0, ctx.n0 + sub * self.epi_n))
                bulk_commit_group()
                bulk_wait_group(0, read=True)
            ctx.barrier()              # the sub-tile buffer is reused by the next sub-tile
