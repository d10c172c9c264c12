"""The main loop of a FlashAttention-4-style forward on sm_100a: S, P and O in tensor memory,
two Q tiles per CTA (FlashAttention-4's "2 Q tiles": ``q_tiles`` x 128 query rows).

Four roles walk the KV blocks of one work unit (``count`` blocks, visited downwards as on Hopper):

* **the MMA warp** (:meth:`TmemAttentionMainloop.mma_loop`; an elected lane issues every
  ``tcgen05.mma``) interleaves the tiles so that the tensor core works on one tile while the
  other tile's softmax runs: ``S_0(0) S_1(0)``, then per block ``j >= 1``: for each tile ``g``,
  wait ``p_full[g]`` and ``o_ready[g]`` (block ``j - 1``), ``O_g += P_g V_{j-1}`` (**A = P read from tensor memory**,
  :meth:`~cutedsl.atom.tcgen05.Umma.mma_tmem_a`; commit ``o_full[g]``), then ``S_g(j) = Q_g
  K_j^T`` (commit ``s_full[g]``); K's slot is released after both tiles' S, V's after both P V;
  after the loop the last block's P V of each tile. While softmax ``g`` works on ``S_g(j)``,
  the tensor core runs the other tile's ``P V`` and ``S``;
* **the softmax warpgroups** (:meth:`TmemAttentionMainloop.softmax_block`; warpgroup ``g`` owns
  tile ``g``, thread ``t`` = row ``t`` = TMEM lane ``t``): wait ``s_full[g]``, ``tcgen05.ld``
  the row of S (32-column loads, one ``wait::ld``), mask, online softmax
  (:class:`~cutedsl.collective.attention_tmem_softmax.TmemRowSoftmax`); from the second block on,
  the row's correction factor to shared memory and an arrive on ``corr_full[g]`` for the
  correction warpgroup (:mod:`~cutedsl.collective.attention_tmem_correction`); P stored as
  16-bit pairs over the first half of S's columns (FlashAttention-4's P aliasing S;
  ``tcgen05.st`` + ``wait::st``), then ``tcgen05.fence::before_thread_sync`` and an arrive on
  ``p_full[g]``;
* **the correction warpgroup** rescales ``O_g`` after the previous ``P V`` (``o_full[g]``) and
  arrives on ``o_ready[g]``, which the MMA warp waits for (with ``p_full[g]``) before ``O_g += P_g V``.

P over S is safe: S of block ``j`` (whose completion ``s_full`` reports) was issued after the ``P
V`` of block ``j - 1`` that read the P columns, and a ``tcgen05.commit`` tracks the completion of
every earlier ``tcgen05.mma`` of its thread (PTX ISA 9.7.16.6.4.2 / 9.7.16.6.4.4); the MMA that
next writes S is issued by the same thread after the ``P V`` that reads P, and ``tcgen05.mma``
operations of one thread execute in issue order (PTX ISA 9.7.16.6.4.3, "pipelined tcgen05
instructions"; the emulator models each issuing thread as one in-order agent).

Every hand-off is an mbarrier (``tcgen05.commit`` -> wait, or arrive -> wait) with the tcgen05
fences around it (PTX ISA 9.7.16.6.4 "memory consistency of tcgen05": ``fence::after_thread_sync``
after a wait before tensor-memory accesses, ``fence::before_thread_sync`` before an arrive), and
every ``tcgen05.ld`` / ``tcgen05.st`` is waited for before its columns are handed on
(9.7.16.8.5). Each barrier completes one phase per block and no role runs more than one phase
ahead of the one waiting, so the parity of block ``n`` is ``n & 1``.

A CTA pair (``operands.pair``; FlashAttention-4's 2-CTA MMA): the same loop with every MMA a
``tcgen05.mma.cta_group::2`` of M = 256 (tile ``g`` of the even and the odd CTA; A = Q from each
CTA's shared memory, or P from each CTA's tensor memory, PTX ISA 9.7.16.10.9; B's halves from
each CTA's shared memory), issued by the even CTA only; every commit is multicast to both CTAs'
barriers (``.multicast::cluster``, :meth:`TmemAttentionMainloop.commit_mask`), so each CTA's softmax
and correction see their own ``s_full`` / ``o_full`` and each CTA's producer its own empty slots;
the threads of both CTAs arrive on the even CTA's ``p_full`` / ``o_ready``
(:class:`~cutedsl.atom.mbarrier.PairLeaderArrivals`: ``mbarrier.arrive.release.cluster`` on the
peer's barrier, twice the arrivals). The phase argument above holds across the pair: the even
CTA's ``p_full`` phase of block ``n`` completes only with both CTAs' arrivals, and neither CTA's
softmax sees ``S`` of block ``n + 1`` before the MMA warp waited for it.

Tensor memory (:class:`TmemPlan`): ``S_g`` at column ``g * block_n`` (``block_n`` f32 columns,
P_g in its first ``block_n / 2``), ``O_g`` after the S columns (``head_dim`` f32 columns each):
512 columns for two tiles at head dim 128.
"""
from __future__ import annotations

