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

Clusters ``(cluster_m, cluster_n)``: the CTAs of a cluster with the same M coordinate need the
same A tile, those with the same N coordinate the same B tile. Each CTA loads a
``1/cluster_n`` slice of A (rows) and a ``1/cluster_m`` slice of B (outer box rows) and
multicasts it to the CTAs that share it (``cp.async.bulk.tensor ... .multicast::cluster``), so
every CTA's full barrier still receives a whole stage of bytes. CTA rank inside the cluster is
``rank = rm + cluster_m * rn``.
"""
from __future__ import annotations

from ..atom.tma import TmaCopy
from ..atom.wgmma import Accumulator
from ..ir._lazy import lazy
from .mainloop import MultistageMainloop
from .pipeline import PipelineState

cir = lazy("cutedsl.ir")

CLUSTERS = ((1, 1), (2, 1), (1, 2))


class WarpSpecializedMainloop(MultistageMainloop):
    """See module docstring. Tile and dtype arguments as :class:`MultistageMainloop`
    (``warpgroups``: consumer warpgroups splitting the tile along M); ``cluster``:
    ``(cluster_m, cluster_n)`` in ``CLUSTERS``. Shared memory: the same slots and full/empty
    barrier groups as the multistage mainloop (declared by :meth:`plan`)."""

    def __init__(self, tile_m: int, tile_n: int, stages: int, dtype: str = "f16", b_major: str = "MN",
                 warpgroups: int = 1, cluster=(1, 1)):
        super().__init__(tile_m, tile_n, stages, dtype, b_major, warpgroups)
        cluster = tuple(cluster)
        if cluster not in CLUSTERS:
            raise ValueError(f"cluster must be one of {CLUSTERS}, got {cluster}")
        self.cluster_m, self.cluster_n = cluster

    # -- IR ------------------------------------------------------------------------
    def bind(self, smem, args, pipeline) -> None:
        """Bind the bound shared memory, the tensor maps and the kernel's pipeline (no IR
        besides the descriptor casts; barrier initialisation is the kernel's)."""
        self.smem, self.pipeline = smem, pipeline
        specs = self.tensor_maps()
        self.tma_a, self.tma_b = TmaCopy(specs[0], args.a), TmaCopy(specs[1], args.b)
        self.bind_operands(smem)

    def prefetch(self, predicate=None) -> None:
        """``prefetch.tensormap`` of A and B."""
        self.tma_a.prefetch(predicate=predicate)
        self.tma_b.prefetch(predicate=predicate)

    def producer_loop(self, pipeline, state: PipelineState, k_first, k_tiles, m0, n0) -> PipelineState:
        """Fill ``k_tiles`` k-tiles starting at ``k_first`` (IR i32) of the tile at ``(m0, n0)``
        through ``pipeline`` from ``state``; one producer thread executes this. Returns the
        state after the last fill."""
        self.pipeline = pipeline
        loop = cir.Loop(0, k_tiles, carry=state.carry())
        for i, carried in loop:
            st = PipelineState.from_carry(self.stages, carried)
            pipeline.producer_acquire(st)
            pipeline.producer_expect(st)
            self.load_stage(st, k_first + i, m0, n0)
            loop.next(*st.advance().carry())
        return PipelineState.from_carry(self.stages, loop.results)

    def release(self, state: PipelineState) -> None:
        """Every consumer warp releases slot ``state`` (with a cluster, in every CTA that
        received it: :meth:`TmaPipeline.consumer_release_warp`)."""
        self.pipeline.consumer_release_warp(state)

    def consumer_loop(self, pipeline, state: PipelineState, k_tiles, acc: Accumulator | None = None):
        """Accumulate ``k_tiles`` (IR, >= 1) k-tiles from ``state``, into ``acc`` or (None) into
        a fresh accumulator (the first k-tile's WGMMAs use scale-d 0, CUTLASS ``ScaleOut::Zero``);
        every thread of the consumer warpgroup(s) executes this (CUTLASS ``mma``). Every slot
        but the last is released once the WGMMAs after it were issued. Returns ``(acc, next
        state, last state)``; finish with :meth:`consumer_tail` on the last state before
        reading ``acc``."""
        self.pipeline = pipeline
        fresh = acc is None
        acc = self.mma(self.mma_atom.undef() if fresh else acc, state, accumulate=not fresh)   # k-tile 0
        loop = cir.Loop(1, k_tiles, carry=list(acc.structs) + state.advance().carry() + state.carry())
        for _, carried in loop:
            acc_i = Accumulator(carried[:-4], acc.n)
            rd = PipelineState.from_carry(self.stages, carried[-4:-2])
            rel = PipelineState.from_carry(self.stages, carried[-2:])
            acc_i = self.mma(acc_i, rd)
            self.mma_atom.wait(1)                 # the WGMMAs of k-tile i-1 finished reading
            self.release(rel)
            loop.next(*acc_i.structs, *rd.advance().carry(), *rd.carry())
        res = loop.results
        return (Accumulator(res[:-4], acc.n), PipelineState.from_carry(self.stages, res[-4:-2]),
                PipelineState.from_carry(self.stages, res[-2:]))

    def consumer_tail(self, last: PipelineState) -> None:
        """Wait for all WGMMAs (the accumulator is final) and release the last slot read
        (CUTLASS ``mma_tail``)."""
        self.mma_atom.wait(0)
        self.release(last)


__all__ = ["WarpSpecializedMainloop", "CLUSTERS"]
