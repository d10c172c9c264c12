"""Warp-specialized GEMM kernels (NVDSL chapters 5-6; CUTLASS ``KernelTmaWarpSpecialized``,
``...Cooperative``, ``...Pingpong``).

Every kernel has one *producer* warpgroup (the last one; it lowers its register budget with
``setmaxnreg.dec`` to 40 and its first thread issues all TMA loads) and one or two
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

from ..collective.epilogue import EpilogueContext, TmaStoreEpilogue
from ..collective.tile_scheduler import PersistentTileScheduler
from ..collective.pipeline import OrderedSequenceBarrier, PipelineState, TmaPipeline
from ..collective.warp_specialized import CLUSTERS, WarpSpecializedMainloop
from ..errors import ConfigError
from ..ir._lazy import lazy
from ..arch import DEFAULT
from ..atom.mma_traits import ATOM_M
from ..problem import GemmProblem
from .gemm import MAX_ACC_REGS, GemmKernel, KernelPlan, acc_regs, split_warpgroups_for
from .skeleton import Role

cir = lazy("cutedsl.ir")

PRODUCER_REGS, CONSUMER_REGS = DEFAULT.producer_regs, DEFAULT.consumer_regs   #: setmaxnreg budgets (40 / 232)
#: 168: the launch budget of 384 threads (a producer and two consumer warpgroups)
LAUNCH_REGS = DEFAULT.launch_regs(3 * DEFAULT.warpgroup_threads)


class WarpSpecializedGemmKernel(GemmKernel):
    """Chapter 5: a producer warpgroup and consumer warpgroup(s) per output tile, one CTA per
    tile (not persistent). ``stages`` 2..7 smem slots; ``cluster`` ``(cluster_m, cluster_n)``;
    ``raster``/``swizzle``/``sm_count`` go to the tile scheduler. Raises ``ConfigError`` for
    combinations the schedule cannot run (see :meth:`check`)."""

    name = "gemm_warp_specialized"
    mainloop_cls = WarpSpecializedMainloop
    epilogue_cls = TmaStoreEpilogue
    scheduler_cls = PersistentTileScheduler
    persistent = False
    CONFIG_FIELDS = GemmKernel.CONFIG_FIELDS + ("stages", "cluster", "raster", "swizzle", "sm_count",
                                                "decomposition", "splits")
    #: one stage cannot work: a consumer releases a slot only after the next k-tile's WGMMAs were
    #: issued (wait_group 1), which needs that fill -- a deadlock
    STAGES = range(2, 8)
    #: the problem visitor of a grouped kernel (:class:`~cutedsl.collective.grouped.GroupedProblems`:
    #: G problems' tables in place of the ``a``, ``b``, ``d``, ``m``, ``n``, ``k`` parameters), or
    #: None: one problem. The instance is :attr:`groups`; every hook below asks it.
    groups_cls = None
    groups = None

    def __init__(self, tile_m=128, tile_n=128, stages=4, dtype="f16", out_dtype="f32", b_major="MN",
                 epilogue=None, cluster=(1, 1), raster="M", swizzle=1, sm_count=None, arch=None, b_dtype=None,
                 fusion=(), batched=False, a_major="K", decomposition="data-parallel", splits=None):
        self.stages, self.cluster = stages, tuple(cluster)      # read by the plan and the builders
        self._schedule = (raster, swizzle, sm_count)
        #: how tiles are divided among the persistent CTAs (``collective.stream_k``)
        self.decomposition, self.splits = decomposition, splits
        super().__init__(tile_m, tile_n, dtype, out_dtype, b_major, epilogue, arch, b_dtype, fusion, batched,
                         a_major)

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

    def make_scheduler(self):
        """The persistent scheduler; with a ``decomposition`` other than data-parallel, the
        stream-K one (and the partial-tile reduction of the epilogue side); a grouped kernel's
        is its problem visitor's (:meth:`make_groups`)."""
        if self.groups_cls is not None:
            self.groups = self.make_groups()
            return self.groups.scheduler
        raster, swizzle, sm_count = self._schedule
        if self.decomposition == "data-parallel" and self.splits is None:
            return self.scheduler_cls(self.tile_m, self.tile_n, raster, swizzle, sm_count, self.cluster,
                                      persistent=self.persistent)
        from ..collective.stream_k import PartialTileReduction, StreamKScheduler
        self.reduction = PartialTileReduction(self.tile_m, self.tile_n, self.split_warpgroups,
                                              self.arch.warpgroup_threads)
        return StreamKScheduler(self.tile_m, self.tile_n, raster, swizzle, sm_count, self.cluster,
                                persistent=self.persistent, decomposition=self.decomposition, splits=self.splits,
                                k_tile=self.traits.k_tile)

    def grouped_features(self) -> dict:
        """What this kernel runs that :meth:`GroupedProblems.reason
        <cutedsl.collective.grouped.GroupedProblems.reason>` judges (subclasses add theirs)."""
        return dict(decomposition=self.decomposition, splits=self.splits, batched=self.batched,
                    epilogue_params=self.epilogue.kernel_params())

    def make_groups(self):
        """The :attr:`groups_cls` problem visitor for this tile, cluster, epilogue kind and
        schedule; ``ValueError`` naming what it cannot be combined with."""
        why = self.groups_cls.reason(**self.grouped_features())
        if why:
            raise ValueError(why)
        raster, swizzle, sm_count = self._schedule
        return self.groups_cls(self.tile_m, self.tile_n, self.traits.k_tile, self.cluster, self.epilogue.kind,
                               raster=raster, swizzle=swizzle, sm_count=sm_count, persistent=self.persistent)

    # -- schedule description (subclasses override) -------------------------------------
    @classmethod
    def split_for(cls, tile_m: int, tile_n: int) -> int:
        """Consumer warpgroups that share one tile, each owning ``tile_m / split`` rows: two
        when one warpgroup's accumulator would pass :data:`MAX_ACC_REGS` registers per thread."""
        return split_warpgroups_for(tile_m, tile_n)

    @classmethod
    def consumers_for(cls, tile_m: int, tile_n: int) -> int:
        """Consumer (MMA) warpgroups per CTA."""
        return cls.split_for(tile_m, tile_n)

    @property
    def consumer_warpgroups(self) -> int:
        return self.consumers_for(self.tile_m, self.tile_n)

    @property
    def split_warpgroups(self) -> int:
        return self.split_for(self.tile_m, self.tile_n)

    @classmethod
    def schedule_reason(cls, tile_m: int, tile_n: int, stages, cluster) -> str | None:
        """Why the schedule cannot run this tile / stage count / cluster, or None."""
        if tuple(cluster) not in CLUSTERS:
            return f"cluster must be one of {CLUSTERS} (cluster_m, cluster_n), got {tuple(cluster)}"
        split, atom_m = cls.split_for(tile_m, tile_n), ATOM_M
        if tile_m // split < atom_m:
            return (f"{cls.name}: tile_m {tile_m} is too small to split over {split} consumer warpgroups "
                    f"({atom_m} rows each at least)")
        acc = acc_regs(tile_m // split, tile_n)
        if acc > MAX_ACC_REGS:
            return (f"{cls.name}: a {tile_m}x{tile_n} tile needs {acc} f32 accumulator registers per consumer "
                    f"thread, past the {MAX_ACC_REGS} that fit the {DEFAULT.consumer_regs}-register consumer "
                    f"budget; use a smaller tile")
        if stages != "auto" and stages not in cls.STAGES:
            return (f"{cls.name}: stages must be {cls.STAGES.start}..{cls.STAGES.stop - 1} (the producer fills "
                    f"one stage while the consumers read another), got {stages}")
        return None

    @classmethod
    def can_implement(cls, config) -> str | None:
        why = super().can_implement(config)
        if why:
            return why
        return cls.schedule_reason(config.tile[0], config.tile[1], config.stages, config.cluster)

    def check(self) -> None:
        """``ConfigError`` naming the limit when the schedule cannot run this tile/cluster."""
        why = self.schedule_reason(self.tile_m, self.tile_n, self.stages, self.cluster)
        if why:
            raise ConfigError(why)

    @property
    def threads(self) -> int:
        return self.plan.threads

    @property
    def launch_registers(self) -> int:
        """Registers per thread at launch (``.maxnreg``): 168, what 384 threads (a producer
        and two consumer warpgroups) can have, <= the consumers' 232. ptxas allocates the
        whole kernel within it (a 64 x 256 single-consumer tile needs more than the 136 a
        256-thread average of 40 and 232 would give); ``setmaxnreg`` then moves registers
        from the producer to the consumers within the CTA's pool."""
        return self.arch.launch_regs(3 * self.arch.warpgroup_threads)

    def config(self) -> dict:
        return {**super().config(), "stages": self.stages, "consumers": self.consumer_warpgroups,
                "scheduler": self.scheduler.config()}

    def params(self):
        """The GEMM parameters; a grouped kernel's are its problem visitor's
        (:meth:`~cutedsl.collective.grouped.GroupedProblems.kernel_params`)."""
        if self.groups is None:
            return super().params()
        return self.groups.kernel_params(self.epilogue.kernel_params())

    def host_params(self) -> list:
        base = super().host_params()
        return base if self.groups is None else base + self.groups.host_params()

    def d_by_tensor_map(self) -> bool:
        """A grouped kernel: each group's D is a tensor map in the table (else an address in ``d_ptrs``)."""
        return self.groups.d_kind == "tma"

    def units_grid(self, units: int) -> tuple:
        """A grouped kernel: CTAs for ``units`` work units of all groups."""
        return self.groups.units_grid(units)

    def map_specs(self) -> dict:
        """A grouped kernel: the ``TensorMapSpec`` of each map in a group's row of the table, by name."""
        return self.groups.map_specs(self.mainloop.tensor_maps() + self.epilogue.tensor_maps())

    def bind_problem(self, args):
        """As :meth:`GemmKernel.bind_problem`; a grouped kernel binds its problem visitor and
        returns its :class:`~cutedsl.collective.grouped.GroupedProblem` (``group(wt.l)``: the
        ``GemmProblem`` of work tile ``wt``)."""
        if self.groups is None:
            return super().bind_problem(args)
        return self.groups.bind(args)

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

    @property
    def cluster_ctas(self) -> int:
        return self.cluster[0] * self.cluster[1]

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

    @property
    def k_varies(self) -> bool:
        """Whether work tiles of one CTA may have different k-tile counts (stream-K pieces,
        grouped problems): ping-pong then skips the other warpgroup's unit by its own count."""
        return self.reduction is not None or self.groups is not None

    def operand_atoms(self, args):
        """The A and B ``TmaCopy`` atoms the mainloop binds (None: over the kernel's ``a`` and
        ``b`` tensor-map parameters); a kernel whose maps change per work tile gives its
        first ones (prefetched) and swaps them in :meth:`unit_operands` (a grouped kernel: group 0's)."""
        if self.groups is not None:
            return self.groups.operand_atoms(self.mainloop, args)
        return None

    def unit_operands(self, ops, wt):
        """The mainloop operands the producer loads work tile ``wt`` with: ``ops`` with the
        tile's batch coordinates (:meth:`batch_operands`), or a grouped kernel's group's A and B maps."""
        if self.groups is not None:
            return self.groups.unit_operands(self.mainloop, ops, wt)
        return self.batch_operands(ops, wt)

    def epilogue_context(self, args, smem, wt, row_base, wg) -> EpilogueContext:
        """The :class:`EpilogueContext` of work tile ``wt`` stored by consumer warpgroup ``wg``
        (a grouped kernel: with its group's M, N, K and D)."""
        if self.groups is not None:
            return self.groups.epilogue_context(args, smem, wt, row_base, wg)
        return EpilogueContext(wt.m0, wt.n0, args.m, args.n, args, smem, row_base, warpgroup=wg, l=wt.l,
                               problem=GemmProblem.from_args(args))

    def k_range(self, wt) -> tuple:
        """IR ``(k_first, k_count)`` the pipeline runs for work tile ``wt``: its range, except
        that an empty one (a split-K slice with nothing to do) runs one k-tile past the end of
        K instead: TMA fills it with zeros, so the accumulator is zero and no consumer waits
        for a fill that never comes."""
        total = wt.k_total if wt.k_total is not None else self.scheduler.k_tiles
        k_first, k_count = wt.k_first, wt.k_count
        empty = cir.u32(k_count).eq(0) if not isinstance(k_count, int) else k_count == 0
        k_first = cir.select(empty, total, k_first if not isinstance(k_first, int) else cir.u32(k_first))
        return k_first, cir.select(empty, cir.u32(1), k_count)

    def producer(self, ops, pipeline) -> None:
        """One thread: fill the pipeline with every work tile's k-tiles in scheduler order,
        then wait for every release (``producer_tail``)."""
        sch, s = self.scheduler, self.stages

        def tile(i, carried):
            wt = self.work_tile(i)
            k_first, k_count = self.k_range(wt)
            st = self.mainloop.producer_loop(self.unit_operands(ops, wt), pipeline, PipelineState.from_carry(s, carried),
                                             k_first, k_count, wt.m0, wt.n0)
            return st.carry()
        # the producer runs ahead of the other roles: a scheduler that fetches units at run time
        # (cluster launch control) has it ask for them (its issuing thread, or all that run this)
        issuer = ops.producer if ops.producer is not None else cir.const(1, "i1")
        pipeline.producer_tail(PipelineState.from_carry(s, sch.work_loop(PipelineState(s).carry(), tile, issuer)))

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

    def params(self):
        """The GEMM parameters; a grouped kernel's are its problem visitor's
        (:meth:`~cutedsl.collective.grouped.GroupedProblems.kernel_params`)."""
        if self.groups is None:
            return super().params()
        return self.groups.kernel_params(self.epilogue.kernel_params())

    def host_params(self) -> list:
        base = super().host_params()
        return base if self.groups is None else base + self.groups.host_params()

    def d_by_tensor_map(self) -> bool:
        """A grouped kernel: each group's D is a tensor map in the table (else an address in ``d_ptrs``)."""
        return self.groups.d_kind == "tma"

    def units_grid(self, units: int) -> tuple:
        """A grouped kernel: CTAs for ``units`` work units of all groups."""
        return self.groups.units_grid(units)

    def map_specs(self) -> dict:
        """A grouped kernel: the ``TensorMapSpec`` of each map in a group's row of the table, by name."""
        return self.groups.map_specs(self.mainloop.tensor_maps() + self.epilogue.tensor_maps())

    def bind_problem(self, args):
        """As :meth:`GemmKernel.bind_problem`; a grouped kernel binds its problem visitor and
        returns its :class:`~cutedsl.collective.grouped.GroupedProblem` (``group(wt.l)``: the
        ``GemmProblem`` of work tile ``wt``)."""
        if self.groups is None:
            return super().bind_problem(args)
        return self.groups.bind(args)

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
