"""Blackwell warp-specialized mainloop (CUTLASS ``MainloopSm100TmaUmmaWarpSpecialized``).

Composed, not inherited from the sm_90 mainloops: the operand ring -- A, B and, block-scaled,
their scale-factor atoms; TMA boxes, cluster multicast, the producer loop -- is the GEMM
configuration of the operand loader (:class:`~cutedsl.collective.gemm_operands.GemmOperandRing`,
the same shared-memory layouts the sm_90a mainloops use, read by tcgen05 descriptors instead), and
the MMA side is its own. That side is **one elected thread** (:meth:`Tcgen05Mainloop.mma_loop`):
per k-tile it waits for the slot, issues the k-tile's ``tcgen05.mma`` instructions into a TMEM
accumulator and releases the slot with ``tcgen05.commit`` on its empty barrier -- the arrive
lands when those MMAs have read the slot (CUTLASS's ``umma_arrive``). With a cluster the commit
is multicast to the empty barrier of every CTA that received slices of the slot (this CTA's
cluster row and column), so each slot's empty barrier counts one release per such CTA.
"""
from __future__ import annotations

import attrs

from ..arch import DEFAULT
from ..atom.mma_traits import block_scale
from ..atom.tcgen05 import SCALED_KIND, SF_ATOM_BYTES, SF_COLUMNS, SF_ROWS, Umma, sf_tile_atoms
from ..atom.wgmma import ADDR_SHIFT
from ..ir._lazy import lazy
from .gemm_operands import CLUSTERS, CTA_PAIR, STAGES, GemmOperandRing, check_ring
from .pipeline import PipelineState, TmaPipeline

cir = lazy("cutedsl.ir")

