"""Multistage TMA + WGMMA mainloop (CUTLASS ``MainloopSm90TmaGmma``, NVDSL chapter 4).

One warpgroup computes a ``tile_m x tile_n`` accumulator over ``k_tiles`` k-tiles of 64:

* ``prologue``: fill ``min(stages, k_tiles)`` slots (one elected thread arms each full barrier
  with the stage's bytes and issues the TMA boxes);
* ``mainloop``: for k-tile i, wait its slot, issue the WGMMAs, ``wgmma.wait_group(lag)`` with
  lag = 1 (0 when ``stages == 1``) so that the MMA of k-tile i-lag has finished reading; each
  consumer warp then releases that slot (one arrival per warp on its *empty* mbarrier) and
  the elected producer thread waits for all releases before refilling the slot with k-tile
  ``i - lag + stages`` (CUTLASS ``consumer_release`` / ``producer_acquire``);
* ``tail``: ``wgmma.wait_group(0)``.

Each step is an overridable method. Shared memory: A ``stages x [tile_m x 64]`` K-major and B
``stages x`` (MN-major: ``tile_n/64`` boxes ``[64 x 64]``; K-major: ``[tile_n x 64]``), all
128-byte swizzled and 1024-B aligned; one full and one empty mbarrier per stage.

Global operands (numpy order): A ``(M, K)`` row-major; B ``(K, N)`` row-major for
``b_major="MN"`` or ``(N, K)`` row-major (B transposed) for ``b_major="K"``.
"""
from __future__ import annotations

from ..atom.mbarrier import MBarriers
from ..atom.sync import elect_one
from ..atom.tma import TmaCopy
from ..arch import DEFAULT
from ..atom.wgmma import WarpgroupMMA
from ..compiler.artifact import TensorMapSpec
from ..ir._lazy import lazy
from .pipeline import PipelineState, TmaPipeline

cir = lazy("cutedsl.ir")


