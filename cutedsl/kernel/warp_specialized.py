"""Warp-specialized GEMM kernels (NVDSL chapters 5-6; CUTLASS ``KernelTmaWarpSpecialized``,
``...Cooperative``, ``...Pingpong``).

Every kernel has one *producer* warpgroup (the last one; it lowers its register budget with
``setmaxnreg.dec`` to 40 and its first thread issues all TMA loads: the arch-neutral producer
loop of :class:`~cutedsl.kernel.ws_gemm.WarpSpecializedGemmBase`) and one or two
*consumer* warpgroups (``setmaxnreg.inc`` to 232; WGMMA and the epilogue). They share one
full/empty TMA pipeline (:class:`~cutedsl.collective.pipeline.TmaPipeline`), one mainloop
collective (:class:`~cutedsl.collective.warp_specialized.WarpSpecializedMainloop`), one
epilogue collective and one tile scheduler
(:class:`~cutedsl.collective.tile_scheduler.PersistentTileScheduler`); the kernels
differ only in how consumers share tiles:

============================ ============= ================================================
kernel                       persistent    consumer warpgroups
============================ ============= ================================================
WarpSpecializedGemmKernel    no            1 (2 splitting M for a 128 x 256 tile)
CooperativeGemmKernel        yes           2, splitting each tile along M (tile_m = 128)
PingpongGemmKernel           yes           2 on alternate tiles; the epilogue of one
                                           overlaps the MMAs of the other
============================ ============= ================================================

Clusters ``(cluster_m, cluster_n)`` in ``(1, 1), (2, 1), (1, 2)``: A is multicast across the
cluster's N direction, B across M; each slot's empty barrier counts the releases of every
CTA that received the slot; a cluster barrier follows barrier initialisation; the producer
waits for every release of its slots (``producer_tail``) before its CTA may exit.

Kernel parameters as the other GEMMs: ``a``, ``b`` (tensor maps), ``d``, epilogue extras,
``m``, ``n``, ``k`` (i32). Launch: ``grid = (clusters x cluster size, 1, 1)`` (see the
scheduler); threads ``128 x (consumer warpgroups + 1)``. ``k_tile_range`` may split K (an
empty range runs one zero-filled k-tile past the end of K).
"""
from __future__ import annotations

from ..collective.pipeline import OrderedSequenceBarrier, PipelineState, TmaPipeline
from ..collective.warp_specialized import WarpSpecializedMainloop
from ..ir._lazy import lazy
from ..arch import DEFAULT
from ..atom.mma_traits import ATOM_M
from .gemm import MAX_ACC_REGS, KernelPlan, acc_regs, split_warpgroups_for
from .skeleton import Role
from .ws_gemm import WarpSpecializedGemmBase

cir = lazy("cutedsl.ir")

PRODUCER_REGS, CONSUMER_REGS = DEFAULT.producer_regs, DEFAULT.consumer_regs   #: setmaxnreg budgets (40 / 232)


