"""The correction warpgroup of a FlashAttention-4-style forward on sm_100a: it rescales O in tensor
memory when a row's reference maximum moved, and stores O and the LSE at the end.

FlashAttention-4 takes the correction of O out of the softmax warps: the softmax warpgroup of Q
tile ``g`` writes each row's factor ``corr = exp2((m_old - m_ref) k)`` (1 where the stale maximum
stayed, :class:`~cutedsl.collective.attention_tmem_softmax.TmemRowSoftmax`) to shared memory
(:class:`RowStats`) and arrives on ``corr_full[g]``; thread ``t`` of the correction warpgroup
(TMEM lane ``t``, the same row of every tile) waits for it and for ``o_full[g]`` (the previous
``P V`` is done), and -- only in a warp where some row's factor is not 1 (``vote.sync.any``) --
loads its row of ``O_g`` in :data:`LD_COLUMNS`-column chunks (``tcgen05.ld`` + ``wait::ld``),
multiplies (FMUL2) and stores it back (``tcgen05.st``, one ``wait::st`` after the last chunk),
then ``tcgen05.fence::before_thread_sync`` and an arrive on ``o_ready[g]``, which the MMA warp
waits for before the next ``P V`` accumulates into ``O_g`` (PTX ISA 9.7.16.6.4 "memory
consistency of tcgen05": the fences around the mbarrier hand-offs; 9.7.16.8.5 ``tcgen05.wait``).

Phases (per tile): ``o_ready`` completes once per KV block ``n`` (block 0 at once: its ``P V``
does not accumulate), ``corr_full`` once per block ``n >= 1``, ``o_full`` once per block; no role
runs more than one phase ahead, so each wait's parity is its phase index ``& 1``. The final
statistics (``1 / l`` and the LSE) have their own slots and barrier (``stats_full``, one phase):
on ``corr_full`` they could complete a second phase before the correction saw the first.

The factor slot of a tile is rewritten for block ``n + 1`` only after ``s_full`` of block ``n + 1``,
whose MMA the MMA warp issued after waiting for ``o_ready`` of block ``n``, which the correction
arrived on after reading the slot: one slot per row and tile suffices.
"""
from __future__ import annotations

from ..atom.tcgen05 import TensorMemory
from ..atom.tmem_fragment import TmemFragment, store_columns
from ..ir._lazy import lazy
from .attention_tmem_mainloop import HandOffs, warp_any

cir = lazy("cutedsl.ir")
V = lazy("cutedsl.ir.values")

LD_COLUMNS = 32             #: O columns per tcgen05.ld / st of the correction
STATS_SYMBOL = "attn_row_stats"


class RowStats:
    """Per row and Q tile, :data:`SLOTS` f32 words in static shared memory (one symbol, so ptxas
    rematerialises the address after ``setmaxnreg`` instead of keeping it): the correction
    factor, ``1 / l`` and the LSE. Thread ``t`` of a 128-thread warpgroup (softmax or
    correction) owns row ``t``."""
    FACTOR, INV, LSE = range(3)
    SLOTS = 3

    def __init__(self, q_tiles: int, rows: int = 128):
        self.q_tiles, self.rows = q_tiles, rows

    def _slot(self, g, which: int):
        from ..ir.smem_tile import StaticArray
        arr = StaticArray(STATS_SYMBOL, self.q_tiles * self.SLOTS * self.rows)
        t = cir.i32(cir.thread_idx() % self.rows)
        return arr, cir.i32(g) * (self.SLOTS * self.rows) + which * self.rows + t

    def put(self, g, which: int, value) -> None:
        """Store ``value`` (f32) in slot ``which`` (:attr:`FACTOR`, :attr:`INV`, :attr:`LSE`) of this
        thread's row of tile ``g``."""
        arr, i = self._slot(g, which)
        arr.store(i, value)

    def get(self, g, which: int):
        arr, i = self._slot(g, which)
        return arr.load(i)


class TmemCorrection:
    """The correction warpgroup's loop over ``q_tiles`` tiles whose ``O_g`` lie at the columns
    ``o_cols`` (a :class:`~cutedsl.collective.attention_tmem_mainloop.TmemPlan`'s ``o``), each
    ``head_dim`` f32 columns wide."""

    def __init__(self, head_dim: int, o_cols: tuple):
        self.head_dim, self.o_cols = head_dim, tuple(o_cols)

    def loop(self, bars: HandOffs, stats: RowStats, taddr, count) -> None:
        """Blocks ``0 .. count - 1`` (IR i32) of every tile (see the module docstring)."""
        for g in range(len(self.o_cols)):
            bars.o_ready.arrive(g)                  # block 0: P V overwrites O
        loop = cir.Loop(1, count, counter="i32")
        for n in loop:
            ph = (cir.i32(n) - 1) & 1
            for g, col in enumerate(self.o_cols):
                bars.corr_full.wait(g, ph)
                scale = stats.get(g, RowStats.FACTOR)
                bars.o_full.wait(g, ph)             # block n - 1's P V has written O
                TensorMemory.fence_after()
                with cir.If(warp_any(scale.ne(1.0))):
                    self.rescale(taddr + col, scale)
                TensorMemory.fence_before()
                bars.o_ready.arrive(g)

    def rescale(self, o_addr, scale) -> None:
        """This thread's row of O times ``scale``; ``wait::st`` after the last chunk."""
        last = self.head_dim - LD_COLUMNS
        for c0 in range(0, self.head_dim, LD_COLUMNS):
            frag = TmemFragment.load(o_addr, c0, LD_COLUMNS)
            store_columns(o_addr, c0, [x * scale for x in frag.values], wait=c0 == last)

    def final(self, bars: HandOffs, stats: RowStats, count, g: int) -> tuple:
        """After the loop, tile ``g``: wait for the softmax's statistics and the last ``P V``
        (none when ``count`` is 0); returns ``(1 / l, lse)`` of this thread's row."""
        bars.stats_full.wait(g, 0)
        inv, lse = stats.get(g, RowStats.INV), stats.get(g, RowStats.LSE)
        with cir.If(count > 0):
            bars.o_full.wait(g, (count - 1) & 1)
            TensorMemory.fence_after()
        return inv, lse


__all__ = ["TmemCorrection", "RowStats", "LD_COLUMNS"]
