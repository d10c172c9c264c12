"""Blackwell warp-specialized mainloop (CUTLASS ``MainloopSm100TmaUmmaWarpSpecialized``).

The operand ring, its TMA boxes, cluster multicast and the producer loop are the sm_90 ones
(:class:`~cutedsl.collective.warp_specialized.WarpSpecializedMainloop`: the same shared-memory
layouts, read by sm_100 descriptors instead). The MMA side is **one elected thread**
(:meth:`Tcgen05Mainloop.mma_loop`): per k-tile it waits for the slot, issues the k-tile's
``tcgen05.mma`` instructions into a TMEM accumulator and releases the slot with
``tcgen05.commit`` on its empty barrier -- the arrive lands when those MMAs have read the slot
(CUTLASS's ``umma_arrive``). With a cluster the commit is multicast to the empty barrier of
every CTA that received slices of the slot (this CTA's cluster row and column), so each slot's
empty barrier counts one release per such CTA.
"""
from __future__ import annotations

from ..atom.mma_traits import block_scale
from ..atom.tcgen05 import SCALED_KIND, SF_ATOM_BYTES, SF_COLUMNS, SF_ROWS, Umma, sf_tile_atoms
from ..atom.tma import TmaCopy
from ..atom.wgmma import ADDR_SHIFT
from ..ir._lazy import lazy
from .pipeline import PipelineState, TmaPipeline
from .warp_specialized import WarpSpecializedMainloop

cir = lazy("cutedsl.ir")

