"""Multistage TMA + WGMMA mainloop (CUTLASS ``MainloopSm90TmaGmma``, NVDSL chapter 4).

One warpgroup (two splitting M for a 128 x 256 tile) computes a ``tile_m x tile_n``
accumulator over ``k_count`` k-tiles, issuing both the TMA loads and the WGMMAs:

* ``prologue``: fill ``min(stages, k_count)`` slots (one elected thread arms each full barrier
  with the stage's bytes and issues the TMA boxes);
* ``mainloop``: for k-tile i, wait its slot, issue the WGMMAs, ``wgmma.wait_group(lag)`` with
  lag = 1 (0 when ``stages == 1``) so that the MMA of k-tile i-lag has finished reading; each
  consumer warp then releases that slot (one arrival per warp on its *empty* mbarrier) and
  the elected producer thread waits for all releases before refilling the slot with k-tile
  ``i - lag + stages`` (CUTLASS ``consumer_release`` / ``producer_acquire``);
* ``tail``: ``wgmma.wait_group(0)``.

Each step is an overridable method taking the bound operands (:class:`MainloopOperands`) and
the pipeline; :meth:`MultistageMainloop.setup` makes both. The operand ring, its buffers and
the stage loads are :class:`~cutedsl.collective.tma_wgmma.TmaWgmmaMainloop`'s (shared with the
warp-specialized mainloop).
"""
from __future__ import annotations

import attrs

from ..atom.mbarrier import MBarriers
from ..atom.sync import elect_one
from ..ir._lazy import lazy
from .pipeline import PipelineState, TmaPipeline
from .tma_wgmma import MainloopOperands, TmaWgmmaMainloop

cir = lazy("cutedsl.ir")


