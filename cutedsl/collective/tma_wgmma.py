"""What every TMA + WGMMA mainloop shares (CUTLASS ``CollectiveMma`` for sm90 TMA operands).

:class:`TmaWgmmaMainloop` composes the GEMM operand ring
(:class:`~cutedsl.collective.gemm_operands.GemmOperandRing`, a configuration of the operand
loader: boxes, stage bytes, buffers and barriers, the stage loads with cluster multicast) with
the WGMMA step: :meth:`~TmaWgmmaMainloop.bind` (tensor maps and stage 0's WGMMA descriptors,
returned as :class:`MainloopOperands`), :meth:`~TmaWgmmaMainloop.load_stage` (the ring's) and
:meth:`~TmaWgmmaMainloop.mma` (wait for a slot, issue its WGMMAs).
The schedules compose these (``mainloop.MultistageMainloop``: prologue + pipelined loop in one
warpgroup; ``warp_specialized.WarpSpecializedMainloop``: producer and consumer loops).

Explicit state, as CUTLASS collectives have it: device methods take the bound operands, the
pipeline and its :class:`~cutedsl.collective.pipeline.PipelineState` and return the new state;
nothing of a launch is kept on the collective object. Every size derives from the MMA atom's
traits (``atom/mma_traits.py``) and the architecture object.

Shared memory, global layouts and clusters: :mod:`~cutedsl.collective.gemm_operands`.
"""
from __future__ import annotations

import attrs

from ..arch import DEFAULT
from ..atom.wgmma import WarpgroupMMA
from ..ir._lazy import lazy
from .gemm_operands import CLUSTERS, STAGES, GemmOperandRing, check_ring
from .pipeline import PipelineState

