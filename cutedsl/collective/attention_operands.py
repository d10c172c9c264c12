"""The TMA operands of an attention forward (FlashAttention-3): Q loaded once per work unit, K
and V each through their own ring of stages, with full/empty mbarriers per stage -- one
configuration of the generic :class:`~cutedsl.collective.loader.OperandLoader` (rings ``q``
(load once), ``k`` and ``v`` (``stages`` slots each)), whose buffers hold one tile per MMA k-tile
so that the WGMMA descriptors step through a ring with one stride.

Shared memory (every tile 128-byte swizzled, as the WGMMA descriptors read it):

* ``q``: ``head_dim / k_tile`` k-tiles ``[block_m x k_tile]`` (K-major A of ``S = Q K^T``);
* ``k``: ``stages x head_dim / k_tile`` k-tiles ``[block_n x k_tile]`` (K-major B of ``S``);
* ``v``: ``stages x block_n / k_tile`` k-tiles of ``O += P V``, each ``head_dim / mn_box`` boxes
  ``[k_tile x mn_box]`` (MN-major B: V row-major is N-major);
* barriers ``q_full`` (1), ``k_full``/``k_empty``, ``v_full``/``v_empty`` (``stages`` each).

A CTA pair (``pair``: the operands of a ``cta_group::2`` MMA of 256 rows, FlashAttention-4's
2-CTA forward; the GEMM's 2-SM split): each CTA loads its own Q rows, half of each KV block's keys
(``block_n / 2`` rows of K: B of ``S = Q K^T`` split along N) and half of V's columns (``head_dim
/ 2``: B of ``O += P V`` split along N), at the same shared offsets; every load of both CTAs
completes on the pair's even CTA's full barriers (``.cta_group::2``,
:class:`~cutedsl.atom.mbarrier.PairLeaderBarriers`), which only the even CTA arms, with both CTAs'
bytes; each CTA's empty barriers are released by the even CTA's multicast commit.

Global operands, FlashAttention's layouts, seen through tensor maps whose dimensions are
permuted so that every box is ``(1, .., rows, k_tile)`` over a 2-D tile: dense ``q`` (batch,
seqlen_q, heads, d) as (batch, heads, seqlen_q, d); varlen (total_q, heads, d) as (heads,
total_q, d) (:meth:`AttentionOperands.map_extent`). A dense map clips at its sequence (TMA
fills rows past ``seqlen`` with zeros); a varlen box may read the next sequence's rows, which
the mask removes (keys) or the epilogue never stores (queries).
"""
from __future__ import annotations

import attrs

from ..atom.mma_traits import mma_traits
from ..errors import ConfigError
from ..ir._lazy import lazy
from .gemm_operands import CTA_PAIR
from .loader import OperandLoader, TmaOperand, TmaRing
from .pipeline import PipelineState

cir = lazy("cutedsl.ir")

OPERANDS = ("q", "k", "v")


@attrs.frozen
class BoundAttentionOperands:
    """The operands inside a kernel body: bound shared memory, the loader's bound ``TmaCopy``
    atoms (``bound``: a :class:`~cutedsl.collective.loader.BoundOperands`), Q's pipeline
    (``q_pipe``, load once: no empty barrier) and its full barrier ``q_bar`` (the consumers wait on
    ``q_bar.wait(0, 0)``), and the K and V pipelines."""
    smem: object
    bound: object
    q_pipe: object
    k_pipe: object
    v_pipe: object

    @property
    def q_bar(self):
        return self.q_pipe.full


