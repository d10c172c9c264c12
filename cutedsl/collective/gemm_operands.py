"""The GEMM's operand ring as a configuration of the operand loader (CUTLASS ``CollectiveMma``'s
TMA side, shared by the sm_90a and sm_100a mainloops: the same shared-memory layouts, read by
WGMMA or by tcgen05 descriptors).

One :class:`~cutedsl.collective.loader.TmaRing` (barrier groups ``full`` / ``empty``) of
``stages`` slots holding A, B and, for a block-scaled sm_100a GEMM, A's and B's scale-factor
atoms. Shared memory: A ``stages x [tile_m x k_tile]`` K-major (M-major: ``tile_m / mn_box``
boxes ``[k_tile x mn_box]``) and B ``stages x`` (MN-major: ``tile_n / mn_box`` boxes ``[k_tile
x mn_box]``; K-major: ``[tile_n x k_tile]``), swizzled as the MMA atom's traits say. Global
operands (numpy order): A ``(M, K)`` row-major (M-major: ``(K, M)``); B ``(K, N)`` row-major for
``b_major="MN"``, ``(N, K)`` for ``"K"``; a leading batch dimension when ``batched``.

Clusters ``(cluster_m, cluster_n)``: the CTAs with the same M coordinate need the same A tile,
those with the same N coordinate the same B tile; each CTA loads a ``1/cluster_n`` slice of A's
rows and a ``1/cluster_m`` slice of B's outer rows (:attr:`TmaOperand.slices`) and multicasts
it to the CTAs sharing it, so every CTA's full barrier still receives a whole stage. CTA rank
in the cluster: ``rank = rm + cluster_m * rn``. A CTA pair (``pair``: one ``cta_group::2`` MMA
over two CTAs along M) loads its own A rows and half of B's N rows each, without multicast.
"""
from __future__ import annotations

from ..atom.mma_traits import mma_traits
from ..ir._lazy import lazy
from .loader import BoundOperands, OperandLoader, TmaOperand, TmaRing
from .pipeline import PipelineState

cir = lazy("cutedsl.ir")

CLUSTERS = ((1, 1), (2, 1), (1, 2), (2, 2), (4, 1), (1, 4))   #: (cluster_m, cluster_n) shapes the ring supports
STAGES = range(1, 8)          #: pipeline depths
CTA_PAIR = 2                  #: CTAs sharing one cta_group::2 MMA


def check_ring(stages: int, cluster) -> tuple:
    """``cluster`` as a tuple after checking ``stages`` (in :data:`STAGES`) and ``cluster`` (in
    :data:`CLUSTERS`); ``ValueError`` naming the allowed values otherwise."""
    if stages not in STAGES:
        raise ValueError(f"stages must be {STAGES.start}..{STAGES.stop - 1}, got {stages}")
    cluster = tuple(cluster)
    if cluster not in CLUSTERS:
        raise ValueError(f"cluster must be one of {CLUSTERS}, got {cluster}")
    return cluster


