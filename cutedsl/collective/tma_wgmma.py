"""What every TMA + WGMMA mainloop shares (CUTLASS ``CollectiveMma`` for sm90 TMA operands).

:class:`TmaWgmmaMainloop` describes the operand ring — the TMA boxes of a stage, the bytes
each stage receives, the shared-memory buffers and barriers (:meth:`~TmaWgmmaMainloop.plan`)
— and has the three device pieces both schedules use: :meth:`~TmaWgmmaMainloop.bind` (tensor
maps and stage 0's WGMMA descriptors, returned as :class:`MainloopOperands`),
:meth:`~TmaWgmmaMainloop.load_stage` (the one place a stage's TMA boxes are issued, with
cluster multicast) and :meth:`~TmaWgmmaMainloop.mma` (wait for a slot, issue its WGMMAs).
The schedules compose these (``mainloop.MultistageMainloop``: prologue + pipelined loop in one
warpgroup; ``warp_specialized.WarpSpecializedMainloop``: producer and consumer loops).

Explicit state, as CUTLASS collectives have it: device methods take the bound operands, the
pipeline and its :class:`~cutedsl.collective.pipeline.PipelineState` and return the new state;
nothing of a launch is kept on the collective object. Every size derives from the MMA atom's
traits (``atom/mma_traits.py``) and the architecture object.

Shared memory: A ``stages x [tile_m x k_tile]`` K-major and B ``stages x`` (MN-major:
``tile_n / mn_box`` boxes ``[k_tile x mn_box]``; K-major: ``[tile_n x k_tile]``), swizzled and
aligned as the traits say; one full and one empty mbarrier per stage. Global operands (numpy
order): A ``(M, K)`` row-major; B ``(K, N)`` row-major for ``b_major="MN"`` or ``(N, K)``
row-major (B transposed) for ``b_major="K"``.

Clusters ``(cluster_m, cluster_n)``: the CTAs of a cluster with the same M coordinate need the
same A tile, those with the same N coordinate the same B tile. Each CTA loads a
``1/cluster_n`` slice of A (rows) and a ``1/cluster_m`` slice of B (outer box rows) and
multicasts it to the CTAs that share it, so every CTA's full barrier still receives a whole
stage of bytes. CTA rank inside the cluster is ``rank = rm + cluster_m * rn``.
"""
from __future__ import annotations

import attrs

from ..arch import DEFAULT
from ..atom.mma_traits import mma_traits
from ..atom.tma import TmaCopy
from ..atom.wgmma import WarpgroupMMA
from ..compiler.artifact import TensorMapSpec
from ..ir._lazy import lazy
from .pipeline import PipelineState

cir = lazy("cutedsl.ir")

CLUSTERS = ((1, 1), (2, 1), (1, 2), (2, 2), (4, 1), (1, 4))   #: (cluster_m, cluster_n) shapes the operand ring supports


@attrs.frozen
class MainloopOperands:
    """A mainloop's operands bound inside a kernel body (from :meth:`TmaWgmmaMainloop.bind`):
    the bound shared memory, the A and B ``TmaCopy`` atoms, stage 0's WGMMA descriptors
    (``desc0["a"]``: this warpgroup's rows), the byte offset of this warpgroup's A rows, and
    ``producer``: the predicate (IR i1) of the threads that issue loads, where a schedule has one;
    ``batch``: for a batched mainloop, the batch coordinates ``(l of A, l of B)`` (IR i32) of the
    work tile being loaded (set per tile with ``attrs.evolve``; 0 for an operand broadcast
    over the batch)."""
    smem: object
    tma_a: object
    tma_b: object
    desc0: dict
    a_offset: object = 0
    producer: object = None
    batch: object = None
    #: a block-scaled mainloop's scale-factor operands: ``(TmaCopy of A's, of B's, k-tiles)``
    scales: object = None


