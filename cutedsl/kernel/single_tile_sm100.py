"""The talk's Blackwell GEMM (sm_100a, EuroLLVM 2025): the single-tile kernel of NVDSL chapter 3
with the accumulator in tensor memory.

Per CTA (128 threads, one ``128 x tile_n`` output tile): warp 0 allocates the accumulator's
TMEM columns; one thread runs the k-loop: per k-tile it TMA-loads A and B into the slot (the
same :meth:`~cutedsl.kernel.single_tile_base.SingleTileGemmBase.load_k_tile` as the Hopper
kernel: both are composed from that arch-neutral base), waits for them, issues the k-tile's ``tcgen05.mma`` instructions (enable-input-d off
on the tile's first), ``tcgen05.commit`` s them to an mbarrier and waits for it (the MMAs read
the slot: it is free once they complete). After the loop it commits to a second mbarrier that
every thread waits for (phase 0, once: a per-k-tile barrier watched by idle warps could be two
phases ahead of them and alias). The epilogue: each warp loads its lane quarter of D with
``tcgen05.ld`` in chunks of columns and hands each chunk to the configured epilogue
(:func:`~cutedsl.collective.tmem_epilogue.store_accumulator`);
warp 0 frees the columns.
"""
from __future__ import annotations

from ..collective.epilogue import EpilogueContext
from .single_tile_base import SingleTileGemmBase


class Sm100SingleTileGemmKernel(SingleTileGemmBase):
    """Unpipelined tcgen05 GEMM (see the module docstring): ``tile_m`` 128, ``tile_n`` 64, 128
    or 256 (TMEM columns: ``tile_n``); the epilogue stores from registers (``"global"``)."""

    name = "gemm_single_tile_sm100"
    mma_atom = "tcgen05"
    TILE_M = (128,)

    @classmethod
    def can_implement(cls, config) -> str | None:
        why = super().can_implement(config) or cls.stage_reason(config)
        if why:
            return why
        if config.epilogue == "tma":
            from ..atom.cvt import FP8
            from ..collective.fusion import AddC
            if config.out_dtype in FP8 or any(isinstance(nd, AddC) for nd in (config.fusion or ())):
                return ("the sm_100a TMA-store epilogue writes f32, f16 or bf16 and has no beta * C: "
                        "epilogue='global'")
        return None

    def make_epilogue(self):
        """The configured epilogue; a TMA-store one as the tcgen05 variant (each warp stages its
        32 accumulator rows: :class:`~cutedsl.collective.tmem_epilogue_tma.TmemTmaStoreEpilogue`)."""
        from ..collective.tmem_epilogue_tma import for_tcgen05
        self.epilogue_cls = for_tcgen05(self.epilogue_cls)
        return super().make_epilogue()

    def plan_extra(self, plan) -> None:
        """The slot and its TMA barrier (the base's), two MMA-completion barriers (per
        k-tile for the issuing thread; once for the whole CTA when D is complete). The 4-byte slot
        tcgen05.alloc writes the TMEM address to is a static shared word (``static_word``)."""
        super().plan_extra(plan)
        plan.barriers("mma_done", 2)

    # -- build: one warpgroup; warp 0 allocates TMEM, thread 0 loads and issues --------------
    def setup(self, b) -> None:
        from ..atom import MBarriers
        from ..atom.tcgen05 import TensorMemory
        self.bind_slot(b)
        b.done = MBarriers(b.smem.barriers("mma_done"), 2)
        leader, warp0 = b.leader, b.warp.eq(0)
        b.bar.init(0, 1, predicate=leader)
        b.done.init_all(1, predicate=leader)
        self.epilogue.init(b.smem, leader)
        self.alloc_tensor_memory(b, TensorMemory.columns_for(self.tile_n), owner=warp0)

    def bind(self, b) -> None:
        b.problem = self.bind_problem(b.args)

    def role_main(self, b, index) -> None:
        from ..atom.tcgen05 import TensorMemory, Umma
        from ..collective.tmem_epilogue import store_accumulator
        from ..ir import If, Loop, f32, select, u32
        tm, tn, bar, done, smem, tmem = self.tile_m, self.tile_n, b.bar, b.done, b.smem, b.tmem
        d = tmem.address()
        wt = self.work_tile(0)
        m0, n0, first, count = wt.m0, wt.n0, wt.k_first, self._count(wt.k_count)
        la, lb = ((c,) for c in self.batch_coords(wt)) if self.batched else ((), ())
        mma = Umma(tm, tn, self.dtype, self.b_major, self.b_dtype, self.a_major)
        with If(b.leader):                      # one thread loads and issues; the others wait
            loop = Loop(0, count)
            for kt in loop:
                self.load_k_tile(b.ta, b.tb, smem, bar, kt + first, m0, n0, la, lb)
                bar.wait(0, kt & 1)             # each barrier completes one phase per k-tile
                mma.mma(d, smem["a"].tile(), smem["b"].tile(), accumulate=kt.ne(0))
                mma.commit(done.address(0))
                done.wait(0, kt & 1)            # the MMAs read the slot: free once they complete
            mma.commit(done.address(1))         # D complete (at once when there was no k-tile)
        done.wait(1, 0)
        d = tmem.address()                      # re-read: nothing TMEM-related live across the wait
        TensorMemory.fence_after()
        some = u32(count).ne(0)                 # no k-tile: D is zero, TMEM was never written
        ctx = EpilogueContext(m0, n0, b.args.m, b.args.n, b.args, smem, l=wt.l, problem=b.problem)
        store_accumulator(self.epilogue, d, tn, ctx, transform=lambda v, r, c: select(some, v, f32(0.0)))
        # the skeleton's teardown: every warp's loads done, then warp 0 frees the columns