import attrs

from ..atom.tcgen05 import TMEM_COLUMNS, TensorMemory, Umma
from ..atom.tmem_fragment import TmemFragment, store_columns
from ..atom.stmatrix import pack_b16x2
from ..ir._lazy import lazy
from .attention_tmem_softmax import RowScores, RowState
from .gemm_operands import CTA_PAIR
from .pipeline import PipelineState

cir = lazy("cutedsl.ir")
V = lazy("cutedsl.ir.values")
nvvm, ir = lazy("mlir.dialects.nvvm"), lazy("mlir.ir")

@attrs.frozen
class TmemPlan:
    """Column offsets of each Q tile's S, P (aliasing S) and O in one allocation of ``columns``
    (a power of two): ``s[g]``, ``p[g]``, ``o[g]``."""
    s: tuple
    p: tuple
    o: tuple
    columns: int

    @classmethod
    def of(cls, block_n: int, head_dim: int, q_tiles: int = 2) -> "TmemPlan":
        s = tuple(g * block_n for g in range(q_tiles))
        o = tuple(q_tiles * block_n + g * head_dim for g in range(q_tiles))
        return cls(s, s, o, TensorMemory.columns_for(q_tiles * (block_n + head_dim)))

    @property
    def fits(self) -> bool:
        return self.columns <= TMEM_COLUMNS


@attrs.frozen
class HandOffs:
    """The mbarriers of the hand-offs, one per Q tile each: ``s_full`` (MMA -> softmax: S is
    written), ``p_full`` (softmax -> MMA: P is stored), ``o_full`` (MMA -> correction: P V is
    done), ``corr_full`` (softmax -> correction: the rows' factors are in shared memory),
    ``o_ready`` (correction -> MMA: O is rescaled, the next P V may accumulate), ``stats_full``
    (softmax -> correction, once: ``1 / l`` and the LSE are in shared memory)."""
    s_full: object
    p_full: object
    o_full: object
    corr_full: object
    o_ready: object
    stats_full: object

    NAMES = ("s_full", "p_full", "o_full", "corr_full", "o_ready", "stats_full")


S_LD_COLUMNS = 32           #: columns per tcgen05.ld of S (an x128 load needs more than the 128 registers
                            #: ptxas allows one instruction in a 512-thread kernel)


def load_row(taddr, cols: int, chunk: int = S_LD_COLUMNS) -> list:
    """This thread's ``cols`` f32 columns of the TMEM region at ``taddr``: ``tcgen05.ld`` of
    ``chunk`` columns each, one ``tcgen05.wait::ld`` after the last (PTX ISA 9.7.16.8.3 /
    9.7.16.8.5)."""
    out = []
    for c0 in range(0, cols, chunk):
        out += TmemFragment.load(taddr, c0, min(chunk, cols - c0), wait=c0 + chunk >= cols).values
    return out


def warp_any(pred):
    """IR i1: ``pred`` holds in some lane of the warp (``vote.sync.any.pred``, PTX ISA 9.7.12.x)."""
    i1 = ir.IntegerType.get_signless(1)
    return V.Scalar(nvvm.vote_sync(i1, V.i32(-1), pred, nvvm.VoteSyncKind.any))


