"""fp8 (e4m3) operands of the attention forward: Q and K as for 16-bit types, V transposed in
shared memory by the producer warps (FlashAttention-3's fp8 forward).

8-bit WGMMA reads both operands K-major (PTX ISA 9.7.15.5.1.2: the transpose immediates exist
for 16-bit types only), but V (seqlen_k x head_dim, head_dim contiguous) is ``O = P V``'s B
MN-major. So V takes two rings:

* ``v_raw``: TMA boxes ``[block_n x 128]`` (one per 128 head-dim bytes, 128-byte swizzled so that
  eight keys' rows at one head-dim chunk lie in eight different bank groups), full barrier =
  1 arrival + the bytes, empty barrier = one arrival per transposer thread;
* ``v``: V^T as the WGMMA B operand, ``[head_dim x 128]`` per 128-key k-tile, K-major and
  128-byte swizzled -- what the consumers read, with the full barrier completed by the
  transposer threads' arrivals and the empty one by the consumer warps, as for K.

The transposer warps (producer warps other than the TMA one) move one unit of 16 keys x 32
head-dim bytes per warp instruction triple (FlashAttention-3's fp8 idea: matrix loads and stores
around byte permutes):

1. ``ldmatrix.x4.trans`` of V (PTX ISA "Warp-level matrix load instruction: ldmatrix", read as
   8 x 8 matrices of byte pairs): matrix ``i`` = keys ``8 (i % 2) ..+7`` x head-dim chunk ``i // 2``;
   lane ``l`` (``c = l // 4``, ``q = l % 4``) gets, per matrix, keys ``2q, 2q+1`` x head-dim bytes
   ``2c, 2c+1``;
2. two ``prmt`` per matrix pair (PTX ISA 9.7.8.7): bytes ``0, 2, 4, 6`` / ``1, 3, 5, 7`` of
   (keys ``2q, 2q+1``, keys ``8+2q, 9+2q``) are head-dim byte ``2c`` / ``2c+1`` of keys
   ``2q + {0, 1, 8, 9}`` -- V^T columns ``4q .. 4q+3`` in the permuted P order;
3. ``stmatrix.x4`` (PTX ISA "Warp-level matrix store instruction: stmatrix"): lane ``l``'s word
   goes to row ``c`` of its matrix, bytes ``4q..``; the row a lane addresses is V^T row
   ``2c + p``. Lanes ``c >= 4`` swap which word is which parity ``p`` (a per-lane ``prmt``
   selector, no extra instruction) so one matrix's eight rows cover all eight residues mod 8:
   with V^T's 128-byte swizzle their chunks are then eight different bank groups.

Then ``fence.proxy.async`` (the generic-proxy stores are read by WGMMA, the async proxy) before
arriving. The keys of each 32-key step are written in the order of
:data:`~cutedsl.atom.fp8_fragment.K_PERMUTATION`: V^T column ``l`` holds key
``K_PERMUTATION[l]``, the order in which the "permuted" P fragment holds them, so P needs no
shuffle (``AFragment.from_accumulator(s, "e4m3", "permuted")``).
"""
from __future__ import annotations

import attrs

from ..atom.stmatrix import ldmatrix, stmatrix
from ..atom.fp8_fragment import K_PERMUTATION, prmt
from ..atom.mbarrier import MBarriers
from ..atom.sync import fence_proxy_async
from ..ir._lazy import lazy
from .attention_operands import AttentionOperands, BoundAttentionOperands
from .loader import OperandLoader, TmaOperand, TmaRing
from .pipeline import TmaPipeline

cir = lazy("cutedsl.ir")
V = lazy("cutedsl.ir.values")

RAW_BOX = 128           #: head-dim bytes per V box (one 128-byte row of a K-major 8-bit tile)
CHUNK = 16              #: bytes of one swizzle chunk (one ldmatrix / stmatrix row)
CHUNKS = RAW_BOX // CHUNK
UNIT_KEYS = 16          #: keys of one transposer unit (V^T: one 16-byte chunk of a row)
UNIT_BYTES = 32         #: head-dim bytes of one unit (V: two 16-byte chunks of a row)
#: ``prmt`` selectors: head-dim byte 2c (even) / 2c+1 (odd) of keys 2q + {0, 1, 8, 9}
EVEN, ODD = 0x6420, 0x7531


