"""A warp-specialized TMA scale-copy ``y = alpha * x`` (f32, 2-D ``(rows, cols)``, any shape): the
smallest non-GEMM kernel on the skeleton (:mod:`cutedsl.kernel.skeleton`), and a template for
new kernel families.

Per CTA (one strip of ``box[0]`` rows; grid ``(ceil(rows / box[0]), 1, 1)``): a *producer*
(one warp, or a warpgroup that gives registers back with ``setmaxnreg.dec``) walks the strip's
``ceil(cols / box[1])`` boxes and one elected thread TMA-loads each into a ring of ``stages``
slots (:class:`~cutedsl.collective.pipeline.TmaPipeline`: a full barrier armed with the box's
bytes, an empty barrier every consumer thread arrives on); ``consumers`` *consumer* warpgroups
wait for each fill, scale it into a staging tile, release the slot and, after a proxy fence and a
named barrier among themselves, one thread TMA-stores the tile (out-of-bounds elements of a
partial box are zero-filled on load and clipped on store). Before the staging tile is written
again, that thread waits for the previous store to have read it (``cp.async.bulk.wait_group.read``).

Parameters: ``x``, ``y`` (tensor maps over f32 ``(rows, cols)`` arrays, box ``box``), ``cols``
(i32), ``alpha`` (f32).
"""
from __future__ import annotations

from ..errors import ConfigError
from .skeleton import Role, SkeletonKernel

PRODUCERS = ("warp", "warpgroup")
#: the consumers' named barrier (0 is the CTA-wide one)
CONSUMER_BARRIER = 1