cir = lazy("cutedsl.ir")


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

    STAGES = STAGES               #: pipeline depths
    WARPGROUPS = (1, 2)           #: consumer warpgroups splitting the tile along M

    def __init__(self, tile_m: int, tile_n: int, stages: int, dtype: str = "f16", b_major: str = "MN",
                 warpgroups: int = 1, cluster=(1, 1), arch=DEFAULT, b_dtype: str | None = None,
                 batched: bool = False, a_major: str = "K"):
        check_ring(stages, (1, 1))
        self.mma_atom = self.make_mma_atom(tile_m // warpgroups, tile_n, dtype, b_major, b_dtype, a_major)
        self.a_major = a_major
        self.b_dtype = self.mma_atom.b_dtype
        self.batched = batched        #: rank-3 (L, rows, cols) tensor maps, coordinates from ``ops.batch``
        self.traits = self.mma_atom.traits    #: K tile, element bytes, swizzle: every size below
        self.arch = arch
        if warpgroups not in self.WARPGROUPS or tile_m // warpgroups < self.traits.atom_m:
            raise ValueError(f"warpgroups must be 1 or 2 with >= {self.traits.atom_m} rows each (tile_m {tile_m})")
        cluster = check_ring(stages, cluster)
        self.tile_m, self.tile_n, self.stages = tile_m, tile_n, stages
        self.dtype, self.b_major, self.warpgroups = dtype, b_major, warpgroups
        self.wg_m = tile_m // warpgroups
        self.cluster_m, self.cluster_n = cluster
        #: the operand ring (the loader configuration every stage load goes through)
        self.ring = GemmOperandRing(self.traits, dtype, self.b_dtype, tile_m, tile_n, stages, a_major, b_major,
                                    cluster, batched)

    def make_mma_atom(self, m: int, n: int, dtype: str, b_major: str, b_dtype, a_major: str):
        """The MMA atom whose descriptors read the ring (``WarpgroupMMA``)."""
        return WarpgroupMMA(m, n, dtype, b_major, b_dtype, a_major)

    # -- static description (the ring's) ----------------------------------------------
    @property
    def cluster(self) -> tuple:
        """``(cluster_m, cluster_n)``."""
        return (self.cluster_m, self.cluster_n)

    a_box = property(lambda self: self.ring.a_box, doc="A box: this CTA's slice of one A box.")
    a_boxes = property(lambda self: self.ring.a_boxes, doc="TMA boxes per stage for A.")
    b_box = property(lambda self: self.ring.b_box, doc="B box: this CTA's slice of one B box.")
    b_boxes = property(lambda self: self.ring.b_boxes, doc="TMA boxes per stage for B.")
    b_tile_rows = property(lambda self: self.ring.b_tile_rows, doc="N rows of B a CTA's stage holds.")
    multicast_b = property(lambda self: self.ring.multicast_b, doc="Whether B slices are multicast along M.")

    @property
    def stage_bytes(self) -> int:
        """Bytes one stage receives: the whole A and B k-tiles (also with a cluster, whose
        peers multicast the other slices into it)."""
        return self.ring.stage_bytes

    def tensor_maps(self) -> list:
        """A and B tensor maps (a leading batch extent of 1 when :attr:`batched`)."""
        return self.ring.tensor_maps()

    def plan(self, plan, stages: int | None = None) -> None:
        """Declare the operand ring's shared memory and barriers in a ``SmemPlan``: ``stages``
        slots (default :attr:`stages`; another count sizes a deeper or shallower ring without
        a new collective -- how ``stages="auto"`` is resolved)."""
        self.ring.plan(plan, stages)

    # -- IR ------------------------------------------------------------------------
    def tma_atoms(self, args) -> tuple:
        """The A and B ``TmaCopy`` atoms over the kernel's ``a``/``b`` tensor maps."""
        return self.atoms_over(args.a, args.b)

    def atoms_over(self, map_a, map_b) -> tuple:
        """The A and B ``TmaCopy`` atoms over tensor maps ``map_a`` / ``map_b`` (kernel
        parameters, or generic addresses of maps in global memory: a grouped GEMM's table)."""
        return self.ring.atoms_over(map_a, map_b)

    def bind(self, smem, args, tmas=None) -> MainloopOperands:
        """The operands bound in a kernel body: tensor maps (``tmas``: already made by the
        caller) and stage 0's WGMMA descriptors (layouts checked against the buffers;
        :meth:`stage_descriptor` moves them to other stages)."""
        tma_a, tma_b = tmas or self.tma_atoms(args)
        # byte offset of this warpgroup's rows inside an A stage (K-major: one swizzle row per row)
        a_offset = 0
        if self.warpgroups > 1:
            wg = cir.thread_idx() // self.arch.warpgroup_threads
            a_offset = wg * self.traits.tile_bytes(self.wg_m)
        desc0 = self.ring.descriptors(smem, self.mma_atom, a_offset, self.wg_m if self.warpgroups > 1 else None)
        return MainloopOperands(smem, tma_a, tma_b, desc0, a_offset)

    prefetch = staticmethod(GemmOperandRing.prefetch)

    def load_stage(self, ops: MainloopOperands, pipeline, state: PipelineState, k_tile, m0, n0,
                   predicate=None) -> None:
        """Issue the TMA boxes of k-tile ``k_tile`` (absolute, IR i32) of the tile at ``(m0,
        n0)`` into slot ``state.index``, completing on its full barrier in ``pipeline`` (armed
        by the caller); only where ``predicate`` (IR i1) holds: the ring's
        :meth:`~cutedsl.collective.gemm_operands.GemmOperandRing.load_stage` (with a cluster,
        this CTA's slices, multicast to the CTAs sharing them)."""
        self.ring.load_stage(ops, pipeline, state, k_tile, m0, n0, predicate)

    stage_descriptor = staticmethod(GemmOperandRing.stage_descriptor)

    def mma(self, ops: MainloopOperands, pipeline, acc, state: PipelineState, accumulate=True):
        """Wait for slot ``state`` and issue the WGMMAs of one k-tile (committed, not waited);
        ``accumulate=False`` ignores ``acc`` (WGMMA scale-d 0: no zeroed registers needed)."""
        pipeline.consumer_wait(state)
        return self.mma_atom.mma(acc, self.stage_descriptor(ops, "a", state.index),
                                 self.stage_descriptor(ops, "b", state.index), accumulate=accumulate)


__all__ = ["TmaWgmmaMainloop", "MainloopOperands", "CLUSTERS"]