class GemmOperandRing:
    """See the module docstring. ``traits``: the MMA atom's traits of A (K tile, swizzle, boxes);
    ``dtype`` / ``b_dtype``: A's and B's element types; ``tile_m`` x ``tile_n`` the CTA tile;
    ``stages`` slots; ``a_major`` / ``b_major``; ``cluster``; ``batched``: rank-3 maps over (L,
    rows, cols), coordinates from ``MainloopOperands.batch``; ``pair``: a CTA pair's split of B;
    ``sf_box``: the TMA box of one stage's scale factors of one operand (block-scaled), else None;
    ``direct``: TMA issue through the NVVM op with 32-bit shared addresses (``TmaCopy``);
    ``loop_counter``: the producer loop's counter type (``cutedsl.ir.Loop``)."""

    def __init__(self, traits, dtype: str, b_dtype: str, tile_m: int, tile_n: int, stages: int, a_major: str = "K",
                 b_major: str = "MN", cluster=(1, 1), batched: bool = False, pair: bool = False, sf_box=None,
                 direct: bool = False, loop_counter: str = "index"):
        self.traits, self.dtype, self.b_dtype = traits, dtype, b_dtype
        self.tile_m, self.tile_n, self.stages = tile_m, tile_n, stages
        self.a_major, self.b_major = a_major, b_major
        self.cluster_m, self.cluster_n = tuple(cluster)
        self.batched, self.pair, self.sf_box = batched, pair, sf_box
        self.direct, self.loop_counter = direct, loop_counter
        self.loader = OperandLoader(TmaRing("ab", self._operands(), stages, barrier_names=("full", "empty")))

    def _operands(self) -> tuple:
        t, lead = self.traits, 1 if self.batched else 0
        common = dict(swizzle=t.swizzle, lead=lead)
        ta, tb = mma_traits(self.dtype), mma_traits(self.b_dtype)
        if self.a_major == "MN":        # (K, M): k_tile rows of tile_m columns, mn_box-wide boxes
            a = TmaOperand("a", ta.storage, t.k_tile, self.tile_m, box_cols=t.mn_box, **common)
        else:
            a = TmaOperand("a", ta.storage, self.tile_m, t.k_box, **common)
        a = _with(a, major=self.a_major, slices=self.cluster_n, tma_dtype=ta.tma_dtype)
        rows_n = self.b_tile_rows
        if self.b_major == "MN":
            b = TmaOperand("b", tb.storage, t.k_tile, rows_n, box_cols=t.mn_box, **common)
        else:
            b = TmaOperand("b", tb.storage, rows_n, t.k_box, **common)
        b = _with(b, major=self.b_major, slices=1 if self.pair else self.cluster_m, tma_dtype=tb.tma_dtype)
        ops = (a, b)
        if self.sf_box is not None:     # one box of factor atoms per operand and stage, no swizzle
            ops += tuple(TmaOperand(name, "u8", *self.sf_box, lead=lead, param=param)
                         for name, param in (("sfa", "a_scales"), ("sfb", "b_scales")))
        return ops

    # -- static description --------------------------------------------------------
    @property
    def cluster(self) -> tuple:
        return (self.cluster_m, self.cluster_n)

    @property
    def operands(self) -> dict:
        """The ring's :class:`TmaOperand` s by name (``a``, ``b``; ``sfa``, ``sfb``)."""
        return self.loader.operands

    @property
    def a_box(self) -> tuple:
        """A box: this CTA's ``1/cluster_n`` slice of one A box."""
        return self.operands["a"].box

    @property
    def a_boxes(self) -> int:
        return self.operands["a"].boxes

    @property
    def b_box(self) -> tuple:
        """B box: this CTA's ``1/cluster_m`` slice (a CTA pair: its half of N) of one B box."""
        return self.operands["b"].box

    @property
    def b_boxes(self) -> int:
        return self.operands["b"].boxes

    @property
    def b_tile_rows(self) -> int:
        """N rows of B a CTA's stage holds (all ``tile_n``; a CTA pair's CTA holds half)."""
        return self.tile_n // CTA_PAIR if self.pair else self.tile_n

    @property
    def multicast_b(self) -> bool:
        """Whether B slices are multicast to the CTAs along the cluster's M."""
        return self.operands["b"].slices > 1

    def a_tile_shape(self, rows: int) -> tuple:
        """Shape of ``rows`` M-rows of an A k-tile in its buffer (M-major: boxes stacked)."""
        t = self.traits
        return ((rows // t.mn_box) * t.k_tile, t.mn_box) if self.a_major == "MN" else (rows, t.k_box)

    @property
    def sf_stage_bytes(self) -> int:
        """Bytes of one stage's scale-factor atoms in one CTA (A's and B's; 0 unless block-scaled)."""
        return sum(self.operands[n].stage_bytes for n in ("sfa", "sfb")) if self.sf_box else 0

    @property
    def stage_bytes(self) -> int:
        """Bytes one stage of a CTA receives: the whole A and B k-tiles (also with a cluster,
        whose peers multicast the other slices into it) and the factor atoms. (A CTA pair's
        loads complete on the even CTA's barrier: :attr:`pair_stage_bytes`.)"""
        return self.traits.tile_bytes(self.tile_m + self.tile_n) + self.sf_stage_bytes

    @property
    def pair_stage_bytes(self) -> int:
        """Bytes the even CTA's full barrier receives per stage from both CTAs of a pair (A: 2 x
        ``tile_m`` rows, B: the whole tile's N, each CTA's factor atoms)."""
        return self.traits.tile_bytes(CTA_PAIR * self.tile_m + self.tile_n) + CTA_PAIR * self.sf_stage_bytes

    def plan(self, plan, stages: int | None = None) -> None:
        """Declare the ring's buffers and its ``full`` / ``empty`` barriers (``stages`` slots,
        default :attr:`stages`)."""
        self.loader.plan(plan, stages)

    def tensor_maps(self) -> list:
        """A's and B's tensor maps (then ``a_scales``, ``b_scales`` when block-scaled)."""
        return self.loader.tensor_maps()

    # -- IR ------------------------------------------------------------------------
    def atoms_over(self, map_a, map_b) -> tuple:
        """The A and B ``TmaCopy`` atoms over tensor maps ``map_a`` / ``map_b`` (kernel
        parameters, or generic addresses of maps in global memory: a grouped GEMM's table)."""
        b = self.loader.bind(None, maps={"a": map_a, "b": map_b}, direct=self.direct)
        return b.atoms["a"], b.atoms["b"]

    def scale_atoms(self, args) -> tuple:
        """The A and B scale-factor ``TmaCopy`` atoms over ``args.a_scales`` / ``args.b_scales``."""
        b = self.loader.bind(None, maps={"sfa": args.a_scales, "sfb": args.b_scales}, direct=self.direct)
        return b.atoms["sfa"], b.atoms["sfb"]

    def cluster_coords(self):
        """``(rm, rn)`` of this CTA in its cluster (Python 0s without a cluster)."""
        if self.cluster == (1, 1):
            return 0, 0
        from ..atom.cluster import cta_rank
        rank = cta_rank()
        return rank % self.cluster_m, rank // self.cluster_m

    def load_stage(self, ops, pipeline, state: PipelineState, k_tile, m0, n0, predicate=None) -> None:
        """Issue the TMA boxes of k-tile ``k_tile`` (absolute, IR i32) of the tile at ``(m0, n0)``
        into slot ``state.index``, completing on its full barrier in ``pipeline`` (armed by the
        caller); only where ``predicate`` (IR i1) holds. ``ops``: the ``MainloopOperands``
        (``batch`` set per tile when batched; ``scales`` when block-scaled)."""
        t = self.traits
        k0 = k_tile * t.k_box                       # in the tensor maps' elements (bytes if packed)
        bar, s = pipeline.full, state.index
        rm, rn = self.cluster_coords()
        mask_a = mask_b = None
        if self.cluster != (1, 1):
            from ..atom.cluster import multicast_mask
            if self.cluster_n > 1:  # A slice rn goes to every CTA with this rm (along N)
                mask_a = multicast_mask(self.cluster, "y", (rm, rn))
            if self.multicast_b:    # B slice rm goes to every CTA with this rn (along M)
                mask_b = multicast_mask(self.cluster, "x", (rm, rn))
        la = lb = ()
        if self.batched:
            if ops.batch is None:
                raise ValueError("a batched mainloop loads with ops.batch = (l of A, l of B) set per work tile")
            la, lb = (ops.batch[0],), (ops.batch[1],)
        bound = BoundOperands(ops.smem, {"a": ops.tma_a, "b": ops.tma_b})
        self.loader.load(bound, bar, s, "a", (k0, m0) if self.a_major == "MN" else (m0, k0), la, rn, mask_a, predicate)
        if self.pair:               # this CTA's half of the tile's N rows
            n0 = n0 + rm * (self.tile_n // CTA_PAIR)
        self.loader.load(bound, bar, s, "b", (k0, n0) if self.b_major == "MN" else (n0, k0), lb,
                         0 if self.pair else rm, mask_b, predicate)
        if self.sf_box is not None:     # atoms (row block, k-tile) of each operand's factors
            from ..atom.tcgen05 import SF_ROWS
            tsa, tsb, kts = ops.scales
            scales = BoundOperands(ops.smem, {"sfa": tsa, "sfb": tsb})
            k_rows = k_tile * self.sf_box[0]        # shared by both operands: one shift per k-tile
            for name, r0, lead in (("sfa", m0, la), ("sfb", n0, lb)):
                row = (r0 // SF_ROWS) * kts * self.sf_box[0] + k_rows
                self.loader.load(scales, bar, s, name, (row, 0), lead, predicate=predicate)

    def producer_loop(self, ops, pipeline, state: PipelineState, k_first, k_count, m0, n0,
                      load_stage=None, counter: str | None = None) -> PipelineState:
        """Fill ``k_count`` k-tiles starting at ``k_first`` (IR i32) of the tile at ``(m0, n0)``
        through ``pipeline`` from ``state`` (per k-tile: ``producer_acquire``, arm the full
        barrier, issue the boxes with ``load_stage``, default :meth:`load_stage`); one producer
        thread runs this -- or a whole warp with ``ops.producer`` the predicate of the lane that
        issues (``counter``: the loop counter type, default :attr:`loop_counter`). Returns the
        state after the last fill."""
        load_stage = load_stage or self.load_stage
        loop = cir.Loop(0, k_count, carry=state.carry(), counter=counter or self.loop_counter)
        for i, carried in loop:
            st = PipelineState.from_carry(self.stages, carried)
            pipeline.producer_acquire(st)
            pipeline.producer_expect(st, predicate=ops.producer)
            load_stage(ops, pipeline, st, k_first + i, m0, n0, predicate=ops.producer)
            loop.next(*st.advance().carry())
        return PipelineState.from_carry(self.stages, loop.results)

    def descriptors(self, smem, mma_atom, a_offset=0, a_rows=None) -> dict:
        """Stage 0's MMA descriptors of the ring's buffers (``"a"``: ``a_rows`` rows from byte
        ``a_offset``, default all; ``"b"``), their layouts checked against the buffers."""
        a0 = smem["a"].tile(0)
        if a_rows is not None:      # M-major: this warpgroup's boxes, the same bytes in
            a0 = a0.sub(a_offset, shape=self.a_tile_shape(a_rows))
        return {"a": mma_atom.descriptor(a0, "A"), "b": mma_atom.descriptor(smem["b"].tile(0), "B")}

    @staticmethod
    def stage_descriptor(ops, name: str, index):
        """The MMA ``Descriptor`` of stage ``index`` (IR i32) of buffer ``name``: stage 0's plus
        ``index`` stages -- one 32-bit multiply-add that ptxas keeps in uniform registers."""
        return ops.desc0[name].stage(index, ops.smem[name].buf.stage_bytes)

    @staticmethod
    def prefetch(ops, predicate=None) -> None:
        """``prefetch.tensormap`` of A and B."""
        ops.tma_a.prefetch(predicate=predicate)
        ops.tma_b.prefetch(predicate=predicate)


def _with(op: TmaOperand, **kw) -> TmaOperand:
    import attrs
    return attrs.evolve(op, **kw)


__all__ = ["GemmOperandRing", "CLUSTERS", "STAGES", "CTA_PAIR", "check_ring"]
