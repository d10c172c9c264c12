"""The single-tile GEMM (NVDSL chapter 3): one smem slot, one mbarrier, per k-tile load ->
wait -> WGMMA -> wait, composed straight from atoms (no collective mainloop). Split from
:mod:`.gemm` (which re-exports it)."""
from __future__ import annotations

from ..arch import DEFAULT
from ..collective.epilogue import EpilogueContext
from .gemm import MAX_ACC_REGS, acc_regs
from .single_tile_base import SingleTileGemmBase


class SingleTileGemmKernel(SingleTileGemmBase):
    """Unpipelined GEMM built straight from atoms (one smem slot, one mbarrier: the arch-neutral
    :class:`~cutedsl.kernel.single_tile_base.SingleTileGemmBase`), WGMMA into registers."""

    name = "gemm_single_tile"
    mma_atom = "wgmma"

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
        return cls.stage_reason(config)

    # -- build: one warpgroup; thread 0 loads, every thread waits and issues WGMMA ----------
    def setup(self, b) -> None:
        self.bind_slot(b)
        b.bar.init(0, 1, predicate=b.leader)
        self.epilogue.init(b.smem, b.leader)

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
