"""The TMA operands of an attention forward (FlashAttention-3): Q loaded once per work unit, K
and V each through their own ring of stages, with full/empty mbarriers per stage.

Shared memory (every tile 128-byte swizzled, as the WGMMA descriptors read it):

* ``q``: ``head_dim / k_tile`` k-tiles ``[block_m x k_tile]`` (K-major A of ``S = Q K^T``);
* ``k``: ``stages x head_dim / k_tile`` k-tiles ``[block_n x k_tile]`` (K-major B of ``S``);
* ``v``: ``stages x block_n / k_tile`` k-tiles of ``O += P V``, each ``head_dim / mn_box`` boxes
  ``[k_tile x mn_box]`` (MN-major B: V row-major is N-major);
* barriers ``q_full`` (1), ``k_full``/``k_empty``, ``v_full``/``v_empty`` (``stages`` each).

Global operands, FlashAttention's layouts, seen through tensor maps whose dimensions are
permuted so that every box is ``(1, .., rows, k_tile)`` over a 2-D tile: dense ``q`` (batch,
seqlen_q, heads, d) as (batch, heads, seqlen_q, d); varlen (total_q, heads, d) as (heads,
total_q, d) (:meth:`AttentionOperands.map_extent`). A dense map clips at its sequence (TMA
fills rows past ``seqlen`` with zeros); a varlen box may read the next sequence's rows, which
the mask removes (keys) or the epilogue never stores (queries).
"""
from __future__ import annotations

import attrs

from ..atom.mbarrier import MBarriers
from ..atom.mma_traits import mma_traits
from ..atom.tma import TmaCopy
from ..compiler.artifact import TensorMapSpec
from .pipeline import TmaPipeline

OPERANDS = ("q", "k", "v")


@attrs.frozen
class BoundAttentionOperands:
    """The operands inside a kernel body: bound shared memory, the three ``TmaCopy`` atoms,
    Q's barrier and the K and V pipelines."""
    smem: object
    tma: dict
    q_bar: object
    k_pipe: object
    v_pipe: object