#: one 512-byte scale-factor atom (128 rows of M or N x 4 factors) as the TMA box of the packed
#: (rows, 128) u8 scales
SF_BOX = (SF_ATOM_BYTES // SF_ROWS, SF_ROWS)


class Tcgen05Mainloop:
    """See the module docstring. ``tile_m`` x ``tile_n`` per CTA (``tile_m`` 64 or 128: the MMA
    covers it whole, ``warpgroups`` must be 1), ``stages`` in :data:`STAGES`, ``dtype`` /
    ``b_dtype`` the A / B types of the ``Umma`` atom, ``b_major`` / ``a_major``, ``cluster`` in
    :data:`CLUSTERS`, ``batched``, ``arch``; ``mma_sm``: 1, or 2 for a CTA-pair MMA
    (``cta_group::2``, CUTLASS's 2SM kernels): the cluster's CTA pairs along M share one MMA of 2 x
    ``tile_m`` rows (256, or 128: CTA-pair M = 128) issued by the even CTA; each CTA loads its own
    ``tile_m`` rows of A and half of the tile's N rows of B (no multicast between the two) and both
    CTAs' loads complete on the even CTA's full barrier (:class:`PairPipeline`); cluster ``(2, 1)``
    with ``mma_sm`` 2. ``block_scaled``: False, or ``"mx"`` / ``"nv"`` (True = ``"mx"``): per
    stage :attr:`sf_atoms` 512-byte scale-factor atoms for A's 128 rows and as many for B's. Raises
    ``ValueError`` naming the limit."""

    STAGES = STAGES
    PAIR_CLUSTERS = ((2, 1),)
    WARPGROUPS = (1,)
    loop_counter = "i32"            #: 32-bit loop counters: no 64-bit compare per k-tile

    def __init__(self, tile_m: int, tile_n: int, stages: int, dtype: str = "f16", b_major: str = "MN",
                 warpgroups: int = 1, cluster=(1, 1), arch=DEFAULT, b_dtype: str | None = None,
                 batched: bool = False, a_major: str = "K", *, mma_sm: int = 1, block_scaled=False):
        if mma_sm not in (1, 2):
            raise ValueError(f"mma_sm must be 1 or 2, got {mma_sm}")
        if warpgroups not in self.WARPGROUPS:
            raise ValueError(f"the tcgen05 MMA covers the whole tile_m: warpgroups must be 1, got {warpgroups}")
        check_ring(stages, (1, 1))
        self.pair = mma_sm == 2
        self.block_scaled = bool(block_scaled)
        self.scale = block_scale(block_scaled) if block_scaled else None
        if self.pair:
            self.mma_atom = Umma(CTA_PAIR * tile_m, tile_n, dtype, b_major, b_dtype, a_major, cta_group=CTA_PAIR)
        else:
            self.mma_atom = Umma(tile_m, tile_n, dtype, b_major, b_dtype, a_major)
        self.traits = self.mma_atom.traits
        self.b_dtype = self.mma_atom.b_dtype
        cluster = check_ring(stages, cluster)
        self.tile_m, self.tile_n, self.stages, self.wg_m = tile_m, tile_n, stages, tile_m
        self.dtype, self.a_major, self.b_major, self.warpgroups = dtype, a_major, b_major, 1
        self.batched, self.arch = batched, arch
        self.cluster_m, self.cluster_n = cluster
        if block_scaled and (tile_m != SF_ROWS or tile_n != SF_ROWS or dtype not in SCALED_KIND):
            raise ValueError(f"block-scaled (MX) mainloops are built for 128 x 128 tiles (per CTA) of "
                             f"{'/'.join(SCALED_KIND)} so far, got {tile_m} x {tile_n} {dtype}")
        self.sf_atoms = sf_tile_atoms(dtype, self.scale.block) if block_scaled else 0
        if self.pair and b_major == "MN" and (tile_n // CTA_PAIR) % self.traits.mn_box:
            raise ValueError(f"a CTA pair with an MN-major B loads {tile_n // CTA_PAIR} columns per CTA, not a "
                             f"multiple of the {self.traits.mn_box}-column box")
        if self.pair and cluster not in self.PAIR_CLUSTERS:
            raise ValueError(f"a CTA-pair MMA (mma_sm=2) runs on cluster {' or '.join(map(str, self.PAIR_CLUSTERS))} "
                             f"(the pair along M), got {cluster}")
        #: the operand ring: A, B (a pair: this CTA's half of N), the factor atoms; TMA issued
        #: through the NVVM op with 32-bit shared addresses (13 fewer instructions per k-tile)
        self.ring = GemmOperandRing(self.traits, dtype, self.b_dtype, tile_m, tile_n, stages, a_major, b_major,
                                    cluster, batched, pair=self.pair, sf_box=self.sf_box if block_scaled else None,
                                    direct=True, loop_counter=self.loop_counter)

    # -- static description ----------------------------------------------------------
    @property
    def cluster(self) -> tuple:
        """``(cluster_m, cluster_n)``."""
        return (self.cluster_m, self.cluster_n)

    @property
    def b_tile_rows(self) -> int:
        """N rows of B a CTA's stage holds (a CTA pair: half the tile's)."""
        return self.ring.b_tile_rows

    @property
    def sf_box(self) -> tuple:
        """The TMA box of one stage's factors of one operand: :attr:`sf_atoms` atoms."""
        return (SF_BOX[0] * self.sf_atoms, SF_BOX[1])

    @property
    def sf_stage_bytes(self) -> int:
        """Bytes of one stage's factor atoms in one CTA: A's and B's (0 unless block-scaled)."""
        return self.ring.sf_stage_bytes

    @property
    def stage_bytes(self) -> int:
        """Bytes one stage of a CTA receives (A, B and the factor atoms; a pair: see
        :attr:`pair_stage_bytes`)."""
        return self.ring.stage_bytes

    @property
    def pair_stage_bytes(self) -> int:
        """Bytes the even CTA's full barrier receives per stage from both CTAs (A: 2 x 128
        rows, B: the whole tile's N; block-scaled: each CTA's factor atoms of its A rows and of
        B's N rows -- both CTAs hold B's, which the MMA reads from the issuing CTA's TMEM)."""
        return self.ring.pair_stage_bytes

    def plan(self, plan, stages: int | None = None) -> None:
        """Declare the ring's buffers and barriers (``stages`` slots, default :attr:`stages`)."""
        self.ring.plan(plan, stages)

    def tensor_maps(self) -> list:
        """A's and B's maps, then the packed factors' (``a_scales``, ``b_scales``) when block-scaled."""
        return self.ring.tensor_maps()

    # -- IR ------------------------------------------------------------------------
    def tma_atoms(self, args) -> tuple:
        """The A and B ``TmaCopy`` atoms over the kernel's ``a``/``b`` tensor maps."""
        return self.atoms_over(args.a, args.b)

    def atoms_over(self, map_a, map_b) -> tuple:
        """The A and B ``TmaCopy`` atoms over tensor maps ``map_a`` / ``map_b``, issuing through
        the NVVM op with 32-bit shared addresses (``direct``)."""
        return self.ring.atoms_over(map_a, map_b)

    def bind(self, smem, args, tmas=None):
        """The bound operands (``MainloopOperands``): tensor maps (``tmas``: made by the caller)
        and stage 0's tcgen05 descriptors of A and B."""
        from .tma_wgmma import MainloopOperands
        tma_a, tma_b = tmas or self.tma_atoms(args)
        return MainloopOperands(smem, tma_a, tma_b, self.ring.descriptors(smem, self.mma_atom))

    prefetch = staticmethod(GemmOperandRing.prefetch)
    stage_descriptor = staticmethod(GemmOperandRing.stage_descriptor)

    def bind_scales(self, ops, args, k_tiles):
        """``ops`` with the scale-factor tensor maps and the problem's k-tile count (block-scaled)."""
        if not self.block_scaled:
            return ops
        return attrs.evolve(ops, scales=(*self.ring.scale_atoms(args), k_tiles))

    def load_stage(self, ops, pipeline, state, k_tile, m0, n0, predicate=None) -> None:
        """The ring's :meth:`~cutedsl.collective.gemm_operands.GemmOperandRing.load_stage`: A,
        B (a pair: this CTA's half) and the factor atoms of k-tile ``k_tile`` into slot ``state``."""
        self.ring.load_stage(ops, pipeline, state, k_tile, m0, n0, predicate)

    def producer_loop(self, ops, pipeline, state: PipelineState, k_first, k_count, m0, n0) -> PipelineState:
        """Fill ``k_count`` k-tiles from ``k_first`` of the tile at ``(m0, n0)`` (the ring's
        producer loop, a 32-bit counter): the producer warp runs it, ``ops.producer`` electing
        the issuing lane. Returns the state after the last fill."""
        return self.ring.producer_loop(ops, pipeline, state, k_first, k_count, m0, n0, self.load_stage,
                                       self.loop_counter)

    def release_mask(self):
        """IR i16: the cluster ranks whose producers multicast into this CTA's slots -- its
        cluster row and column (rank = ``rm + cluster_m * rn``) -- or, for a CTA pair, the pair;
        None without a cluster."""
        if self.pair:
            from ..atom.cluster import cta_rank
            return cir.u32(3) << (cta_rank() & ~1)
        if self.cluster == (1, 1):
            return None
        rm, rn = self.ring.cluster_coords()
        cm, cn = self.cluster
        mask = cir.u32(0)
        for r in range(cm * cn):
            same = rm.eq(r % cm) | rn.eq(r // cm)
            mask = mask | cir.select(same, cir.u32(1 << r), cir.u32(0))
        return mask

    def sf_columns(self, stages: int | None = None) -> int:
        """TMEM columns the scale factors of every stage take (block-scaled), else 0."""
        return (stages or self.stages) * 2 * self.sf_atoms * SF_COLUMNS

    def mma_loop(self, ops, pipeline, state: PipelineState, k_count, d, mask=None, sf=None,
                 elect=False) -> PipelineState:
        """Accumulate ``k_count`` (IR, >= 1) k-tiles from ``state`` into the TMEM accumulator at
        ``d`` (i32; the first k-tile overwrites it), each slot released by a commit (multicast
        to ``mask``, :meth:`release_mask`); block-scaled: the stage's factor atoms copied into
        TMEM at ``sf`` first. Returns the state after the last k-tile; the caller commits the
        accumulator's completion.

        ``elect``: the whole warp walks the ring and waits, and ``elect.sync`` picks the lane
        that issues each instruction (CUTLASS's pattern, :func:`~cutedsl.atom.tcgen05.issuing`:
        the loop stays on the uniform datapath -- no register-to-uniform moves and no branch per
        k-tile); False: the caller runs this in one thread."""
        if self.block_scaled:               # stage 0's factor descriptors, moved per stage in the loop
            sf0 = {name: (self.mma_atom.scales_descriptor(ops.smem[name].tile(0).address()),
                          ops.smem[name].buf.stage_bytes >> ADDR_SHIFT) for name in ("sfa", "sfb")}
        loop = cir.Loop(0, k_count, carry=state.carry(), counter=self.loop_counter)
        for i, carried in loop:
            st = PipelineState.from_carry(self.stages, carried)
            pipeline.consumer_wait(st)
            da, db = self.stage_descriptor(ops, "a", st.index), self.stage_descriptor(ops, "b", st.index)
            self._issue_k_tile(ops, pipeline, st, i, d, da, db, mask, sf, sf0 if self.block_scaled else None, elect)
            loop.next(*st.advance().carry())
        return PipelineState.from_carry(self.stages, loop.results)

    def _issue_k_tile(self, ops, pipeline, st, i, d, da, db, mask, sf, sf0, elect) -> None:
        """One k-tile's copies (block-scaled), MMAs and slot-release commit."""
        if self.block_scaled:           # the stage's factor atoms -> TMEM, then the scaled MMAs
            cols = self.sf_atoms * SF_COLUMNS
            sfa = sf + st.index * (2 * cols)
            sfb = sfa + cols
            for dst, name in ((sfa, "sfa"), (sfb, "sfb")):
                lo0, stage_units = sf0[name]
                src = lo0 + cir.u32(st.index) * stage_units
                for atom in range(self.sf_atoms):
                    self.mma_atom.copy_scales(dst + atom * SF_COLUMNS if atom else dst,
                                              src + atom * (SF_ATOM_BYTES >> ADDR_SHIFT) if atom else src, elect)
            self.mma_atom.mma_scaled(d, da, db, sfa, sfb, accumulate=i.ne(0), scale=self.scale, elect=elect)
        else:
            self.mma_atom.mma(d, da, db, accumulate=i.ne(0), elect=elect)
        self.mma_atom.commit(pipeline.empty.address(st.index), mask, elect)


class PairPipeline(TmaPipeline):
    """The TMA pipeline of a CTA pair (``mma_sm`` 2): every CTA's loads complete on the even
    CTA's full barriers (``full``: a :class:`~cutedsl.atom.mbarrier.PairLeaderBarriers`), which
    only the even CTA arms, with the bytes of both CTAs' loads; each CTA's empty barriers get one
    release per fill (the even CTA's commit, multicast to the pair)."""

    def __init__(self, full, tx_bytes, empty, leader):
        super().__init__(full, tx_bytes, empty, consumers=1)
        self.leader = leader        #: IR i1: this CTA is the pair's even CTA

    def producer_expect(self, state, predicate=None) -> None:
        from ..atom.sync import ElectEach
        if isinstance(predicate, ElectEach) and predicate.shared is None:   # the even CTA's elected lane
            with cir.If(self.leader):
                self.full.arrive_expect_tx(state.index, self.tx_bytes, predicate=predicate)
            return
        from ..atom.sync import operand_predicate
        p = self.leader if predicate is None else operand_predicate(predicate) & self.leader
        self.full.arrive_expect_tx(state.index, self.tx_bytes, predicate=p)

    def sync_after_init(self) -> None:
        from ..atom.cluster import cluster_sync
        cluster_sync()              # the peer's loads and commits reach the even CTA's barriers


__all__ = ["Tcgen05Mainloop", "PairPipeline"]