class _UnitLanes:
    """This lane's (IR i32 ``lane``) constants of a transposer unit, byte offsets within the unit:
    ``raw_row`` / ``raw_chunk`` / ``raw_xor``: the V row (key) it addresses for ``ldmatrix``
    (matrix ``lane // 8``, row ``lane % 8``), the matrix's head-dim chunk, and the swizzle's xor
    (the key's row in its 8-row atom, in bytes); ``vt_row`` / ``vt_xor``: the V^T row (head-dim
    byte) it addresses for ``stmatrix`` and that row's swizzle xor; ``sel``: the ``prmt``
    selectors of words 0 and 1 (even and odd head-dim byte, swapped for lanes ``c = lane // 4
    >= 4``: see the module)."""

    def __init__(self, lane):
        lane = V.i32(lane).unsigned()
        mat, row = lane // 8, lane % 8
        self.raw_row = (8 * (mat % 2) + row) * RAW_BOX
        self.raw_chunk = mat // 2
        self.raw_xor = row * CHUNK
        # matrix `mat` row `row` holds V^T row 16 (mat // 2) + 2 row + parity, the parity swapped
        # for rows >= 4 (the data lane c = row's words, see sel)
        high = (row // 4).eq(1)
        parity = V.select(high, V.u32(1), V.u32(0)) ^ (mat % 2)
        d = 16 * (mat // 2) + 2 * row + parity
        self.vt_row = d * RAW_BOX
        self.vt_xor = (d % 8) * CHUNK
        swap = (lane // 16).eq(1)                       # data lane c = lane // 4 >= 4
        self.sel = (V.select(swap, V.u32(ODD), V.u32(EVEN)), V.select(swap, V.u32(EVEN), V.u32(ODD)))


@attrs.frozen
class BoundFp8Operands(BoundAttentionOperands):
    """:class:`BoundAttentionOperands` plus the raw V ring (``v_pipe`` is V^T's)."""
    vraw_pipe: object = None


class TransposedPipeline(TmaPipeline):
    """A ring filled by threads instead of TMA: the full barrier expects ``producers``
    arrivals (each after its stores and ``fence.proxy.async``) and no transaction bytes."""

    def __init__(self, full, producers: int, empty, consumers: int):
        super().__init__(full, 0, empty, consumers)
        self.producers = producers

    def init(self, leader) -> None:
        self.full.init_all(self.producers, predicate=leader)
        self.empty.init_all(self.consumers, predicate=leader)
        MBarriers.fence_init()

    def producer_commit(self, state) -> None:
        """Every producer thread: its stores are done (after ``fence.proxy.async``)."""
        self.full.arrive(state.index)


class AttentionOperandsFp8(AttentionOperands):
    """e4m3 Q, K, V of the forward (see the module): ``head_dim`` a multiple of 128 (the 8-bit
    K tile; smaller head dims are padded by TMA's zero fill), ``block_n`` a multiple of 128,
    ``transposers`` producer threads transposing V. The loader's rings are ``q``, ``k`` and
    ``vraw`` (operand ``v_raw`` over the ``v`` tensor map: one unswizzled ``[block_n x 128]``
    tile per box); V^T's buffer ``v`` and its barriers are this collective's own."""

    def __init__(self, head_dim: int, block_m: int, block_n: int, stages: int, dtype: str, varlen: bool,
                 consumer_warps: int, transposers: int):
        super().__init__(head_dim, block_m, block_n, stages, dtype, varlen, consumer_warps)
        t = self.traits
        if head_dim % t.k_tile or block_n % t.k_tile:
            raise ValueError(f"fp8 attention operands: head_dim {head_dim} and block_n {block_n} must be multiples "
                             f"of the {t.k_tile}-element K tile")
        self.transposers = transposers
        self.raw_boxes = head_dim // RAW_BOX
        q, k = (self.loader.rings[n] for n in ("q", "k"))
        # V's boxes 128-byte swizzled: ldmatrix's eight rows (keys) of one chunk hit eight bank groups
        raw = TmaOperand("v_raw", t.storage, block_n, head_dim, box_cols=RAW_BOX, swizzle=128,
                         lead=len(self.lead), param="v", tma_dtype=t.tma_dtype, tiles=self.raw_boxes)
        self.loader = OperandLoader(q, k, TmaRing("vraw", (raw,), stages))

    @property
    def v_bytes(self) -> int:
        return self.loader.rings["vraw"].tx_bytes

    def plan(self, plan) -> None:
        """The loader's rings, then V^T: ``stages x pv_tiles`` K-major tiles ``[head_dim x k_box]``
        and its ``v_full`` / ``v_empty`` barriers."""
        t = self.traits
        self.loader.plan(plan)
        plan.buffer("v", (self.head_dim, t.k_box), t.storage, self.stages * self.pv_tiles, swizzle=t.swizzle,
                    major="K")
        plan.barriers("v_full", self.stages)
        plan.barriers("v_empty", self.stages)

    def bind(self, smem, args, leader, init: bool = True) -> BoundFp8Operands:
        """As :meth:`AttentionOperands.bind`, with the raw V ring (released by the transposers) and
        V^T's :class:`TransposedPipeline` (filled by them)."""
        ld = self.loader
        q = ld.pipeline(smem, "q")
        k = ld.pipeline(smem, "k", consumers=self.consumer_warps)
        vraw = ld.pipeline(smem, "vraw", consumers=self.transposers)
        v = TransposedPipeline(MBarriers(smem.barriers("v_full"), self.stages), self.transposers,
                               MBarriers(smem.barriers("v_empty"), self.stages), self.consumer_warps)
        if init:
            q.full.init_all(1, predicate=leader)
            for p in (k, vraw, v):
                p.init(leader)
        return BoundFp8Operands(smem, ld.bind(smem, args), q, k, v, vraw)

    def load_kv(self, ops: BoundFp8Operands, state, lead: tuple, row0) -> None:
        """Producer thread: K into its ring, V's ``[block_n x 128]`` boxes into the raw ring."""
        self.loader.fill(ops.bound, ops.k_pipe, state, "k", {"k": (row0, 0)}, {"k": lead})
        self.loader.fill(ops.bound, ops.vraw_pipe, state, "vraw", {"v_raw": (row0, 0)}, {"v_raw": lead})

    def transpose(self, ops: BoundFp8Operands, state, thread) -> None:
        """Transposer thread ``thread`` (IR i32 in ``0..transposers-1``, whole warps): V of slot
        ``state`` into V^T (keys in :data:`K_PERMUTATION` order per 32), then release the raw slot
        and commit the V^T slot. Per unit (16 keys x 32 head-dim bytes, one warp): one
        ``ldmatrix.x4.trans``, four ``prmt``, one ``stmatrix.x4`` (see :class:`_UnitLanes`)."""
        ops.v_pipe.producer_acquire(state)
        ops.vraw_pipe.consumer_wait(state)
        raw, vt = ops.smem["v_raw"], ops.smem["v"]
        raw_stage, vt_stage = raw.buf.stage_bytes, vt.buf.stage_bytes
        s = V.i32(state.index).unsigned()
        warp, lanes = thread // 32, _UnitLanes(thread % 32)
        # 32-bit shared addresses of this lane's rows in unit 0 of the slot
        raw0 = V.u32(raw.address(0)) + s * (self.raw_boxes * raw_stage) + lanes.raw_row
        vt0 = V.u32(vt.address(0)) + s * (self.pv_tiles * vt_stage) + lanes.vt_row
        key_chunks = self.block_n // UNIT_KEYS
        units = key_chunks * (self.head_dim // UNIT_BYTES)
        # a runtime loop over the warp's units (unit u: key chunk u % key_chunks, head-dim bytes
        # 32 (u // key_chunks) ..): its addresses are a few shifts, ands and xors of u
        loop = cir.Loop(warp, units, step=self.transposers // 32, counter="i32")
        for u in loop:
            u = V.i32(u).unsigned()
            kc, dp = u % key_chunks, u // key_chunks
            # raw V: row key 16 kc + lane's, 16-byte chunk 2 dp + lane's of box (2 dp + ..) // 8, the
            # chunk xor-ed with the key's row in its 8-row swizzle atom (hoisted as raw_xor)
            dch = 2 * dp + lanes.raw_chunk
            a = (raw0 + kc * (UNIT_KEYS * RAW_BOX) + (dch // CHUNKS) * raw_stage
                 + (((dch % CHUNKS) * CHUNK) ^ lanes.raw_xor))
            r = ldmatrix(a, 4, trans=True)
            w = [prmt(r[0], r[1], lanes.sel[0]), prmt(r[0], r[1], lanes.sel[1]),
                 prmt(r[2], r[3], lanes.sel[0]), prmt(r[2], r[3], lanes.sel[1])]
            # V^T: row 32 dp + lane's, chunk kc of key tile kc // 8, xor-ed with the row's (vt_xor)
            b = (vt0 + dp * (UNIT_BYTES * self.traits.k_box) + (kc // CHUNKS) * vt_stage
                 + (((kc % CHUNKS) * CHUNK) ^ lanes.vt_xor))
            stmatrix(b, w)
            loop.next()
        fence_proxy_async()
        ops.vraw_pipe.consumer_release(state)
        ops.v_pipe.producer_commit(state)


__all__ = ["AttentionOperandsFp8", "BoundFp8Operands", "TransposedPipeline", "RAW_BOX"]
