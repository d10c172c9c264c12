"""The MMA warpgroups' main loop of a FlashAttention-3-style attention backward (dK/dV kernel): the
CTA owns one KV block of 64 keys per MMA warpgroup (one or two: 64 or 128 keys, as FA3/FA4, each
warpgroup owning 64 keys x the whole head dimension) and visits every query block that attends it,
for each query head sharing its K/V head (GQA), accumulating dK and dV in registers and adding dQ
into an f32 workspace. Two warpgroups share each query block's Q, dO, LSE and D (loaded once) and
its dQ: both store their dS into one ``[64 x 128]`` tile, and warpgroup ``w`` computes the dQ
chunks ``w, w + 2, ..`` over all 128 keys (``dQ = dS K``, two 64-key k-tiles), so the block's dQ
is staged once and reduced once (one bulk reduction per 64 x 128 block, not one per warpgroup).

Per query block (64 queries; the accumulators are transposed, rows = keys, as FlashAttention-2/3
compute them, so that P^T and dS^T are register A operands):

1. ``S^T = K Q^T`` and ``dP^T = V dO^T`` (SS WGMMA, two commit groups);
2. while they run, each thread reads the log-sum-exp (times log2 e) and ``D = rowsum(dO * O)``
   of its 16 query columns from the slot's ``stats`` buffer (8 ``ld.shared.v2.f32`` each; the
   producer copied them from the preprocess's padded workspace, 0 past the sequence:
   :meth:`~cutedsl.collective.attention_bwd_operands.AttentionBwdOperands.stat_pair`);
3. ``P^T = exp2(S^T * scale * log2 e - LSE * log2 e)`` (masked entries ``-inf`` first: the band
   transposed -- key ``j`` keeps queries ``j - shift - right .. j - shift + left`` -- and keys
   past ``seqlen_k``);
4. ``dS^T = P^T * (dP^T - D)``;
5. ``dS`` to shared memory (``stmatrix``), then ``dV += P^T dO`` and ``dK += dS^T Q`` (WGMMA
   with A from registers) and ``dQ = dS K`` (SS) in 64-column chunks (with two warpgroups a
   named barrier over both first: each chunk reads both warpgroups' dS);
6. each chunk of ``dQ`` (unscaled) into shared memory in fragment order, then (named barrier
   ``DQ_FULL_BARRIER``, arrive only) the dQ writer warp of the producer warpgroup adds the whole
   block into its slab of the f32 workspace with one ``cp.reduce.async.bulk .add.f32`` and hands
   the staging buffer back once read (``DQ_EMPTY_BARRIER``) -- FlashAttention-3's dQ-writing
   producer warp, so no issuing thread, branch or spin sits in the MMA loop
   (:meth:`AttentionBwdMainloop.write_dq`, :class:`~cutedsl.collective.attention_bwd_dq.DqStaging`;
   rows past the sequence land in the slab's padding, which the postprocess never reads).
   Deterministic mode orders those additions:
   before adding to query block ``m`` of a (batch, head), KV block ``n``'s writer waits
   until the block's semaphore equals ``n - n_min(m)`` (its rank among the KV blocks that visit
   ``m``, ascending), and after ``cp.async.bulk.wait_group 0`` (the additions done) releases
   ``rank + 1`` (``ld.acquire.gpu`` spin, ``st.release.gpu``: PTX ISA memory consistency model,
   release/acquire patterns), so every element's f32 sum is formed in one order -- bit-identical
   across runs (FlashAttention-3's ``Deterministic`` dQ semaphore). It needs the KV blocks of a
   sequence resident in launch order.

Query blocks are visited ascending in the three ranges of a transposed
:class:`~cutedsl.collective.attention_mask.BlockRange` (masked, unmasked, masked); the loops
carry dK, dV and the pipeline state.
"""
from __future__ import annotations

import math

import attrs