class MultistageMainloop:
    """See module docstring. ``tile_m`` in {64, 128}, ``tile_n`` in {64, 128, 256},
    ``stages`` 1..7, ``dtype`` f16/bf16, ``b_major`` "MN" or "K". ``warpgroups`` consumer
    warpgroups split the tile along M (each owns ``tile_m / warpgroups`` rows); with more than
    one, the empty barriers make sure every warpgroup finished reading a slot before it is
    refilled."""

    STAGES = range(1, 8)          #: pipeline depths this mainloop supports
    WARPGROUPS = (1, 2)           #: consumer warpgroups splitting the tile along M

    def __init__(self, tile_m: int, tile_n: int, stages: int, dtype: str = "f16", b_major: str = "MN",
                 warpgroups: int = 1, arch=DEFAULT):
        if stages not in self.STAGES:
            raise ValueError(f"stages must be {self.STAGES.start}..{self.STAGES.stop - 1}, got {stages}")
        self.mma_atom = WarpgroupMMA(tile_m // warpgroups, tile_n, dtype, b_major)
        self.traits = self.mma_atom.traits    #: K tile, element bytes, swizzle: every size below
        self.arch = arch
        if warpgroups not in self.WARPGROUPS or tile_m // warpgroups < self.traits.atom_m:
            raise ValueError(f"warpgroups must be 1 or 2 with >= {self.traits.atom_m} rows each (tile_m {tile_m})")
        self.tile_m, self.tile_n, self.stages = tile_m, tile_n, stages
        self.dtype, self.b_major, self.warpgroups = dtype, b_major, warpgroups
        self.wg_m = tile_m // warpgroups
        self.k_first = 0          #: first k-tile of this CTA (set by ``run``)

    cluster_m = cluster_n = 1     #: CTAs per cluster along M / N (see ``WarpSpecializedMainloop``)

    # -- static description --------------------------------------------------------
    @property
    def cluster(self) -> tuple:
        """``(cluster_m, cluster_n)``: ``(1, 1)`` here."""
        return (self.cluster_m, self.cluster_n)

    @property
    def a_box(self) -> tuple:
        """A box: this CTA's ``1/cluster_n`` slice (rows) of the ``tile_m x 64`` A tile."""
        return (self.tile_m // self.cluster_n, self.traits.k_tile)

    @property
    def b_box(self) -> tuple:
        """B box: this CTA's ``1/cluster_m`` slice (outer rows) of one B box (MN-major:
        ``64 x 64``, ``tile_n / 64`` of them; K-major: ``tile_n x 64``)."""
        t = self.traits
        outer = t.k_tile if self.b_major == "MN" else self.tile_n
        return (outer // self.cluster_m, t.k_tile if self.b_major == "K" else t.mn_box)

    @property
    def b_boxes(self) -> int:
        """TMA boxes per stage for B."""
        return self.tile_n // self.traits.mn_box if self.b_major == "MN" else 1

    @property
    def stage_bytes(self) -> int:
        """Bytes one stage receives: the whole A and B k-tiles (also with a cluster, whose
        peers multicast the other slices into it)."""
        return self.traits.tile_bytes(self.tile_m + self.tile_n)

    def tensor_maps(self) -> list:
        sw = self.traits.swizzle
        return [TensorMapSpec("a", self.dtype, self.a_box, swizzle=sw),
                TensorMapSpec("b", self.dtype, self.b_box, swizzle=sw)]

    def plan(self, plan) -> None:
        """Declare this mainloop's shared memory in a ``SmemPlan``."""
        t = self.traits
        plan.buffer("a", (self.tile_m, t.k_tile), self.dtype, self.stages, swizzle=t.swizzle, major="K")
        b_shape = (self.b_boxes * t.k_tile, t.mn_box) if self.b_major == "MN" else (self.tile_n, t.k_tile)
        plan.buffer("b", b_shape, self.dtype, self.stages, swizzle=t.swizzle, major=self.b_major)
        plan.barriers("full", self.stages)
        plan.barriers("empty", self.stages)

    # -- IR ------------------------------------------------------------------------
    def setup(self, smem, args) -> None:
        """Bind TMA descriptors and barriers; initialise barriers (thread 0) and prefetch the
        tensor maps. Ends with a CTA barrier."""
        from mlir.dialects import gpu
        self.smem = smem
        specs = self.tensor_maps()
        self.tma_a = TmaCopy(specs[0], args.a)
        self.tma_b = TmaCopy(specs[1], args.b)
        self.leader = cir.thread_idx().eq(0)
        # the empty barrier of a slot completes when every consumer warp released it
        self.pipeline = TmaPipeline(MBarriers(smem.barriers("full"), self.stages), self.stage_bytes,
                                    MBarriers(smem.barriers("empty"), self.stages),
                                    consumers=self.arch.warps_per_warpgroup * self.warpgroups)
        self.pipeline.init(self.leader)
        self.bind_operands(smem)
        # the producer is warp 0 (a warp-uniform branch: ptxas keeps the loop's descriptor and
        # stage arithmetic in uniform registers); one elected lane issues
        self.producer_warp = cir.warp_idx().eq(0)
        self.tma_a.prefetch(predicate=self.leader)
        self.tma_b.prefetch(predicate=self.leader)
        gpu.barrier()

    def bind_operands(self, smem) -> None:
        """This warpgroup's A rows and stage 0's WGMMA descriptors (layouts checked against the
        buffers; :meth:`stage_descriptor` moves them to other stages)."""
        # byte offset of this warpgroup's rows inside an A stage (K-major: one swizzle row per row)
        t = self.traits
        wg = cir.thread_idx() // self.arch.warpgroup_threads
        self.a_offset = wg * t.tile_bytes(self.wg_m) if self.warpgroups > 1 else 0
        a0 = smem["a"].tile(0)
        if self.warpgroups > 1:
            a0 = a0.sub(self.a_offset, shape=(self.wg_m, t.k_tile))
        self._desc0 = {"a": self.mma_atom.descriptor(a0, "A"), "b": self.mma_atom.descriptor(smem["b"].tile(0), "B")}

    def load(self, state: PipelineState, k_tile, m0, n0) -> None:
        """Fill slot ``state.index`` with ``k_tile``: warp 0 waits until the slot was released;
        one elected lane arms its full barrier and issues the TMA boxes. (A branch on one
        thread inside the main loop would make ptxas move all uniform arithmetic of the loop
        to per-thread registers: 149 instead of 95 SASS instructions per k-tile.)"""
        with cir.If(self.producer_warp):
            one = elect_one()
            self.pipeline.producer_acquire(state)
            self.pipeline.producer_expect(state, predicate=one)
            self.load_stage(state, k_tile + self.k_first, m0, n0, predicate=one)

    def _cluster_coords(self):
        """``(rm, rn)`` of this CTA in its cluster (Python 0s without a cluster)."""
        if self.cluster == (1, 1):
            return 0, 0
        from ..atom.cluster import cta_rank
        rank = cta_rank()
        return rank % self.cluster_m, rank // self.cluster_m

    def load_stage(self, state: PipelineState, k_tile, m0, n0, predicate=None) -> None:
        """Issue the TMA boxes of k-tile ``k_tile`` (absolute, IR i32) of the tile at ``(m0,
        n0)`` into slot ``state.index``, completing on its full barrier (armed by the caller);
        only where ``predicate`` (IR i1) holds. The one place a stage's boxes are issued, for
        every mainloop: with a cluster (``cluster_m`` x ``cluster_n`` > 1) this CTA loads its
        A/B slices (:attr:`a_box`, :attr:`b_box`) and multicasts them to the CTAs sharing them
        (the cluster as ``(x, y) = (M, N)``: rank = ``rm + cluster_m * rn``)."""
        t = self.traits
        k0 = k_tile * t.k_tile
        bar, s = self.pipeline.full, state.index
        rm, rn = self._cluster_coords()
        mask_a = mask_b = None
        if self.cluster != (1, 1):
            from ..atom.cluster import multicast_mask
            if self.cluster_n > 1:  # A slice rn goes to every CTA with this rm (along N)
                mask_a = multicast_mask(self.cluster, "y", (rm, rn))
            if self.cluster_m > 1:  # B slice rm goes to every CTA with this rn (along M)
                mask_b = multicast_mask(self.cluster, "x", (rm, rn))
        a_rows, b_rows, row_bytes = self.a_box[0], self.b_box[0], t.row_bytes
        a_off = rn * (a_rows * row_bytes) if self.cluster_n > 1 else 0
        self.tma_a.load(self.smem["a"].tile(s).sub(a_off, self.a_box), bar, s, (m0 + rn * a_rows, k0),
                        multicast_mask=mask_a, predicate=predicate)
        for j in range(self.b_boxes):
            box_off = j * t.mn_box_bytes             # MN-major: mn_box columns x k_tile K-rows per box
            off = rm * (b_rows * row_bytes) + box_off if self.cluster_m > 1 else box_off
            dst = self.smem["b"].tile(s).sub(off, self.b_box)
            coords = (k0 + rm * b_rows, n0 + t.mn_box * j) if self.b_major == "MN" else (n0 + rm * b_rows, k0)
            self.tma_b.load(dst, bar, s, coords, multicast_mask=mask_b, predicate=predicate)

    def prologue(self, k_tiles, m0, n0) -> None:
        """Fill the first ``min(stages, k_tiles)`` slots with k-tiles 0.. (phase 0)."""
        for s in range(self.stages):
            with cir.If(k_tiles > s):
                self.load(PipelineState(self.stages, s, 0), cir.i32(s), m0, n0)

    def stage_descriptor(self, name: str, index):
        """The WGMMA ``Descriptor`` of stage ``index`` (IR i32) of buffer ``name`` (``"a"``:
        this warpgroup's rows): stage 0's, computed once in :meth:`setup`, plus ``index``
        stages — one 32-bit multiply-add that ptxas keeps in uniform registers."""
        return self._desc0[name].stage(index, self.smem[name].buf.stage_bytes)

    def mma(self, acc, state: PipelineState, accumulate=True):
        """Wait for slot ``state`` and issue the WGMMAs of one k-tile (committed, not waited);
        ``accumulate=False`` ignores ``acc`` (WGMMA scale-d 0: no zeroed registers needed)."""
        self.pipeline.consumer_wait(state)
        return self.mma_atom.mma(acc, self.stage_descriptor("a", state.index), self.stage_descriptor("b", state.index),
                                 accumulate=accumulate)

    @property
    def lag(self) -> int:
        """WGMMA groups left in flight after each k-tile (1 overlaps MMA with the next wait)."""
        return 1 if self.stages > 1 else 0

    def release(self, state: PipelineState) -> None:
        """Every consumer warp (its lane 0) releases slot ``state`` after its WGMMA wait."""
        with cir.If(cir.lane_id().eq(0)):
            self.pipeline.consumer_release(state)

    def mainloop(self, acc, k_tiles, m0, n0):
        """Steady state. Carried: the accumulator, the consumer state of k-tile ``i`` and the
        state of k-tile ``i - lag`` (whose slot is released and refilled with k-tile
        ``i - lag + stages``: same slot, next phase), all i32, with a 32-bit loop counter, so
        no division by ``stages`` and no 64-bit arithmetic runs per k-tile."""
        lag = self.lag
        prev0 = PipelineState(self.stages, self.stages - 1, 1) if lag else PipelineState(self.stages)
        carry = list(acc.structs) + PipelineState(self.stages).carry() + prev0.carry()
        loop = cir.Loop(0, k_tiles, carry=carry, counter="i32")
        for i, carried in loop:
            acc_i = type(acc)(carried[:-4], acc.n)
            state = PipelineState.from_carry(self.stages, carried[-4:-2])
            prev = PipelineState.from_carry(self.stages, carried[-2:]) if lag else state
            acc_i = self.mma(acc_i, state)
            self.mma_atom.wait(lag)
            # k-tile i - lag finished reading its slot: every consumer warp releases it, and the
            # producer refills it with k-tile i - lag + stages once all releases arrived
            refill = i + (self.stages - lag)
            fill = PipelineState(self.stages, prev.index, prev.phase ^ 1)
            if lag:
                started = i >= lag
                with cir.If(started):
                    self.release(prev)
                with cir.If((refill < k_tiles) & started):
                    self.load(fill, refill, m0, n0)
            else:
                self.release(prev)
                with cir.If(refill < k_tiles):
                    self.load(fill, refill, m0, n0)
            loop.next(*acc_i.structs, *state.advance().carry(), *state.carry())
        res = loop.results
        return type(acc)(res[:-4], acc.n)

    def tail(self) -> None:
        """``wgmma.wait_group 0``: the accumulator is final."""
        self.mma_atom.wait(0)

    def run(self, k_tiles, m0, n0, k_first=0):
        """Prologue + mainloop + tail over k-tiles ``k_first .. k_first + k_tiles - 1`` (IR i32
        or Python int); returns the accumulator (zero when ``k_tiles == 0``)."""
        self.k_first = k_first
        acc = self.mma_atom.zero()
        self.prologue(k_tiles, m0, n0)
        acc = self.mainloop(acc, k_tiles, m0, n0)
        self.tail()
        return acc
