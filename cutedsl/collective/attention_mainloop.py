"""The MMA warpgroups' main loop of a FlashAttention-3-style forward: per KV block ``S = Q K^T``
(SS WGMMA), the online softmax in registers, ``O += P V`` (WGMMA with A = P from registers).

Two schedules, both exact against the float64 reference on the emulator:

* ``overlap=False`` -- per block: issue S, wait, release K; softmax; rescale O; issue P V,
  wait, release V.
* ``overlap=True`` (FlashAttention-3's intra-warpgroup overlap) -- the first block's S and
  softmax run alone; then per block ``j``: issue ``S_j``, issue ``P_{j-1} V_{j-1}``, wait only
  for ``S_j`` (``wgmma.wait_group 1``), softmax of ``S_j`` while ``P V`` runs, wait for it,
  rescale O; the last ``P V`` is issued after the loop.
* ``pingpong=True`` (with overlap; FlashAttention-3's inter-warpgroup schedule) -- the two MMA
  warpgroups take turns issuing their GEMMs through two named barriers (PTX ISA 9.7.13.1
  ``barrier.sync`` / ``barrier.arrive``): warpgroup ``w`` syncs on barrier ``w`` before its
  GEMMs and arrives on the other's after them, so one warpgroup's softmax overlaps the other's
  GEMMs. Warpgroup 1 opens with one arrival for warpgroup 0 and leaves out its last one, so
  every barrier phase completes and none is left pending when the CTA exits.

KV blocks are visited downwards in the three ranges of a
:class:`~cutedsl.collective.attention_mask.BlockRange` (masked, unmasked, masked); the
element mask runs only in the masked ones. Under a mask_mod the range is a
:class:`~cutedsl.collective.attention_block_mask.SparseBlocks` (its PARTIAL blocks masked, its
FULL ones not), and ``rng.block(v)`` names the KV block of each visit. The attention hooks
(:class:`~cutedsl.collective.attention_hooks.BoundHooks`, ``UnitContext.hooks``) run per
accumulator element: score_mod on every visited block, mask_mod in the masked ones. Explicit state: the loops carry the pipeline state,
the softmax state, O (and with overlap the previous block's P); nothing of a launch is kept on
the collective.
"""
from __future__ import annotations

import attrs

from ..atom.mma_traits import ATOM_M
from ..atom.sync import NamedBarrier
from ..atom.wgmma import FRAG_PAIR, Accumulator, WarpgroupMMA, WgmmaFragment
from ..atom.wgmma_rs import AFragment, WarpgroupMMARegA
from ..atom.cvt import FP8
from ..atom.fragment_rows import ROW_HALVES
from ..ir._lazy import lazy
from .attention_mask import _min
from .attention_softmax import SoftmaxState
from .pipeline import PipelineState

cir = lazy("cutedsl.ir")
V = lazy("cutedsl.ir.values")

#: named barriers of the ping-pong schedule: ids PINGPONG_BARRIER + warpgroup (0 is the CTA's)
PINGPONG_BARRIER = 1


@attrs.frozen
class UnitContext:
    """What the main loop needs of one work unit, IR values: ``batch``, ``head``, ``row0`` (the
    warpgroup's first query row within the sequence), ``seqlen_q``, ``seqlen_k``, ``left`` /
    ``right`` (band extents of a local mask), the softmax parameters, the warpgroup index and
    ``hooks`` (a ``BoundHooks``, or None without hooks)."""
    batch: object
    head: object
    row0: object
    seqlen_q: object
    seqlen_k: object
    left: object
    right: object
    params: object
    wg: object
    hooks: object = None