class TmemAttentionMainloop:
    """``operands`` (an :class:`~cutedsl.collective.attention_operands.AttentionOperands` with
    ``q_tiles`` x 128 query rows), ``mask``, ``softmax`` (a
    :class:`~cutedsl.collective.attention_tmem_softmax.TmemRowSoftmax`), ``softmax_threads``
    (128 per tile: one per row). ``ValueError`` when the tiles' S and O do not fit the 512 TMEM
    columns."""

    def __init__(self, operands, mask, softmax, softmax_threads: int = 128, q_tiles: int = 2):
        o = operands
        self.ops_desc, self.mask, self.softmax, self.threads = operands, mask, softmax, softmax_threads
        self.q_tiles = q_tiles
        self.tile_m = o.block_m // q_tiles
        #: a CTA pair (``operands.pair``): M = 256 over the pair's two tiles ``g`` (cta_group::2)
        self.pair = o.pair
        group = CTA_PAIR if self.pair else 1
        self.qk = Umma(group * self.tile_m, o.block_n, o.dtype, b_major="K", cta_group=group)
        self.pv = Umma(group * self.tile_m, o.head_dim, o.dtype, b_major="MN", cta_group=group)
        self.tmem = TmemPlan.of(o.block_n, o.head_dim, q_tiles)
        if not self.tmem.fits:
            raise ValueError(f"{q_tiles} x (S {o.block_n} + O {o.head_dim}) columns exceed the {TMEM_COLUMNS} "
                             f"of tensor memory")

    # -- static description ----------------------------------------------------------
    def plan(self, plan) -> None:
        for name in HandOffs.NAMES:
            plan.barriers(name, self.q_tiles)

    def bind(self, smem) -> HandOffs:
        """The hand-off barriers, one per Q tile (no IR but their addresses: a role binds them
        after its ``setmaxnreg``)."""
        from ..atom.mbarrier import MBarriers, PairLeaderArrivals
        return HandOffs(*((PairLeaderArrivals if n in self.LEADER_ARRIVALS and self.pair else MBarriers)(
            smem.barriers(n), self.q_tiles) for n in HandOffs.NAMES))

    #: the hand-offs the MMA warp waits on: a pair's threads of both CTAs arrive on the even CTA's
    LEADER_ARRIVALS = ("p_full", "o_ready")

    def init(self, bars: HandOffs, leader) -> None:
        """Initialise the barriers (``leader``: the initialising thread; the caller fences and
        synchronises the CTA): one ``tcgen05.commit`` completes ``s_full`` / ``o_full``, every
        thread of the tile's softmax warpgroup ``p_full`` / ``corr_full`` / ``stats_full``, every
        thread of the correction warpgroup ``o_ready`` (a pair: those of both CTAs arrive on
        ``p_full`` / ``o_ready`` of the even CTA)."""
        for g in range(self.q_tiles):
            bars.s_full.init(g, 1, predicate=leader)
            bars.o_full.init(g, 1, predicate=leader)
            for b in (bars.p_full, bars.corr_full, bars.o_ready, bars.stats_full):
                both = self.pair and b in (bars.p_full, bars.o_ready)
                b.init(g, self.threads * (CTA_PAIR if both else 1), predicate=leader)

    def commit_mask(self):
        """IR i16 or None: the CTAs a commit arrives in -- a pair's two (``.multicast::cluster``,
        CUTLASS's ``umma_arrive_multicast_2x1SM``), or only this one."""
        if not self.pair:
            return None
        from ..atom.cluster import cta_rank
        return cir.u32(3) << (cta_rank() & ~1)

    # -- the MMA warp ------------------------------------------------------------------
    def mma_loop(self, ops, bars: HandOffs, taddr, count, live=None) -> None:
        """The MMA warp: every MMA of ``count`` (IR i32) KV blocks of both Q tiles into tensor
        memory at ``taddr``, in the order of the module docstring. The whole warp waits and walks
        the loop; an ``elect.sync``-ed lane issues each tcgen05 instruction (CUTLASS's pattern: a
        one-thread branch makes ptxas wrap every UTC* instruction in a loop over the lanes'
        possibly divergent operands). Q's, K's and V's descriptors are made once, before the
        loop, and moved per stage by 32-bit adds (:meth:`~cutedsl.atom.wgmma.Descriptor.stage`,
        as the GEMM's tcgen05 mainloop): ptxas keeps them in uniform registers. ``live`` (IR i1
        or None): whether the producer loads Q at all (a query block past its sequence gets
        ``count`` 0 and no wait for Q). The caller must not call this inside a branch ptxas
        cannot prove warp-uniform (see the kernel)."""
        o, stages = self.ops_desc, self.ops_desc.stages
        if live is None:
            ops.q_bar.wait(0, 0)
        else:
            with cir.If(live):
                ops.q_bar.wait(0, 0)
        tile_bytes = o.traits.tile_bytes(self.tile_m)
        q = [[self.qk.descriptor(ops.smem["q"].tile(kt).sub(g * tile_bytes, shape=(self.tile_m, o.traits.k_box)),
                                 "A") for kt in range(o.d_tiles)] for g in range(self.q_tiles)]
        k0 = self.qk.descriptor(ops.smem["k"].tile(0), "B")
        v0 = self.pv.descriptor(ops.smem["v"].tile(0), "B")
        kb, vb = ops.smem["k"].buf.stage_bytes, ops.smem["v"].buf.stage_bytes
        t = self.tmem
        mask = self.commit_mask()                   # a pair: S, O and the slots' releases reach both CTAs

        def s_mma(g, st):                           # S_g = Q_g K^T of K's slot st
            for kt in range(o.d_tiles):
                self.qk.mma(taddr + t.s[g], q[g][kt], k0.stage(st.index * o.d_tiles + kt, kb), accumulate=kt > 0,
                            elect=True)
            self.qk.commit(bars.s_full.address(g), mask, elect=True)

        def pv_mma(g, st, n):                       # O_g += P_g V of V's slot st, block n (IR i32)
            bars.p_full.wait(g, n & 1)
            bars.o_ready.wait(g, n & 1)             # O rescaled for block n (block 0: at once)
            TensorMemory.fence_after()              # P's stores, O's correction; S's loads before S is rewritten
            for kt in range(o.pv_tiles):
                a = taddr + (t.p[g] + kt * (o.traits.k_tile // 2))
                self.pv.mma_tmem_a(taddr + t.o[g], a, v0.stage(st.index * o.pv_tiles + kt, vb),
                                   accumulate=n.ne(0) if kt == 0 else True, elect=True)
            self.pv.commit(bars.o_full.address(g), mask, elect=True)

        with cir.If(count > 0):
            first = PipelineState(stages, V.i32(0), V.i32(0))
            ops.k_pipe.consumer_wait(first)
            for g in range(self.q_tiles):
                s_mma(g, first)
            self.qk.commit(ops.k_pipe.empty.address(first.index), mask, elect=True)
            loop = cir.Loop(1, count, carry=first.carry(), counter="i32")   # no 64-bit compare
            for it, carried in loop:
                prev = PipelineState.from_carry(stages, carried)           # block it - 1: its V
                cur = prev.advance()                                        # block it: its K
                ops.k_pipe.consumer_wait(cur)
                ops.v_pipe.consumer_wait(prev)
                for g in range(self.q_tiles):
                    pv_mma(g, prev, V.i32(it) - 1)
                    s_mma(g, cur)
                self.pv.commit(ops.v_pipe.empty.address(prev.index), mask, elect=True)
                self.qk.commit(ops.k_pipe.empty.address(cur.index), mask, elect=True)
                loop.next(*cur.carry())
            last = PipelineState.from_carry(stages, loop.results)
            ops.v_pipe.consumer_wait(last)
            for g in range(self.q_tiles):
                pv_mma(g, last, count - 1)
            self.pv.commit(ops.v_pipe.empty.address(last.index), mask, elect=True)

    # -- the softmax warpgroup ---------------------------------------------------------------
    def softmax_block(self, bars: HandOffs, stats, taddr, ctx, state: RowState, n, j, masked: bool,
                      g=0) -> RowState:
        """Block ``j`` (the ``n``-th visited, IR i32) for this thread's row ``ctx.row0 + tid`` of
        Q tile ``g`` (IR i32 or int); returns the new state. ``ctx``: a
        :class:`~cutedsl.collective.attention_mainloop.UnitContext`; ``stats``: the
        :class:`~cutedsl.collective.attention_tmem_correction.RowStats` the factor goes to."""
        o, t = self.ops_desc, self.tmem
        s_addr = self.tile_address(taddr, t.s, g)
        bars.s_full.wait(g, n & 1)
        TensorMemory.fence_after()
        s = RowScores(load_row(s_addr, o.block_n))
        n0 = j * o.block_n
        row = ctx.row0 + cir.i32(cir.thread_idx() % self.threads)
        hk = ctx.hooks                              # FlexAttention hooks at (batch, head, row, key)
        score = (lambda x, b, i: hk.score(x, ctx.batch, ctx.head, row, n0 + i)) if hk is not None else None
        s = self.softmax.scores(s, ctx.params, score)
        if masked:                                  # the band / sequence end, and the mask_mod
            limits = [[self.mask.row_limits(row, ctx.seqlen_q, ctx.seqlen_k, n0, ctx.left, ctx.right)]]
            keep = (lambda b, i: hk.keep(ctx.batch, ctx.head, row, n0 + i)) \
                if hk is not None and hk.hooks.has_mask else None
            s = self.mask.apply(s, lambda b, i: 0, lambda b, i: V.i32(i), limits, keep)
        p, state, corr, _grew = self.softmax.update_row(s, state, ctx.params.exp_scale)
        with cir.If(n.ne(0)):                       # the correction warpgroup rescales O by corr
            stats.put(g, stats.FACTOR, corr)
            bars.corr_full.arrive(g)
        # P over S's columns: free, since s_full's commit followed the previous block's P V (a
        # commit tracks every earlier tcgen05.mma of its thread, PTX ISA 9.7.16.6.4.2 / 9.7.16.6.4.4)
        store_columns(self.tile_address(taddr, t.p, g), 0,
                      [pack_b16x2(p[2 * c], p[2 * c + 1], o.dtype) for c in range(o.block_n // 2)])
        TensorMemory.fence_before()
        bars.p_full.arrive(g)
        return state

    def tile_address(self, taddr, cols: tuple, g):
        """TMEM address of tile ``g``'s region whose column offsets per tile are ``cols`` (the
        tiles' regions are equally spaced)."""
        if isinstance(g, int):
            return taddr + cols[g]
        step = cols[1] - cols[0] if len(cols) > 1 else 0
        return taddr + cols[0] + cir.u32(g) * step


__all__ = ["TmemAttentionMainloop", "TmemPlan", "HandOffs", "warp_any"]
