"""GEMM kernels: ``D[M, N] = A[M, K] @ B[K, N]`` (f16/bf16/fp8/tf32 in, f32 accumulate; batched too).

By default one CTA (one warpgroup, 128 threads; two for a 128 x 256 tile) per
``tile_m x tile_n`` output tile; grid ``(ceil(N / tile_n), ceil(M / tile_m), 1)``; M, N, K
are kernel arguments, so one compiled kernel serves every shape; the tensor maps carry global
shapes and strides, TMA zero-fills partial tiles and the epilogue clips them.

* :class:`GemmKernel` — the base (CUTLASS ``GemmUniversal``): names its collectives as class
  attributes and exposes the hooks a new algorithm overrides (see its docstring).
* :class:`MultistageGemmKernel` — TMA + WGMMA software pipeline with ``stages`` slots
  (``MultistageMainloop``) and a pluggable epilogue (NVDSL chapter 4, CUTLASS ``KernelTma``).
* :class:`SingleTileGemmKernel` (in :mod:`.single_tile`) — composed directly from atoms, no pipelining: per k-tile
  load -> wait -> WGMMA -> wait (NVDSL chapter 3; K = 64 is one k-tile).

Kernel parameters: ``a``, ``b`` (tensor maps), ``d`` (tensor map or pointer, per epilogue),
epilogue extras, ``m``, ``n``, ``k`` (i32).
"""
from __future__ import annotations

import attrs

from ..arch import DEFAULT, get_arch
from ..atom.mma_traits import mma_traits, operand_pair_reason
from ..collective.epilogue import Epilogue, EpilogueContext, GlobalEpilogue, TmaStoreEpilogue
from ..collective.mainloop import MultistageMainloop
from ..collective.tile_scheduler import TileScheduler
from ..compiler.identity import qualname
from ..problem import GemmProblem
from .skeleton import Role, SkeletonKernel

TILE_M = (64, 128)
TILE_N = (64, 128, 256)
#: f32 accumulator registers per thread one consumer warpgroup holds; a larger tile is split
#: along M over two warpgroups (128 x 256 would be 256 of the 255 a thread may have)
MAX_ACC_REGS = 128


def acc_regs(rows: int, tile_n: int, arch=DEFAULT) -> int:
    """f32 accumulator registers per thread of one warpgroup holding ``rows x tile_n``."""
    return rows * tile_n // arch.warpgroup_threads


def split_warpgroups_for(tile_m: int, tile_n: int, arch=DEFAULT) -> int:
    """Consumer warpgroups sharing a tile along M: two when one warpgroup's accumulator would
    pass :data:`MAX_ACC_REGS` registers per thread."""
    return 2 if acc_regs(tile_m, tile_n, arch) > MAX_ACC_REGS else 1


@attrs.frozen
class KernelPlan:
    """What a GEMM kernel decides before it builds a collective (CUTLASS's kernel-level
    choices): ``split_warpgroups`` consumer warpgroups share one tile along M,
    ``consumer_warpgroups`` MMA warpgroups per CTA, ``producer_warpgroup`` a dedicated TMA
    warpgroup, ``threads`` per CTA, and ``epilogue`` -- placement options for the epilogue
    (applied where its class declares them in ``Epilogue.OPTIONS``: buffers per warpgroup,
    aliasing the A stages, deferring the store tail)."""
    split_warpgroups: int = 1
    consumer_warpgroups: int = 1
    producer_warpgroup: bool = False
    threads: int = DEFAULT.warpgroup_threads
    epilogue: dict = attrs.field(factory=dict)


def _check_grid_protocol(obj) -> None:
    """``ConfigError`` for a ``grid`` override written for the old ``grid(m, n, k)`` protocol:
    it would receive a ``GemmProblem`` as ``m`` and fail far from here."""
    import inspect
    from ..errors import ConfigError
    params = list(inspect.signature(type(obj).grid).parameters)
    if params[1:3] == ["m", "n"]:
        raise ConfigError(f"{type(obj).__name__}.grid(self, m, n, k) uses the old protocol: grid() now takes "
                          f"one GemmProblem, e.g. 'def grid(self, problem): ... problem.m, problem.n, problem.k'")