class AttentionMainloop:
    """Consumer side for one MMA warpgroup of ``ATOM_M`` query rows: ``operands`` (an
    :class:`~cutedsl.collective.attention_operands.AttentionOperands`), ``mask``
    (:class:`~cutedsl.collective.attention_mask.AttentionMask`), ``softmax``
    (:class:`~cutedsl.collective.attention_softmax.OnlineSoftmax`), ``mma_warpgroups``."""

    def __init__(self, operands, mask, softmax, overlap: bool = True, pingpong: bool = False,
                 mma_warpgroups: int = 2, warpgroup_threads: int = 128):
        if pingpong and not overlap:
            raise ValueError("the ping-pong schedule turns the overlapped GEMM issue points; use overlap=True")
        self.ops_desc, self.mask, self.softmax = operands, mask, softmax
        self.overlap, self.pingpong = bool(overlap), bool(pingpong)
        self.mma_warpgroups, self.wg_threads = mma_warpgroups, warpgroup_threads
        o = operands
        self.qk = WarpgroupMMA(ATOM_M, o.block_n, o.dtype, b_major="K")
        # 8-bit B is K-major only: the fp8 operands hold V^T with each 32 keys in the order of the
        # shuffle-free ("permuted") P fragment (collective/attention_fp8.py)
        fp8 = o.dtype in FP8
        self.pv = WarpgroupMMARegA(ATOM_M, o.head_dim, o.dtype, b_major="K" if fp8 else "MN")
        self.p_order = "permuted" if fp8 else "exact"

    # -- descriptors -----------------------------------------------------------------
    def descriptors(self, ops, wg) -> dict:
        """Stage-0 descriptors: this warpgroup's Q rows per k-tile, K and V."""
        t, o = self.ops_desc.traits, self.ops_desc
        q = [self.qk.descriptor(ops.smem["q"].tile(kt).sub(wg * t.tile_bytes(ATOM_M), (ATOM_M, t.k_box)), "A")
             for kt in range(o.d_tiles)]
        return {"q": q, "k": self.qk.descriptor(ops.smem["k"].tile(0), "B"),
                "v": self.pv.descriptor(ops.smem["v"].tile(0), "B")}

    def _stage(self, ops, desc, name, index):
        return desc[name].stage(index, ops.smem[name].buf.stage_bytes)

    # -- GEMM issue --------------------------------------------------------------------
    def issue_s(self, ops, desc, state: PipelineState) -> Accumulator:
        """Wait for K in slot ``state``; issue ``S = Q K^T`` as one commit group."""
        o = self.ops_desc
        ops.k_pipe.consumer_wait(state)
        s = self.qk.undef()
        for kt in range(o.d_tiles):
            kd = self._stage(ops, desc, "k", state.index * o.d_tiles + kt)
            s = self.qk.mma(s, desc["q"][kt], kd, accumulate=kt > 0, fence=kt == 0, commit=kt == o.d_tiles - 1)
        return s

    def issue_pv(self, ops, desc, acc: Accumulator, p: AFragment, state: PipelineState) -> Accumulator:
        """Wait for V in slot ``state``; issue ``O += P V`` as one commit group."""
        o = self.ops_desc
        ops.v_pipe.consumer_wait(state)
        for kt in range(o.pv_tiles):
            vd = self._stage(ops, desc, "v", state.index * o.pv_tiles + kt)
            acc = self.pv.mma(acc, p, vd, accumulate=True, k_tile=kt, fence=kt == 0, commit=kt == o.pv_tiles - 1)
        return acc

    # -- softmax of one block ----------------------------------------------------------
    def softmax_block(self, ctx: UnitContext, s: Accumulator, sm: SoftmaxState, j, masked: bool) -> tuple:
        """``(P as an A fragment, new softmax state, O's correction)`` of block ``j``."""
        bn = self.ops_desc.block_n
        n0 = j * bn
        r0, c0 = WgmmaFragment.thread_base(cir.thread_idx() % self.wg_threads)
        r0, c0 = V.i32(r0), V.i32(c0)

        def row(b, i):
            return ctx.row0 + r0 + WgmmaFragment.offset(b, i)[0]

        def col(b, i):
            return c0 + WgmmaFragment.offset(b, i)[1]
        hk = ctx.hooks

        def score(x, b, i):
            return hk.score(x, ctx.batch, ctx.head, row(b, i), n0 + col(b, i))

        def keep(b, i):
            return hk.keep(ctx.batch, ctx.head, row(b, i), n0 + col(b, i))
        s = self.softmax.scores(s, ctx.params, score if hk is not None else None)
        if masked:
            # one keep mask per row (a few integer instructions), then a bit test per element
            # without a band every row has the same mask (seqlen_k only): build it once
            halves = ROW_HALVES if self.mask.local else 1
            bits = [[self.mask.row_keep_bits(ctx.row0 + r0 + WgmmaFragment.offset(b, FRAG_PAIR * h)[0],
                                             ctx.seqlen_q, ctx.seqlen_k, n0, ctx.left, ctx.right, c0,
                                             s.regs // ROW_HALVES)
                     for h in range(halves)] for b in range(s.m_blocks)]
            bits = [bb * ROW_HALVES if len(bb) == 1 else bb for bb in bits]
            s = self.mask.apply_bits(s, bits, keep if hk is not None and hk.hooks.has_mask else None)
        p, sm, corr = self.softmax.update(s, sm, ctx.params.exp_scale)
        return AFragment.from_accumulator(p, self.ops_desc.dtype, self.p_order), sm, corr

    # -- ping-pong -----------------------------------------------------------------------
    def _turn_begin(self, wg) -> None:
        if self.pingpong:
            NamedBarrier(PINGPONG_BARRIER + wg, self.mma_warpgroups * self.wg_threads).sync()

    def _turn_end(self, wg, last: bool = False) -> None:
        if not self.pingpong:
            return
        bar = NamedBarrier(PINGPONG_BARRIER + (1 - wg), self.mma_warpgroups * self.wg_threads)
        if last:                  # warpgroup 1 opened with an extra arrival: it leaves out its last
            with cir.If(wg.eq(0)):
                bar.arrive()
        else:
            bar.arrive()

    # -- the loop over KV blocks ----------------------------------------------------------
    def run(self, ops, ctx: UnitContext, rng) -> tuple:
        """Every KV block of ``rng`` (a ``BlockRange`` of IR i32, ``count >= 1``) for this
        warpgroup; returns ``(O, softmax state)`` (O not yet divided by the row sums)."""
        desc = self.descriptors(ops, ctx.wg)
        o = self.pv.zero()
        sm = self.softmax.initial(o.m_blocks)
        st = PipelineState(self.ops_desc.stages)
        ranges = ((rng.u_hi, rng.n_max, True), (rng.u_lo, rng.u_hi, False), (rng.n_min, rng.u_lo, True))
        if not self.mask.left_edge:   # no left edge: [n_min, u_lo) is empty (u_lo = n_min), no loop for it
            ranges = ranges[:2]
        if not self.overlap:
            for lo, hi, masked in ranges:
                o, sm, st = self._simple_loop(ops, desc, ctx, rng, lo, hi, masked, o, sm, st)
            return o, sm
        if self.pingpong:          # warpgroup 0 takes the first turn
            with cir.If(ctx.wg.eq(1)):
                NamedBarrier(PINGPONG_BARRIER, self.mma_warpgroups * self.wg_threads).arrive()
        # the first block (the highest, at the diagonal): S and softmax alone
        j0 = rng.n_max - 1
        self._turn_begin(ctx.wg)
        s = self.issue_s(ops, desc, st)
        self._turn_end(ctx.wg)
        self.qk.wait(0)
        s = s.pinned()
        ops.k_pipe.consumer_release_warp(st)
        p, sm, _ = self.softmax_block(ctx, s, sm, rng.block(j0), True)
        # the loops carry one block count and K's phase bit; the slots derive from the count
        # (cheaper than carrying two ring states), the phases from the bit (_ring)
        count = V.i32(1)
        # the prologue took block j0: the three ranges below it
        u_hi, u_lo = _min(rng.u_hi, j0), _min(rng.u_lo, j0)
        for lo, hi, masked in ((u_hi, j0, True), (u_lo, u_hi, False), (rng.n_min, u_lo, True))[:len(ranges)]:
            o, p, sm, count = self._overlap_loop(ops, desc, ctx, rng, lo, hi, masked, o, p, sm, count)
        prev = self._state(count - 1)
        self._turn_begin(ctx.wg)
        o = self.issue_pv(ops, desc, o, p, prev)
        self._turn_end(ctx.wg, last=True)
        self.pv.wait(0)
        o = o.pinned()
        ops.v_pipe.consumer_release_warp(prev)
        return o, sm

    def _state(self, count) -> PipelineState:
        """The ring slot of the ``count``-th KV block (IR i32 >= 0). With a power-of-two ring
        the phase is left unmasked (``count >> log2 stages``): its only reader, the barrier
        wait, takes the low bit (``MBarriers.wait`` truncates to i1)."""
        st = self.ops_desc.stages
        if st & (st - 1):
            return PipelineState.at(st, count)
        c = V.i32(count).unsigned()
        return PipelineState(st, c & (st - 1), c >> (st.bit_length() - 1))

    def _ring(self, count, phase) -> tuple:
        """``(state of block count - 1, state of block count, phase bit of block count + 1)``
        for the ``count``-th KV block (IR i32 >= 0) whose phase bit ``phase`` (IR i32, exactly 0
        or 1) the loop carries. The barrier waits take the bit as it is (PTX ISA 9.7.13.15.16:
        ``phaseParity`` is 0 or 1; ptxas moves it to bit 31 with one ``SHF``); a bit extracted
        from the count cost a shift, a ``USGXT`` and a move out of the uniform registers per
        wait. The phase flips past the ring's last slot (forwards) and before its first
        (backwards)."""
        n = self.ops_desc.stages
        c = V.i32(count).unsigned()
        def slot(x):
            return x & (n - 1) if not n & (n - 1) else x % n

        def flip(cond):
            return phase ^ V.select(cond, V.i32(1), V.i32(0))
        i = slot(c)
        return PipelineState(n, slot(c - 1), flip(i.eq(0))), PipelineState(n, i, phase), flip(i.eq(n - 1))

    def _simple_loop(self, ops, desc, ctx, rng, lo, hi, masked, o, sm, st):
        n_sm = len(sm.carry())
        loop = cir.Loop(0, hi - lo, carry=o.structs + sm.carry() + st.carry(), counter="i32")
        for it, carried in loop:
            c = list(carried)
            o = Accumulator(c[:o.m_blocks], o.n)
            sm = SoftmaxState.from_carry(c[o.m_blocks:o.m_blocks + n_sm], o.m_blocks)
            st = PipelineState.from_carry(st.stages, c[o.m_blocks + n_sm:])
            j = rng.block(hi - 1 - V.i32(it), masked)
            s = self.issue_s(ops, desc, st)
            self.qk.wait(0)
            s = s.pinned()
            ops.k_pipe.consumer_release_warp(st)
            p, sm, corr = self.softmax_block(ctx, s, sm, j, masked)
            o = self.softmax.rescale(o, corr)
            o = self.issue_pv(ops, desc, o, p, st)
            self.pv.wait(0)
            o = o.pinned()
            ops.v_pipe.consumer_release_warp(st)
            loop.next(*(o.structs + sm.carry() + st.advance().carry()))
        c = list(loop.results)
        n_o = o.m_blocks
        return (Accumulator(c[:n_o], o.n), SoftmaxState.from_carry(c[n_o:n_o + n_sm], n_o),
                PipelineState.from_carry(st.stages, c[n_o + n_sm:]))

    def _overlap_loop(self, ops, desc, ctx, rng, lo, hi, masked, o, p, sm, count):
        n_o, n_sm, n_p = o.m_blocks, len(sm.carry()), sum(len(x) for blk in p.regs for x in blk)
        flat_p = [r for blk in p.regs for step in blk for r in step]
        # the loop carries K's phase bit beside the count (see _ring)
        phase = V.i32(self._state(count).phase) & 1
        loop = cir.Loop(0, hi - lo, carry=o.structs + flat_p + sm.carry() + [count, phase], counter="i32")

        def unpack(c):
            o2 = Accumulator(c[:n_o], o.n)
            regs = c[n_o:n_o + n_p]
            steps = len(p.regs[0])
            per = len(p.regs[0][0])
            p2 = AFragment([[regs[(b * steps + k) * per:(b * steps + k + 1) * per] for k in range(steps)]
                            for b in range(len(p.regs))], p.dtype, p.k_order)
            rest = c[n_o + n_p:]
            return o2, p2, SoftmaxState.from_carry(rest[:n_sm], n_o), V.i32(rest[n_sm]), V.i32(rest[n_sm + 1])
        for it, carried in loop:
            o, p, sm, count, phase = unpack(list(carried))
            prev, st, next_phase = self._ring(count, phase)
            j = rng.block(hi - 1 - V.i32(it), masked)
            self._turn_begin(ctx.wg)
            s = self.issue_s(ops, desc, st)
            o = self.issue_pv(ops, desc, o, p, prev)
            self._turn_end(ctx.wg)
            self.qk.wait(1)                   # S_j done; P V of the previous block may still run
            s = s.pinned()
            ops.k_pipe.consumer_release_warp(st)
            p, sm, corr = self.softmax_block(ctx, s, sm, j, masked)
            self.pv.wait(0)
            o = o.pinned()
            ops.v_pipe.consumer_release_warp(prev)
            o = self.softmax.rescale(o, corr)
            loop.next(*(o.structs + [r for blk in p.regs for step in blk for r in step] + sm.carry()
                        + [count + 1, next_phase]))
        return unpack(list(loop.results))[:4]


__all__ = ["AttentionMainloop", "UnitContext", "PINGPONG_BARRIER"]
