"""Blackwell warp-specialized mainloop (CUTLASS ``MainloopSm100TmaUmmaWarpSpecialized``).

The operand ring, its TMA boxes, cluster multicast and the producer loop are the sm_90 ones
(:class:`~cutedsl.collective.warp_specialized.WarpSpecializedMainloop`: the same shared-memory
layouts, read by sm_100 descriptors instead). The MMA side is **one warp, one elected thread
issuing** (:meth:`Tcgen05Mainloop.mma_loop`): per k-tile it waits for the slot, issues the k-tile's
``tcgen05.mma`` instructions into a TMEM accumulator and releases the slot with
``tcgen05.commit`` on its empty barrier -- the arrive lands when those MMAs have read the slot
(CUTLASS's ``umma_arrive``). With a cluster the commit is multicast to the empty barrier of
every CTA that received slices of the slot (this CTA's cluster row and column), so each slot's
empty barrier counts one release per such CTA.
"""
from __future__ import annotations

from ..atom.tcgen05 import Umma
from ..ir._lazy import lazy
from .pipeline import PipelineState
from .warp_specialized import WarpSpecializedMainloop

cir = lazy("cutedsl.ir")


class Tcgen05Mainloop(WarpSpecializedMainloop):
    """See the module docstring; constructor arguments as
    :class:`~cutedsl.collective.tma_wgmma.TmaWgmmaMainloop` with ``warpgroups = 1`` (the MMA
    covers the whole ``tile_m`` = 128 rows)."""

    @staticmethod
    def make_mma_atom(m: int, n: int, dtype: str, b_major: str, b_dtype, a_major: str):
        return Umma(m, n, dtype, b_major, b_dtype, a_major)

    def release_mask(self):
        """IR i16: the cluster ranks whose producers multicast into this CTA's slots -- its
        cluster row and column (rank = ``rm + cluster_m * rn``); None without a cluster."""
        if self.cluster == (1, 1):
            return None
        rm, rn = self._cluster_coords()
        cm, cn = self.cluster
        mask = cir.u32(0)
        for r in range(cm * cn):
            same = rm.eq(r % cm) | rn.eq(r // cm)
            mask = mask | cir.select(same, cir.u32(1 << r), cir.u32(0))
        return mask

    def mma_loop(self, ops, pipeline, state: PipelineState, k_count, d, mask=None) -> PipelineState:
        """One whole warp: accumulate ``k_count`` (IR, >= 1) k-tiles from ``state`` into the
        TMEM accumulator at ``d`` (i32; the first k-tile overwrites it); the warp waits for each
        slot and an elected lane (``elect.sync``) issues the MMAs and releases the slot by a
        commit (multicast to ``mask``, :meth:`release_mask`) -- CUTLASS's pattern: the operands
        stay warp-uniform, so ptxas issues each UTC*MMA straight from uniform registers (from one
        thread's branch it wraps each in a loop over the warp's possible values). Returns the
        state after the last k-tile; the caller commits the accumulator's completion (under
        :func:`~cutedsl.atom.sync.elect_one` too)."""
        from ..atom.sync import elect_one
        loop = cir.Loop(0, k_count, carry=state.carry())
        for i, carried in loop:
            st = PipelineState.from_carry(self.stages, carried)
            pipeline.consumer_wait(st)
            with cir.If(elect_one()):
                self.mma_atom.mma(d, self.stage_descriptor(ops, "a", st.index),
                                  self.stage_descriptor(ops, "b", st.index), accumulate=i.ne(0))
                Umma.commit(pipeline.empty.address(st.index), mask)
            loop.next(*st.advance().carry())
        return PipelineState.from_carry(self.stages, loop.results)


__all__ = ["Tcgen05Mainloop"]