from ..arch import DEFAULT
from ..atom.fragment_rows import ROW_HALVES
from ..atom.mma_traits import ATOM_M
from ..atom.operand_store import store_operand
from ..atom.sync import NamedBarrier, fence_proxy_async, wait_flag
from ..atom.tma import bulk_wait_group
from ..atom.wgmma import FRAG_PAIR, Accumulator, WarpgroupMMA, WgmmaFragment
from ..atom.wgmma_descriptor import Descriptor, descriptor_anchor
from ..atom.wgmma_rs import AFragment, WarpgroupMMARegA
from ..ir._lazy import lazy
from .attention_bwd_dq import DqStaging
from .attention_mask import AttentionMask, BlockRange
from .pipeline import PipelineState

cir = lazy("cutedsl.ir")
V = lazy("cutedsl.ir.values")
F = lazy("cutedsl.ir.fmath")

LOG2E = 1.0 / math.log(2.0)
#: named barrier of the MMA warpgroups (0 is the CTA's)
BWD_BARRIER = 1
#: named barriers of the dQ hand-off between the MMA warpgroups and the dQ writer warp: "staged"
#: and "staging buffer free" (past the epilogue's 3 + warpgroup)
DQ_FULL_BARRIER, DQ_EMPTY_BARRIER = 5, 6
#: the dQ writer: this warp of the producer warpgroup (warp 0's thread 0 loads)
DQ_WRITER_WARP = 1


@attrs.frozen
class BwdUnit:
    """One (KV block, query head) of the loop, IR values: ``batch``, ``head`` (the query head),
    ``n_block`` and ``n0`` (its first key within the sequence), ``seqlen_q``, ``seqlen_k``,
    ``left`` / ``right`` (band extents), ``dq_block0`` (the workspace slab of the unit's query
    block 0: :class:`~cutedsl.collective.attention_bwd_dq.DqStaging` layout, also the LSE / D
    slabs'), ``heads``, ``exp_scale`` (``softmax_scale * log2 e``), ``sem_base`` (deterministic:
    element of the head's first query-block semaphore), and the kernel's pointer parameters
    ``dq_accum`` (f32 workspace), ``semaphores``."""
    batch: object
    head: object
    n_block: object
    n0: object
    seqlen_q: object
    seqlen_k: object
    left: object
    right: object
    dq_block0: object
    heads: object
    exp_scale: object
    dq_accum: object
    sem_base: object = None
    semaphores: object = None


