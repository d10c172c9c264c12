"""fp8 (e4m3) operands of the attention forward: Q and K as for 16-bit types, V transposed in
shared memory by the producer warps (FlashAttention-3's fp8 forward).

8-bit WGMMA reads both operands K-major (PTX ISA 9.7.15.5.1.2: the transpose immediates exist
for 16-bit types only), but V (seqlen_k x head_dim, head_dim contiguous) is ``O = P V``'s B
MN-major. So V takes two rings:

* ``v_raw``: TMA boxes ``[block_n x 128]`` (one per 128 head-dim bytes, unswizzled), full
  barrier = 1 arrival + the bytes, empty barrier = one arrival per transposer thread;
* ``v``: V^T as the WGMMA B operand, ``[head_dim x 128]`` per 128-key k-tile, K-major and
  128-byte swizzled -- what the consumers read, with the full barrier completed by the
  transposer threads' arrivals and the empty one by the consumer warps, as for K.

The transposer threads (producer warps other than the TMA one) move 4 keys x 4 head-dim bytes
per unit: four ``ld.shared.b32`` of V rows, a 4 x 4 byte transpose in eight ``prmt`` (PTX ISA
9.7.8.7), four ``st.shared.b32`` of V^T rows, then ``fence.proxy.async`` (their generic stores
are read by WGMMA, the async proxy) before arriving. The keys of each 32-key step are written in
the order of :data:`~cutedsl.atom.fp8_fragment.K_PERMUTATION`: V^T column ``l`` holds key
``K_PERMUTATION[l]``, the order in which the "permuted" P fragment holds them, so P needs no
shuffle (``AFragment.from_accumulator(s, "e4m3", "permuted")``).
"""
from __future__ import annotations

import attrs

from ..atom.fp8_fragment import K_PERMUTATION, STEP, prmt
from ..atom.mbarrier import MBarriers
from ..atom.sync import fence_proxy_async
from ..ir._lazy import lazy
from .attention_operands import AttentionOperands, BoundAttentionOperands
from .loader import OperandLoader, TmaOperand, TmaRing
from .pipeline import TmaPipeline

ir, llvm = lazy("mlir.ir"), lazy("mlir.dialects.llvm")
cir = lazy("cutedsl.ir")
V = lazy("cutedsl.ir.values")
S = lazy("cutedsl.ir.smem_tile")

RAW_BOX = 128           #: head-dim bytes per V box (one 128-byte row of a K-major 8-bit tile)
UNIT = 4                #: keys and head-dim bytes one transposer unit moves (4 x 4 bytes)
#: the keys (from 16h + 2q) behind V^T columns 16h + 4q .. 4q+3: the permuted P fragment's order
UNIT_KEYS = K_PERMUTATION[:UNIT]


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


def _lds(addr):
    i32 = ir.IntegerType.get_signless(32)
    return V.Scalar(llvm.load(i32, llvm.inttoptr(ir.Type.parse("!llvm.ptr<3>"), V.i64(addr))), signed=False)


def _sts(addr, value) -> None:
    llvm.store(value, llvm.inttoptr(ir.Type.parse("!llvm.ptr<3>"), V.i64(addr)))


def transpose4x4(words):
    """Four i32 rows of 4 bytes -> four i32 columns (byte ``i`` of input ``r`` becomes byte ``r``
    of output ``i``), eight ``prmt``."""
    a, b, c, d = words
    ab01, cd01 = prmt(a, b, V.i32(0x5140)), prmt(c, d, V.i32(0x5140))     # a0 b0 a1 b1 / c0 d0 c1 d1
    ab23, cd23 = prmt(a, b, V.i32(0x7362)), prmt(c, d, V.i32(0x7362))     # a2 b2 a3 b3 / c2 d2 c3 d3
    return [prmt(ab01, cd01, V.i32(0x5410)), prmt(ab01, cd01, V.i32(0x7632)),
            prmt(ab23, cd23, V.i32(0x5410)), prmt(ab23, cd23, V.i32(0x7632))]


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
        # V's boxes unswizzled: the transposers address its rows directly
        raw = TmaOperand("v_raw", t.storage, block_n, head_dim, box_cols=RAW_BOX, lead=len(self.lead),
                         param="v", tma_dtype=t.tma_dtype, tiles=self.raw_boxes)
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
        """Transposer thread ``thread`` (IR i32 in ``0..transposers-1``): V of slot ``state`` into
        V^T (keys in :data:`K_PERMUTATION` order per 32), then release the raw slot and commit
        the V^T slot."""
        t = self.traits
        ops.v_pipe.producer_acquire(state)
        ops.vraw_pipe.consumer_wait(state)
        s = V.i32(state.index).unsigned()
        raw0 = ops.smem["v_raw"].address(0) + V.i64(s * (self.raw_boxes * ops.smem["v_raw"].buf.stage_bytes))
        vt0 = ops.smem["v"].address(0) + V.i64(s * (self.pv_tiles * ops.smem["v"].buf.stage_bytes))
        raw_stage, vt_stage = ops.smem["v_raw"].buf.stage_bytes, ops.smem["v"].buf.stage_bytes
        d4s = self.head_dim // UNIT
        groups = STEP // UNIT                                   # 4-column groups of one 32-key step
        units = (self.block_n // STEP) * groups * d4s
        # a runtime loop (not unrolled): each unit's addresses are a few shifts and masks of the
        # counter, where an unrolled body would keep every unit's addresses live (spills at 40 registers)
        loop = cir.Loop(V.i32(thread), units, step=self.transposers, counter="i32")
        for u in loop:
            u = V.i32(u).unsigned()
            d4, rest = u % d4s, u // d4s
            g, step = rest % groups, rest // groups
            # V^T columns 16h + 4q .. +3 hold keys 16h + 2q + {0, 1, 8, 9} (K_PERMUTATION)
            half, quad = g // UNIT, g % UNIT
            key0 = step * STEP + 16 * half + 2 * quad
            box, col = d4 // (RAW_BOX // UNIT), (d4 % (RAW_BOX // UNIT)) * UNIT
            base = raw0 + V.i64(box * raw_stage + col)
            rows = [_lds(base + V.i64((key0 + k) * RAW_BOX)) for k in UNIT_KEYS]
            cols = transpose4x4(rows)
            key = step * STEP + UNIT * g                       # V^T column of the first key
            kt, kc = key // t.k_tile, key % t.k_tile
            for j in range(UNIT):
                off = S.swizzle_offset((d4 * UNIT + j) * t.k_box + kc, t.swizzle)
                _sts(vt0 + V.i64(kt * vt_stage + off), cols[j])
            loop.next()
        fence_proxy_async()
        ops.vraw_pipe.consumer_release(state)
        ops.v_pipe.producer_commit(state)


__all__ = ["AttentionOperandsFp8", "BoundFp8Operands", "TransposedPipeline", "transpose4x4", "RAW_BOX"]
