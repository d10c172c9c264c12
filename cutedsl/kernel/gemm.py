"""GEMM kernels: ``D[M, N] = A[M, K] @ B[K, N]`` (f16/bf16 in, f32 accumulate, f32/f16/bf16 out).

One CTA (one warpgroup, 128 threads) per ``tile_m x tile_n`` output tile; grid
``(ceil(N / tile_n), ceil(M / tile_m))``; M, N, K are kernel arguments, so one compiled kernel
serves every shape; the tensor maps carry global shapes and strides, TMA zero-fills partial
tiles and the epilogue clips them.

* :class:`MultistageGemmKernel` — TMA + WGMMA software pipeline with ``stages`` slots
  (``MultistageMainloop``) and a pluggable epilogue (NVDSL chapter 4, CUTLASS
  ``KernelTma``).
* :class:`SingleTileGemmKernel` — composed directly from atoms, no pipelining: per k-tile
  load -> wait -> WGMMA -> wait (NVDSL chapter 3; K = 64 is one k-tile).

Kernel parameters: ``a``, ``b`` (tensor maps), ``d`` (tensor map or pointer, per epilogue),
epilogue extras, ``m``, ``n``, ``k`` (i32).
"""
from __future__ import annotations

from ..collective.epilogue import Epilogue, EpilogueContext, GlobalEpilogue, TmaStoreEpilogue
from ..compiler.identity import qualname
from .base import Kernel

TILE_M = (64, 128)
TILE_N = (64, 128, 256)