class MultistageMainloop(TmaWgmmaMainloop):
    """See module docstring; constructor arguments as :class:`TmaWgmmaMainloop` (no cluster).
    With more than one consumer warpgroup, the empty barriers make sure every warpgroup
    finished reading a slot before it is refilled."""

    def __init__(self, tile_m: int, tile_n: int, stages: int, dtype: str = "f16", b_major: str = "MN",
                 warpgroups: int = 1, arch=None, b_dtype: str | None = None, batched: bool = False,
                 a_major: str = "K"):
        kw = {} if arch is None else {"arch": arch}
        super().__init__(tile_m, tile_n, stages, dtype, b_major, warpgroups, b_dtype=b_dtype, batched=batched,
                         a_major=a_major, **kw)

    # -- IR ------------------------------------------------------------------------
    def setup(self, smem, args) -> tuple:
        """Bind the operands and make the pipeline: TMA descriptors, full/empty barriers
        initialised by thread 0, tensor maps prefetched; ends with a CTA barrier. Returns
        ``(operands, pipeline)``."""
        from mlir.dialects import gpu
        tmas = self.tma_atoms(args)
        leader = cir.thread_idx().eq(0)
        # the empty barrier of a slot completes when every consumer warp released it
        pipeline = TmaPipeline(MBarriers(smem.barriers("full"), self.stages), self.stage_bytes,
                               MBarriers(smem.barriers("empty"), self.stages),
                               consumers=self.arch.warps_per_warpgroup * self.warpgroups)
        pipeline.init(leader)
        ops = self.bind(smem, args, tmas)
        # the producer is warp 0 (a warp-uniform branch: ptxas keeps the loop's descriptor and
        # stage arithmetic in uniform registers); one elected lane issues
        ops = attrs.evolve(ops, producer=cir.warp_idx().eq(0))
        ops.tma_a.prefetch(predicate=leader)
        ops.tma_b.prefetch(predicate=leader)
        gpu.barrier()
        return ops, pipeline

    def load(self, ops: MainloopOperands, pipeline, state: PipelineState, k_tile, m0, n0, k_first=0) -> None:
        """Fill slot ``state.index`` with k-tile ``k_first + k_tile``: warp 0 waits until the
        slot was released; one elected lane arms its full barrier and issues the TMA boxes. (A
        branch on one thread inside the main loop would make ptxas move all uniform arithmetic
        of the loop to per-thread registers: 149 instead of 95 SASS instructions per k-tile.)"""
        with cir.If(ops.producer):
            one = elect_one()
            pipeline.producer_acquire(state)
            pipeline.producer_expect(state, predicate=one)
            self.load_stage(ops, pipeline, state, k_tile + k_first, m0, n0, predicate=one)

    def prologue(self, ops, pipeline, k_first, k_count, m0, n0) -> None:
        """Fill the first ``min(stages, k_count)`` slots with k-tiles ``k_first ..`` (phase 0)."""
        for s in range(self.stages):
            with cir.If(k_count > s):
                self.load(ops, pipeline, PipelineState(self.stages, s, 0), cir.i32(s), m0, n0, k_first)

    @property
    def lag(self) -> int:
        """WGMMA groups left in flight after each k-tile (1 overlaps MMA with the next wait)."""
        return 1 if self.stages > 1 else 0

    @staticmethod
    def release(pipeline, state: PipelineState) -> None:
        """Every consumer warp (its lane 0) releases slot ``state`` after its WGMMA wait."""
        with cir.If(cir.lane_id().eq(0)):
            pipeline.consumer_release(state)

    def mainloop(self, ops, pipeline, acc, k_first, k_count, m0, n0):
        """Steady state. Carried: the accumulator, the consumer state of k-tile ``i`` and the
        state of k-tile ``i - lag`` (whose slot is released and refilled with k-tile
        ``i - lag + stages``: same slot, next phase), all i32, with a 32-bit loop counter, so
        no division by ``stages`` and no 64-bit arithmetic runs per k-tile. Returns the
        accumulator."""
        lag = self.lag
        prev0 = PipelineState(self.stages, self.stages - 1, 1) if lag else PipelineState(self.stages)
        carry = list(acc.structs) + PipelineState(self.stages).carry() + prev0.carry()
        loop = cir.Loop(0, k_count, carry=carry, counter="i32")
        for i, carried in loop:
            acc_i = type(acc)(carried[:-4], acc.n)
            state = PipelineState.from_carry(self.stages, carried[-4:-2])
            prev = PipelineState.from_carry(self.stages, carried[-2:]) if lag else state
            acc_i = self.mma(ops, pipeline, acc_i, state)
            self.mma_atom.wait(lag)
            # k-tile i - lag finished reading its slot: every consumer warp releases it, and the
            # producer refills it with k-tile i - lag + stages once all releases arrived
            refill = i + (self.stages - lag)
            fill = PipelineState(self.stages, prev.index, prev.phase ^ 1)
            if lag:
                started = i >= lag
                with cir.If(started):
                    self.release(pipeline, prev)
                with cir.If((refill < k_count) & started):
                    self.load(ops, pipeline, fill, refill, m0, n0, k_first)
            else:
                self.release(pipeline, prev)
                with cir.If(refill < k_count):
                    self.load(ops, pipeline, fill, refill, m0, n0, k_first)
            loop.next(*acc_i.structs, *state.advance().carry(), *state.carry())
        res = loop.results
        return type(acc)(res[:-4], acc.n)

    def tail(self) -> None:
        """``wgmma.wait_group 0``: the accumulator is final."""
        self.mma_atom.wait(0)

    def run(self, ops, pipeline, k_count, m0, n0, k_first=0):
        """Prologue + mainloop + tail over k-tiles ``k_first .. k_first + k_count - 1`` (IR i32
        or Python int); returns the accumulator (zero when ``k_count == 0``)."""
        acc = self.mma_atom.zero()
        self.prologue(ops, pipeline, k_first, k_count, m0, n0)
        acc = self.mainloop(ops, pipeline, acc, k_first, k_count, m0, n0)
        self.tail()
        return acc


__all__ = ["MultistageMainloop", "MainloopOperands"]
