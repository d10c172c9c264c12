"""The persistent warp-specialized Blackwell GEMM (sm_100a; CUTLASS ``KernelTmaWarpSpecialized``
for sm100 with a 1-SM MMA), from the same collectives as the Hopper kernels, composed from the arch-neutral
:class:`~cutedsl.kernel.ws_gemm.WarpSpecializedGemmBase` (not a subclass of an sm_90 kernel).

Roles (6 warps, 192 threads, :mod:`.skeleton` roles): warp 0 -- the producer loop (the
arch-neutral :meth:`~cutedsl.kernel.ws_gemm.WarpSpecializedGemmBase.producer` the sm_90 kernels
run too, TMA multicast in clusters), the whole warp walking the ring and an elected lane issuing; warp 1 -- allocates
the tensor memory and an elected lane issues every ``tcgen05.mma``
(:meth:`~cutedsl.collective.tcgen05_mainloop.Tcgen05Mainloop.mma_loop`); warps 2-5 -- the
epilogue, each reading its lane quarter of the accumulator with ``tcgen05.ld``
(:func:`~cutedsl.collective.tmem_epilogue.store_accumulator`).

The accumulator is **double-buffered in TMEM** (``2 x tile_n`` columns): a second pipeline of
two slots (the same :class:`~cutedsl.collective.pipeline.TmaPipeline` protocol: a full barrier
the MMA thread's ``tcgen05.commit`` completes when the tile's MMAs are done, an empty barrier
every epilogue thread arrives on after its last ``tcgen05.ld``) lets the MMAs of the next tile
run while the epilogue stores this one. All three roles walk the persistent tile scheduler's
work tiles in the same order. At the end the CTA synchronises and warp 1 frees the columns.
"""
from __future__ import annotations

from ..atom.mma_traits import block_scale
from ..atom.tmem_fragment import SPLIT_ROWS, accumulator_split, tmem_columns

from ..collective.clc_scheduler import TILE_SCHEDULERS, ClcTileScheduler
from ..collective.pipeline import PipelineState, TmaPipeline
from ..collective.tcgen05_mainloop import Tcgen05Mainloop
from ..ir._lazy import lazy
from .gemm import KernelPlan
from .skeleton import Role
from .ws_gemm import WarpSpecializedGemmBase

cir = lazy("cutedsl.ir")

PRODUCER_WARP, MMA_WARP, FIRST_EPILOGUE_WARP = 0, 1, 2
ACC_STAGES = 2                      #: accumulator buffers in tensor memory