class AttentionOperands:
    """``head_dim`` (a multiple of the k-tile, 64 for 16-bit types), ``block_m`` query rows,
    ``block_n`` keys per KV block, ``stages`` per ring, ``dtype`` f16/bf16, ``varlen``: rank-3
    maps over packed sequences; ``consumer_warps``: warps releasing each K/V stage; ``pair``: a
    CTA pair's operands (the module docstring; ``ConfigError`` when half of ``head_dim`` is not a
    whole number of V's column boxes). The loader is
    :attr:`loader`: Q and K K-major, ``head_dim / k_box`` column boxes, one buffer tile each; V
    MN-major, row blocks of one k-tile of keys (a buffer tile each) of ``head_dim / mn_box``
    column boxes."""

    def __init__(self, head_dim: int, block_m: int, block_n: int, stages: int, dtype: str, varlen: bool,
                 consumer_warps: int, pair: bool = False):
        self.traits = t = mma_traits(dtype)
        self.head_dim, self.block_m, self.block_n, self.stages = head_dim, block_m, block_n, stages
        self.dtype, self.varlen, self.consumer_warps = dtype, bool(varlen), consumer_warps
        self.pair = bool(pair)
        split = CTA_PAIR if self.pair else 1
        #: keys of K and columns of V one CTA loads per KV block (a pair: half of each)
        self.k_rows, self.v_cols = block_n // split, head_dim // split
        if self.v_cols % t.mn_box or self.k_rows % 8:
            raise ConfigError(f"a CTA pair loads {self.v_cols} of V's {head_dim} columns per CTA, not a multiple of "
                              f"the {t.mn_box}-column box of the {t.swizzle}-byte swizzle: head_dim must be a "
                              f"multiple of {CTA_PAIR * t.mn_box}")
        self.d_tiles = head_dim // t.k_tile          #: k-tiles of S = Q K^T
        self.pv_tiles = block_n // t.k_tile          #: k-tiles of O += P V
        self.d_boxes = self.v_cols // t.mn_box       #: V boxes per P V k-tile
        lead = len(self.lead)

        def k_major(name, rows):
            return TmaOperand(name, t.storage, rows, head_dim, box_cols=t.k_box, swizzle=t.swizzle, major="K",
                              lead=lead, tma_dtype=t.tma_dtype, tiles=self.d_tiles)
        v = TmaOperand("v", t.storage, block_n, self.v_cols, box_cols=t.mn_box, box_rows=t.k_tile,
                       swizzle=t.swizzle, major="MN", lead=lead, tma_dtype=t.tma_dtype, tiles=self.pv_tiles)
        self.loader = OperandLoader(TmaRing("q", (k_major("q", block_m),)),
                                    TmaRing("k", (k_major("k", self.k_rows),), stages),
                                    TmaRing("v", (v,), stages))

    @property
    def lead(self) -> tuple:
        """The box's leading unit dimensions: (batch, head) dense, (head,) varlen."""
        return (1,) if self.varlen else (1, 1)

    def tensor_maps(self) -> list:
        """The ``q``, ``k``, ``v`` tensor maps (boxes ``lead + (block_m | block_n, k_box)`` and
        ``lead + (k_tile, mn_box)``)."""
        return self.loader.tensor_maps()

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
        """Buffers ``q``, ``k``, ``v`` and barriers ``q_full``, ``k_full``/``k_empty``,
        ``v_full``/``v_empty`` (the module docstring's layout)."""
        self.loader.plan(plan)

    @property
    def q_bytes(self) -> int:
        return self.loader.rings["q"].tx_bytes

    @property
    def k_bytes(self) -> int:
        return self.loader.rings["k"].tx_bytes

    @property
    def v_bytes(self) -> int:
        return self.loader.rings["v"].tx_bytes

    # -- IR ------------------------------------------------------------------------
    def bind(self, smem, args, leader, init: bool = True) -> BoundAttentionOperands:
        """Tensor-map atoms and pipelines; with ``init``, initialises the barriers where ``leader``
        holds (the K and V pipelines each emit ``fence.mbarrier_init``, which covers Q's barrier
        initialised before them; the caller follows with a CTA barrier). ``init=False`` only
        binds: a role that binds again, after the barrier, what set-up initialised."""
        ld = self.loader
        bound = ld.bind(smem, args)
        if self.pair:
            q, k, v = (self._pair_pipeline(smem, n) for n in ("q", "k", "v"))
        else:
            q = ld.pipeline(smem, "q")
            k, v = (ld.pipeline(smem, n, consumers=self.consumer_warps) for n in ("k", "v"))
        if init:
            q.full.init_all(1, predicate=leader)
            k.init(leader)
            v.init(leader)
        return BoundAttentionOperands(smem, bound, q, k, v)

    def _pair_pipeline(self, smem, ring: str):
        """A pair's pipeline of ring ``ring``: full barriers the even CTA's (armed there with both
        CTAs' bytes), empty ones this CTA's, one release (the even CTA's commit) per fill."""
        from ..atom.cluster import cta_rank
        from ..atom.mbarrier import MBarriers, PairLeaderBarriers
        from .tcgen05_mainloop import PairPipeline
        r = self.loader.rings[ring]
        full = PairLeaderBarriers(smem.barriers(r.barrier_names[0]), r.slots)
        empty = MBarriers(smem.barriers(r.barrier_names[1]), r.slots) if r.release else None
        return PairPipeline(full, CTA_PAIR * r.tx_bytes, empty, (cta_rank() % 2).eq(0))

    def kv_origins(self, row0) -> dict:
        """The ``(row, col)`` of this CTA's K and V tiles of the KV block at key row ``row0`` (a
        pair: CTA ``r`` loads keys ``row0 + r block_n / 2 ..`` of K and columns ``r head_dim / 2
        ..`` of V)."""
        if not self.pair:
            return {"k": (row0, 0), "v": (row0, 0)}
        from ..atom.cluster import cta_rank
        half = cir.i32(cta_rank() % 2)
        return {"k": (row0 + half * self.k_rows, 0), "v": (row0, half * self.v_cols)}

    @staticmethod
    def prefetch(ops: BoundAttentionOperands, predicate=None) -> None:
        for atom in ops.bound.atoms.values():
            atom.prefetch(predicate=predicate)

    def load_q(self, ops: BoundAttentionOperands, lead: tuple, row0) -> None:
        """Producer thread: Q's ``block_m`` rows from ``row0`` of the map slice ``lead``."""
        self.loader.fill(ops.bound, ops.q_pipe, PipelineState(1), "q", {"q": (row0, 0)}, {"q": lead})

    def load_kv(self, ops: BoundAttentionOperands, state, lead: tuple, row0) -> None:
        """Producer thread: K and V of the KV block at key row ``row0`` into slot ``state`` of
        their rings (each waits for its slot's release first)."""
        at = self.kv_origins(row0)
        self.loader.fill(ops.bound, ops.k_pipe, state, "k", {"k": at["k"]}, {"k": lead})
        self.loader.fill(ops.bound, ops.v_pipe, state, "v", {"v": at["v"]}, {"v": lead})


__all__ = ["AttentionOperands", "BoundAttentionOperands", "OPERANDS"]