class ScaleCopyKernel(SkeletonKernel):
    """See the module docstring. ``box``: (rows, cols) of one TMA box (cols * 4 bytes a multiple
    of 16, each at most 256 elements; the box's elements a multiple of the consumer threads);
    ``stages`` ring slots (>= 1); ``consumers`` warpgroups (1 or 2); ``producer`` "warp" or
    "warpgroup" (with register budgets: the arch's producer and consumer ``setmaxnreg`` counts).
    Raises ``ConfigError`` for values outside these."""

    name = "scale_copy"

    def __init__(self, box=(32, 32), stages=2, consumers=1, producer="warp", arch=None):
        from ..arch import get_arch
        self.arch = get_arch(arch or self.arch)
        self.box, self.stages, self.consumers, self.producer = tuple(box), stages, consumers, producer
        if producer not in PRODUCERS:
            raise ConfigError(f"producer must be one of {PRODUCERS}, got {producer!r}")
        if consumers not in (1, 2):
            raise ConfigError(f"consumers must be 1 or 2 warpgroups, got {consumers!r}")
        if not isinstance(stages, int) or stages < 1:
            raise ConfigError(f"stages must be a positive int, got {stages!r}")
        from ..dtypes import dtype
        r, c = self.box
        if not (1 <= r <= 256 and 1 <= c <= 256) or (dtype("f32").nbytes * c) % 16:
            raise ConfigError(f"box {self.box}: each side 1..256 elements and rows of a multiple of 16 bytes "
                              f"(cols a multiple of 4)")
        if (r * c) % self.consumer_threads:
            raise ConfigError(f"box {self.box} has {r * c} elements, not a multiple of the {self.consumer_threads} "
                              f"consumer threads")
        self.layout()                           # the roles' checks, before any IR

    @property
    def consumer_threads(self) -> int:
        return self.consumers * self.arch.warpgroup_threads

    def config(self) -> dict:
        return {"arch": self.arch.name, "box": list(self.box), "stages": self.stages, "consumers": self.consumers,
                "producer": self.producer}

    def grid(self, rows: int, cols: int = 0) -> tuple:
        return ((rows + self.box[0] - 1) // self.box[0], 1, 1)

    # -- plan --------------------------------------------------------------------------
    def roles(self) -> tuple:
        if self.producer == "warp":
            return Role.warpgroups("consumer", self.consumers), Role.warps("producer")
        return (Role.warpgroups("consumer", self.consumers, regs=self.arch.consumer_regs),
                Role.warpgroups("producer", regs=self.arch.producer_regs))

    @property
    def launch_registers(self):
        if self.producer == "warp":
            return None
        return self.arch.launch_regs(sum(r.thread_count(self.arch) for r in self.roles()))   # clamped to 248

    def declare_smem(self, plan, stages=None) -> None:
        plan.buffer("x", self.box, "f32", stages or self.stages)
        plan.buffer("y", self.box, "f32")
        plan.barriers("full", stages or self.stages)
        plan.barriers("empty", stages or self.stages)

    def params(self) -> list:
        from ..compiler.artifact import ParamSpec as Param
        return [Param("x", "tensormap"), Param("y", "tensormap"), Param("cols", "i32"), Param("alpha", "f32")]

    def tensor_maps(self) -> list:
        from ..compiler.artifact import TensorMapSpec
        return [TensorMapSpec("x", "f32", self.box), TensorMapSpec("y", "f32", self.box)]

    # -- build -------------------------------------------------------------------------
    def setup(self, b) -> None:
        from ..atom import MBarriers, TmaCopy
        from ..collective.pipeline import TmaPipeline
        specs = self.tensor_maps()
        b.tx, b.ty = TmaCopy(specs[0], b.args.x), TmaCopy(specs[1], b.args.y)
        b.pipeline = TmaPipeline(MBarriers(b.smem.barriers("full"), self.stages), specs[0].box_bytes,
                                 MBarriers(b.smem.barriers("empty"), self.stages), consumers=self.consumer_threads)
        b.pipeline.init(b.leader)
        b.init_fenced = True                # TmaPipeline.init ends with fence.mbarrier_init

    def bind(self, b) -> None:
        from ..ir import block_idx
        bc = self.box[1]
        b.row0 = block_idx() * self.box[0]
        b.boxes = (b.args.cols.unsigned() + bc - 1) // bc

    def role_producer(self, b, index) -> None:
        """One thread (the role's first) fills the ring with the strip's boxes in order."""
        from ..collective.pipeline import PipelineState
        from ..ir import If, Loop
        s, p = self.stages, b.pipeline
        with If(b.tid.eq(self.consumer_threads)):
            loop = Loop(0, b.boxes, carry=PipelineState(s).carry())
            for j, carried in loop:
                st = PipelineState.from_carry(s, carried)
                p.producer_acquire(st)
                p.producer_expect(st)
                b.tx.load(b.smem["x"].tile(st.index), p.full, st.index, (b.row0, j * self.box[1]))
                loop.next(*st.advance().carry())
            p.producer_tail(PipelineState.from_carry(s, loop.results))

    def role_consumer(self, b, index) -> None:
        """Every consumer thread scales its elements of each box; thread 0 stores the tile."""
        from mlir.dialects import memref
        from ..atom import NamedBarrier, bulk_commit_group, bulk_wait_group, fence_proxy_async
        from ..collective.pipeline import PipelineState
        from ..ir import If, Loop, index as idx
        s, p, n, ct = self.stages, b.pipeline, self.box[0] * self.box[1], self.consumer_threads
        together = NamedBarrier(CONSUMER_BARRIER, ct)
        loop = Loop(0, b.boxes, carry=PipelineState(s).carry())
        for j, carried in loop:
            st = PipelineState.from_carry(s, carried)
            p.consumer_wait(st)
            with If(b.leader):
                bulk_wait_group(0, read=True)       # the previous store has read the staging tile
            together.sync()
            xs, ys = b.smem["x"].view(st.index, shape=(n,)), b.smem["y"].view(0, shape=(n,))
            for e in range(n // ct):
                i = idx(b.tid + e * ct)
                memref.store(b.args.alpha * memref.load(xs, [i]), ys, [i])
            p.consumer_release(st)                  # this thread's reads of the slot are done
            fence_proxy_async()                     # generic writes -> the TMA store's async-proxy reads
            together.sync()
            with If(b.leader):
                b.ty.store(b.smem["y"].tile(), (b.row0, j * self.box[1]))
                bulk_commit_group()
            loop.next(*st.advance().carry())
        with If(b.leader):
            bulk_wait_group(0, read=True)           # no CTA exits while a store reads its shared memory


__all__ = ["ScaleCopyKernel", "PRODUCERS"]
