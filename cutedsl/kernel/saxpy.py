"""SAXPY kernels (NVDSL chapters 1 and 2): ``y <- alpha * x + y`` on f32 vectors of runtime length n.

:class:`TmaSaxpyKernel` uses the skeleton's single-role form (a shared-memory plan, an mbarrier
initialised and fenced, tensor maps: what the skeleton builds). :class:`SaxpyKernel` and
:class:`HelloKernel` stay plain :class:`~cutedsl.kernel.base.Kernel` s: no shared memory, no
barrier, no role -- and a CTA of any thread count (``HelloKernel`` defaults to 4 threads, less
than a warp) -- so the skeleton would add nothing but indirection."""
from __future__ import annotations

from .base import Kernel
from .skeleton import Role, SkeletonKernel


SMEM_ALIGN = 128    #: bytes; TMA destinations need 16, 128 keeps each buffer on its own cache line


class SaxpyKernel(Kernel):
    """One element per thread, ``block`` threads per CTA, bounds-checked (``ld/st.global``).

    Parameters: x, y (global f32 pointers), n (i32 elements), alpha (f32).
    """

    name = "saxpy"

    def __init__(self, block: int = 128):
        self.block = block

    def config(self) -> dict:
        return {"block": self.block}

    def grid(self, n: int) -> tuple:
        return ((n + self.block - 1) // self.block, 1, 1)

    def define(self):
        from ..ir import If, KernelBuilder, Param, block_idx, thread_idx
        from ..ir.gmem import GlobalPtr
        kb = KernelBuilder(self.name, [Param("x", "ptr"), Param("y", "ptr"), Param("n", "i32"),
                                       Param("alpha", "f32")], block=(self.block,))
        with kb.build() as a:
            i = block_idx() * self.block + thread_idx()
            x, y = GlobalPtr(a.x, "f32"), GlobalPtr(a.y, "f32")
            with If(i < a.n.unsigned()):
                y.store(i, a.alpha * x.load(i) + y.load(i))
        return kb, 0, []


class TmaSaxpyKernel(SkeletonKernel):
    """SAXPY through TMA: each CTA loads a ``tile``-element box of x and y into shared memory
    (one mbarrier, 2 x tile x 4 transaction bytes), computes, stores y back with a TMA store
    (out-of-bounds elements are zero-filled on load and clipped on store). The skeleton's
    single-role form (:mod:`.skeleton`): its plan, barrier initialisation and init barrier
    are the skeleton's, its one role is every thread of the CTA.

    Parameters: x, y (tensor maps of rank 1, box ``(tile,)``), alpha (f32).
    """

    name = "saxpy_tma"

    def __init__(self, tile: int = 256, block: int = 128):
        if tile % block or tile > 256 or (tile * 4) % 16:
            raise ValueError(f"tile {tile} must be a multiple of block {block}, <= 256")
        self.tile, self.block = tile, block

    def config(self) -> dict:
        return {"tile": self.tile, "block": self.block}

    def grid(self, n: int) -> tuple:
        return ((n + self.tile - 1) // self.tile, 1, 1)

    def roles(self) -> tuple:
        return (Role.threads("main", self.block),)

    def declare_smem(self, plan, stages=None) -> None:
        plan.buffer("x", (self.tile,), "f32", align=SMEM_ALIGN)
        plan.buffer("y", (self.tile,), "f32", align=SMEM_ALIGN)
        plan.barriers("bar", 1)

    def params(self) -> list:
        from ..ir import Param
        return [Param("x", "tensormap"), Param("y", "tensormap"), Param("alpha", "f32")]

    def tensor_maps(self):
        from ..compiler.artifact import TensorMapSpec
        return [TensorMapSpec("x", "f32", (self.tile,)), TensorMapSpec("y", "f32", (self.tile,))]

    def setup(self, b) -> None:
        from ..atom import MBarriers, TmaCopy
        specs = self.tensor_maps()
        b.tx, b.ty = TmaCopy(specs[0], b.args.x), TmaCopy(specs[1], b.args.y)
        b.bar = MBarriers(b.smem.barriers("bar"), 1)
        b.bar.init(0, 1, predicate=b.leader)

    def role_main(self, b, index) -> None:
        from mlir.dialects import gpu, memref
        from ..atom import bulk_commit_group, bulk_wait_group, tma_store_fence
        from ..ir import If, block_idx
        from ..ir import index as idx
        a, bar, tid = b.args, b.bar, b.tid
        x0 = block_idx() * self.tile
        xt, yt = b.smem["x"].tile(), b.smem["y"].tile()
        xs, ys = xt.memref(), yt.memref()
        with If(b.leader):
            bar.arrive_expect_tx(0, xt.nbytes + yt.nbytes)
            b.tx.load(xt, bar, 0, (x0,))
            b.ty.load(yt, bar, 0, (x0,))
        bar.wait(0, 0)
        for r in range(self.tile // self.block):
            j = idx(tid + r * self.block)
            memref.store(a.alpha * memref.load(xs, [j]) + memref.load(ys, [j]), ys, [j])
        tma_store_fence()
        gpu.barrier()
        with If(b.leader):
            b.ty.store(yt, (x0,))
            bulk_commit_group()
            bulk_wait_group(0)


class HelloKernel(Kernel):
    """NVDSL chapter 0: every thread prints ``hello from thread t of block b`` (``vprintf``)."""

    name = "hello"

    def __init__(self, block: int = 4):
        self.block = block

    def config(self) -> dict:
        return {"block": self.block}

    def grid(self, blocks: int = 1) -> tuple:
        return (blocks, 1, 1)

    def define(self):
        from mlir.dialects import gpu
        from ..ir import KernelBuilder, block_idx, thread_idx
        kb = KernelBuilder(self.name, [], block=(self.block,))
        with kb.build():
            gpu.printf("hello from thread %d of block %d\n", thread_idx(), block_idx())
        return kb, 0, []
