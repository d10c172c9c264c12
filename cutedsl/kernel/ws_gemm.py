"""The warp-specialized GEMM kernel, arch-neutral: what the sm_90a kernels
(:mod:`.warp_specialized`: producer and consumer warpgroups, WGMMA) and the sm_100a kernel
(:mod:`.warp_specialized_sm100`: producer, MMA and epilogue warps, tcgen05 with the accumulator in
tensor memory) share, composed into each -- neither architecture's kernel derives from the other's,
so an edit to one cannot change the other.

:class:`WarpSpecializedGemmBase` holds the schedule's fields (``stages``, ``cluster``, rasterization,
SM count, stream-K ``decomposition`` / ``splits``), its tile scheduler (persistent, stream-K, or a
grouped kernel's problem visitor, ``groups_cls``) and every hook asking it (parameters, host
contract, the work tiles' operands and epilogue context), the rules every architecture applies
(clusters, stage counts), and the TMA producer loop (one fill per k-tile of every work tile, then
``producer_tail``), which both architectures run unchanged. Roles, pipelines, the MMA side and the
epilogue side are each architecture's.
"""
from __future__ import annotations

from ..collective.epilogue import EpilogueContext, TmaStoreEpilogue
from ..collective.pipeline import PipelineState
from ..collective.tile_scheduler import PersistentTileScheduler
from ..collective.warp_specialized import CLUSTERS
from ..errors import ConfigError
from ..ir._lazy import lazy
from ..problem import GemmProblem
from .gemm import GemmKernel

cir = lazy("cutedsl.ir")


class WarpSpecializedGemmBase(GemmKernel):
    """The arch-neutral warp-specialized GEMM (see the module docstring): not a kernel by itself
    (no roles, no MMA atom); ``stages`` in :attr:`STAGES`; ``cluster`` ``(cluster_m, cluster_n)``
    in :data:`~cutedsl.collective.warp_specialized.CLUSTERS`; ``raster`` / ``swizzle`` /
    ``sm_count`` go to the tile scheduler; ``decomposition`` / ``splits`` to the stream-K one.
    Raises ``ConfigError`` for combinations the schedule cannot run (:meth:`check`)."""

    epilogue_cls = TmaStoreEpilogue
    scheduler_cls = PersistentTileScheduler
    persistent = False
    CONFIG_FIELDS = GemmKernel.CONFIG_FIELDS + ("stages", "cluster", "raster", "swizzle", "sm_count",
                                                "decomposition", "splits")
    #: one stage cannot work: a slot is released only after the next k-tile's MMAs were issued,
    #: which needs that fill -- a deadlock
    STAGES = range(2, 8)
    #: who reads a stage while the producer fills another (the stage-count error names them)
    STAGE_READERS = "the consumers"
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
        """MMA warpgroups sharing one tile along M (each owning ``tile_m / split`` rows): 1 here."""
        return 1

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
    def tile_schedule_reason(cls, tile_m: int, tile_n: int) -> str | None:
        """Hook: why the schedule's roles cannot hold this tile (register budgets), or None."""
        return None

    @classmethod
    def schedule_reason(cls, tile_m: int, tile_n: int, stages, cluster) -> str | None:
        """Why the schedule cannot run this tile / stage count / cluster, or None."""
        if tuple(cluster) not in CLUSTERS:
            return f"cluster must be one of {CLUSTERS} (cluster_m, cluster_n), got {tuple(cluster)}"
        why = cls.tile_schedule_reason(tile_m, tile_n)
        if why:
            return why
        if stages != "auto" and stages not in cls.STAGES:
            return (f"{cls.name}: stages must be {cls.STAGES.start}..{cls.STAGES.stop - 1} (the producer fills "
                    f"one stage while {cls.STAGE_READERS} read another), got {stages}")
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
    def cluster_ctas(self) -> int:
        return self.cluster[0] * self.cluster[1]

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


__all__ = ["WarpSpecializedGemmBase"]
