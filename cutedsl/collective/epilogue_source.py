"""The epilogue's source matrix C loaded by TMA (CUTLASS's sm90 epilogue "source" load).

A TMA-store epilogue whose fused nodes add ``beta * C`` (:class:`~cutedsl.collective.fusion.AddC`)
reads C through a tensor map instead of per-element global loads: for each output sub-tile
(``SUB_M`` rows x ``epi_n`` columns) one thread of the storing warpgroup arms the warpgroup's
mbarrier with the box's bytes and issues the TMA load of the same C sub-tile into the
warpgroup's ``c_in`` buffer (row-major, unswizzled: any C dtype with 16-byte box rows); every
thread waits for the phase, and the node reads its elements from shared memory. The load of
sub-tile ``s`` is issued after the warpgroup barrier that ends sub-tile ``s - 1``, so no
thread still reads the buffer it overwrites. Rows and columns outside the problem are
zero-filled by TMA (and never stored). A call with an odd number of sub-tiles completes one
more phase with a plain arrive, so every call (every tile of a persistent kernel) starts at
parity 0.
"""
from __future__ import annotations

from ..atom.tma import TmaCopy
from ..compiler.artifact import TensorMapSpec
from ..dtypes import dtype as _dtype
from ..ir._lazy import lazy

cir = lazy("cutedsl.ir")
MB = lazy("cutedsl.atom.mbarrier")
#: C's sub-tiles are read element by element at fragment positions: an unswizzled row-major
#: box (any dtype; bank conflicts cost the epilogue, not the main loop)
UNSWIZZLED = 0


class TmaSource:
    """C of ``dtype`` loaded in ``sub_m x epi_n`` boxes for ``warpgroups`` storing warpgroups
    (each its own buffer and mbarrier); ``batched``: C is (L, M, N) (a rank-3 map)."""

    PARAM = "c"

    def __init__(self, dtype: str, sub_m: int, epi_n: int, warpgroups: int = 1, batched: bool = False):
        self.dtype, self.sub_m, self.epi_n = dtype, sub_m, epi_n
        self.warpgroups, self.batched = warpgroups, batched
        row = epi_n * _dtype(dtype).nbytes
        if row % 16:
            raise ValueError(f"a C sub-tile row of {epi_n} {dtype} elements is {row} B; TMA needs multiples of 16 B")

    def spec(self) -> TensorMapSpec:
        lead = (1,) if self.batched else ()
        return TensorMapSpec(self.PARAM, self.dtype, lead + (self.sub_m, self.epi_n), swizzle=UNSWIZZLED)

    def plan(self, plan) -> None:
        plan.buffer("c_in", (self.sub_m, self.epi_n), self.dtype, self.warpgroups, swizzle=UNSWIZZLED)
        plan.barriers("c_bar", self.warpgroups)

    def init(self, smem, leader) -> None:
        MB.MBarriers(smem.barriers("c_bar"), self.warpgroups).init_all(1, predicate=leader)

    def load(self, ctx, s: int, row0, col0, leader, wg):
        """IR: load C's sub-tile at ``(row0, col0)`` (sub-tile ``s`` of this call) and wait for
        it; returns the ``EpilogueContext.c_tile`` record."""
        bars = MB.MBarriers(ctx.smem.barriers("c_bar"), self.warpgroups)
        buf = ctx.smem["c_in"]
        tile = buf.tile(wg)
        tma = TmaCopy(self.spec(), getattr(ctx.args, self.PARAM))
        lead = (ctx.l,) if self.batched else ()
        with cir.If(leader):
            bars.arrive_expect_tx(wg, tma.box_bytes)
            tma.load(tile, bars, wg, lead + (row0, col0))
        bars.wait(wg, s & 1)
        return buf.address(wg), row0, col0, self.epi_n

    def finish(self, ctx, subs: int, leader, wg) -> None:
        """After the call's last sub-tile (and its warpgroup barrier): complete one more phase
        when ``subs`` is odd, so the next call starts at parity 0."""
        if subs % 2:
            bars = MB.MBarriers(ctx.smem.barriers("c_bar"), self.warpgroups)
            with cir.If(leader):
                bars.arrive(wg)

    def read(self, c_tile, row, col):
        """IR: the f32 value of C at global ``(row, col)`` from the loaded sub-tile."""
        from mlir import ir
        from mlir.dialects import llvm
        addr, row0, col0, cols = c_tile
        e = _dtype(self.dtype).nbytes
        off = (cir.i64(cir.u32(row - row0)) * cols + cir.i64(cir.u32(col - col0))) * e
        ptr = llvm.inttoptr(ir.Type.parse("!llvm.ptr<3>"), cir.i32(addr + off))
        v = cir.Scalar(llvm.load(cir.mlir_type(self.dtype), ptr))
        return v if self.dtype == "f32" else v.to("f32")


__all__ = ["TmaSource"]
