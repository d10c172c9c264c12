"""The single-tile GEMM (NVDSL chapter 3): one smem slot, one mbarrier, per k-tile load ->
wait -> WGMMA -> wait, composed straight from atoms (no collective mainloop). Split from
:mod:`.gemm` (which re-exports it)."""
from __future__ import annotations

from ..arch import DEFAULT
from ..collective.epilogue import EpilogueContext
from .gemm import MAX_ACC_REGS, GemmKernel, acc_regs


class SingleTileGemmKernel(GemmKernel):
    """Unpipelined GEMM built straight from atoms (one smem slot, one mbarrier)."""

    name = "gemm_single_tile"

    @classmethod
    def can_implement(cls, config) -> str | None:
        """One warpgroup holds the whole accumulator; one stage."""
        why = super().can_implement(config)
        if why:
            return why
        bm, bn, _ = config.tile
        acc = acc_regs(bm, bn)
        if acc > MAX_ACC_REGS:
            return (f"single_tile uses one warpgroup: a {bm}x{bn} f32 accumulator needs {acc} registers per "
                    f"thread, past the {DEFAULT.max_regs_per_thread}-register limit; use schedule='multistage' "
                    f"(two consumer warpgroups)")
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

    # -- build: one warpgroup; thread 0 loads, every thread waits and issues WGMMA ----------
    def setup(self, b) -> None:
        from ..atom import MBarriers, TmaCopy
        specs = self.tensor_map_specs()
        b.ta, b.tb = TmaCopy(specs[0], b.args.a), TmaCopy(specs[1], b.args.b)
        b.bar = MBarriers(b.smem.barriers("bar"), 1)
        b.bar.init(0, 1, predicate=b.leader)
        self.epilogue.init(b.smem, b.leader)

    def bind(self, b) -> None:
        b.problem = self.bind_problem(b.args)

    def role_main(self, b, index) -> None:
        from mlir.dialects import gpu
        from ..atom import Accumulator, WarpgroupMMA
        from ..ir import If, Loop
        tm, tn, bar, args = self.tile_m, self.tile_n, b.bar, b.args
        wt = self.work_tile(0)
        m0, n0, first, count = wt.m0, wt.n0, wt.k_first, self._count(wt.k_count)
        la, lb = ((c,) for c in self.batch_coords(wt)) if self.batched else ((), ())
        mma = WarpgroupMMA(tm, tn, self.dtype, self.b_major, self.b_dtype, self.a_major)
        loop = Loop(0, count, carry=mma.zero().structs)
        for kt, structs in loop:
            with If(b.leader):
                self.load_k_tile(b.ta, b.tb, b.smem, bar, kt + first, m0, n0, la, lb)
            bar.wait(0, kt & 1)                 # the barrier completes one phase per k-tile
            acc = mma.mma(Accumulator(structs, tn), b.smem["a"].tile(), b.smem["b"].tile())
            mma.wait(0)
            gpu.barrier()                       # all reads of the slot done before it is refilled
            loop.next(*acc.structs)
        acc = Accumulator(loop.results, tn)
        self.epilogue.store(acc, EpilogueContext(m0, n0, args.m, args.n, args, b.smem, l=wt.l, problem=b.problem))
