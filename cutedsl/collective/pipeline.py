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
        if isinstance(self.index, int) and isinstance(self.phase, int):
            nxt = self.index + 1
            return PipelineState(self.stages, nxt % self.stages, self.phase ^ (nxt == self.stages))
        idx = V.i32(self.index) if isinstance(self.index, int) else self.index
        ph = V.i32(self.phase) if isinstance(self.phase, int) else self.phase
        nxt = idx + 1
        wrap = nxt.eq(self.stages)
        return PipelineState(self.stages, V.select(wrap, V.i32(0), nxt), V.select(wrap, ph ^ 1, ph))

    def carry(self) -> list:
        """The state as two i32 values, for ``Loop(carry=...)``."""
        return [V.i32(self.index) if isinstance(self.index, int) else self.index,
                V.i32(self.phase) if isinstance(self.phase, int) else self.phase]

    @classmethod
    def from_carry(cls, stages, values) -> "PipelineState":
        return cls(stages, values[0], values[1])


class TmaPipeline:
    """Full (and optionally empty) barriers of a TMA-fed ring of slots.

    ``tx_bytes``: transaction bytes one stage receives (all boxes of A and B);
    ``consumers``: arrivals that release a slot on its empty barrier (0 = no empty barriers:
    a single warpgroup that waits on its own WGMMA before refilling, as in the multistage
    kernel).
    """

    def __init__(self, full: MBarriers, tx_bytes: int, empty: MBarriers | None = None, consumers: int = 0):
        self.full, self.empty = full, empty
        self.stages = full.count
        self.tx_bytes = tx_bytes
        self.consumers = consumers

    def init(self, leader) -> None:
        """Initialise the barriers from thread(s) where ``leader`` (i1) holds; then fence.
        The caller follows with a CTA barrier."""
        self.full.init_all(1, predicate=leader)
        if self.empty is not None:
            self.empty.init_all(self.consumers, predicate=leader)
        MBarriers.fence_init()

    def producer_acquire(self, state: PipelineState) -> None:
        """Before the fill ``state``: wait until the consumers released the slot's previous
        fill (no-op without empty barriers)."""
        if self.empty is not None:
            self.empty.wait(state.index, state.phase ^ 1)

    def producer_expect(self, state: PipelineState, predicate=None) -> None:
        """Arm the full barrier of the slot with the stage's transaction bytes (one arrival)."""
        self.full.arrive_expect_tx(state.index, self.tx_bytes, predicate=predicate)

    def consumer_wait(self, state: PipelineState) -> None:
        """Wait until the slot's TMA bytes have landed."""
        self.full.wait(state.index, state.phase)

    def consumer_release(self, state: PipelineState) -> None:
        """Release the slot to the producer (warp-specialized pipelines only)."""
        if self.empty is not None:
            self.empty.arrive(state.index)


__all__ = ["PipelineState", "TmaPipeline"]