class AttentionBwdMainloop:
    """Consumer side for the one MMA warpgroup: ``operands`` (an
    :class:`~cutedsl.collective.attention_bwd_operands.AttentionBwdOperands`), ``local`` (a
    causal / sliding-window band), ``deterministic`` (ordered dQ additions)."""

    def __init__(self, operands, local: bool = False, deterministic: bool = False, warpgroup_threads: int = 128,
                 warp_threads: int | None = None):
        o = self.ops_desc = operands
        self.local, self.deterministic, self.wg_threads = bool(local), bool(deterministic), warpgroup_threads
        self.mask = AttentionMask(o.block_n, o.block_m, local)          # rows = keys: the band transposed
        self.fwd_mask = AttentionMask(o.block_m, o.block_n, local)      # rows = queries (KV blocks of a query block)
        self.s_mma = WarpgroupMMA(ATOM_M, o.block_m, o.dtype, b_major="K")
        self.kv_mma = WarpgroupMMARegA(ATOM_M, o.head_dim, o.dtype, b_major="MN")
        self.dq_mma = WarpgroupMMA(ATOM_M, o.traits.mn_box, o.dtype, b_major="MN")     # one 64-column chunk
        self.wgs = o.key_tiles                                          # MMA warpgroups
        self.bar = NamedBarrier(BWD_BARRIER, warpgroup_threads * self.wgs)
        self.warp_threads = warp_threads or DEFAULT.warp_threads
        handoff = warpgroup_threads * self.wgs + self.warp_threads     # the MMA threads and the dQ writer
        self.dq_full = NamedBarrier(DQ_FULL_BARRIER, handoff)
        self.dq_empty = NamedBarrier(DQ_EMPTY_BARRIER, handoff)
        self.dq = DqStaging.for_kernel(o.head_dim, o.block_m, o.dtype)

    # -- ranges ------------------------------------------------------------------------
    def query_blocks(self, n0, seqlen_q, seqlen_k, left, right) -> BlockRange:
        """Query blocks (ints on the host, IR i32 in a kernel) of the KV block at key ``n0``:
        ``[n_min, u_lo)`` masked, ``[u_lo, u_hi)`` unmasked, ``[u_hi, n_max)`` masked (the
        forward's ranges with queries and keys swapped). A ragged KV block (keys past
        ``seqlen_k``) is masked in every query block."""
        r = self.mask.block_range(n0, seqlen_k, seqlen_q, right, left)
        ragged = n0 + self.ops_desc.block_n > seqlen_k
        if isinstance(ragged, bool):
            u_hi = r.u_lo if ragged else r.u_hi
        else:
            u_hi = V.select(ragged, V.i32(r.u_lo), V.i32(r.u_hi))
        return BlockRange(r.n_min, r.n_max, r.u_lo, u_hi)

    def rank(self, n_block, m_block, seqlen_q, seqlen_k, left, right):
        """The KV block's place among those visiting query block ``m_block`` (ascending):
        ``n_block - n_min`` of the forward's range of that query block."""
        r = self.fwd_mask.block_range(m_block * self.ops_desc.block_m, seqlen_q, seqlen_k, left, right)
        return n_block - r.n_min

    # -- descriptors -----------------------------------------------------------------
    def descriptors(self, ops, w=0) -> dict:
        """Slot-0 descriptors of MMA warpgroup ``w`` (int or IR i32) as ``(layout, static bytes,
        extra bytes)`` to anchor in the loop (:meth:`_in_loop`): its 64 rows of K and V per
        k-tile (A), Q and dO (K-major B and the MN-major reading), K's boxes as MN-major B of
        its ``dQ = dS K`` chunks (``k_mn[j * wgs + h]``: chunk ``w + wgs j``, keys ``64 h ..``),
        and dS (A, per 64 keys); ``extra``: the warpgroup's offset (IR when ``w`` is)."""
        o, sm, t = self.ops_desc, ops.smem, self.ops_desc.traits
        kt, parts = range(o.d_tiles), range(self.wgs)
        rows = w * t.tile_bytes(t.k_tile)                   # the warpgroup's keys within a K/V box
        box = w * t.tile_bytes(o.block_n)                   # its first dQ chunk's K box

        def spec(mma, tile, role, extra=0):
            return mma.operand_layout(tile, role), tile.static, extra
        return {"k": [spec(self.s_mma, o.k_tile(sm["k"], 0, j), "A", rows) for j in kt],
                "v": [spec(self.s_mma, o.k_tile(sm["v"], 0, j), "A", rows) for j in kt],
                "q": spec(self.s_mma, o.k_tile(sm["q"]), "B"),
                "do": spec(self.s_mma, o.k_tile(sm["do"]), "B"),
                "q_mn": spec(self.kv_mma, o.mn_view(o.k_tile(sm["q"])), "B"),
                "do_mn": spec(self.kv_mma, o.mn_view(o.k_tile(sm["do"])), "B"),
                "k_mn": [spec(self.dq_mma, o.mn_view(o.k_tile(sm["k"], 0, self.wgs * j, h), 1), "B", box)
                         for j in range(o.d_tiles // self.wgs) for h in parts],
                "ds": [spec(self.dq_mma, o.ds_tile(sm["ds"], h), "A") for h in parts]}

    def _in_loop(self, ops, specs: dict) -> dict:
        """The descriptors to use inside one iteration: one
        :func:`~cutedsl.atom.wgmma_descriptor.descriptor_anchor` (the operand buffers' origin
        through an opaque ``mov.b64``) and each descriptor that plus a constant
        (:meth:`~cutedsl.atom.wgmma_descriptor.Descriptor.anchored`). Hoisted out of the loop,
        the ~20 per-k-step 64-bit descriptors were what ptxas spilled at head dim 128
        (docs/measurements.md); one opaque value per descriptor kept ~10 loop-invariant words
        in uniform registers; anchored, one register pair is live and each k-step's
        descriptor is one ``UIADD3.64``."""
        origin = ops.smem["k"].tile(0).origin_address()
        anchor = descriptor_anchor(origin, specs["q"][0])      # every layout here shares its high word

        def one(sp):
            layout, static, extra = sp
            return Descriptor.anchored(anchor, layout, static).offset(extra)
        return {n: [one(x) for x in v] if isinstance(v, list) else one(v) for n, v in specs.items()}

    def _at(self, ops, desc, name, stage, kt: int = 0):
        """``desc`` (slot 0's) moved to slot ``stage`` and k-tile ``kt`` of buffer ``name``."""
        t = self.ops_desc.traits
        return desc.stage(stage, ops.smem[name].buf.stage_bytes).offset(kt * t.tile_bytes(t.k_tile))

    # -- one query block ---------------------------------------------------------------
    def _stats(self, ops, stage, which: int, c0) -> dict:
        """``{column offset: value}`` of slot ``stage``'s LSE * log2 e (``which`` 0) or D (1) at
        this thread's query columns (``c0 + offset``): the fragment's columns come in adjacent
        pairs, one ``ld.shared.v2.f32`` each."""
        out = {}
        for i in range(self.s_mma.n // 2):
            off = WgmmaFragment.offset(0, i)[1]
            if off not in out and off % 2 == 0:
                out[off], out[off + 1] = self.ops_desc.stat_pair(ops, stage, which, c0 + off)
        return out

    def _mask(self, unit: BwdUnit, s: Accumulator, m0, rk, c0) -> Accumulator:
        """``s`` with masked entries ``-inf``; ``rk``: this thread's first key row within the
        CTA's KV block (its warpgroup's 64 w included). The band transposed (rows are keys,
        columns queries) as one keep mask per row (:meth:`AttentionMask.row_keep_bits`: counts
        taken at query 0, loop-invariant, moved by one subtraction per block), then one bit test
        and select per element; a key past ``seqlen_k`` keeps nothing (its mask is 0)."""
        bits = []
        for h in range(ROW_HALVES):
            key = unit.n0 + rk + WgmmaFragment.offset(0, FRAG_PAIR * h)[0]
            cols = V.select(key < unit.seqlen_k, V.i32(unit.seqlen_q), V.i32(0))
            bits.append(self.mask.row_keep_bits(key, unit.seqlen_k, cols, m0, unit.right, unit.left, c0,
                                          s.regs // ROW_HALVES))
        return self.mask.apply_bits(s, [bits])

    def _issue_t(self, ops, desc, a: str, b: str, st: PipelineState) -> Accumulator:
        """Issue ``A B^T`` (keys x queries) over the head dimension as one commit group: ``a``
        (K or V, loaded once) times ``b`` (Q or dO in slot ``st``)."""
        acc, n = self.s_mma.undef(), self.ops_desc.d_tiles
        for kt in range(n):
            acc = self.s_mma.mma(acc, desc[a][kt], self._at(ops, desc[b], b, st.index, kt), accumulate=kt > 0,
                                 fence=kt == 0, commit=kt == n - 1)
        return acc

    def step(self, ops, desc, unit: BwdUnit, m_block, st: PipelineState, dk, dv, masked: bool, w=0) -> tuple:
        """One query block for MMA warpgroup ``w`` (int or IR i32): returns the new ``(dk, dv)``."""
        o = self.ops_desc
        desc = self._in_loop(ops, desc)
        m0 = m_block * o.block_m
        wt = cir.thread_idx() % self.wg_threads
        c0 = V.i32(WgmmaFragment.thread_base(wt)[1])
        ops.qdo_pipe.consumer_wait(st)
        s = self._issue_t(ops, desc, "k", "q", st)            # S^T = K Q^T
        dp = self._issue_t(ops, desc, "v", "do", st)          # dP^T = V dO^T
        # LSE while the GEMMs run, D only once P is formed: fewer registers live beside dK and dV
        lse2 = self._stats(ops, st.index, 0, c0)
        self.s_mma.wait(1)
        s = s.pinned()
        if masked:
            # the fragment row of thread t of the MMA warpgroups together is 64 w + its row in
            # warpgroup w: the key row without w as one more live value
            rk = V.i32(WgmmaFragment.thread_base(cir.thread_idx() % (self.wg_threads * self.wgs))[0])
            s = self._mask(unit, s, m0, rk, c0)
        p = s.map_regs(lambda x, b, i: F.exp2(F.fma(x, unit.exp_scale, -lse2[WgmmaFragment.offset(b, i)[1]])))
        dsum = self._stats(ops, st.index, 1, c0)
        self.s_mma.wait(0)
        dp = dp.pinned()
        ds = dp.map_regs(lambda x, b, i: p.get(b, i) * (x - dsum[WgmmaFragment.offset(b, i)[1]]))
        pf, dsf = AFragment.from_accumulator(p, o.dtype), AFragment.from_accumulator(ds, o.dtype)
        # the dQ writer handed the staging buffer back (its bulk reduction read it), which it
        # does only after every MMA warp staged the previous dQ, i.e. waited for the previous
        # dQ GEMM: dS may be overwritten too
        self.dq_empty.sync()
        store_operand(ds, o.ds_tile(ops.smem["ds"], w), "B", warpgroup_thread=wt)
        fence_proxy_async()           # generic-proxy stmatrix before the async-proxy WGMMA read
        self.bar.sync()
        dv = self.kv_mma.mma(dv, pf, self._at(ops, desc["do_mn"], "do", st.index), fence=True, commit=False)
        dk = self.kv_mma.mma(dk, dsf, self._at(ops, desc["q_mn"], "q", st.index), fence=False, commit=True)
        # dQ = dS K in 64-column chunks (this warpgroup's: every wgs-th), each staged before the
        # next is issued: 32 registers live beside dK and dV instead of head_dim / 2
        for j in range(o.d_tiles // self.wgs):
            dq = self.dq_mma.undef()
            for h in range(self.wgs):        # K = the CTA's keys, 64 per k-tile
                dq = self.dq_mma.mma(dq, desc["ds"][h], desc["k_mn"][j * self.wgs + h], accumulate=h > 0,
                                     fence=j > 0 and h == 0, commit=h == self.wgs - 1)
            self.s_mma.wait(0)
            if j == 0:
                dk, dv = dk.pinned(), dv.pinned()
                ops.qdo_pipe.consumer_release_warp(st)
            self.dq.store(ops.smem, dq.pinned(), w + self.wgs * j, wt)
        fence_proxy_async()           # generic-proxy stores before the async-proxy bulk reduction reads them
        self.dq_full.arrive()         # to the dQ writer (write_dq), no wait
        return dk, dv

    def _send_dq(self, ops, unit: BwdUnit, m_block) -> None:
        """One thread: the staged dQ block into its workspace slab; deterministic mode waits
        for this KV block's turn at query block ``m_block`` first and, once the additions are
        done, hands the turn on (module docstring)."""
        if not self.deterministic:
            self.dq.send(ops.smem, unit.dq_accum, unit.dq_block0 + m_block)
            return
        sems = cir.GlobalPtr(unit.semaphores, "u32")
        idx = unit.sem_base + m_block
        rank = self.rank(unit.n_block, m_block, unit.seqlen_q, unit.seqlen_k, unit.left, unit.right)
        wait_flag(sems, idx, V.u32(rank))
        self.dq.send(ops.smem, unit.dq_accum, unit.dq_block0 + m_block)
        bulk_wait_group(0, read=False)      # the additions are performed before the release
        sems.store_release(idx, V.u32(rank + 1))

    def write_dq(self, ops, unit_of, group, rng: BlockRange, lane) -> None:
        """The dQ writer warp (FlashAttention-3's dQ-writing producer warp; all its lanes call
        this, ``lane``: IR i32): hands the empty staging buffer to the MMA warpgroups, then for
        every query block they visit (``unit_of``, ``group``, ``rng`` as :meth:`run`'s, same
        order) waits until they staged its dQ; lane 0 adds it into the workspace
        (:meth:`_send_dq`) and waits until the bulk reduction has read the buffer
        (``cp.async.bulk.wait_group.read 0``) before the warp hands it back. The semaphore spin
        of deterministic mode runs here, outside the MMA loop's control flow."""
        self.dq_empty.arrive()
        for g in cir.Loop(0, group):
            unit = unit_of(V.i32(g))
            for it in cir.Loop(0, rng.n_max - rng.n_min):
                self.dq_full.sync()
                with cir.If(lane.eq(0)):
                    self._send_dq(ops, unit, rng.n_min + V.i32(it))
                    bulk_wait_group(0, read=True)
                self.dq_empty.arrive()

    # -- the loops ---------------------------------------------------------------------
    def run(self, ops, unit_of, group, rng: BlockRange, w=0) -> tuple:
        """MMA warpgroup ``w`` (int or IR i32): all query blocks of ``rng`` (from :meth:`query_blocks`) for each
        of the ``group`` query heads (``unit_of(g)`` -> :class:`BwdUnit`); returns its ``(dK,
        dV)`` (keys ``64 w ..`` of the KV block) unscaled."""
        desc = self.descriptors(ops, w)
        dk, dv = self.kv_mma.zero(), self.kv_mma.zero()
        st = PipelineState(self.ops_desc.stages)
        nb = dk.m_blocks
        outer = cir.Loop(0, group, carry=dk.structs + dv.structs + st.carry())
        for g, c in outer:
            c = list(c)
            dk, dv = Accumulator(c[:nb], dk.n), Accumulator(c[nb:2 * nb], dv.n)
            st = PipelineState.from_carry(st.stages, c[2 * nb:])
            unit = unit_of(V.i32(g))
            for lo, hi, masked in ((rng.n_min, rng.u_lo, True), (rng.u_lo, rng.u_hi, False),
                                   (rng.u_hi, rng.n_max, True)):
                dk, dv, st = self._loop(ops, desc, unit, lo, hi, masked, dk, dv, st, w)
            outer.next(*(dk.structs + dv.structs + st.carry()))
        self.dq_empty.sync()        # the writer's last hand-back (its first came before any block)
        c = list(outer.results)
        return Accumulator(c[:nb], dk.n), Accumulator(c[nb:2 * nb], dv.n)

    def _loop(self, ops, desc, unit, lo, hi, masked, dk, dv, st, w):
        nb = dk.m_blocks
        loop = cir.Loop(0, hi - lo, carry=dk.structs + dv.structs + st.carry())
        for it, c in loop:
            c = list(c)
            dk, dv = Accumulator(c[:nb], dk.n), Accumulator(c[nb:2 * nb], dv.n)
            st = PipelineState.from_carry(st.stages, c[2 * nb:])
            dk, dv = self.step(ops, desc, unit, lo + V.i32(it), st, dk, dv, masked, w)
            loop.next(*(dk.structs + dv.structs + st.advance().carry()))
        c = list(loop.results)
        return (Accumulator(c[:nb], dk.n), Accumulator(c[nb:2 * nb], dv.n),
                PipelineState.from_carry(st.stages, c[2 * nb:]))


__all__ = ["AttentionBwdMainloop", "BwdUnit", "LOG2E", "BWD_BARRIER"]