class Sm100WarpSpecializedGemmKernel(WarpSpecializedGemmBase):
    """Persistent; see the module docstring. ``tile_m`` 128 or 64 (one CTA's M = 64 MMA, or with
    ``mma_sm`` 2 a CTA pair's M = 128 MMA, 64 rows per CTA), ``tile_n`` 64/128/256; ``stages``
    2..7; ``cluster`` as the sm_90 kernels (TMA multicast, commit multicast of the releases);
    the ``global`` epilogue, or ``tma`` (each epilogue warp stages its 32 rows in swizzled shared
    sub-tiles for TMA stores: :class:`~cutedsl.collective.tmem_epilogue_tma.TmemTmaStoreEpilogue`);
    fused nodes and batches as everywhere (``beta * C`` with the global epilogue); stream-K /
    split-K (``decomposition``) with ``mma_sm`` 1: the epilogue warps
    reduce each piece's TMEM rows (:func:`~cutedsl.collective.tmem_epilogue.store_partial`)."""

    name = "gemm_warp_specialized_sm100"
    mma_atom = "tcgen05"
    mainloop_cls = Tcgen05Mainloop
    persistent = True
    TILE_M = (128, SPLIT_ROWS)
    STAGE_READERS = "the MMAs"
    CONFIG_FIELDS = WarpSpecializedGemmBase.CONFIG_FIELDS + ("mma_sm", "block_scaled", "tile_scheduler")

    def __init__(self, *args, mma_sm: int = 1, block_scaled=False, tile_scheduler: str = "static", **kw):
        self.mma_sm = mma_sm        #: 2: CTA pairs share one MMA of 2 x tile_m rows (cta_group::2)
        if tile_scheduler not in TILE_SCHEDULERS:
            raise ValueError(f"tile_scheduler must be one of {TILE_SCHEDULERS}, got {tile_scheduler!r}")
        #: "static": persistent CTAs walk fixed units; "clc": one cluster per unit, the running
        #: ones cancel the waiting ones and take their units (ClcTileScheduler)
        self.tile_scheduler = tile_scheduler
        #: block-scaled inputs, parameters a_scales / b_scales: False, "mx" (E8M0 factors per 32
        #: K elements; True means it too) or "nv" (NVFP4: UE4M3 per 16)
        self.block_scaled = block_scale(block_scaled).name if block_scaled else False
        super().__init__(*args, **kw)

    @property
    def pair(self) -> bool:
        return self.mma_sm == 2

    @property
    def split_accumulator(self) -> str | None:
        """How each CTA's accumulator lies in TMEM (:data:`~cutedsl.atom.tmem_fragment.SPLITS`):
        that of an MMA of ``mma_sm x tile_m`` rows over ``mma_sm`` CTAs."""
        return accumulator_split(self.mma_sm * self.tile_m, self.mma_sm)

    @property
    def acc_columns(self) -> int:
        """TMEM columns of one accumulator buffer."""
        return tmem_columns(self.tile_n, self.split_accumulator)

    def make_mainloop(self):
        return self.mainloop_cls(self.tile_m, self.tile_n, self.stages, self.dtype, self.b_major, 1, self.cluster,
                                 arch=self.arch, b_dtype=self.b_dtype, batched=self.batched, a_major=self.a_major,
                                 mma_sm=self.mma_sm, block_scaled=self.block_scaled)

    def params(self):
        """The GEMM parameters; block-scaled: A's and B's packed factors (tensor maps) after B."""
        ps = super().params()
        if not self.block_scaled:
            return ps
        from ..collective.tcgen05_mainloop import SF_BOX
        from ..compiler.artifact import ParamSpec as Param
        la, lb = (("la",), ("lb",)) if self.batched else ((), ())     # a batch: each operand's own
        sf = [Param("a_scales", "tensormap", shape=la + ("sfa_rows", SF_BOX[1]), dtype="u8"),
              Param("b_scales", "tensormap", shape=lb + ("sfb_rows", SF_BOX[1]), dtype="u8")]
        return ps[:2] + sf + ps[2:]

    def param_dims(self, problem) -> dict:
        if not self.block_scaled:
            return {}
        from ..atom.tcgen05 import sf_packed_rows, sf_tile_atoms
        block = block_scale(self.block_scaled).block
        atoms = sf_tile_atoms(self.dtype, block)
        return {"sfa_rows": sf_packed_rows(problem.m, problem.k, atoms, block),
                "sfb_rows": sf_packed_rows(problem.n, problem.k, atoms, block)}

    @staticmethod
    def operand_reason(dtype: str, b_dtype, b_major: str, a_major: str = "K") -> str | None:
        """As the base class, plus the sub-byte types of the block-scaled kinds
        (:func:`~cutedsl.atom.mma_traits.packed_pair_reason`): packed e2m1 (MXFP4 / NVFP4) times
        e2m1, 6-bit e2m3 / e3m2 (MXFP6) with each other or with e4m3 / e5m2, both K-major."""
        from ..atom.mma_traits import SUBBYTE, packed_pair_reason
        b_dtype = b_dtype or dtype
        if not {dtype, b_dtype} & SUBBYTE:
            return WarpSpecializedGemmBase.operand_reason(dtype, b_dtype, b_major, a_major)
        return packed_pair_reason(dtype, b_dtype, a_major, b_major)

    def make_scheduler(self):
        """The static persistent scheduler (or stream-K's), or with ``tile_scheduler="clc"`` the
        cluster-launch-control one, which every warp of the CTA walks."""
        if self.tile_scheduler == "static" or self.groups_cls is not None:   # grouped: refused by its visitor
            return super().make_scheduler()
        raster, swizzle, sm_count = self._schedule
        cs = self.cluster[0] * self.cluster[1]
        # every role's warps in every CTA of the cluster, but the MMA warp of a pair's odd CTA
        warps = (FIRST_EPILOGUE_WARP + self.arch.warps_per_warpgroup) * cs - (cs // 2 if self.pair else 0)
        return ClcTileScheduler(self.tile_m, self.tile_n, raster, swizzle, sm_count, self.cluster, warps=warps)

    def grouped_features(self) -> dict:
        return {**super().grouped_features(), "tile_scheduler": self.tile_scheduler,
                "block_scaled": self.block_scaled}

    @classmethod
    def can_implement(cls, config) -> str | None:
        why = super().can_implement(config)
        if why:
            return why
        pairs = Tcgen05Mainloop.PAIR_CLUSTERS
        split = accumulator_split(getattr(config, "mma_sm", 1) * config.tile[0], getattr(config, "mma_sm", 1))
        if split and config.epilogue == "tma":
            from ..collective.tmem_epilogue_tma import TmemTmaStoreEpilogue
            why = TmemTmaStoreEpilogue.split_reason(config.tile[1], config.out_dtype, split)
            if why:
                return why
        if split and config.decomposition != "data-parallel":
            return "stream-K / split-K on sm_100a are built for BLOCK_M 128 so far"
        if getattr(config, "mma_sm", 1) == 2 and tuple(config.cluster) not in pairs:
            return (f"mma_sm=2 (one MMA shared by a CTA pair: 256 or 128 rows) runs on cluster "
                    f"{' or '.join(map(str, pairs))}, got cluster={tuple(config.cluster)}")
        if getattr(config, "mma_sm", 1) == 2 and config.b_major == "MN":
            from ..atom.mma_traits import element_type, mma_traits
            box = mma_traits(element_type(config.dtype)).mn_box
            if (config.tile[1] // 2) % box:
                return (f"mma_sm=2 with an MN-major B loads tile_n / 2 = {config.tile[1] // 2} columns per CTA in "
                        f"boxes of {box}: use tile_n >= {2 * box} or b_major='K'")
        if config.epilogue == "tma":
            from ..atom.cvt import FP8
            from ..collective.fusion import AddC
            if config.out_dtype in FP8:
                return f"the sm_100a TMA-store epilogue writes f32, f16 or bf16, not {config.out_dtype}: epilogue='global'"
            if any(isinstance(nd, AddC) for nd in (config.fusion or ())):
                return "beta * C is not built for the sm_100a TMA-store epilogue: epilogue='global'"
        from ..atom.mma_traits import MX_DTYPES
        if config.dtype in MX_DTYPES or config.b_dtype in MX_DTYPES:
            from ..atom.mma_traits import DTYPE_SCALES
            b = config.b_dtype or config.dtype
            if config.dtype not in MX_DTYPES or b not in MX_DTYPES or DTYPE_SCALES[config.dtype] != DTYPE_SCALES[b] \
                    or (MX_DTYPES[config.dtype] == "e2m1") != (MX_DTYPES[b] == "e2m1"):
                return (f"block-scaled inputs come in pairs (MXFP8 or MXFP6 with MXFP8 or MXFP6, MXFP4 with MXFP4, "
                        f"NVFP4 with NVFP4): dtype {config.dtype!r}, b_dtype {config.b_dtype!r}")
            from ..atom.tcgen05 import SF_ROWS
            if tuple(config.tile[:2]) != (SF_ROWS, SF_ROWS):
                return ("block-scaled (MX) GEMMs are built for tile 128 x 128 (per CTA; a CTA pair with mma_sm=2: "
                        f"256 x 128) so far; got tile {config.tile[:2]}")
        if getattr(config, "tile_scheduler", "static") == "clc" and config.decomposition != "data-parallel":
            return (f"tile_scheduler='clc' (cluster launch control) hands out whole tiles: decomposition must be "
                    f"'data-parallel', got {config.decomposition!r}")
        if config.decomposition != "data-parallel" and getattr(config, "mma_sm", 1) == 2:
            return "stream-K / split-K on sm_100a are built for one SM per MMA (mma_sm=1) so far"
        return None

    def make_plan(self) -> KernelPlan:
        self.check()
        warps = FIRST_EPILOGUE_WARP + self.arch.warps_per_warpgroup
        # a TMA-store epilogue's last wait comes after the tile loop (epilogue_loop)
        return KernelPlan(split_warpgroups=1, consumer_warpgroups=1, producer_warpgroup=True,
                          threads=warps * self.arch.warp_threads,
                          epilogue={"defer_tail": True, "split": self.split_accumulator})

    def make_epilogue(self):
        """The configured epilogue; a TMA-store one as the tcgen05 variant that stages tensor
        memory rows (:class:`~cutedsl.collective.tmem_epilogue_tma.TmemTmaStoreEpilogue`)."""
        from ..collective.tmem_epilogue_tma import for_tcgen05
        self.epilogue_cls = for_tcgen05(self.epilogue_cls)
        return super().make_epilogue()

    @property
    def launch_registers(self):
        return None                 # no setmaxnreg: ptxas sizes the kernel (192 threads)

    @property
    def epilogue_threads(self) -> int:
        return self.arch.warpgroup_threads

    def plan_extra(self, plan) -> None:
        plan.barriers("acc_full", ACC_STAGES)
        plan.barriers("acc_empty", ACC_STAGES)
        self.scheduler.plan(plan)                   # cluster launch control: its response ring

    def config(self) -> dict:
        return {**super().config(), "acc_stages": ACC_STAGES, **({"mma_sm": 2} if self.pair else {}),
                **({"block_scaled": self.block_scaled + str(block_scale(self.block_scaled).block)}
                   if self.block_scaled else {})}

    # -- build: producer warp, MMA warp, four epilogue warps ---------------------------------
    def roles(self) -> tuple:
        """Warp 0 loads, warp 1 allocates TMEM and issues the MMAs, warps 2-5 store (no
        register budgets: ptxas sizes the 192-thread kernel)."""
        return (Role.warps("producer"), Role.warps("mma"),
                Role.warps("epilogue", self.epilogue_threads // self.arch.warp_threads))

    def role_predicate(self, b, role, predicate):
        # a pair: only the even CTA's MMA warp issues (its MMAs cover both CTAs)
        return predicate & b.even if role.name == "mma" and self.pair else predicate

    @property
    def cluster_ctas(self) -> int:
        return self.cluster[0] * self.cluster[1]

    def setup(self, b) -> None:
        """The operand ring (a pair's loads complete on the even CTA's barriers), the
        accumulator ring, the epilogue's and the scheduler's barriers, TMEM, the operands."""
        from ..atom import MBarriers
        from ..atom.cluster import cta_rank
        from ..atom.mbarrier import PairLeaderBarriers
        from ..atom.tcgen05 import TensorMemory
        from ..collective.tcgen05_mainloop import PairPipeline
        ml, smem = self.mainloop, b.smem
        leader, _ = b.leader, b.warp
        b.even = (cta_rank() % 2).eq(0) if self.pair else None
        if self.pair:                   # both CTAs' loads complete on the even CTA's barriers
            b.pipeline = PairPipeline(PairLeaderBarriers(smem.barriers("full"), self.stages), ml.pair_stage_bytes,
                                      MBarriers(smem.barriers("empty"), self.stages), b.even)
        else:
            b.pipeline = TmaPipeline(MBarriers(smem.barriers("full"), self.stages), ml.stage_bytes,
                                     MBarriers(smem.barriers("empty"), self.stages), consumers=1,
                                     cluster=self.cluster)
        # the accumulator's empty barrier: every epilogue thread of this CTA arrives, or (a
        # pair) lane 0 of every epilogue warp of both CTAs arrives on the even CTA's
        releases = 2 * self.arch.warps_per_warpgroup if self.pair else self.epilogue_threads
        b.accp = TmaPipeline(MBarriers(smem.barriers("acc_full"), ACC_STAGES), 0,
                             MBarriers(smem.barriers("acc_empty"), ACC_STAGES), consumers=releases)
        self.epilogue.init(smem, leader)
        b.accp.init(leader)
        self.scheduler.init(smem, leader)       # before the init fence and barrier
        b.pipeline.init(leader)
        b.init_fenced = True                    # the pipelines' init ends with the fence
        self.alloc_tensor_memory(b, TensorMemory.columns_for(ACC_STAGES * self.acc_columns + ml.sf_columns()),
                                 warp=MMA_WARP, cta_group=self.mma_sm)
        b.ops = ml.bind(smem, b.args, self.operand_atoms(b.args))
        ml.prefetch(b.ops, predicate=leader)

    def bind(self, b) -> None:
        self.bind_problem(b.args)
        b.ops = self.mainloop.bind_scales(b.ops, b.args, self.scheduler.k_tiles)   # k_tiles: every role uses it

    # the producer and MMA warps walk their rings whole and each instruction is issued by an
    # elected lane (CUTLASS's elect_one_sync per instruction, ElectEach): ptxas then keeps the
    # loops on the uniform datapath with no branch around the UTMALDG / UTC* instructions (a
    # lane-0 branch makes it wrap each in a loop over the warp's possibly divergent operands; one
    # elected predicate shared by several, in BSSY/BSYNC)
    def role_producer(self, b, index) -> None:
        import attrs
        from ..atom.sync import ElectEach, elect_one
        self.producer(attrs.evolve(b.ops, producer=ElectEach(elect_one())), b.pipeline)

    def role_mma(self, b, index) -> None:
        self.mma_issuer(b.ops, b.pipeline, b.accp, b.tmem)

    def role_epilogue(self, b, index) -> None:
        self.epilogue_loop(b.args, b.smem, b.accp, b.tmem)

    def mma_issuer(self, ops, pipeline, accp, tmem) -> None:
        """The MMA warp: per work tile, wait for a free accumulator buffer, run the tile's
        k-tiles into it, commit its completion to the buffer's full barrier; the whole warp
        waits, an elected lane issues each tcgen05 instruction."""
        from ..atom.tcgen05 import TensorMemory
        sch, s, ml = self.scheduler, self.stages, self.mainloop
        d0 = tmem.address()
        mask = ml.release_mask()

        def tile(i, carried):
            st = PipelineState.from_carry(s, carried[:2])
            acc = PipelineState.from_carry(ACC_STAGES, carried[2:])
            wt = self.work_tile(i)
            _, k_count = self.k_range(wt)
            accp.producer_acquire(acc)              # the epilogue has read this buffer's last tile
            TensorMemory.fence_after()
            st = ml.mma_loop(ops, pipeline, st, k_count, d0 + acc.index * self.acc_columns, mask,
                             sf=d0 + ACC_STAGES * self.acc_columns, elect=True)
            # a pair: both CTAs' accumulators are complete
            ml.mma_atom.commit(accp.full.address(acc.index), mask if self.pair else None, elect=True)
            return [*st.carry(), *acc.advance().carry()]
        sch.work_loop(PipelineState(s).carry() + PipelineState(ACC_STAGES).carry(), tile)

    def release_accumulator(self, accp, acc) -> None:
        """An epilogue thread is done reading buffer ``acc``: every thread arrives on this CTA's
        empty barrier, or (a pair) lane 0 of each warp on the even CTA's (the warp's
        ``tcgen05.wait::ld`` covered all its lanes' loads)."""
        if not self.pair:
            accp.consumer_release(acc)
            return
        from ..atom.cluster import cta_rank
        accp.empty.arrive_cluster(acc.index, cta_rank() & ~1,
                                  predicate=(cir.thread_idx() % self.arch.warp_threads).eq(0))

    def epilogue_loop(self, args, smem, accp, tmem) -> None:
        """Warps 2-5: per work tile, wait for its accumulator, load it in column chunks (each
        warp its lane quarter), release the buffer after the last load, store every chunk."""
        from ..atom.tcgen05 import TensorMemory
        from ..collective.tmem_epilogue import store_accumulator
        sch = self.scheduler
        d0 = tmem.address()

        def tile(i, carried):
            acc = PipelineState.from_carry(ACC_STAGES, carried)
            wt = self.work_tile(i)
            accp.consumer_wait(acc)
            TensorMemory.fence_after()
            ctx = self.epilogue_context(args, smem, wt, 0, 0)

            def release(acc=acc):                   # the last load: the MMAs may reuse the buffer
                TensorMemory.fence_before()
                self.release_accumulator(accp, acc)
            if self.reduction is None:
                store_accumulator(self.epilogue, d0 + acc.index * self.acc_columns, self.tile_n, ctx, release,
                                  split=self.split_accumulator)
            else:                                   # a stream-K / split-K piece: fix-up, then the final one stores
                from ..collective.tmem_epilogue import store_partial
                store_partial(self.epilogue, d0 + acc.index * self.tile_n, self.tile_n, ctx, release,
                              self.reduction, wt, self.reduction.BARRIER_ID)
            return acc.advance().carry()
        sch.work_loop(PipelineState(ACC_STAGES).carry(), tile)
        if getattr(self.epilogue, "defer_tail", False):
            self.epilogue.store_tail()          # no CTA exits while a TMA store reads its smem


__all__ = ["Sm100WarpSpecializedGemmKernel"]