class _GemmBase(Kernel):
    def __init__(self, tile_m=128, tile_n=128, dtype="f16", out_dtype="f32", b_major="MN",
                 epilogue=GlobalEpilogue):
        if tile_m not in TILE_M:
            raise ValueError(f"tile_m must be one of {TILE_M}, got {tile_m}")
        if tile_n not in TILE_N:
            raise ValueError(f"tile_n must be one of {TILE_N}, got {tile_n}")
        if dtype not in ("f16", "bf16"):
            raise ValueError(f"dtype must be f16 or bf16, got {dtype}")
        if b_major not in ("MN", "K"):
            raise ValueError(f"b_major must be 'MN' or 'K', got {b_major}")
        if not (isinstance(epilogue, type) and issubclass(epilogue, Epilogue)):
            raise TypeError(f"epilogue must be an Epilogue subclass, got {epilogue!r}")
        self.tile_m, self.tile_n, self.dtype, self.out_dtype = tile_m, tile_n, dtype, out_dtype
        self.b_major, self.epilogue_cls = b_major, epilogue
        self.epilogue = epilogue(tile_m, tile_n, out_dtype)

    def config(self) -> dict:
        return {"tile": [self.tile_m, self.tile_n, 64], "dtype": self.dtype, "out_dtype": self.out_dtype,
                "b_major": self.b_major, "epilogue": qualname(self.epilogue_cls)}

    def grid(self, m: int, n: int, k: int = 0) -> tuple:
        return ((n + self.tile_n - 1) // self.tile_n, (m + self.tile_m - 1) // self.tile_m, 1)

    def params(self):
        from ..ir import Param
        return ([Param("a", "tensormap"), Param("b", "tensormap"), self.epilogue.d_param()]
                + self.epilogue.extra_params() + [Param("m", "i32"), Param("n", "i32"), Param("k", "i32")])

    def _tile_origin(self):
        from ..ir import block_idx
        return block_idx("y") * self.tile_m, block_idx("x") * self.tile_n


class MultistageGemmKernel(_GemmBase):
    """Pipelined GEMM; ``stages`` 1..7 smem slots; see module docstring."""

    name = "gemm_multistage"

    def __init__(self, tile_m=128, tile_n=128, stages=4, dtype="f16", out_dtype="f32", b_major="MN",
                 epilogue=TmaStoreEpilogue):
        super().__init__(tile_m, tile_n, dtype, out_dtype, b_major, epilogue)
        from ..collective.mainloop import MultistageMainloop
        self.stages = stages
        # a 128 x 256 f32 accumulator is 256 registers per thread for one warpgroup (limit 255):
        # split it along M over two consumer warpgroups
        self.warpgroups = 2 if tile_m * tile_n > 128 * 128 else 1
        self.mainloop = MultistageMainloop(tile_m, tile_n, stages, dtype, b_major, self.warpgroups)

    @property
    def threads(self) -> int:
        return 128 * self.warpgroups

    def config(self) -> dict:
        return {**super().config(), "stages": self.stages, "warpgroups": self.warpgroups}

    def smem_plan(self):
        """The shared-memory plan (raises ``SharedMemoryError`` when it cannot fit)."""
        from ..ir.smem import SmemPlan
        plan = SmemPlan()
        self.mainloop.plan(plan)
        self.epilogue.plan(plan)
        return plan

    def define(self):
        from ..ir import KernelBuilder, thread_idx
        plan = self.smem_plan()
        kb = KernelBuilder(self.name, self.params(), block=(self.threads, 1, 1))
        with kb.build() as args:
            smem = plan.bind()
            self.mainloop.setup(smem, args)
            m0, n0 = self._tile_origin()
            k_tiles = (args.k.unsigned() + 63) // 64
            acc = self.mainloop.run(k_tiles, m0, n0)
            row_base = (thread_idx() // 128) * self.mainloop.wg_m if self.warpgroups > 1 else 0
            self.epilogue.store(acc, EpilogueContext(m0, n0, args.m, args.n, args, smem, row_base))
        return kb, plan.dynamic_bytes, self.mainloop.tensor_maps() + self.epilogue.tensor_maps()


class SingleTileGemmKernel(_GemmBase):
    """Unpipelined GEMM built straight from atoms (one smem slot, one mbarrier)."""

    name = "gemm_single_tile"

    def define(self):
        from mlir.dialects import gpu
        from ..atom import Accumulator, MBarriers, TmaCopy, WarpgroupMMA
        from ..compiler.artifact import TensorMapSpec
        from ..ir import If, KernelBuilder, Loop, SmemPlan, thread_idx
        tm, tn = self.tile_m, self.tile_n
        b_box = (64, 64) if self.b_major == "MN" else (tn, 64)
        specs = [TensorMapSpec("a", self.dtype, (tm, 64), swizzle=128),
                 TensorMapSpec("b", self.dtype, b_box, swizzle=128)]
        plan = SmemPlan()
        plan.buffer("a", (tm, 64), self.dtype, align=1024)
        plan.buffer("b", (tn, 64), self.dtype, align=1024)
        plan.barriers("bar", 1)
        self.epilogue.plan(plan)
        kb = KernelBuilder(self.name, self.params(), block=(128, 1, 1))
        with kb.build() as args:
            smem = plan.bind()
            ta, tb = TmaCopy(specs[0], args.a), TmaCopy(specs[1], args.b)
            bar = MBarriers(smem.barriers("bar"), 1)
            leader = thread_idx().eq(0)
            bar.init(0, 1, predicate=leader)
            bar.fence_init()
            gpu.barrier()
            m0, n0 = self._tile_origin()
            mma = WarpgroupMMA(tm, tn, self.dtype, self.b_major)
            loop = Loop(0, (args.k.unsigned() + 63) // 64, carry=mma.zero().structs)
            for kt, structs in loop:
                k0 = kt * 64
                with If(leader):
                    bar.arrive_expect_tx(0, (tm + tn) * 64 * 2)
                    ta.load(smem["a"].view(), bar, 0, (m0, k0))
                    if self.b_major == "MN":
                        for j in range(tn // 64):
                            dst = smem["b"].view(shape=b_box, byte_offset=j * tb.box_bytes)
                            tb.load(dst, bar, 0, (k0, n0 + 64 * j))
                    else:
                        tb.load(smem["b"].view(), bar, 0, (n0, k0))
                bar.wait(0, kt & 1)                 # the barrier completes one phase per k-tile
                acc = mma.mma(Accumulator(structs, tn), smem["a"].address(), smem["b"].address())
                mma.wait(0)
                gpu.barrier()                       # all reads of the slot done before it is refilled
                loop.next(*acc.structs)
            acc = Accumulator(loop.results, tn)
            self.epilogue.store(acc, EpilogueContext(m0, n0, args.m, args.n, args, smem))
        return kb, plan.dynamic_bytes, specs + self.epilogue.tensor_maps()
