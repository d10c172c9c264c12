"""Warp-specialized TMA + WGMMA mainloop (CUTLASS ``MainloopSm90TmaGmmaWarpSpecialized``,
NVDSL chapter 5): a producer thread fills a ring of ``stages`` shared-memory slots with TMA
while consumer warpgroups run WGMMA on the filled slots; the two sides meet only on the
pipeline's full and empty mbarriers.

* :meth:`WarpSpecializedMainloop.producer_loop` (one elected producer thread): per k-tile
  ``producer_acquire`` (the slot's previous fill was released by every consumer warp, in every
  CTA that received it), arm the full barrier with the stage's bytes, issue the TMA boxes.
* :meth:`WarpSpecializedMainloop.consumer_loop` (every thread of the consumer warpgroups):
  per k-tile ``consumer_wait`` -> WGMMA -> ``wgmma.wait_group 1`` -> release the slot read one
  k-tile earlier (so one WGMMA group stays in flight); tail ``wait_group 0`` and release the
  last slot.

The kernel owns roles, shared memory and the pipeline states (CUTLASS's kernel/collective
split): both loops take the :class:`~cutedsl.collective.pipeline.TmaPipeline` and a
:class:`~cutedsl.collective.pipeline.PipelineState` and return the advanced state, so a
persistent kernel carries them from tile to tile.

Clusters and the operand ring: :class:`~cutedsl.collective.tma_wgmma.TmaWgmmaMainloop`.
"""
from __future__ import annotations

from ..atom.wgmma import Accumulator
from ..ir._lazy import lazy
from .pipeline import PipelineState
from .tma_wgmma import CLUSTERS, MainloopOperands, TmaWgmmaMainloop

cir = lazy("cutedsl.ir")


class WarpSpecializedMainloop(TmaWgmmaMainloop):
    """See module docstring; constructor arguments as :class:`TmaWgmmaMainloop`
    (``warpgroups``: consumer warpgroups splitting the tile along M; ``cluster``:
    ``(cluster_m, cluster_n)`` in ``CLUSTERS``). The kernel binds the operands
    (:meth:`~TmaWgmmaMainloop.bind`) and owns the pipeline and its states."""

    #: the producer loop's counter type (``cutedsl.ir.Loop``): 64-bit ``"index"`` here, ``"i32"``
    #: where a mainloop measured fewer instructions per k-tile with it (the sm_100 one)
    loop_counter = "index"

    def producer_loop(self, ops: MainloopOperands, pipeline, state: PipelineState, k_first, k_count,
                      m0, n0) -> PipelineState:
        """Fill ``k_count`` k-tiles starting at ``k_first`` (IR i32) of the tile at ``(m0, n0)``
        through ``pipeline`` from ``state``; one producer thread executes this -- or a whole warp
        with ``ops.producer`` the predicate of the one lane that issues (the state then stays in
        uniform registers). Returns the state after the last fill."""
        return self.ring.producer_loop(ops, pipeline, state, k_first, k_count, m0, n0, self.load_stage,
                                       self.loop_counter)

    @staticmethod
    def release(pipeline, state: PipelineState) -> None:
        """Every consumer warp releases slot ``state`` (with a cluster, in every CTA that
        received it: :meth:`TmaPipeline.consumer_release_warp`)."""
        pipeline.consumer_release_warp(state)

    def consumer_loop(self, ops: MainloopOperands, pipeline, state: PipelineState, k_count,
                      acc: Accumulator | None = None):
        """Accumulate ``k_count`` (IR, >= 1) k-tiles from ``state``, into ``acc`` or (None) into
        a fresh accumulator (the first k-tile's WGMMAs use scale-d 0, CUTLASS ``ScaleOut::Zero``);
        every thread of the consumer warpgroup(s) executes this (CUTLASS ``mma``). Every slot
        but the last is released once the WGMMAs after it were issued. Returns ``(acc, next
        state, last state)``; finish with :meth:`consumer_tail` on the last state before
        reading ``acc``."""
        fresh = acc is None
        acc = self.mma(ops, pipeline, self.mma_atom.undef() if fresh else acc, state, accumulate=not fresh)
        loop = cir.Loop(1, k_count, carry=list(acc.structs) + state.advance().carry() + state.carry())
        for _, carried in loop:
            acc_i = Accumulator(carried[:-4], acc.n)
            rd = PipelineState.from_carry(self.stages, carried[-4:-2])
            rel = PipelineState.from_carry(self.stages, carried[-2:])
            acc_i = self.mma(ops, pipeline, acc_i, rd)
            self.mma_atom.wait(1)                 # the WGMMAs of k-tile i-1 finished reading
            self.release(pipeline, rel)
            loop.next(*acc_i.structs, *rd.advance().carry(), *rd.carry())
        res = loop.results
        return (Accumulator(res[:-4], acc.n), PipelineState.from_carry(self.stages, res[-4:-2]),
                PipelineState.from_carry(self.stages, res[-2:]))

    def consumer_tail(self, pipeline, last: PipelineState) -> None:
        """Wait for all WGMMAs (the accumulator is final) and release the last slot read
        (CUTLASS ``mma_tail``)."""
        self.mma_atom.wait(0)
        self.release(pipeline, last)


__all__ = ["WarpSpecializedMainloop", "CLUSTERS"]
