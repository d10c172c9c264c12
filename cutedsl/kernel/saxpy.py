"""SAXPY kernels (NVDSL chapters 1 and 2): ``y <- alpha * x + y`` on f32 vectors of runtime length n."""
from __future__ import annotations

from .base import Kernel


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


class TmaSaxpyKernel(Kernel):
    """SAXPY through TMA: each CTA loads a ``tile``-element box of x and y into shared memory
    (one mbarrier, 2 x tile x 4 transaction bytes), computes, stores y back with a TMA store
    (out-of-bounds elements are zero-filled on load and clipped on store).

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

    def tensor_maps(self):
        from ..compiler.artifact import TensorMapSpec
        return [TensorMapSpec("x", "f32", (self.tile,)), TensorMapSpec("y", "f32", (self.tile,))]

    def define(self):
        from mlir.dialects import gpu, memref
        from ..atom import MBarriers, TmaCopy, bulk_commit_group, bulk_wait_group, tma_store_fence
        from ..ir import If, KernelBuilder, Param, SmemPlan, block_idx, index, thread_idx
        plan = SmemPlan()
        plan.buffer("x", (self.tile,), "f32", align=SMEM_ALIGN)
        plan.buffer("y", (self.tile,), "f32", align=SMEM_ALIGN)
        plan.barriers("bar", 1)
        specs = self.tensor_maps()
        kb = KernelBuilder(self.name, [Param("x", "tensormap"), Param("y", "tensormap"),
                                       Param("alpha", "f32")], block=(self.block,))
        with kb.build() as a:
            smem = plan.bind()
            tx, ty = TmaCopy(specs[0], a.x), TmaCopy(specs[1], a.y)
            bar = MBarriers(smem.barriers("bar"), 1)
            tid = thread_idx()
            leader = tid.eq(0)
            bar.init(0, 1, predicate=leader)
            bar.fence_init()
            gpu.barrier()
            x0 = block_idx() * self.tile
            xt, yt = smem["x"].tile(), smem["y"].tile()
            xs, ys = xt.memref(), yt.memref()
            with If(leader):
                bar.arrive_expect_tx(0, xt.nbytes + yt.nbytes)
                tx.load(xt, bar, 0, (x0,))
                ty.load(yt, bar, 0, (x0,))
            bar.wait(0, 0)
            for r in range(self.tile // self.block):
                j = index(tid + r * self.block)
                memref.store(a.alpha * memref.load(xs, [j]) + memref.load(ys, [j]), ys, [j])
            tma_store_fence()
            gpu.barrier()
            with If(leader):
                ty.store(yt, (x0,))
                bulk_commit_group()
                bulk_wait_group(0)
        return kb, plan.dynamic_bytes, specs


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
