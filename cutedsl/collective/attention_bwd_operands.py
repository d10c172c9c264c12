"""The TMA operands of a FlashAttention-3-style attention backward (dK/dV kernel): K and V of the
CTA's KV block loaded once, Q and dO of every query block through one ring of stages, and the
shared tile dS goes through on its way from registers to the ``dQ`` GEMM.

Every tile is ``[64 rows x 64]`` 16-bit elements, 128-byte swizzled, K-major as TMA writes it
(rows = the sequence, 128-byte rows along the head dimension); a head dimension of ``d`` is ``d
/ 64`` such tiles back to back (8 KiB apart):

* ``k``, ``v``: ``d / 64`` tiles (A of ``S^T = K Q^T`` and ``dP^T = V dO^T``);
* ``q``, ``do``: ``stages x d / 64`` tiles (B of those GEMMs, K-major);
* ``ds``: one tile, ``dS`` (query rows, key columns), stored from the ``dS^T`` accumulator by
  ``stmatrix`` (:func:`~cutedsl.atom.operand_store.store_operand` as a K-major B) and read back
  as the K-major A of ``dQ = dS K``;
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

from ..atom.mbarrier import MBarriers
from ..atom.mma_traits import mma_traits
from ..atom.tma import TmaCopy
from ..compiler.artifact import TensorMapSpec
from .attention_operands import AttentionOperands
from .pipeline import TmaPipeline

OPERANDS = ("q", "k", "v", "do")


@attrs.frozen
class BoundAttentionBwdOperands:
    """Inside a kernel body: bound shared memory, the four ``TmaCopy`` atoms, K/V's barrier and
    the Q/dO pipeline."""
    smem: object
    tma: dict
    kv_bar: object
    qdo_pipe: object


class AttentionBwdOperands:
    """``head_dim`` (a multiple of 64), ``block_m`` query rows and ``block_n`` keys (both one
    k-tile, 64), ``stages`` of the Q/dO ring, ``dtype`` f16/bf16, ``varlen`` (rank-3 maps over
    packed sequences), ``consumer_warps`` (warps releasing each Q/dO stage). Raises
    ``ValueError`` for tiles the double reading (module docstring) does not cover."""

    def __init__(self, head_dim: int, block_m: int, block_n: int, stages: int, dtype: str, varlen: bool,
                 consumer_warps: int):
        self.traits = t = mma_traits(dtype)
        if block_m != t.k_tile or block_n != t.k_tile or head_dim % t.mn_box:
            raise ValueError(f"attention backward tiles are {t.k_tile} x {t.k_tile} (block_m = block_n = one "
                             f"k-tile) over a head_dim multiple of {t.mn_box}; got block_m {block_m}, block_n "
                             f"{block_n}, head_dim {head_dim}")
        self.head_dim, self.block_m, self.block_n, self.stages = head_dim, block_m, block_n, stages
        self.dtype, self.varlen, self.consumer_warps = dtype, bool(varlen), consumer_warps
        self.d_tiles = head_dim // t.k_tile

    @property
    def lead(self) -> tuple:
        return (1,) if self.varlen else (1, 1)

    def tensor_maps(self) -> list:
        t = self.traits
        rows = {"q": self.block_m, "do": self.block_m, "k": self.block_n, "v": self.block_n}
        return [TensorMapSpec(n, t.tma_dtype, self.lead + (rows[n], t.k_box), swizzle=t.swizzle) for n in OPERANDS]

    map_extent = staticmethod(AttentionOperands.map_extent)

    def plan(self, plan) -> None:
        t, sw = self.traits, self.traits.swizzle
        for n, rows, count in (("k", self.block_n, self.d_tiles), ("v", self.block_n, self.d_tiles),
                               ("q", self.block_m, self.stages * self.d_tiles),
                               ("do", self.block_m, self.stages * self.d_tiles), ("ds", self.block_m, 1)):
            plan.buffer(n, (rows, t.k_box), t.storage, count, swizzle=sw, major="K")
        plan.barriers("kv_full", 1)
        plan.barriers("qdo_full", self.stages)
        plan.barriers("qdo_empty", self.stages)

    @property
    def kv_bytes(self) -> int:
        return 2 * self.d_tiles * self.traits.tile_bytes(self.block_n)

    @property
    def qdo_bytes(self) -> int:
        return 2 * self.d_tiles * self.traits.tile_bytes(self.block_m)

    def mn_view(self, tile, tiles: int | None = None):
        """``tiles`` (default ``d / 64``) K-major tiles from ``tile`` (a ``[64 x 64]`` K-major
        ``SmemTile``) read as one MN-major B operand ``[64 tiles x 64]`` (K = the 64 sequence
        rows, N = ``64 tiles`` head-dimension columns): the same bytes (module docstring), a
        tile whose buffer declares ``major="MN"``."""
        from ..ir.smem_tile import SmemTile
        t = self.traits
        shape = ((tiles or self.d_tiles) * t.mn_box, t.mn_box)
        buf = attrs.evolve(tile.buffer, major="MN", shape=shape)
        return SmemTile(tile._bound, buf, tile.offset, shape, None)

    # -- IR ------------------------------------------------------------------------
    def bind(self, smem, args, leader) -> BoundAttentionBwdOperands:
        """Tensor-map atoms and barriers, initialised where ``leader`` holds (the caller
        follows with a CTA barrier)."""
        specs = {s.param: s for s in self.tensor_maps()}
        tma = {n: TmaCopy(specs[n], getattr(args, n)) for n in OPERANDS}
        kv_bar = MBarriers(smem.barriers("kv_full"), 1)
        pipe = TmaPipeline(MBarriers(smem.barriers("qdo_full"), self.stages), self.qdo_bytes,
                           MBarriers(smem.barriers("qdo_empty"), self.stages), consumers=self.consumer_warps)
        kv_bar.init(0, 1, predicate=leader)
        pipe.init(leader)
        return BoundAttentionBwdOperands(smem, tma, kv_bar, pipe)

    @staticmethod
    def prefetch(ops: BoundAttentionBwdOperands, predicate=None) -> None:
        for n in OPERANDS:
            ops.tma[n].prefetch(predicate=predicate)

    def _rows(self, ops, name, first_tile, bar, index, lead, row0) -> None:
        for kt in range(self.d_tiles):
            ops.tma[name].load(ops.smem[name].tile(first_tile + kt), bar, index, lead + (row0, kt * self.traits.k_box))

    def load_kv(self, ops: BoundAttentionBwdOperands, lead: tuple, row0) -> None:
        """Producer thread: K and V of the KV block at key row ``row0`` of the map slice ``lead``."""
        ops.kv_bar.arrive_expect_tx(0, self.kv_bytes)
        for n in ("k", "v"):
            self._rows(ops, n, 0, ops.kv_bar, 0, lead, row0)

    def load_qdo(self, ops: BoundAttentionBwdOperands, state, lead: tuple, row0) -> None:
        """Producer thread: Q and dO of the query block at row ``row0`` into slot ``state`` of
        the ring (after waiting for the slot's release)."""
        pipe = ops.qdo_pipe
        pipe.producer_acquire(state)
        pipe.producer_expect(state)
        for n in ("q", "do"):
            self._rows(ops, n, state.index * self.d_tiles, pipe.full, state.index, lead, row0)


__all__ = ["AttentionBwdOperands", "BoundAttentionBwdOperands", "OPERANDS"]
