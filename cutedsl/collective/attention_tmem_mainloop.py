"""The main loop of a FlashAttention-4-style forward on sm_100a: S, P and O in tensor memory.

Two roles walk the KV blocks of one work unit (``count`` blocks, visited downwards as on Hopper):

* **the MMA warp** (:meth:`TmemAttentionMainloop.mma_loop`; an elected lane issues every
  ``tcgen05.mma``): per block, wait for K, ``S = Q K^T`` (A = Q, B = K from shared memory),
  ``tcgen05.commit`` releasing K's slot and signalling ``s_full``; wait for ``p_full`` (the softmax
  wrote P and rescaled O), wait for V, ``O += P V`` with **A = P read from tensor memory**
  (:meth:`~cutedsl.atom.tcgen05.Umma.mma_tmem_a`), commit releasing V's slot and signalling
  ``o_full``;
* **the softmax warpgroup** (:meth:`TmemAttentionMainloop.softmax_block`; four warps, thread
  ``t`` = row ``t`` = TMEM lane ``t``): wait ``s_full``, ``tcgen05.ld`` the row of S
  (+ ``wait::ld``), mask, online softmax (:class:`~cutedsl.collective.attention_tmem_softmax.TmemRowSoftmax`);
  wait ``o_full`` of the previous block (its ``P V`` has read the P columns and written O), rescale
  O in tensor memory where the reference maximum moved (the *correction*: ``tcgen05.ld``, multiply,
  ``tcgen05.st``; skipped by a warp none of whose rows moved), store P as 16-bit pairs
  (``tcgen05.st`` + ``wait::st``), then ``tcgen05.fence::before_thread_sync`` and an arrive on
  ``p_full``.

Every hand-off is an mbarrier (``tcgen05.commit`` -> wait, or arrive -> wait) with the tcgen05
fences around it (PTX ISA 9.7.16.6.4 "memory consistency of tcgen05": ``fence::after_thread_sync``
after a wait before tensor-memory accesses, ``fence::before_thread_sync`` before an arrive), and
every ``tcgen05.ld`` / ``tcgen05.st`` is waited for before its columns are handed on
(9.7.16.8.5). Each barrier completes one phase per block and no role runs more than one phase
ahead of the one waiting, so the parity of block ``n`` is ``n & 1``.

Tensor memory (:class:`TmemPlan`): S at column 0 (``block_n`` f32 columns), P after it
(``block_n / 2`` columns of 16-bit pairs), O after P (``head_dim`` f32 columns).
"""
from __future__ import annotations

import attrs

from ..atom.tcgen05 import TMEM_COLUMNS, TensorMemory, Umma
from ..atom.tmem_fragment import TmemFragment, store_columns
from ..atom.stmatrix import pack_b16x2
from ..ir._lazy import lazy
from .attention_tmem_softmax import RowScores, RowState
from .pipeline import PipelineState

cir = lazy("cutedsl.ir")
V = lazy("cutedsl.ir.values")
nvvm, ir = lazy("mlir.dialects.nvvm"), lazy("mlir.ir")

LD_COLUMNS = 32             #: columns per tcgen05.ld / st of O in the correction


@attrs.frozen
class TmemPlan:
    """Column offsets of S, P and O in one allocation of ``columns`` (a power of two)."""
    s: int
    p: int
    o: int
    columns: int

    @classmethod
    def of(cls, block_n: int, head_dim: int) -> "TmemPlan":
        p = block_n
        o = p + block_n // 2
        return cls(0, p, o, TensorMemory.columns_for(o + head_dim))

    @property
    def fits(self) -> bool:
        return self.columns <= TMEM_COLUMNS


@attrs.frozen
class HandOffs:
    """The mbarriers of the hand-offs between the MMA warp and the softmax warpgroup."""
    s_full: object
    p_full: object
    o_full: object


def warp_any(pred):
    """IR i1: ``pred`` holds in some lane of the warp (``vote.sync.any.pred``, PTX ISA 9.7.12.x)."""
    i1 = ir.IntegerType.get_signless(1)
    return V.Scalar(nvvm.vote_sync(i1, V.i32(-1), pred, nvvm.VoteSyncKind.any))


