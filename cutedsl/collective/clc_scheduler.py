"""Dynamic persistent tile scheduling by cluster launch control (sm_100; PTX ISA
``clusterlaunchcontrol.try_cancel`` / ``query_cancel``; CUTLASS's ``PersistentTileSchedulerSm100``).

The grid has **one cluster per work unit** (cluster tile), as a non-persistent launch. A
running CTA starts with its own unit; for each next one it asks the hardware to cancel a
cluster that has not started yet (``try_cancel``), and runs that cluster's unit instead. A
request that finds no waiting cluster fails and the CTA's loop ends. Work is thereby balanced
at run time over the SMs that are free (some may run another kernel, or a slow tile), and the
grid is sized by the problem, not by a guess of the SM count.

Per CTA, a ring of :data:`CLC_STAGES` 16-byte responses in shared memory with a full and an
empty mbarrier each (the pipeline protocol of the operand ring): the issuing role (the
producer warp, ahead of the others) arms its full barrier with 16 transaction bytes at the
start of each of its units and, in the cluster's first CTA, waits until the slot is free and
issues ``try_cancel`` into it -- ``.multicast::cluster::all`` in a larger cluster, so the
response lands in every CTA's slot and completes on every CTA's full barrier, and the cluster's
CTAs walk the same units. Every role that walks the units (:meth:`ClcTileScheduler.work_loop`)
then waits for that slot, reads the response (``query_cancel.is_canceled`` and
``get_first_ctaid::x``) and releases it: lane 0 of each of its warps arrives on the empty
barrier of the cluster's first CTA (``mbarrier.arrive.release.cluster`` from the others), which
thus counts every warp of the cluster. The response completes through the async proxy on the
mbarrier, like a TMA load, so the reads after the wait see it.
"""
from __future__ import annotations

import contextlib

from ..atom.clc import RESPONSE_BYTES, query_cancel, try_cancel
from ..ir._lazy import lazy
from .pipeline import PipelineState
from .tile_scheduler import PersistentTileScheduler
from .work_unit import PersistentScheduler

cir = lazy("cutedsl.ir")

#: GemmConfig.tile_scheduler values: the static persistent walk, or cluster launch control
TILE_SCHEDULERS = ("static", "clc")
CLC_STAGES = 3              #: responses in flight: the producer runs up to two units ahead of the epilogue


class ClcScheduler(PersistentScheduler):
    """See the module docstring: cluster launch control over any problem's ``units`` (a
    :class:`~cutedsl.collective.work_unit.UnitSpace`); one cluster of ``cluster_size`` CTAs per
    unit is launched; ``warps``: the warps of the whole cluster that run :meth:`work_loop` (each
    releases every response once)."""

    def __init__(self, units=None, sm_count=None, cluster_size: int = 1, warps: int = 1):
        super().__init__(units, sm_count, cluster_size, persistent=False)
        self.warps = warps

    def config(self) -> dict:
        return {**super().config(), "clc": CLC_STAGES, "clc_warps": self.warps}

    def unit_index(self, i=0):
        return i                    # work_loop hands its body the unit itself

    # -- shared memory -------------------------------------------------------------
    def plan(self, plan) -> None:
        """Declare the response ring and its barriers in a ``SmemPlan``."""
        plan.buffer("clc_response", (RESPONSE_BYTES,), "u8", CLC_STAGES, align=RESPONSE_BYTES)
        plan.barriers("clc_full", CLC_STAGES)
        plan.barriers("clc_empty", CLC_STAGES)

    def init(self, smem, leader) -> None:
        """IR: bind the ring of ``smem`` (a ``BoundSmem``) and initialise its barriers by thread
        ``leader`` (IR i1); ``fence.mbarrier_init`` and a CTA barrier -- a cluster barrier in a
        larger cluster, whose CTAs arrive on the first CTA's barriers -- must follow (the operand
        ring's init and sync)."""
        from ..atom import MBarriers
        self.responses = smem["clc_response"]
        self.full = MBarriers(smem.barriers("clc_full"), CLC_STAGES)
        self.empty = MBarriers(smem.barriers("clc_empty"), CLC_STAGES)
        self.full.init_all(1, predicate=leader)
        self.empty.init_all(self.warps, predicate=leader)

    # -- the work loop ---------------------------------------------------------------
    def work_loop(self, carry, body, issuer=None) -> list:
        """IR: ``body(unit, carried) -> next carried`` for this CTA's first unit and each unit a
        successful ``try_cancel`` hands it; returns the last carried values. ``issuer`` (an
        ``ElectEach`` or IR i1 selecting one thread of the calling warp): this role issues
        the requests. Run by whole warps (each warp releases each response once)."""
        first = self.cluster_id
        init = [cir.u32(first), cir.const(1, "i1"), *PipelineState(CLC_STAGES).carry(), *carry]

        def step(unit, valid, ci, cp, *rest):
            st = PipelineState(CLC_STAGES, ci, cp)
            if issuer is not None:
                self._request(st, issuer)
            rest = body(unit, list(rest))
            nxt, ok = self._response(st)
            return [nxt, ok, *st.advance().carry(), *rest]

        return list(cir.While(init, cond=lambda unit, valid, *_: valid, body=step).results[4:])

    def _request(self, st, issuer) -> None:
        """Arm slot ``st``'s full barrier; in the cluster's first CTA, wait for the slot to be
        free everywhere and ask for a cluster to cancel."""
        from ..atom.sync import ElectEach, elected
        first = None if self.cluster_size == 1 else cir.u32(self.rank).eq(0)   # the CTA that issues
        with _where(first):
            self.empty.wait(st.index, st.phase ^ 1)
        with elected(issuer) if isinstance(issuer, ElectEach) else cir.If(issuer):
            self.full.arrive_expect_tx(st.index, RESPONSE_BYTES)
            with _where(first):
                try_cancel(self._response_address(st), self.full.address(st.index), multicast=self.cluster_size > 1)

    def _response_address(self, st):
        """IR i32: the shared address of slot ``st``'s response."""
        return cir.u32(self.responses.tile(st.index).address())

    def _response(self, st) -> tuple:
        """IR ``(next unit, canceled)``: wait for slot ``st``'s response, read it, release the
        slot (lane 0 of the warp)."""
        self.full.wait(st.index, st.phase)
        ok, x = query_cancel(self._response_address(st))
        lane0 = (cir.thread_idx() % 32).eq(0)
        if self.cluster_size == 1:
            with cir.If(lane0):
                self.empty.arrive(st.index)
        else:                   # the cluster's first CTA counts the releases of all its CTAs
            self.empty.arrive_cluster(st.index, 0, predicate=lane0)
        cs = self.cluster_size
        return (x // cs if cs > 1 else x), ok


class ClcTileScheduler(ClcScheduler, PersistentTileScheduler):
    """The GEMM instance: constructor arguments as
    :class:`~cutedsl.collective.tile_scheduler.PersistentTileScheduler` (the unit -> tile
    rasterization is the same) plus ``warps`` (:class:`ClcScheduler`)."""

    def __init__(self, tile_m: int, tile_n: int, raster: str = "M", swizzle: int = 1, sm_count=None,
                 cluster=(1, 1), warps: int = 1):
        PersistentTileScheduler.__init__(self, tile_m, tile_n, raster, swizzle, sm_count, cluster, persistent=False)
        self.warps = warps


def _where(cond):
    """``cir.If(cond)``, or no condition when ``cond`` is None."""
    return contextlib.nullcontext() if cond is None else cir.If(cond)


__all__ = ["ClcScheduler", "ClcTileScheduler", "CLC_STAGES", "TILE_SCHEDULERS"]
