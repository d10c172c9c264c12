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
from .pipeline import PipelineState, TmaPipeline
from .warp_specialized import WarpSpecializedMainloop

cir = lazy("cutedsl.ir")

CTA_PAIR = 2        #: CTAs sharing one cta_group::2 MMA


class Tcgen05Mainloop(WarpSpecializedMainloop):
    """See the module docstring; constructor arguments as
    :class:`~cutedsl.collective.tma_wgmma.TmaWgmmaMainloop` with ``warpgroups = 1`` (the MMA
    covers the whole ``tile_m`` = 128 rows), plus ``mma_sm``: 1, or 2 for a CTA-pair MMA
    (``cta_group::2``, CUTLASS's 2SM kernels): the cluster's CTA pairs along M share one
    256-row MMA issued by the even CTA; each CTA loads its own 128 rows of A and half of the
    tile's N rows of B (no multicast between the two) and both CTAs' loads complete on the even
    CTA's full barrier (:class:`PairPipeline`). Cluster ``(2, 1)`` with ``mma_sm`` 2."""

    PAIR_CLUSTERS = ((2, 1),)

    def __init__(self, *args, mma_sm: int = 1, **kw):
        if mma_sm not in (1, 2):
            raise ValueError(f"mma_sm must be 1 or 2, got {mma_sm}")
        self.pair = mma_sm == 2
        super().__init__(*args, **kw)
        if self.pair and self.b_major == "MN" and (self.tile_n // CTA_PAIR) % self.traits.mn_box:
            raise ValueError(f"a CTA pair with an MN-major B loads {self.tile_n // CTA_PAIR} columns per CTA, not a "
                             f"multiple of the {self.traits.mn_box}-column box")
        if self.pair and self.cluster not in self.PAIR_CLUSTERS:
            raise ValueError(f"a CTA-pair MMA (mma_sm=2) runs on cluster {' or '.join(map(str, self.PAIR_CLUSTERS))} "
                             f"(the pair along M), got {self.cluster}")

    def make_mma_atom(self, m: int, n: int, dtype: str, b_major: str, b_dtype, a_major: str):
        if self.pair:
            return Umma(CTA_PAIR * m, n, dtype, b_major, b_dtype, a_major, cta_group=CTA_PAIR)
        return Umma(m, n, dtype, b_major, b_dtype, a_major)

    # -- the CTA pair's operand split --------------------------------------------------
    @property
    def b_tile_rows(self) -> int:
        return self.tile_n // CTA_PAIR if self.pair else self.tile_n

    @property
    def multicast_b(self) -> bool:
        return not self.pair and super().multicast_b

    @property
    def b_box(self) -> tuple:
        if not self.pair:
            return super().b_box
        t = self.traits
        return (t.k_tile, t.mn_box) if self.b_major == "MN" else (self.tile_n // CTA_PAIR, t.k_tile)

    @property
    def b_boxes(self) -> int:
        if not self.pair:
            return super().b_boxes
        return self.tile_n // CTA_PAIR // self.traits.mn_box if self.b_major == "MN" else 1

    def b_placement(self, j: int, k0, n0, rm):
        if not self.pair:
            return super().b_placement(j, k0, n0, rm)
        t, half = self.traits, self.tile_n // CTA_PAIR          # this CTA's half of the tile's N rows
        if self.b_major == "MN":
            return j * t.mn_box_bytes, (k0, n0 + rm * half + t.mn_box * j)
        return 0, (n0 + rm * half, k0)

    @property
    def pair_stage_bytes(self) -> int:
        """Bytes the even CTA's full barrier receives per stage from both CTAs (A: 2 x 128
        rows, B: the whole tile's N)."""
        return self.traits.tile_bytes(CTA_PAIR * self.tile_m + self.tile_n)

    def release_mask(self):
        """IR i16: the cluster ranks whose producers multicast into this CTA's slots -- its
        cluster row and column (rank = ``rm + cluster_m * rn``) -- or, for a CTA pair, the pair;
        None without a cluster."""
        if self.pair:
            from ..atom.cluster import cta_rank
            return cir.u32(3) << (cta_rank() & ~1)
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
                self.mma_atom.commit(pipeline.empty.address(st.index), mask)
            loop.next(*st.advance().carry())
        return PipelineState.from_carry(self.stages, loop.results)




class PairPipeline(TmaPipeline):
    """The TMA pipeline of a CTA pair (``mma_sm`` 2): every CTA's loads complete on the even
    CTA's full barriers (``full``: a :class:`~cutedsl.atom.mbarrier.PairLeaderBarriers`), which
    only the even CTA arms, with the bytes of both CTAs' loads; each CTA's empty barriers get one
    release per fill (the even CTA's commit, multicast to the pair)."""

    def __init__(self, full, tx_bytes, empty, leader):
        super().__init__(full, tx_bytes, empty, consumers=1)
        self.leader = leader        #: IR i1: this CTA is the pair's even CTA

    def producer_expect(self, state, predicate=None) -> None:
        p = self.leader if predicate is None else predicate & self.leader
        self.full.arrive_expect_tx(state.index, self.tx_bytes, predicate=p)

    def sync_after_init(self) -> None:
        from ..atom.cluster import cluster_sync
        cluster_sync()              # the peer's loads and commits reach the even CTA's barriers


__all__ = ["Tcgen05Mainloop", "PairPipeline"]