CTA_PAIR = 2        #: CTAs sharing one cta_group::2 MMA
#: one 512-byte scale-factor atom (128 rows of M or N x 4 factors) as the TMA box of the packed
#: (rows, 128) u8 scales
SF_BOX = (SF_ATOM_BYTES // SF_ROWS, SF_ROWS)


class Tcgen05Mainloop(WarpSpecializedMainloop):
    """See the module docstring; constructor arguments as
    :class:`~cutedsl.collective.tma_wgmma.TmaWgmmaMainloop` with ``warpgroups = 1`` (the MMA
    covers the whole ``tile_m`` = 128 rows), plus ``mma_sm``: 1, or 2 for a CTA-pair MMA
    (``cta_group::2``, CUTLASS's 2SM kernels): the cluster's CTA pairs along M share one
    MMA of 2 x ``tile_m`` rows (256, or 128: CTA-pair M = 128) issued by the even CTA; each CTA
    loads its own ``tile_m`` rows of A and half of the
    tile's N rows of B (no multicast between the two) and both CTAs' loads complete on the even
    CTA's full barrier (:class:`PairPipeline`). Cluster ``(2, 1)`` with ``mma_sm`` 2."""

    PAIR_CLUSTERS = ((2, 1),)
    loop_counter = "i32"            #: 32-bit loop counters: no 64-bit compare per k-tile

    def __init__(self, *args, mma_sm: int = 1, block_scaled=False, **kw):
        if mma_sm not in (1, 2):
            raise ValueError(f"mma_sm must be 1 or 2, got {mma_sm}")
        self.pair = mma_sm == 2
        #: block-scaled inputs (False, or ``"mx"`` / ``"nv"``: :class:`BlockScale`; True = "mx"):
        #: per stage, :attr:`sf_atoms` 512-byte scale-factor atoms for A's 128 rows and as many
        #: for B's (tile_n 128)
        self.block_scaled = bool(block_scaled)
        self.scale = block_scale(block_scaled) if block_scaled else None
        super().__init__(*args, **kw)
        if block_scaled and (self.tile_m != SF_ROWS or self.tile_n != SF_ROWS or self.dtype not in SCALED_KIND):
            raise ValueError(f"block-scaled (MX) mainloops are built for 128 x 128 tiles (per CTA) of "
                             f"{'/'.join(SCALED_KIND)} so far, got {self.tile_m} x {self.tile_n} {self.dtype}")
        self.sf_atoms = sf_tile_atoms(self.dtype, self.scale.block) if block_scaled else 0
        if self.pair and self.b_major == "MN" and (self.tile_n // CTA_PAIR) % self.traits.mn_box:
            raise ValueError(f"a CTA pair with an MN-major B loads {self.tile_n // CTA_PAIR} columns per CTA, not a "
                             f"multiple of the {self.traits.mn_box}-column box")
        if self.pair and self.cluster not in self.PAIR_CLUSTERS:
            raise ValueError(f"a CTA-pair MMA (mma_sm=2) runs on cluster {' or '.join(map(str, self.PAIR_CLUSTERS))} "
                             f"(the pair along M), got {self.cluster}")

    def make_mma_atom(self, m: int, n: int, dtype: str, b_major: str, b_dtype, a_major: str):
        if self.pair:
            return Umma(CTA_PAIR * m, n, dtype, b_major, b_dtype, a_major, cta_group=CTA_PAIR)
        return Umma(m, n, dtype, b_major, b_dtype, a_major)

    def atoms_over(self, map_a, map_b) -> tuple:
        """The A and B ``TmaCopy`` atoms, issuing through the NVVM op with 32-bit shared
        addresses (``direct``): 13 fewer instructions per k-tile in the producer loop here."""
        specs = super().tensor_maps()[:2]
        return TmaCopy(specs[0], map_a, direct=True), TmaCopy(specs[1], map_b, direct=True)

    # -- the CTA pair's operand split --------------------------------------------------
    @property
    def b_tile_rows(self) -> int:
        return self.tile_n // CTA_PAIR if self.pair else self.tile_n

    @property
    def multicast_b(self) -> bool:
        return not self.pair and super().multicast_b

    @property
    def b_box(self) -> tuple:
        if not self.pair:
            return super().b_box
        t = self.traits
        return (t.k_tile, t.mn_box) if self.b_major == "MN" else (self.tile_n // CTA_PAIR, t.k_box)

    @property
    def b_boxes(self) -> int:
        if not self.pair:
            return super().b_boxes
        return self.tile_n // CTA_PAIR // self.traits.mn_box if self.b_major == "MN" else 1

    def b_placement(self, j: int, k0, n0, rm):
        if not self.pair:
            return super().b_placement(j, k0, n0, rm)
        t, half = self.traits, self.tile_n // CTA_PAIR          # this CTA's half of the tile's N rows
        if self.b_major == "MN":
            return j * t.mn_box_bytes, (k0, n0 + rm * half + t.mn_box * j)
        return 0, (n0 + rm * half, k0)

    # -- MX scale factors ------------------------------------------------------------------
    @property
    def sf_box(self) -> tuple:
        """The TMA box of one stage's factors of one operand: :attr:`sf_atoms` atoms."""
        return (SF_BOX[0] * self.sf_atoms, SF_BOX[1])

    @property
    def sf_stage_bytes(self) -> int:
        """Bytes of one stage's factor atoms in one CTA: A's and B's (0 unless block-scaled)."""
        return 2 * self.sf_atoms * SF_ATOM_BYTES

    @property
    def stage_bytes(self) -> int:
        return super().stage_bytes + self.sf_stage_bytes

    def plan(self, plan, stages: int | None = None) -> None:
        super().plan(plan, stages)
        if self.block_scaled:               # A's and B's factor atoms per stage
            for name in ("sfa", "sfb"):
                plan.buffer(name, self.sf_box, "u8", stages or self.stages)

    def tensor_maps(self) -> list:
        from ..compiler.artifact import TensorMapSpec
        maps = super().tensor_maps()
        if self.block_scaled:               # packed factors (cutedsl.device.mx.pack_scales), per batch
            box = ((1,) if self.batched else ()) + self.sf_box
            maps += [TensorMapSpec("a_scales", "u8", box), TensorMapSpec("b_scales", "u8", box)]
        return maps

    def bind_scales(self, ops, args, k_tiles):
        """``ops`` with the scale-factor tensor maps and the problem's k-tile count (block-scaled)."""
        if not self.block_scaled:
            return ops
        import attrs
        sa, sb = self.tensor_maps()[-2:]
        tsa, tsb = TmaCopy(sa, args.a_scales, direct=True), TmaCopy(sb, args.b_scales, direct=True)
        return attrs.evolve(ops, scales=(tsa, tsb, k_tiles))

    def load_stage(self, ops, pipeline, state, k_tile, m0, n0, predicate=None) -> None:
        super().load_stage(ops, pipeline, state, k_tile, m0, n0, predicate)
        if self.block_scaled:               # atoms (row block, k-tile) of each operand's factors
            tsa, tsb, kts = ops.scales
            s = state.index
            k_rows = k_tile * self.sf_box[0]        # shared by both operands: one shift per k-tile
            la, lb = ((ops.batch[0],), (ops.batch[1],)) if self.batched else ((), ())   # the operand's batch
            for tma, name, r0, lead in ((tsa, "sfa", m0, la), (tsb, "sfb", n0, lb)):
                row = (r0 // SF_ROWS) * kts * self.sf_box[0] + k_rows
                tma.load(ops.smem[name].tile(s), pipeline.full, s, lead + (row, 0), predicate=predicate)

    @property
    def pair_stage_bytes(self) -> int:
        """Bytes the even CTA's full barrier receives per stage from both CTAs (A: 2 x 128
        rows, B: the whole tile's N; block-scaled: each CTA's factor atoms of its A rows and of
        B's N rows -- both CTAs hold B's, which the MMA reads from the issuing CTA's TMEM)."""
        return self.traits.tile_bytes(CTA_PAIR * self.tile_m + self.tile_n) + CTA_PAIR * self.sf_stage_bytes

    def release_mask(self):
        """IR i16: the cluster ranks whose producers multicast into this CTA's slots -- its
        cluster row and column (rank = ``rm + cluster_m * rn``) -- or, for a CTA pair, the pair;
        None without a cluster."""
        if self.pair:
            from ..atom.cluster import cta_rank
            return cir.u32(3) << (cta_rank() & ~1)
        if self.cluster == (1, 1):
            return None
        rm, rn = self._cluster_coords()
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