class GemmKernel(SkeletonKernel):
    """Base of the GEMM kernels of every architecture (on the kernel skeleton,
    :mod:`cutedsl.kernel.skeleton`); a new algorithm is a subclass overriding these hooks:

    * class attributes ``mainloop_cls`` (e.g. ``MultistageMainloop``; ``None`` when the kernel
      composes atoms itself), ``epilogue_cls`` (an ``Epilogue`` subclass; the constructor's
      ``epilogue`` argument overrides it per instance) and ``scheduler_cls`` (a
      ``TileScheduler``: which tile a CTA computes, and the launch grid);
    * :meth:`k_tile_range` — the k-tiles (of ``k_tile``) a unit of work reduces over;
    * :meth:`grid` — the CTAs to launch for a ``GemmProblem`` (the Device layer launches
      exactly this).

    The body asks the scheduler for one :class:`~cutedsl.collective.tile_scheduler.WorkTile`
    per unit of work (:meth:`work_tile`): tile origin, batch, k-tile range, valid.

    ``tile_m`` in {64, 128}, ``tile_n`` in {64, 128, 256}; ``dtype`` f16/bf16/e4m3/e5m2/tf32
    (A, and B unless ``b_dtype``: e4m3 and e5m2 mix); ``out_dtype`` f32/f16/bf16/e4m3/e5m2 (D);
    ``b_major`` "MN" (B is (K, N) row-major) or "K"; ``a_major`` "K" or "MN" (16-bit types);
    ``fusion`` fused epilogue nodes; ``batched`` (L, rows, cols) operands (parameters ``l``,
    ``la``, ``lb``). Raises ``ValueError``/``TypeError`` for values outside these sets.
    """

    name = "gemm"
    #: the MMA atom family the kernel issues (``Arch.require`` checks the target has it): each
    #: architecture's kernel names its own ("wgmma", "tcgen05"); None in the arch-neutral bases
    mma_atom = None
    #: the fix-up of tiles whose K is split over units of work (a ``PartialTileReduction``
    #: when the scheduler splits K: stream-K / split-K), else None
    reduction = None
    mainloop_cls = None
    epilogue_cls = GlobalEpilogue
    scheduler_cls = TileScheduler
    #: the values this kernel implements (``GemmConfig`` and the CLI ask these, keeping no copy)
    TILE_M, TILE_N = TILE_M, TILE_N
    #: the GemmConfig fields, as constructor keywords, a config passes to this kernel
    CONFIG_FIELDS = ("tile_m", "tile_n", "dtype", "out_dtype", "b_major", "epilogue", "arch", "b_dtype", "fusion",
                     "batched", "a_major")

    @classmethod
    def can_implement(cls, config) -> str | None:
        """Why this kernel cannot run ``config`` (a ``GemmConfig``), or None: the tile lists it
        publishes, the K tile of the MMA traits of ``config.dtype``, the output types of its
        epilogue. Subclasses add their schedule's rules (and call this first)."""
        from ..atom.mma_traits import MX_DTYPES, element_type
        from ..errors import one_of
        bm, bn, bk = config.tile
        if config.dtype in MX_DTYPES and "block_scaled" not in cls.CONFIG_FIELDS:
            return (f"dtype {config.dtype!r} (block-scaled MX inputs) needs a block-scaled kernel: "
                    f"arch='sm_100a', schedule='warp_specialized'")
        dtype = element_type(config.dtype)
        why = cls.tile_reason(bm, bn, dtype)
        if why:
            return why
        t = mma_traits(dtype)
        if bk != t.k_tile:
            return (f"tile BLOCK_K must be {t.k_tile} (one {t.swizzle}-byte swizzle row of {config.dtype}), "
                    f"got {bk}")
        if config.out_dtype not in Epilogue.OUT_DTYPES:
            return f"out_dtype must be {one_of(Epilogue.OUT_DTYPES)}, got {config.out_dtype!r}"
        return cls.operand_reason(dtype, element_type(getattr(config, "b_dtype", None)), config.b_major,
                                  getattr(config, "a_major", "K"))

    @staticmethod
    def operand_reason(dtype: str, b_dtype, b_major: str, a_major: str = "K") -> str | None:
        """Why the MMA atom cannot read A of ``dtype`` stored ``a_major`` and B of ``b_dtype``
        (None: ``dtype``) stored ``b_major``, or None (type pairs and majors of the PTX ISA's
        wgmma)."""
        b_dtype = b_dtype or dtype
        why = operand_pair_reason(dtype, b_dtype)
        if why:
            return why
        if a_major not in mma_traits(dtype).majors_a:
            return (f"{dtype} operand A must be K-major (WGMMA transposes only 16-bit operands): use "
                    f"a_major='K' (A stored as a row-major (M, K) array), got a_major={a_major!r}")
        t = mma_traits(b_dtype)
        if b_major not in t.majors_b:
            return (f"{b_dtype} operands must be K-major (WGMMA transposes only 16-bit operands): "
                    f"use b_major='K' (B stored as (N, K), i.e. b.T of a row-major (K, N) array), "
                    f"got b_major={b_major!r}")
        return None

    @classmethod
    def tile_reason(cls, tile_m: int, tile_n: int, dtype: str) -> str | None:
        """Why this class has no ``tile_m x tile_n`` tile of ``dtype`` operands (its published
        lists -- a subclass may widen them -- and the MMA atom's operand types), or None."""
        from ..errors import ConfigError, one_of
        if tile_m not in cls.TILE_M:
            return f"tile BLOCK_M must be {one_of(cls.TILE_M, quote=False)}, got {tile_m}"
        if tile_n not in cls.TILE_N:
            return f"tile BLOCK_N must be {one_of(cls.TILE_N, quote=False)}, got {tile_n}"
        try:
            mma_traits(dtype)
        except ConfigError as e:
            return str(e)
        return None

    def __init__(self, tile_m=128, tile_n=128, dtype="f16", out_dtype="f32", b_major="MN", epilogue=None, arch=None,
                 b_dtype=None, fusion=(), batched=False, a_major="K"):
        why = self.tile_reason(tile_m, tile_n, dtype)
        if why:                    # name the constructor's arguments as well as the rule
            raise ValueError(f"{type(self).__name__}(tile_m={tile_m}, tile_n={tile_n}, dtype={dtype!r}): {why}")
        why = self.operand_reason(dtype, b_dtype, b_major, a_major) if b_major in ("MN", "K") else None
        if why:
            raise ValueError(f"{type(self).__name__}(dtype={dtype!r}, b_dtype={b_dtype!r}, b_major={b_major!r}, "
                             f"a_major={a_major!r}): {why}")
        self.a_major = a_major              #: A's layout: "K" (row-major (M, K)) or "MN" (M-major)
        self.b_dtype = b_dtype or dtype     #: B's element type (an fp8 kind may mix with A's)
        self.fusion = tuple(fusion)         #: fused epilogue nodes (cutedsl.collective.fusion)
        #: D[l] = A[l] @ B[l] over a batch: rank-3 tensor maps, parameters l, la, lb (A's and
        #: B's batch extents: L, or 1 for an operand broadcast over the batch)
        self.batched = bool(batched)
        self.traits = mma_traits(dtype)    #: K tile, element bytes, swizzle of the operands
        self.arch = get_arch(arch or DEFAULT)    #: the target: warpgroup size, budgets, toolchain
        if self.mma_atom is not None:
            self.arch.require(self.mma_atom, type(self).__name__)
        if b_major not in ("MN", "K"):
            raise ValueError(f"b_major must be 'MN' or 'K', got {b_major}")
        if epilogue is not None:
            self.epilogue_cls = epilogue           # per instance, shadows the class attribute
        if not (isinstance(self.epilogue_cls, type) and issubclass(self.epilogue_cls, Epilogue)):
            raise TypeError(f"epilogue must be an Epilogue subclass, got {self.epilogue_cls!r}")
        self.tile_m, self.tile_n, self.dtype, self.out_dtype = tile_m, tile_n, dtype, out_dtype
        self.b_major = b_major
        # plan, then build each collective once from the plan
        self.plan = self.make_plan()
        self.epilogue = self.make_epilogue()
        self.scheduler = self.make_scheduler()
        if self.batched:
            self.scheduler.batched = True
        self.mainloop = self.make_mainloop()
        _check_grid_protocol(self)
        _check_grid_protocol(self.scheduler)

    def collectives(self) -> tuple:
        """The base's, plus the fused epilogue nodes (user node classes are code too)."""
        return super().collectives() + tuple(self.fusion)

    def config(self) -> dict:
        # class identities by name: their source (user code included) is in the cache key
        # through cutedsl.compiler.identity
        mixed = {"b_dtype": self.b_dtype} if self.b_dtype != self.dtype else {}   # identity unchanged for one type
        if self.a_major != "K":
            mixed["a_major"] = self.a_major
        if self.fusion:                     # the nodes' classes and specs (their code: compiler.identity)
            mixed["fusion"] = [f"{qualname(type(nd))}:{nd!r}" for nd in self.epilogue.fusion]
        if self.batched:
            mixed["batched"] = True
        return {"arch": self.arch.name, "tile": [self.tile_m, self.tile_n, self.traits.k_tile], "dtype": self.dtype,
                **mixed,
                "out_dtype": self.out_dtype,
                "b_major": self.b_major, "class": qualname(type(self)),
                "epilogue": qualname(self.epilogue_cls), "scheduler": qualname(type(self.scheduler)),
                "mainloop": qualname(self.mainloop_cls) if self.mainloop_cls else None}

    # -- plan and construction (subclasses override) -----------------------------------
    def make_plan(self) -> KernelPlan:
        """The :class:`KernelPlan`: one warpgroup, no producer, the epilogue's defaults."""
        return KernelPlan()

    def make_epilogue(self):
        """``epilogue_cls(tile_m, tile_n, out_dtype)`` with the plan's placement options (those
        the class declares)."""
        epi = self.epilogue_cls(self.tile_m, self.tile_n, self.out_dtype)
        opts = {k: v for k, v in self.plan.epilogue.items() if k in self.epilogue_cls.OPTIONS}
        if opts:
            epi.configure(**opts)
        if self.batched:
            epi.batched = True
        return epi.fuse(self.fusion) if self.fusion else epi

    def make_mainloop(self):
        """The mainloop collective (``None`` for a kernel that composes atoms itself)."""
        return None

    # -- hooks -----------------------------------------------------------------------
    def make_scheduler(self):
        """The tile scheduler instance: ``scheduler_cls(tile_m, tile_n)``; override to pass
        more (e.g. rasterization, SM count)."""
        return self.scheduler_cls(self.tile_m, self.tile_n)

    def grid(self, problem) -> tuple:
        """CTAs ``(x, y, z)`` for ``problem`` (a ``GemmProblem``; the scheduler's grid by default)."""
        return self.scheduler.grid(problem)

    def work_tile(self, i=0):
        """IR: the ``WorkTile`` of this CTA's unit of work ``i``, its k-tiles decided by
        :meth:`k_tile_range` (the scheduler's unless a subclass overrides it)."""
        return self.scheduler.work_tile(i, self.k_tile_range)

    def k_tile_range(self, k_tiles) -> tuple:
        """IR: ``(first, count)`` — a unit of work reduces k-tiles ``first .. first + count - 1``
        (each ``k_tile`` of K) of the ``k_tiles`` (unsigned i32) the problem has; each may be a Python
        int or an IR i32; ``count`` may be 0 (the accumulator stays zero). Tiles past ``k_tiles``
        read as zeros (TMA fills out-of-bounds boxes). Default: the tile scheduler's
        :meth:`~cutedsl.collective.tile_scheduler.TileScheduler.k_tile_range` (all k-tiles,
        ``(0, k_tiles)``, unless a split-K scheduler says otherwise)."""
        return self.scheduler.k_tile_range(k_tiles)

    def declare_smem(self, plan, stages=None) -> None:
        """The kernel's shared memory (see :meth:`SkeletonKernel.smem_plan
        <cutedsl.kernel.skeleton.SkeletonKernel.smem_plan>`, which sizes it against
        ``arch.smem_per_cta``: 227 KiB per CTA on sm_90a, and ``max_stages``, CUTLASS's
        ``StageCountAutoCarveout``): the mainloop's buffers and barriers (if it has a mainloop;
        with ``stages`` slots, default its own), the epilogue's, then :meth:`plan_extra`'s.
        Declarations only (no IR)."""
        if self.mainloop is not None:
            self.mainloop.plan(plan, stages)
        self.epilogue.plan(plan)
        self.plan_extra(plan)

    def tensor_maps(self) -> list:
        """The mainloop's tensor maps (A, B; scale factors), then the epilogue's."""
        ml = self.mainloop.tensor_maps() if self.mainloop is not None else []
        return ml + self.epilogue.tensor_maps()

    def plan_extra(self, plan) -> None:
        """Hook: declare a subclass's own shared memory / barriers in ``plan`` (none here)."""

    def param_dims(self, problem) -> dict:
        """Host: named sizes (beyond m, n, k, l) the shapes of this kernel's declared array
        parameters use, for ``problem`` (a ``GemmProblem`` of ints); none here."""
        return {}

    # -- host contract (see Kernel): the scheduler's parameters, the reduction's workspace and
    #    co-residency, the epilogue's zero-filled D -- answered here, never read by the front end
    def workspace(self, problem) -> dict:
        """Host: bytes of each workspace parameter (``ParamSpec.workspace``) a launch for
        ``problem`` (a ``GemmProblem`` of ints) needs; the runtime provides them zeroed."""
        if self.reduction is None:
            return {}
        return self.reduction.workspace_bytes(self.scheduler.partial_tiles(problem))

    def host_params(self) -> list:
        return [p.name for p in self.scheduler.kernel_params()]

    def host_values(self, problem) -> dict:
        return self.scheduler.param_values(problem)

    def zero_filled_outputs(self) -> tuple:
        return ("d",) if self.epilogue.accumulates else ()

    def co_resident(self) -> bool:
        return self.reduction is not None        # stream-K / split-K pieces of one tile wait on each other

    def resident_ctas(self, sm_count: int) -> int:
        return sm_count * self.scheduler.ctas_per_sm

    def needs_sm_count(self) -> bool:
        s = self.scheduler
        return bool(getattr(s, "persistent", False)) and s.sm_count is None

    def set_sm_count(self, sm_count) -> None:
        self.scheduler.sm_count = sm_count

    def bind_problem(self, args):
        """IR: the ``GemmProblem`` of the kernel's arguments, bound to the tile scheduler with
        its k-tile count (and its own parameters); returns it."""
        problem = GemmProblem.from_args(args)
        self.scheduler.bind(problem, self.traits.k_tile)
        self.scheduler.bind_params(args)
        if self.batched:
            self._operand_batches = (args.la, args.lb)
        return problem

    def batch_operands(self, ops, wt):
        """The mainloop operands ``ops`` with the batch coordinates of work tile ``wt`` (a
        batched kernel: ``wt.l``, or 0 for an operand whose batch extent is 1); ``ops``
        unchanged otherwise."""
        if not self.batched:
            return ops
        import attrs as _attrs
        return _attrs.evolve(ops, batch=self.batch_coords(wt))

    def batch_coords(self, wt) -> tuple:
        """IR ``(l of A, l of B)``: the TMA batch coordinates of work tile ``wt`` (batched kernels)."""
        from ..ir import select, u32
        l = u32(wt.l)
        la, lb = self._operand_batches
        return select(la.eq(1), u32(0), l), select(lb.eq(1), u32(0), l)

    @staticmethod
    def _count(count):
        from ..ir import u32
        return u32(count) if isinstance(count, int) else count

    # -- shared pieces -----------------------------------------------------------------
    def params(self):
        from ..compiler.artifact import ParamSpec as Param   # no MLIR: Gemm calls this on GPU machines without it
        batch = [Param("l", "i32"), Param("la", "i32"), Param("lb", "i32")] if self.batched else []
        reduction = self.reduction.kernel_params() if self.reduction is not None else []
        return ([Param("a", "tensormap"), Param("b", "tensormap"), self.epilogue.d_param()]
                + self.epilogue.kernel_params() + [Param("m", "i32"), Param("n", "i32"), Param("k", "i32")] + batch
                + self.scheduler.kernel_params() + reduction)

    def k_tiles(self, args):
        """IR: k-tiles of the problem, ``ceil(K / k_tile)`` (unsigned i32)."""
        kt = self.traits.k_tile
        return (args.k.unsigned() + kt - 1) // kt


