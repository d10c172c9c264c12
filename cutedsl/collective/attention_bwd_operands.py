"""The TMA operands of a FlashAttention-3-style attention backward (dK/dV kernel): K and V of the
CTA's KV block loaded once, Q and dO of every query block through one ring of stages, and the
shared tile dS goes through on its way from registers to the ``dQ`` GEMM.

Loaded through the :class:`~cutedsl.collective.loader.OperandLoader`: ring ``kv`` (K and V, once)
and ring ``qdo`` (Q and dO, ``stages`` slots with full/empty barriers). Every operand tile is
``64`` rows of the sequence by ``d`` (the head dimension) 16-bit elements, loaded as ``d / 64``
boxes ``[64 x 64]`` (128-byte swizzled, K-major as TMA writes them) stacked 8 KiB apart:

* ``k``, ``v``: A of ``S^T = K Q^T`` and ``dP^T = V dO^T``, one box per k-tile;
* ``q``, ``do``: B of those GEMMs, K-major;
* ``ds``: one tile, ``dS`` (query rows, key columns), stored from the ``dS^T`` accumulator by
  ``stmatrix`` (:func:`~cutedsl.atom.operand_store.store_operand` as a K-major B) and read back
  as the K-major A of ``dQ = dS K``;
* ``stats``: per slot, the query block's ``LSE * log2 e`` (64 f32) then ``D`` (64 f32), 512 bytes
  copied from the preprocess's padded workspace by one ``cp.async.bulk`` on the slot's full
  barrier beside Q and dO (FlashAttention-3/4 stage LSE and ``dPsum`` in shared memory the same
  way): the consumer reads them with ``ld.shared`` instead of per-thread global loads, bounds
  checks and address arithmetic (:meth:`AttentionBwdOperands.stat_pair`);
* barriers ``kv_full`` (1), ``qdo_full`` / ``qdo_empty`` (``stages`` each).

Two reads of the same bytes: ``dV += P^T dO``, ``dK += dS^T Q`` and ``dQ = dS K`` take dO, Q and
K as an MN-major B (K = the sequence, N = the head dimension). A 64-row K-major tile ``[64 x
64]`` is byte for byte the MN-major box ``[64 (K) x 64 (N)]`` of the same matrix, and an
MN-major B of N = ``d`` is ``d / 64`` such boxes 8 KiB apart (LBO, PTX ISA 9.7.15.5.1 "Matrix
Descriptor Format") -- exactly how the K-major tiles lie. So one load serves both GEMMs
(FlashAttention-3 reads its sQ / sdO / sK through transposed CuTe layouts the same way);
:meth:`AttentionBwdOperands.mn_view` makes the second reading a tile whose declared layout the
descriptor checks accept. It holds because the sequence side of a tile is 64 rows, one k-tile.
"""
from __future__ import annotations

import attrs

from ..atom.mma_traits import mma_traits
from ..atom.tma import BULK_ALIGN
from .attention_operands import AttentionOperands
from .loader import OperandLoader, TmaOperand, TmaRing
from .pipeline import PipelineState

OPERANDS = ("q", "k", "v", "do")
STATS = "stats"         #: the shared buffer of a query block's LSE * log2 e and D
STAT_ROWS = 2           #: LSE * log2 e, then D
F32_BYTES = 4
MAX_KEY_TILES = 2       #: 64-key tiles per KV block: one per MMA warpgroup


@attrs.frozen
class BoundAttentionBwdOperands:
    """Inside a kernel body: bound shared memory, the loader's bound TMA atoms, the ``kv``
    pipeline (load once) and the ``qdo`` pipeline (a ring)."""
    smem: object
    bound: object
    kv_pipe: object
    qdo_pipe: object