class AttentionOperands:
    """``head_dim`` (a multiple of the k-tile, 64 for 16-bit types), ``block_m`` query rows,
    ``block_n`` keys per KV block, ``stages`` per ring, ``dtype`` f16/bf16, ``varlen``: rank-3
    maps over packed sequences; ``consumer_warps``: warps releasing each K/V stage."""

    def __init__(self, head_dim: int, block_m: int, block_n: int, stages: int, dtype: str, varlen: bool,
                 consumer_warps: int):
        self.traits = t = mma_traits(dtype)
        self.head_dim, self.block_m, self.block_n, self.stages = head_dim, block_m, block_n, stages
        self.dtype, self.varlen, self.consumer_warps = dtype, bool(varlen), consumer_warps
        self.d_tiles = head_dim // t.k_tile          #: k-tiles of S = Q K^T
        self.pv_tiles = block_n // t.k_tile          #: k-tiles of O += P V
        self.d_boxes = head_dim // t.mn_box          #: V boxes per P V k-tile

    @property
    def lead(self) -> tuple:
        """The box's leading unit dimensions: (batch, head) dense, (head,) varlen."""
        return (1,) if self.varlen else (1, 1)

    def tensor_maps(self) -> list:
        t, sw = self.traits, self.traits.swizzle
        return [TensorMapSpec("q", t.tma_dtype, self.lead + (self.block_m, t.k_box), swizzle=sw),
                TensorMapSpec("k", t.tma_dtype, self.lead + (self.block_n, t.k_box), swizzle=sw),
                TensorMapSpec("v", t.tma_dtype, self.lead + (t.k_tile, t.mn_box), swizzle=sw)]

    @staticmethod
    def map_extent(shape, strides, varlen: bool) -> tuple:
        """Host: ``(shape, strides)`` of the tensor map over an operand of numpy ``shape`` /
        byte ``strides`` ((batch, seqlen, heads, d), or varlen (total, heads, d)): the heads
        dimension moved before the sequence."""
        if varlen:
            (n, h, d), (sn, sh, sd) = shape, strides
            return (h, n, d), (sh, sn, sd)
        (b, n, h, d), (sb, sn, sh, sd) = shape, strides
        return (b, h, n, d), (sb, sh, sn, sd)

    def plan(self, plan) -> None:
        t, sw = self.traits, self.traits.swizzle
        plan.buffer("q", (self.block_m, t.k_box), t.storage, self.d_tiles, swizzle=sw, major="K")
        plan.buffer("k", (self.block_n, t.k_box), t.storage, self.stages * self.d_tiles, swizzle=sw, major="K")
        plan.buffer("v", (self.d_boxes * t.k_tile, t.mn_box), t.storage, self.stages * self.pv_tiles, swizzle=sw,
                    major="MN")
        plan.barriers("q_full", 1)
        for n in ("k", "v"):
            plan.barriers(f"{n}_full", self.stages)
            plan.barriers(f"{n}_empty", self.stages)

    @property
    def q_bytes(self) -> int:
        return self.d_tiles * self.traits.tile_bytes(self.block_m)

    @property
    def k_bytes(self) -> int:
        return self.d_tiles * self.traits.tile_bytes(self.block_n)

    @property
    def v_bytes(self) -> int:
        return self.pv_tiles * self.d_boxes * self.traits.mn_box_bytes

    # -- IR ------------------------------------------------------------------------
    def bind(self, smem, args, leader, init: bool = True) -> BoundAttentionOperands:
        """Tensor-map atoms and barriers; initialises the barriers where ``leader`` holds (the
        caller follows with a CTA barrier) unless ``init`` is False (a role binding again what
        the set-up initialised)."""
        specs = {s.param: s for s in self.tensor_maps()}
        tma = {n: TmaCopy(specs[n], getattr(args, n)) for n in OPERANDS}
        q_bar = MBarriers(smem.barriers("q_full"), 1)
        pipes = [TmaPipeline(MBarriers(smem.barriers(f"{n}_full"), self.stages), nbytes,
                             MBarriers(smem.barriers(f"{n}_empty"), self.stages), consumers=self.consumer_warps)
                 for n, nbytes in (("k", self.k_bytes), ("v", self.v_bytes))]
        if init:
            q_bar.init(0, 1, predicate=leader)
            for p in pipes:
                p.init(leader)
        return BoundAttentionOperands(smem, tma, q_bar, *pipes)

    @staticmethod
    def prefetch(ops: BoundAttentionOperands, predicate=None) -> None:
        for n in OPERANDS:
            ops.tma[n].prefetch(predicate=predicate)

    def load_q(self, ops: BoundAttentionOperands, lead: tuple, row0) -> None:
        """Producer thread: Q's ``block_m`` rows from ``row0`` of the map slice ``lead``."""
        t = self.traits
        ops.q_bar.arrive_expect_tx(0, self.q_bytes)
        for kt in range(self.d_tiles):
            ops.tma["q"].load(ops.smem["q"].tile(kt), ops.q_bar, 0, lead + (row0, kt * t.k_box))

    def load_kv(self, ops: BoundAttentionOperands, state, lead: tuple, row0) -> None:
        """Producer thread: K and V of the KV block at key row ``row0`` into slot ``state`` of
        their rings (each waits for its slot's release first)."""
        t, s = self.traits, state.index
        k_pipe, v_pipe = ops.k_pipe, ops.v_pipe
        k_pipe.producer_acquire(state)
        k_pipe.producer_expect(state)
        for kt in range(self.d_tiles):
            ops.tma["k"].load(ops.smem["k"].tile(s * self.d_tiles + kt), k_pipe.full, s,
                              lead + (row0, kt * t.k_box))
        v_pipe.producer_acquire(state)
        v_pipe.producer_expect(state)
        box = (t.k_tile, t.mn_box)
        for kt in range(self.pv_tiles):
            tile = ops.smem["v"].tile(s * self.pv_tiles + kt)
            for db in range(self.d_boxes):
                dst = tile.sub(db * t.mn_box_bytes, box) if db else tile.sub(0, box)
                ops.tma["v"].load(dst, v_pipe.full, s, lead + (row0 + kt * t.k_tile, db * t.mn_box))


__all__ = ["AttentionOperands", "BoundAttentionOperands", "OPERANDS"]