class WarpSpecializedGemmKernel(WarpSpecializedGemmBase):
    """Chapter 5: a producer warpgroup and consumer warpgroup(s) per output tile, one CTA per
    tile (not persistent). ``stages`` 2..7 smem slots; ``cluster`` ``(cluster_m, cluster_n)``;
    ``raster``/``swizzle``/``sm_count`` go to the tile scheduler (the schedule's fields, scheduler
    and grouped hooks: :class:`~cutedsl.kernel.ws_gemm.WarpSpecializedGemmBase`). Raises
    ``ConfigError`` for combinations the schedule cannot run (see :meth:`check`)."""

    name = "gemm_warp_specialized"
    mma_atom = "wgmma"
    mainloop_cls = WarpSpecializedMainloop

    def make_plan(self) -> KernelPlan:
        """Roles: a producer warpgroup and :attr:`consumer_warpgroups` consumers; the epilogue
        stores per consumer warpgroup, defers its tail out of the tile loop, and -- one tile per
        CTA, stored by every consumer warpgroup -- lives in the A stages: once the consumers
        waited for every fill, no TMA load (own or a cluster peer's multicast) and no WGMMA
        touches them again (one more stage fits)."""
        self.check()
        split, consumers = self.split_warpgroups, self.consumer_warpgroups
        alias = not self.persistent and consumers == split
        return KernelPlan(split_warpgroups=split, consumer_warpgroups=consumers, producer_warpgroup=True,
                          threads=self.arch.warpgroup_threads * (consumers + 1),
                          epilogue={"warpgroups": consumers, "defer_tail": True, "alias": "a" if alias else None})

    def make_mainloop(self):
        return self.mainloop_cls(self.tile_m, self.tile_n, self.stages, self.dtype, self.b_major,
                                 self.plan.split_warpgroups, self.cluster, arch=self.arch, b_dtype=self.b_dtype,
                                 batched=self.batched, a_major=self.a_major)

    # -- schedule description (subclasses override) -------------------------------------
    @classmethod
    def split_for(cls, tile_m: int, tile_n: int) -> int:
        """Consumer warpgroups that share one tile, each owning ``tile_m / split`` rows: two
        when one warpgroup's accumulator would pass :data:`MAX_ACC_REGS` registers per thread."""
        return split_warpgroups_for(tile_m, tile_n)

    @classmethod
    def tile_schedule_reason(cls, tile_m: int, tile_n: int) -> str | None:
        """Each consumer warpgroup's rows are at least one WGMMA atom, and its f32 accumulator
        fits the consumer register budget."""
        split, atom_m = cls.split_for(tile_m, tile_n), ATOM_M
        if tile_m // split < atom_m:
            return (f"{cls.name}: tile_m {tile_m} is too small to split over {split} consumer warpgroups "
                    f"({atom_m} rows each at least)")
        acc = acc_regs(tile_m // split, tile_n)
        if acc > MAX_ACC_REGS:
            return (f"{cls.name}: a {tile_m}x{tile_n} tile needs {acc} f32 accumulator registers per consumer "
                    f"thread, past the {MAX_ACC_REGS} that fit the {DEFAULT.consumer_regs}-register consumer "
                    f"budget; use a smaller tile")
        return None

    @property
    def launch_registers(self) -> int:
        """Registers per thread at launch (``.maxnreg``): 168, what 384 threads (a producer
        and two consumer warpgroups) can have, <= the consumers' 232. ptxas allocates the
        whole kernel within it (a 64 x 256 single-consumer tile needs more than the 136 a
        256-thread average of 40 and 232 would give); ``setmaxnreg`` then moves registers
        from the producer to the consumers within the CTA's pool."""
        return self.arch.launch_regs(3 * self.arch.warpgroup_threads)

    def init_extra(self, smem, leader) -> None:
        """Initialise the extra barriers (before the pipeline's init fence)."""

    # -- build: consumer warpgroups first, the producer warpgroup last -----------------------
    #: the producer's branch (setmaxnreg.dec) is emitted before the consumers' (.inc)
    dispatch_order = ("producer", "consumer")

    def roles(self) -> tuple:
        """Consumer warpgroups (WGMMA + epilogue, ``arch.consumer_regs``), then the producer
        warpgroup (TMA, ``arch.producer_regs``)."""
        return (Role.warpgroups("consumer", self.consumer_warpgroups, regs=self.arch.consumer_regs),
                Role.warpgroups("producer", regs=self.arch.producer_regs))

    def setup(self, b) -> None:
        """The operand ring's full/empty barriers, the kernel's and the epilogue's barriers, the
        mainloop's operands (tensor maps prefetched)."""
        from ..atom import MBarriers
        ml = self.mainloop
        b.pipeline = TmaPipeline(MBarriers(b.smem.barriers("full"), self.stages), ml.stage_bytes,
                                 MBarriers(b.smem.barriers("empty"), self.stages),
                                 consumers=self.arch.warps_per_warpgroup * self.split_warpgroups, cluster=self.cluster)
        self.init_extra(b.smem, b.leader)
        self.epilogue.init(b.smem, b.leader)
        b.pipeline.init(b.leader)
        b.init_fenced = True                        # TmaPipeline.init ends with the init fence
        b.ops = ml.bind(b.smem, b.args, self.operand_atoms(b.args))
        ml.prefetch(b.ops, predicate=b.leader)

    def bind(self, b) -> None:
        self.bind_problem(b.args)
        self.scheduler.k_tiles      # emitted here: the producer and consumer branches both use it

    def role_producer(self, b, index) -> None:
        with cir.If((b.tid % self.arch.warpgroup_threads).eq(0)):
            self.producer(b.ops, b.pipeline)

    def role_consumer(self, b, wg) -> None:
        self.consumer(b.ops, b.args, b.smem, b.pipeline, wg)

    def store(self, acc, args, smem, wt, row_base, wg) -> None:
        """The epilogue of work tile ``wt`` by consumer warpgroup ``wg`` (its rows from
        ``row_base``); a piece of a tile split along K is first reduced with the tile's other
        pieces, and only the piece that completes the tile stores."""
        ctx = self.epilogue_context(args, smem, wt, row_base, wg)
        if self.reduction is None:
            self.epilogue.store(acc, ctx)
            return
        part = wg if self.split_warpgroups > 1 else 0
        acc, final = self.reduction.reduce(acc, wt, part, wg, args)
        with cir.If(final):
            self.epilogue.store(acc, ctx)

    def store_tail(self) -> None:
        """After a consumer warpgroup's last tile: its TMA stores finished reading shared
        memory (the epilogue defers this wait out of the tile loop)."""
        if hasattr(self.epilogue, "store_tail"):
            self.epilogue.store_tail()

    def consumer(self, ops, args, smem, pipeline, wg) -> None:
        """Consumer warpgroups: every work tile of this CTA, split along M between them."""
        sch, s, ml = self.scheduler, self.stages, self.mainloop
        row_base = wg * ml.wg_m if self.split_warpgroups > 1 else 0
        loop = cir.Loop(0, sch.work_count(), carry=PipelineState(s).carry())
        for i, carried in loop:
            wt = self.work_tile(i)
            _, k_count = self.k_range(wt)
            acc, st, last = ml.consumer_loop(ops, pipeline, PipelineState.from_carry(s, carried), k_count)
            ml.consumer_tail(pipeline, last)
            self.store(acc, args, smem, wt, row_base, wg)
            loop.next(*st.carry())
        self.store_tail()


class CooperativeGemmKernel(WarpSpecializedGemmKernel):
    """Persistent; two consumer warpgroups split every tile along M (``tile_m`` 128); the
    producer prefetches the next tile while the consumers run the epilogue."""

    name = "gemm_cooperative"
    persistent = True

    @classmethod
    def split_for(cls, tile_m: int, tile_n: int) -> int:
        return 2


class PingpongGemmKernel(WarpSpecializedGemmKernel):
    """Persistent; two consumer warpgroups take alternate tiles of the CTA. An ordered
    barrier (depth 2: mainloop, epilogue) makes them take turns, so one warpgroup's epilogue
    overlaps the other's MMAs and the pipeline's slots are read in fill order."""

    name = "gemm_pingpong"
    persistent = True

    @classmethod
    def consumers_for(cls, tile_m: int, tile_n: int) -> int:
        return 2

    @classmethod
    def split_for(cls, tile_m: int, tile_n: int) -> int:
        return 1

    def plan_extra(self, plan) -> None:
        plan.barriers("order", 4)

    def init_extra(self, smem, leader) -> None:
        from ..atom import MBarriers
        self.order = OrderedSequenceBarrier(MBarriers(smem.barriers("order"), 4), depth=2, length=2,
                                            arrivals=self.arch.warpgroup_threads)
        self.order.init(leader)

    def consumer(self, ops, args, smem, pipeline, wg) -> None:
        sch, s, ml, order = self.scheduler, self.stages, self.mainloop, self.order
        # warpgroup 1 starts one tile (its k-tile count of fills) further along the ring; when
        # units' k counts vary (stream-K pieces, grouped problems) each skip reads the other's unit
        per_unit = self.k_varies
        _, k_count = self.k_range(self.work_tile(0))
        start = PipelineState(s).advance_by(wg * k_count)
        loop = cir.Loop(wg, sch.work_count(), step=2, carry=start.carry())
        for i, carried in loop:
            turn = i // 2
            wt = self.work_tile(i)
            if per_unit:
                _, k_count = self.k_range(wt)
            order.wait(0, wg, turn)
            acc, st, last = ml.consumer_loop(ops, pipeline, PipelineState.from_carry(s, carried), k_count)
            order.arrive(0, wg)          # the other warpgroup's MMAs may start
            ml.consumer_tail(pipeline, last)
            order.wait(1, wg, turn)
            self.store(acc, args, smem, wt, 0, wg)
            order.arrive(1, wg)
            skip = self.k_range(self.work_tile(i + 1))[1] if per_unit else k_count
            loop.next(*st.advance_by(skip).carry())   # skip the other warpgroup's tile
        self.store_tail()


__all__ = ["WarpSpecializedGemmKernel", "CooperativeGemmKernel", "PingpongGemmKernel",
           "PRODUCER_REGS", "CONSUMER_REGS"]