class AttentionBwdOperands:
    """``head_dim`` (a multiple of 64), ``block_m`` query rows (one k-tile, 64) and ``block_n``
    keys (64, or 128 for two MMA warpgroups of 64 keys each: K and V are then ``[128 x 64]``
    boxes, warpgroup ``w``'s rows ``64 w ..`` one 8 KiB swizzled tile into each), ``stages`` of
    the Q/dO ring, ``dtype`` f16/bf16, ``varlen`` (rank-3 maps over packed sequences),
    ``consumer_warps`` (warps releasing each Q/dO stage). Raises ``ValueError`` for tiles the
    double reading (module docstring) does not cover."""

    def __init__(self, head_dim: int, block_m: int, block_n: int, stages: int, dtype: str, varlen: bool,
                 consumer_warps: int):
        self.traits = t = mma_traits(dtype)
        keys = [t.k_tile * n for n in range(1, MAX_KEY_TILES + 1)]
        if block_m != t.k_tile or block_n not in keys or head_dim % t.mn_box:
            raise ValueError(f"attention backward tiles are {t.k_tile} queries (one k-tile) x "
                             f"{' or '.join(map(str, keys))} keys over a head_dim multiple of {t.mn_box}; got "
                             f"block_m {block_m}, block_n {block_n}, head_dim {head_dim}")
        self.head_dim, self.block_m, self.block_n, self.stages = head_dim, block_m, block_n, stages
        self.dtype, self.varlen, self.consumer_warps = dtype, bool(varlen), consumer_warps
        self.d_tiles = head_dim // t.k_tile
        self.key_tiles = block_n // t.k_tile          #: 64-key tiles of the KV block (MMA warpgroups)
        self.stat_elems = STAT_ROWS * block_m         #: f32 per query block in the stats workspace
        self.stat_bytes = self.stat_elems * F32_BYTES

        def op(name, rows):
            return TmaOperand(name, t.storage, rows=rows, cols=head_dim, box_cols=t.k_box, swizzle=t.swizzle,
                              major="K", lead=1 if self.varlen else 2, tma_dtype=t.tma_dtype)
        self.loader = OperandLoader(TmaRing("kv", (op("k", block_n), op("v", block_n))),
                                    TmaRing("qdo", (op("q", block_m), op("do", block_m)), stages))

    def tensor_maps(self) -> list:
        specs = {s.param: s for s in self.loader.tensor_maps()}
        return [specs[n] for n in OPERANDS]

    map_extent = staticmethod(AttentionOperands.map_extent)

    def plan(self, plan) -> None:
        t = self.traits
        self.loader.plan(plan)
        plan.buffer("ds", (self.key_tiles * self.block_m, t.k_box), t.storage, 1, swizzle=t.swizzle, major="K")
        plan.buffer(STATS, (self.stat_elems,), "f32", self.stages, align=BULK_ALIGN)

    def k_tile(self, buf, stage=0, kt: int = 0, part: int = 0):
        """The K-major ``[64 x 64]`` tile of head-dimension columns ``64 kt ..`` and sequence rows
        ``64 part ..`` of slot ``stage`` of operand buffer ``buf`` (a bound buffer: ``smem["q"]``;
        K and V of a 128-key block have two parts per box, Q and dO one)."""
        t = self.traits
        rows = buf.buf.shape[0] // self.d_tiles          # rows of one box: the buffer stacks d / 64 of them
        return buf.tile(stage).sub(kt * t.tile_bytes(rows) + part * t.tile_bytes(t.k_tile), (t.k_tile, t.k_box))

    def ds_tile(self, ds, part: int = 0):
        """The K-major ``[64 x 64]`` tile of dS holding keys ``64 part ..`` (``ds``: the bound
        buffer ``smem["ds"]``)."""
        t = self.traits
        return ds.tile(0).sub(part * t.tile_bytes(t.k_tile), (t.k_tile, t.k_box))

    def mn_view(self, tile, tiles: int | None = None):
        """``tiles`` (default ``d / 64``) K-major boxes from ``tile`` (a ``[64 x 64]`` K-major
        ``SmemTile``) read as one MN-major B operand ``[64 tiles x 64]`` (K = the 64 sequence
        rows, N = ``64 tiles`` head-dimension columns): the same bytes (module docstring), a
        tile whose buffer declares ``major="MN"``."""
        from ..ir.smem_tile import SmemTile
        t = self.traits
        shape = ((tiles or self.d_tiles) * t.mn_box, t.mn_box)
        buf = attrs.evolve(tile.buffer, major="MN", shape=shape)
        return SmemTile(tile._bound, buf, tile.offset, shape, None, tile.static)

    # -- IR ------------------------------------------------------------------------
    def bind(self, smem, args, leader) -> BoundAttentionBwdOperands:
        """TMA atoms and pipelines, barriers initialised where ``leader`` holds (the caller
        follows with a CTA barrier)."""
        kv = self.loader.pipeline(smem, "kv")
        qdo = self.loader.pipeline(smem, "qdo", consumers=self.consumer_warps, extra_tx=self.stat_bytes)
        kv.init(leader)
        qdo.init(leader)
        return BoundAttentionBwdOperands(smem, self.loader.bind(smem, args), kv, qdo)

    @staticmethod
    def prefetch(ops: BoundAttentionBwdOperands, predicate=None) -> None:
        for atom in ops.bound.atoms.values():
            atom.prefetch(predicate=predicate)

    def load_kv(self, ops: BoundAttentionBwdOperands, lead: tuple, row0) -> None:
        """Producer thread: K and V of the KV block at key row ``row0`` of the map slice ``lead``."""
        self.loader.fill(ops.bound, ops.kv_pipe, PipelineState(1), "kv", {"k": (row0, 0), "v": (row0, 0)},
                         {"k": lead, "v": lead})

    def wait_kv(self, ops: BoundAttentionBwdOperands) -> None:
        ops.kv_pipe.consumer_wait(PipelineState(1))

    def load_qdo(self, ops: BoundAttentionBwdOperands, state, lead: tuple, row0, stats, slab) -> None:
        """Producer thread: Q and dO of the query block at row ``row0`` into slot ``state`` of
        the ring (after waiting for the slot's release), and the block's LSE and D: ``stat_elems``
        f32 at element ``slab * stat_elems`` of ``stats`` (the f32 pointer parameter; ``slab``
        an IR integer), on the same full barrier."""
        from ..atom.tma import bulk_load
        from ..ir import GlobalPtr, i64
        self.loader.fill(ops.bound, ops.qdo_pipe, state, "qdo", {"q": (row0, 0), "do": (row0, 0)},
                         {"q": lead, "do": lead})
        src = GlobalPtr(stats, "f32").address(i64(slab) * self.stat_elems)
        bulk_load(ops.smem[STATS].address(state.index), src, self.stat_bytes, ops.qdo_pipe.full, state.index)

    def stat_pair(self, ops: BoundAttentionBwdOperands, stage, which: int, col) -> tuple:
        """Consumer: ``(x[col], x[col + 1])`` (IR f32) of slot ``stage``'s ``LSE * log2 e``
        (``which`` 0) or ``D`` (1), ``col`` an even query column of the block (IR i32): one
        ``ld.shared.v2.f32``. Valid between the slot's full-barrier wait and its release."""
        from mlir import ir
        from mlir.dialects import llvm
        from ..atom.cluster import shared_pointer
        from ..ir import Scalar, i32
        addr = i32(ops.smem[STATS].address(stage)) + (i32(which * self.block_m) + col) * F32_BYTES
        f32 = ir.F32Type.get()
        vec = llvm.load(ir.VectorType.get([2], f32), shared_pointer(addr), alignment=2 * F32_BYTES)
        return tuple(Scalar(llvm.extractelement(vec, i32(j))) for j in range(2))


__all__ = ["AttentionBwdOperands", "BoundAttentionBwdOperands", "OPERANDS", "STATS"]
