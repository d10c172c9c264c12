"""Pipeline state and the TMA pipeline (CUTLASS ``PipelineState`` / ``PipelineTmaAsync``).

A ring of ``stages`` shared-memory slots. Each slot has a *full* mbarrier (1 producer arrival
+ the TMA transaction bytes) and optionally an *empty* mbarrier (one arrival per consumer
that must release the slot before it is refilled). A :class:`PipelineState` names a slot and
the phase parity of its full barrier; ``advance()`` moves to the next slot and flips the
parity on wrap-around. Producer and consumer walk the same sequence of states: the fill with
state ``(s, p)`` waits on the empty barrier for parity ``p ^ 1`` (the release of the slot's
previous fill), which a fresh barrier reports as completed, so the first ``stages`` fills
pass at once (CUTLASS starts its producer state at phase 1 for the same reason).
"""
from __future__ import annotations

from ..atom.mbarrier import MBarriers
from ..ir._lazy import lazy

V = lazy("cutedsl.ir.values")
cir = lazy("cutedsl.ir")


class PipelineState:
    """``(index, phase)`` of a ``stages``-slot ring; both i32 IR values (or Python ints)."""

    def __init__(self, stages: int, index=0, phase=0):
        self.stages = stages
        self.index = index
        self.phase = phase

    @classmethod
    def at(cls, stages: int, iteration) -> "PipelineState":
        """The state after ``iteration`` advances from (0, 0) (``iteration`` int or IR i32)."""
        if isinstance(iteration, int):
            return cls(stages, iteration % stages, (iteration // stages) & 1)
        it = iteration.unsigned()
        return cls(stages, it % stages, (it // stages) & 1)

    def advance(self) -> "PipelineState":
        """The next slot; the phase flips when the index wraps to 0 (Python ints stay ints,
        IR values give IR ``select``s, no division)."""
        if isinstance(self.index, int) and isinstance(self.phase, int):
            nxt = self.index + 1
            return PipelineState(self.stages, nxt % self.stages, self.phase ^ (nxt == self.stages))
        idx = V.i32(self.index) if isinstance(self.index, int) else self.index
        ph = V.i32(self.phase) if isinstance(self.phase, int) else self.phase
        nxt = idx + 1
        wrap = nxt.eq(self.stages)
        return PipelineState(self.stages, V.select(wrap, V.i32(0), nxt), V.select(wrap, ph ^ 1, ph))

    def advance_by(self, n) -> "PipelineState":
        """The state ``n`` advances later (``n`` int or IR i32, >= 0): ping-pong consumers skip
        the other warpgroup's k-tiles with it (CUTLASS ``PipelineState::advance``)."""
        if isinstance(n, int) and n == 1:
            return self.advance()
        idx = V.i32(self.index) if isinstance(self.index, int) else self.index
        ph = V.i32(self.phase) if isinstance(self.phase, int) else self.phase
        t = idx.unsigned() + n
        return PipelineState(self.stages, t % self.stages, ph ^ ((t // self.stages) & 1))

    def carry(self) -> list:
        """The state as two i32 values, for ``Loop(carry=...)``."""
        return [V.i32(self.index) if isinstance(self.index, int) else self.index,
                V.i32(self.phase) if isinstance(self.phase, int) else self.phase]

    @classmethod
    def from_carry(cls, stages, values) -> "PipelineState":
        """The state from the two values :meth:`carry` gave (e.g. a loop's carried values)."""
        return cls(stages, values[0], values[1])


class TmaPipeline:
    """Full (and optionally empty) barriers of a TMA-fed ring of slots.

    ``tx_bytes``: transaction bytes one stage receives (all boxes of A and B, including
    those multicast into it by cluster peers); ``consumers``: arrivals per CTA that release a
    slot on its empty barrier (e.g. one per consumer warp); ``cluster``: ``(cluster_m,
    cluster_n)`` — every CTA of this CTA's cluster row and column received slices of the slot,
    so the empty barrier expects ``consumers x`` :attr:`peers` arrivals (CUTLASS
    ``PipelineTmaAsync``).
    """

    def __init__(self, full: MBarriers, tx_bytes: int, empty: MBarriers | None = None, consumers: int = 0,
                 cluster=(1, 1)):
        self.full, self.empty = full, empty
        self.stages = full.count
        self.tx_bytes = tx_bytes
        self.consumers = consumers
        self.cluster = tuple(cluster)

    @property
    def peers(self) -> int:
        """CTAs whose consumers release each slot of this CTA: itself and the CTAs of its
        cluster row and column, which received the same multicast A or B slices
        (``cluster_m + cluster_n - 1``; CUTLASS ``PipelineTmaAsync``)."""
        return self.cluster[0] + self.cluster[1] - 1

    def init(self, leader) -> None:
        """Initialise the barriers from thread(s) where ``leader`` (i1) holds; then fence.
        The caller follows with :meth:`sync_after_init` (or a CTA barrier)."""
        self.full.init_all(1, predicate=leader)
        if self.empty is not None:
            self.empty.init_all(self.consumers * self.peers, predicate=leader)
        MBarriers.fence_init()

    def sync_after_init(self) -> None:
        """Make the initialised barriers visible before anyone uses them: a CTA barrier, or
        with a cluster a cluster barrier (peers multicast into and arrive on this CTA's
        barriers)."""
        if self.cluster == (1, 1):
            from mlir.dialects import gpu
            gpu.barrier()
        else:
            from ..atom.cluster import cluster_sync
            cluster_sync()

    def producer_acquire(self, state: PipelineState) -> None:
        """Before the fill ``state``: wait until the consumers released the slot's previous
        fill (no-op without empty barriers)."""
        if self.empty is not None:
            self.empty.wait(state.index, state.phase ^ 1)

    def producer_expect(self, state: PipelineState, predicate=None) -> None:
        """Arm the full barrier of the slot with the stage's transaction bytes (one arrival)."""
        self.full.arrive_expect_tx(state.index, self.tx_bytes, predicate=predicate)

    def producer_tail(self, state: PipelineState) -> None:
        """After the producer's last fill (``state`` = the state after it): wait until every
        slot's last fill was released, so that no arrival can still target this CTA's
        barriers when it exits (CUTLASS ``producer_tail``; needed with clusters, where peers
        arrive remotely)."""
        for _ in range(self.stages):
            self.producer_acquire(state)
            state = state.advance()

    def consumer_wait(self, state: PipelineState) -> None:
        """Wait until the slot's TMA bytes have landed."""
        self.full.wait(state.index, state.phase)

    def consumer_release(self, state: PipelineState) -> None:
        """Release the slot to the producer (warp-specialized pipelines only)."""
        if self.empty is not None:
            self.empty.arrive(state.index)

    def consumer_release_warp(self, state: PipelineState) -> None:
        """Release the slot once per consumer warp (every lane of the warp executes this;
        ``consumers`` counts consumer warps per CTA). Without a cluster lane 0 arrives on
        this CTA's empty barrier; with a cluster lane ``r`` arrives on the empty barrier of
        CTA rank ``r`` when that CTA shares this CTA's cluster row or column (rank = ``rm +
        cluster_m * rn``), i.e. every CTA whose producer multicast into the slot."""
        if self.cluster == (1, 1):
            with cir.If(cir.lane_id().eq(0)):
                self.consumer_release(state)
            return
        from ..atom.cluster import cta_rank
        cm, cn = self.cluster
        lane, me = cir.lane_id(), cta_rank()
        same_line = (lane % cm).eq(me % cm) | (lane // cm).eq(me // cm)
        # a predicated arrival, not a branch: the consumer loop stays free of divergence; CTA
        # scope as CUTLASS's consumer_release (MBarriers.arrive_cluster: the slot's wgmma reads
        # are complete, nothing is published to the peer; cluster scope costs MEMBARs per k-tile)
        self.empty.arrive_cluster(state.index, lane, predicate=(lane < cm * cn) & same_line, scope="cta")


class OrderedSequenceBarrier:
    """Turn-taking between ``length`` groups of threads over ``depth`` steps (CUTLASS
    ``OrderedSequenceBarrier<Depth, Length>``), e.g. ping-pong: depth 2 (mainloop, epilogue),
    length 2 (consumer warpgroups).

    ``depth x length`` mbarriers, each expecting ``arrivals`` threads (every thread of a group
    arrives). Group ``g`` takes its turn at step ``d`` with :meth:`wait` and hands it on with
    :meth:`arrive`, which signals group ``(g + 1) % length``. Group 0's first turn at every
    step is free (it waits on the already-completed parity 1 of a fresh barrier).
    """

    def __init__(self, barriers: MBarriers, depth: int, length: int, arrivals: int):
        if barriers.count != depth * length:
            raise ValueError(f"OrderedSequenceBarrier needs {depth * length} mbarriers, got {barriers.count}")
        self.bars, self.depth, self.length, self.arrivals = barriers, depth, length, arrivals

    def init(self, leader) -> None:
        """Initialise from threads where ``leader`` holds (with the pipeline's init and fence)."""
        self.bars.init_all(self.arrivals, predicate=leader)

    def _slot(self, step: int, group):
        return step * self.length + group

    def wait(self, step: int, group, turn) -> None:
        """Wait for ``group``'s ``turn``-th turn (0, 1, ...; IR i32) at ``step``."""
        parity = turn & 1
        parity = V.select(V.Scalar(group).eq(0), parity ^ 1, parity) if not isinstance(group, int) else (
            parity ^ 1 if group == 0 else parity)
        self.bars.wait(self._slot(step, group), parity)

    def arrive(self, step: int, group) -> None:
        """Hand ``step`` over to the next group (every thread of ``group`` executes this)."""
        nxt = (group + 1) % self.length
        self.bars.arrive(self._slot(step, nxt))


__all__ = ["PipelineState", "TmaPipeline", "OrderedSequenceBarrier"]