class MultistageGemmKernel(GemmKernel):
    """Pipelined GEMM; ``stages`` 1..7 smem slots; see module docstring."""

    name = "gemm_multistage"
    mma_atom = "wgmma"
    mainloop_cls = MultistageMainloop
    epilogue_cls = TmaStoreEpilogue
    CONFIG_FIELDS = GemmKernel.CONFIG_FIELDS + ("stages",)

    def __init__(self, tile_m=128, tile_n=128, stages=4, dtype="f16", out_dtype="f32", b_major="MN",
                 epilogue=None, arch=None, b_dtype=None, fusion=(), batched=False, a_major="K"):
        self.stages = stages                        # read by make_plan / make_mainloop
        super().__init__(tile_m, tile_n, dtype, out_dtype, b_major, epilogue, arch, b_dtype, fusion, batched,
                         a_major)

    def make_plan(self) -> KernelPlan:
        # a 128 x 256 f32 accumulator is 256 registers per thread for one warpgroup (limit 255):
        # split it along M over two consumer warpgroups, each with its own epilogue buffers
        wg = split_warpgroups_for(self.tile_m, self.tile_n, self.arch)
        return KernelPlan(split_warpgroups=wg, consumer_warpgroups=wg, threads=self.arch.warpgroup_threads * wg,
                          epilogue={"warpgroups": wg})

    def make_mainloop(self):
        return self.mainloop_cls(self.tile_m, self.tile_n, self.stages, self.dtype, self.b_major,
                                 self.plan.split_warpgroups, arch=self.arch, b_dtype=self.b_dtype,
                                 batched=self.batched, a_major=self.a_major)

    @property
    def warpgroups(self) -> int:
        """Consumer warpgroups splitting the tile along M."""
        return self.plan.split_warpgroups

    @property
    def threads(self) -> int:
        return self.plan.threads

    def config(self) -> dict:
        return {**super().config(), "stages": self.stages, "warpgroups": self.warpgroups}

    # -- build: one warpgroup role (two splitting M) issues TMA and WGMMA, then stores
    def roles(self) -> tuple:
        return (Role.warpgroups("mma", self.warpgroups),)

    def setup(self, b) -> None:
        self.epilogue.init(b.smem, b.leader)            # before the mainloop's init fence
        b.ops, b.pipeline = self.mainloop.setup(b.smem, b.args)
        b.init_synced = True                            # the mainloop fenced and synchronised the CTA

    def bind(self, b) -> None:
        b.problem = self.bind_problem(b.args)

    def role_mma(self, b, index) -> None:
        from ..ir import thread_idx
        wt = self.work_tile(0)
        ops = self.batch_operands(b.ops, wt)
        acc = self.mainloop.run(ops, b.pipeline, self._count(wt.k_count), wt.m0, wt.n0, wt.k_first)
        wg = thread_idx() // self.arch.warpgroup_threads if self.warpgroups > 1 else 0
        row_base = wg * self.mainloop.wg_m if self.warpgroups > 1 else 0
        self.epilogue.store(acc, EpilogueContext(wt.m0, wt.n0, b.args.m, b.args.n, b.args, b.smem, row_base, wg,
                                                 l=wt.l, problem=b.problem))


# composed straight from atoms, in its own module; imported here so existing imports work
from .single_tile import SingleTileGemmKernel  # noqa: E402,F401