class TmaWgmmaMainloop:
    """See module docstring. ``tile_m`` in {64, 128}, ``tile_n`` in {64, 128, 256}, ``stages``
    in :attr:`STAGES`, ``dtype`` / ``b_dtype`` (default ``dtype``) the A / B operand types of
    the MMA atom, ``b_major`` "MN" or "K"; ``warpgroups``
    consumer warpgroups split the tile along M (each owns ``tile_m / warpgroups`` rows);
    ``cluster`` ``(cluster_m, cluster_n)`` in :data:`CLUSTERS`. Raises ``ValueError``."""

    STAGES = range(1, 8)          #: pipeline depths
    WARPGROUPS = (1, 2)           #: consumer warpgroups splitting the tile along M

    def __init__(self, tile_m: int, tile_n: int, stages: int, dtype: str = "f16", b_major: str = "MN",
                 warpgroups: int = 1, cluster=(1, 1), arch=DEFAULT, b_dtype: str | None = None,
                 batched: bool = False, a_major: str = "K"):
        if stages not in self.STAGES:
            raise ValueError(f"stages must be {self.STAGES.start}..{self.STAGES.stop - 1}, got {stages}")
        self.mma_atom = self.make_mma_atom(tile_m // warpgroups, tile_n, dtype, b_major, b_dtype, a_major)
        self.a_major = a_major
        self.b_dtype = self.mma_atom.b_dtype
        self.batched = batched        #: rank-3 (L, rows, cols) tensor maps, coordinates from ``ops.batch``
        self.traits = self.mma_atom.traits    #: K tile, element bytes, swizzle: every size below
        self.arch = arch
        if warpgroups not in self.WARPGROUPS or tile_m // warpgroups < self.traits.atom_m:
            raise ValueError(f"warpgroups must be 1 or 2 with >= {self.traits.atom_m} rows each (tile_m {tile_m})")
        cluster = tuple(cluster)
        if cluster not in CLUSTERS:
            raise ValueError(f"cluster must be one of {CLUSTERS}, got {cluster}")
        self.tile_m, self.tile_n, self.stages = tile_m, tile_n, stages
        self.dtype, self.b_major, self.warpgroups = dtype, b_major, warpgroups
        self.wg_m = tile_m // warpgroups
        self.cluster_m, self.cluster_n = cluster

    def make_mma_atom(self, m: int, n: int, dtype: str, b_major: str, b_dtype, a_major: str):
        """The MMA atom whose descriptors read the ring (``WarpgroupMMA`` here; a Blackwell
        mainloop gives ``Umma``: the same shared-memory layouts)."""
        return WarpgroupMMA(m, n, dtype, b_major, b_dtype, a_major)

    # -- static description --------------------------------------------------------
    @property
    def cluster(self) -> tuple:
        """``(cluster_m, cluster_n)``."""
        return (self.cluster_m, self.cluster_n)

    @property
    def a_box(self) -> tuple:
        """A box: this CTA's ``1/cluster_n`` slice (outer rows) of one A box (K-major: the
        ``tile_m x k_tile`` tile; M-major: ``k_tile x mn_box``, ``tile_m / mn_box`` of them)."""
        t = self.traits
        if self.a_major == "MN":
            return (t.k_tile // self.cluster_n, t.mn_box)
        return (self.tile_m // self.cluster_n, t.k_box)

    @property
    def a_boxes(self) -> int:
        """TMA boxes per stage for A."""
        return self.tile_m // self.traits.mn_box if self.a_major == "MN" else 1

    def _a_tile_shape(self, rows: int) -> tuple:
        """Shape of ``rows`` M-rows of an A k-tile in its buffer (M-major: boxes stacked)."""
        t = self.traits
        return ((rows // t.mn_box) * t.k_tile, t.mn_box) if self.a_major == "MN" else (rows, t.k_box)

    @property
    def b_box(self) -> tuple:
        """B box: this CTA's ``1/cluster_m`` slice (outer rows) of one B box (MN-major:
        ``k_tile x mn_box``, ``tile_n / mn_box`` of them; K-major: ``tile_n x k_tile``)."""
        t = self.traits
        outer = t.k_tile if self.b_major == "MN" else self.tile_n
        return (outer // self.cluster_m, t.k_box if self.b_major == "K" else t.mn_box)

    @property
    def b_boxes(self) -> int:
        """TMA boxes per stage for B."""
        return self.tile_n // self.traits.mn_box if self.b_major == "MN" else 1

    @property
    def b_tile_rows(self) -> int:
        """N rows of B a CTA's stage holds (all ``tile_n``; a CTA-pair mainloop holds half)."""
        return self.tile_n

    @property
    def multicast_b(self) -> bool:
        """Whether B slices are multicast to the CTAs along the cluster's M."""
        return self.cluster_m > 1

    def b_placement(self, j: int, k0, n0, rm):
        """(byte offset in the stage's B tile, TMA coordinates) of B box ``j`` of this CTA
        (with a cluster along M: its ``1/cluster_m`` slice, multicast to the others)."""
        t = self.traits
        b_rows, box_off = self.b_box[0], j * t.mn_box_bytes     # MN-major: mn_box columns per box
        off = rm * (b_rows * t.row_bytes) + box_off if self.cluster_m > 1 else box_off
        coords = (k0 + rm * b_rows, n0 + t.mn_box * j) if self.b_major == "MN" else (n0 + rm * b_rows, k0)
        return off, coords

    @property
    def stage_bytes(self) -> int:
        """Bytes one stage receives: the whole A and B k-tiles (also with a cluster, whose
        peers multicast the other slices into it)."""
        return self.traits.tile_bytes(self.tile_m + self.tile_n)

    def tensor_maps(self) -> list:
        """A and B tensor maps: boxes :attr:`a_box` / :attr:`b_box`, with a leading batch
        extent of 1 when :attr:`batched` (rank-3 maps over (L, rows, cols))."""
        sw, lead = self.traits.swizzle, (1,) if self.batched else ()
        return [TensorMapSpec("a", mma_traits(self.dtype).tma_dtype, lead + self.a_box, swizzle=sw),
                TensorMapSpec("b", mma_traits(self.b_dtype).tma_dtype, lead + self.b_box, swizzle=sw)]

    def plan(self, plan, stages: int | None = None) -> None:
        """Declare the operand ring's shared memory and barriers in a ``SmemPlan``: ``stages``
        slots (default :attr:`stages`; another count sizes a deeper or shallower ring without
        a new collective -- how ``stages="auto"`` is resolved)."""
        t, s = self.traits, stages or self.stages
        plan.buffer("a", self._a_tile_shape(self.tile_m), t.storage, s, swizzle=t.swizzle, major=self.a_major)
        b_shape = (self.b_boxes * t.k_tile, t.mn_box) if self.b_major == "MN" else (self.b_tile_rows, t.k_box)
        plan.buffer("b", b_shape, mma_traits(self.b_dtype).storage, s, swizzle=t.swizzle, major=self.b_major)
        plan.barriers("full", s)
        plan.barriers("empty", s)

    # -- IR ------------------------------------------------------------------------
    def tma_atoms(self, args) -> tuple:
        """The A and B ``TmaCopy`` atoms over the kernel's ``a``/``b`` tensor maps."""
        return self.atoms_over(args.a, args.b)

    def atoms_over(self, map_a, map_b) -> tuple:
        """The A and B ``TmaCopy`` atoms over tensor maps ``map_a`` / ``map_b`` (kernel
        parameters, or generic addresses of maps in global memory: a grouped GEMM's table)."""
        specs = self.tensor_maps()
        return TmaCopy(specs[0], map_a), TmaCopy(specs[1], map_b)

    def bind(self, smem, args, tmas=None) -> MainloopOperands:
        """The operands bound in a kernel body: tensor maps (``tmas``: already made by the
        caller) and stage 0's WGMMA descriptors (layouts checked against the buffers;
        :meth:`stage_descriptor` moves them to other stages)."""
        tma_a, tma_b = tmas or self.tma_atoms(args)
        # byte offset of this warpgroup's rows inside an A stage (K-major: one swizzle row per row)
        t = self.traits
        a_offset = 0
        if self.warpgroups > 1:
            wg = cir.thread_idx() // self.arch.warpgroup_threads
            a_offset = wg * t.tile_bytes(self.wg_m)
        a0 = smem["a"].tile(0)
        if self.warpgroups > 1:      # M-major: this warpgroup's boxes, the same bytes in
            a0 = a0.sub(a_offset, shape=self._a_tile_shape(self.wg_m))
        desc0 = {"a": self.mma_atom.descriptor(a0, "A"), "b": self.mma_atom.descriptor(smem["b"].tile(0), "B")}
        return MainloopOperands(smem, tma_a, tma_b, desc0, a_offset)

    @staticmethod
    def prefetch(ops: MainloopOperands, predicate=None) -> None:
        """``prefetch.tensormap`` of A and B."""
        ops.tma_a.prefetch(predicate=predicate)
        ops.tma_b.prefetch(predicate=predicate)

    def _cluster_coords(self):
        """``(rm, rn)`` of this CTA in its cluster (Python 0s without a cluster)."""
        if self.cluster == (1, 1):
            return 0, 0
        from ..atom.cluster import cta_rank
        rank = cta_rank()
        return rank % self.cluster_m, rank // self.cluster_m

    def load_stage(self, ops: MainloopOperands, pipeline, state: PipelineState, k_tile, m0, n0,
                   predicate=None) -> None:
        """Issue the TMA boxes of k-tile ``k_tile`` (absolute, IR i32) of the tile at ``(m0,
        n0)`` into slot ``state.index``, completing on its full barrier in ``pipeline`` (armed
        by the caller); only where ``predicate`` (IR i1) holds. The one place a stage's boxes
        are issued, for every mainloop: with a cluster this CTA loads its A/B slices
        (:attr:`a_box`, :attr:`b_box`) and multicasts them to the CTAs sharing them."""
        t = self.traits
        k0 = k_tile * t.k_box                       # in the tensor maps' elements (bytes if packed)
        bar, s, smem = pipeline.full, state.index, ops.smem
        rm, rn = self._cluster_coords()
        mask_a = mask_b = None
        if self.cluster != (1, 1):
            from ..atom.cluster import multicast_mask
            if self.cluster_n > 1:  # A slice rn goes to every CTA with this rm (along N)
                mask_a = multicast_mask(self.cluster, "y", (rm, rn))
            if self.multicast_b:    # B slice rm goes to every CTA with this rn (along M)
                mask_b = multicast_mask(self.cluster, "x", (rm, rn))
        a_rows, row_bytes = self.a_box[0], t.row_bytes
        a_off = rn * (a_rows * row_bytes) if self.cluster_n > 1 else 0
        la = lb = ()
        if self.batched:
            if ops.batch is None:
                raise ValueError("a batched mainloop loads with ops.batch = (l of A, l of B) set per work tile")
            la, lb = (ops.batch[0],), (ops.batch[1],)
        for j in range(self.a_boxes):
            box_off = j * t.mn_box_bytes             # M-major: mn_box rows of M x k_tile K-rows per box
            dst = smem["a"].tile(s).sub(a_off + box_off if box_off else a_off, self.a_box)
            coords = (k0 + rn * a_rows, m0 + t.mn_box * j) if self.a_major == "MN" else (m0 + rn * a_rows, k0)
            ops.tma_a.load(dst, bar, s, la + coords, multicast_mask=mask_a, predicate=predicate)
        for j in range(self.b_boxes):
            off, coords = self.b_placement(j, k0, n0, rm)
            dst = smem["b"].tile(s).sub(off, self.b_box)
            ops.tma_b.load(dst, bar, s, lb + coords, multicast_mask=mask_b, predicate=predicate)

    def stage_descriptor(self, ops: MainloopOperands, name: str, index):
        """The WGMMA ``Descriptor`` of stage ``index`` (IR i32) of buffer ``name`` (``"a"``:
        this warpgroup's rows): stage 0's plus ``index`` stages — one 32-bit multiply-add that
        ptxas keeps in uniform registers."""
        return ops.desc0[name].stage(index, ops.smem[name].buf.stage_bytes)

    def mma(self, ops: MainloopOperands, pipeline, acc, state: PipelineState, accumulate=True):
        """Wait for slot ``state`` and issue the WGMMAs of one k-tile (committed, not waited);
        ``accumulate=False`` ignores ``acc`` (WGMMA scale-d 0: no zeroed registers needed)."""
        pipeline.consumer_wait(state)
        return self.mma_atom.mma(acc, self.stage_descriptor(ops, "a", state.index),
                                 self.stage_descriptor(ops, "b", state.index), accumulate=accumulate)


__all__ = ["TmaWgmmaMainloop", "MainloopOperands", "CLUSTERS"]