class TmemAttentionMainloop:
    """``operands`` (an :class:`~cutedsl.collective.attention_operands.AttentionOperands` with
    128 query rows), ``mask``, ``softmax`` (a
    :class:`~cutedsl.collective.attention_tmem_softmax.TmemRowSoftmax`), ``softmax_threads``
    (128: one per row). ``ValueError`` when S, P and O do not fit the 512 TMEM columns."""

    def __init__(self, operands, mask, softmax, softmax_threads: int = 128):
        o = operands
        self.ops_desc, self.mask, self.softmax, self.threads = operands, mask, softmax, softmax_threads
        self.qk = Umma(o.block_m, o.block_n, o.dtype, b_major="K")
        self.pv = Umma(o.block_m, o.head_dim, o.dtype, b_major="MN")
        self.tmem = TmemPlan.of(o.block_n, o.head_dim)
        if not self.tmem.fits:
            raise ValueError(f"S ({o.block_n}), P ({o.block_n // 2}) and O ({o.head_dim}) columns exceed the "
                             f"{TMEM_COLUMNS} of tensor memory")

    # -- static description ----------------------------------------------------------
    @staticmethod
    def plan(plan) -> None:
        for name in ("s_full", "p_full", "o_full"):
            plan.barriers(name, 1)

    def bind(self, smem, leader) -> HandOffs:
        """Bind and initialise the hand-off barriers (``leader``: the initialising thread; the
        caller fences and synchronises the CTA)."""
        from ..atom.mbarrier import MBarriers
        bars = HandOffs(*(MBarriers(smem.barriers(n), 1) for n in ("s_full", "p_full", "o_full")))
        bars.s_full.init(0, 1, predicate=leader)          # one tcgen05.commit each
        bars.o_full.init(0, 1, predicate=leader)
        bars.p_full.init(0, self.threads, predicate=leader)   # every softmax thread
        return bars

    # -- the MMA warp ------------------------------------------------------------------
    def _desc(self, ops, name, mma, role, tile):
        buf = ops.smem[name]
        return mma.descriptor(buf.tile(0), role).stage(tile, buf.buf.stage_bytes)

    def mma_loop(self, ops, bars: HandOffs, taddr, count) -> None:
        """The MMA warp: every MMA of ``count`` (IR i32) KV blocks into tensor memory at
        ``taddr``. The whole warp waits and walks the loop; an ``elect.sync``-ed lane issues each
        tcgen05 instruction (CUTLASS's pattern: a one-thread branch makes ptxas wrap every UTC*
        instruction in a loop over the lanes' possibly divergent operands)."""
        o, t = self.ops_desc, self.tmem
        ops.q_bar.wait(0, 0)
        q = [self.qk.descriptor(ops.smem["q"].tile(kt), "A") for kt in range(o.d_tiles)]
        loop = cir.Loop(0, count, carry=PipelineState(o.stages).carry(), counter="i32")   # no 64-bit compare
        for it, carried in loop:
            st = PipelineState.from_carry(o.stages, carried)
            n = V.i32(it)
            ops.k_pipe.consumer_wait(st)
            TensorMemory.fence_after()              # S's columns: the softmax read them (p_full)
            for kt in range(o.d_tiles):
                kd = self._desc(ops, "k", self.qk, "B", st.index * o.d_tiles + kt)
                self.qk.mma(taddr + t.s, q[kt], kd, accumulate=kt > 0, elect=True)
            self.qk.commit(ops.k_pipe.empty.address(st.index), elect=True)
            self.qk.commit(bars.s_full.address(0), elect=True)
            bars.p_full.wait(0, n & 1)
            TensorMemory.fence_after()
            ops.v_pipe.consumer_wait(st)
            for kt in range(o.pv_tiles):
                vd = self._desc(ops, "v", self.pv, "B", st.index * o.pv_tiles + kt)
                a = taddr + (t.p + kt * (o.traits.k_tile // 2))
                self.pv.mma_tmem_a(taddr + t.o, a, vd, accumulate=n.ne(0) if kt == 0 else True, elect=True)
            self.pv.commit(ops.v_pipe.empty.address(st.index), elect=True)
            self.pv.commit(bars.o_full.address(0), elect=True)
            loop.next(*st.advance().carry())

    # -- the softmax warpgroup ---------------------------------------------------------------
    def softmax_block(self, bars: HandOffs, taddr, ctx, state: RowState, n, j, masked: bool) -> RowState:
        """Block ``j`` (the ``n``-th visited, IR i32) for this thread's row ``ctx.row0 + tid``;
        returns the new state. ``ctx``: a :class:`~cutedsl.collective.attention_mainloop.UnitContext`."""
        o, t = self.ops_desc, self.tmem
        bars.s_full.wait(0, n & 1)
        TensorMemory.fence_after()
        s = RowScores(TmemFragment.load(taddr + t.s, 0, o.block_n).values)
        n0 = j * o.block_n
        row = ctx.row0 + cir.i32(cir.thread_idx() % self.threads)
        s = self.softmax.scores(s, ctx.params)
        if masked:
            limits = [[self.mask.row_limits(row, ctx.seqlen_q, ctx.seqlen_k, n0, ctx.left, ctx.right)]]
            s = self.mask.apply(s, lambda b, i: 0, lambda b, i: V.i32(i), limits)
        p, state, corr, grew = self.softmax.update_row(s, state, ctx.params.exp_scale)
        with cir.If(n.ne(0)):                       # the previous P V is done: O and P's columns are free
            bars.o_full.wait(0, (n - 1) & 1)
            TensorMemory.fence_after()
            with cir.If(warp_any(grew)):            # the correction, by warps with a moved row
                self.rescale(taddr + t.o, corr)
        words = [pack_b16x2(p[2 * c], p[2 * c + 1], o.dtype) for c in range(o.block_n // 2)]
        store_columns(taddr + t.p, 0, words)
        TensorMemory.fence_before()
        bars.p_full.arrive(0)
        return state

    def rescale(self, o_addr, corr) -> None:
        """O's row (this thread's lane) times ``corr``, in :data:`LD_COLUMNS`-column chunks (the
        ``wait::st`` after P's store covers these stores too)."""
        for c0 in range(0, self.ops_desc.head_dim, LD_COLUMNS):
            frag = TmemFragment.load(o_addr, c0, LD_COLUMNS)
            store_columns(o_addr, c0, [x * corr for x in frag.values], wait=False)

    def finish(self, bars: HandOffs, count) -> None:
        """The softmax warpgroup after its last block: wait for the last ``P V`` (none when
        ``count`` is 0) so O can be read."""
        with cir.If(count > 0):
            bars.o_full.wait(0, (count - 1) & 1)
            TensorMemory.fence_after()


__all__ = ["TmemAttentionMainloop", "TmemPlan", "HandOffs", "warp_any", "LD_COLUMNS"]
