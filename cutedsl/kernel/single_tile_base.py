"""The single-tile GEMM, arch-neutral: what the sm_90a kernel (:mod:`.single_tile`, WGMMA with the
accumulator in registers) and the sm_100a kernel (:mod:`.single_tile_sm100`, tcgen05 with the
accumulator in tensor memory) share, composed into each (neither derives from the other): one
shared-memory slot for A and B and its mbarrier, the TMA boxes and tensor maps, the per-k-tile
load, problem binding, and the one-stage rule. Each architecture adds its roles' IR."""
from __future__ import annotations

from .gemm import GemmKernel


class SingleTileGemmBase(GemmKernel):
    """One smem slot, one TMA mbarrier, per k-tile load -> wait -> MMA -> wait (NVDSL chapter 3);
    not a kernel by itself (no MMA atom, no role body)."""

    @staticmethod
    def stage_reason(config) -> str | None:
        """A single-tile kernel has exactly one stage."""
        if config.stages not in ("auto", 1):
            return f"single_tile has exactly one stage, got stages={config.stages!r}"
        return None

    def plan_extra(self, plan) -> None:
        """One slot for A and B (swizzled as the MMA traits say) and its mbarrier."""
        t = self.traits
        # M-/N-major: the boxes of mn_box columns stacked, the same bytes as rows x k_tile
        a_shape = ((self.tile_m // t.mn_box) * t.k_tile, t.mn_box) if self.a_major == "MN" else (self.tile_m, t.k_tile)
        b_shape = ((self.tile_n // t.mn_box) * t.k_tile, t.mn_box) if self.b_major == "MN" else (self.tile_n, t.k_tile)
        plan.buffer("a", a_shape, self.dtype, swizzle=t.swizzle, major=self.a_major)
        plan.buffer("b", b_shape, self.b_dtype, swizzle=t.swizzle, major=self.b_major)
        plan.barriers("bar", 1)

    def boxes(self) -> tuple:
        """The TMA boxes of A and B: a whole k-tile (K-major), or ``k_tile x mn_box`` (MN-major,
        several per tile)."""
        t = self.traits
        a_box = (t.k_tile, t.mn_box) if self.a_major == "MN" else (self.tile_m, t.k_tile)
        b_box = (t.k_tile, t.mn_box) if self.b_major == "MN" else (self.tile_n, t.k_tile)
        return a_box, b_box

    def load_k_tile(self, ta, tb, smem, bar, kt, m0, n0, la=(), lb=()) -> None:
        """IR, by one thread: expect the tile bytes on mbarrier 0 of ``bar`` and TMA-load k-tile
        ``kt`` of A (rows ``m0..``) and B (rows ``n0..``) into the slot (MN-major operands as
        boxes of ``mn_box`` columns); ``la``/``lb``: batch coordinates."""
        t, tm, tn = self.traits, self.tile_m, self.tile_n
        a_box, b_box = self.boxes()
        k0 = kt * t.k_tile
        bar.arrive_expect_tx(0, t.tile_bytes(tm + tn))
        if self.a_major == "MN":
            for j in range(tm // t.mn_box):
                dst = smem["a"].tile(shape=a_box, byte_offset=j * ta.box_bytes)
                ta.load(dst, bar, 0, la + (k0, m0 + t.mn_box * j))
        else:
            ta.load(smem["a"].tile(), bar, 0, la + (m0, k0))
        if self.b_major == "MN":
            for j in range(tn // t.mn_box):
                dst = smem["b"].tile(shape=b_box, byte_offset=j * tb.box_bytes)
                tb.load(dst, bar, 0, lb + (k0, n0 + t.mn_box * j))
        else:
            tb.load(smem["b"].tile(), bar, 0, lb + (n0, k0))

    def tensor_map_specs(self) -> list:
        """The A and B tensor maps (boxes of one k-tile; rank 3 when batched)."""
        from ..compiler.artifact import TensorMapSpec
        t = self.traits
        a_box, b_box = self.boxes()
        lead = (1,) if self.batched else ()       # rank-3 (L, rows, cols) maps
        return [TensorMapSpec("a", self.dtype, lead + a_box, swizzle=t.swizzle),
                TensorMapSpec("b", self.b_dtype, lead + b_box, swizzle=t.swizzle)]

    def tensor_maps(self) -> list:
        return self.tensor_map_specs() + self.epilogue.tensor_maps()

    def bind_slot(self, b) -> None:
        """IR: the A and B ``TmaCopy`` atoms (``b.ta``, ``b.tb``) over the kernel's tensor-map
        parameters and the slot's mbarrier (``b.bar``; initialised by the caller)."""
        from ..atom import MBarriers, TmaCopy
        specs = self.tensor_map_specs()
        b.ta, b.tb = TmaCopy(specs[0], b.args.a), TmaCopy(specs[1], b.args.b)
        b.bar = MBarriers(b.smem.barriers("bar"), 1)

    def bind(self, b) -> None:
        """The ``GemmProblem`` bound to the tile scheduler, as ``b.problem``."""
        b.problem = self.bind_problem(b.args)


__all__ = ["SingleTileGemmBase"]
