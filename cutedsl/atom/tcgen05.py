"""tcgen05 atoms (sm_100a): tensor memory and the fifth-generation tensor-core MMA.

* :class:`TensorMemory` -- a CTA's TMEM allocation (PTX ISA ``tcgen05.alloc`` / ``dealloc`` /
  ``relinquish_alloc_permit``): one warp allocates ``columns`` (a power of two, 32..512) of
  the 128 lanes x 512 columns x 32 bit; the TMEM address (``lane << 16 | column``) is written
  to a 4-byte shared-memory slot and read back by every thread.
* :class:`Umma` -- ``tcgen05.mma.cta_group::1`` issued by **one thread** (CUTLASS's UMMA):
  ``D[M x N] (TMEM, f32) (+)= A[M x K] @ B[K x N]`` with A and B in shared memory behind
  sm_100 matrix descriptors, one instruction per ``k_step`` of the k-tile; completion is
  signalled by ``tcgen05.commit`` to an mbarrier (:meth:`Umma.commit`).
* :class:`~cutedsl.atom.tmem_fragment.TmemFragment` (its own module) -- accumulator columns
  loaded into registers by ``tcgen05.ld`` (thread ``t`` of the 4 epilogue warps holds row ``t``
  of a 128-row accumulator): the same element-layout interface as the wgmma
  :class:`~cutedsl.atom.wgmma.Accumulator`, so every epilogue stores it unchanged.

**Instruction descriptor** (32 bits, PTX ISA "Instruction descriptor" for .kind::f16/tf32/
f8f6f4; CUTLASS ``UMMA::InstrDescriptor``): D format bits 4-5 (1 = f32), A format 7-9 and B
format 10-12 (kind::f16: 0 f16, 1 bf16; kind::tf32: 2; kind::f8f6f4: 0 e4m3, 1 e5m2), transpose
A/B bits 15/16 (0 K-major, 1 MN-major), N >> 3 at bits 17-22, M >> 4 at bits 24-28.

**Shared-memory descriptor** (sm_100): the sm_90 fields (start, LBO, SBO >> 4 at bits 0-13,
16-29, 32-45; the same canonical layouts, :class:`~cutedsl.atom.wgmma.SmemMatrix`), plus the
constant 0b001 at bits 46-48 and a 3-bit swizzle field at bits 61-63 (0 none, 2 128B, 4 64B,
6 32B -- not sm_90's 2-bit field at 62-63).

NVVM dialect ops throughout (``nvvm.tcgen05.*``, LLVM 22): no inline PTX is needed.
"""
from __future__ import annotations

import attrs

from ..ir._lazy import lazy
from .mma_traits import (K_STEP_BYTES, MX_SCALE, NV_SCALE, PACKED_BITS, SUBBYTE, BlockScale, mma_traits, operand_pair_reason,
                          packed_pair_reason)
from .smem_operands import SmemOperands
from .wgmma import ADDR_MASK, ADDR_SHIFT, Descriptor, SmemMatrix

ir = lazy("mlir.ir")
llvm, nvvm = lazy("mlir.dialects.llvm"), lazy("mlir.dialects.nvvm")
V = lazy("cutedsl.ir.values")

TMEM_LANES, TMEM_COLUMNS = 128, 512
TMEM_COLUMN_BYTES = 4                       #: one TMEM column of a lane: 32 bits
QUARTER_LANES = 32                          #: TMEM lanes a warp reaches: its warp id % 4 quarter
QUARTERS = TMEM_LANES // QUARTER_LANES
MAX_LD_COLUMNS = 128                        #: the largest .num of tcgen05.ld.32x32b (.x128)
#: MMA kind and A/B format code (instruction descriptor bits 7-9 / 10-12) per operand type
KIND = {"f16": "f16", "bf16": "f16", "tf32": "tf32", "e4m3": "f8f6f4", "e5m2": "f8f6f4"}
FORMAT = {"f16": 0, "bf16": 1, "tf32": 2, "e4m3": 0, "e5m2": 1}
#: block-scaled kind and A/B format code per operand type (MXFP8: kind::mxf8f6f4; MXFP4, packed
#: e2m1: kind::mxf4, whose descriptor codes e2m1 as 1 -- CUTLASS ``UMMA::MXF4Format``)
SCALED_KIND = {"e4m3": "mxf8f6f4", "e5m2": "mxf8f6f4", "e2m3": "mxf8f6f4", "e3m2": "mxf8f6f4", "e2m1": "mxf4"}
SCALED_FORMAT = {"e4m3": 0, "e5m2": 1, "e2m3": 3, "e3m2": 4, "e2m1": 1}
D_F32 = 1                                   #: D format code of an f32 accumulator
SCALED_M = {1: 128, 2: 256}                 #: M of the block-scaled MMAs built here, per cta_group
SF_ATOM_BYTES, SF_CORE_BYTES = 512, 128     #: a scale-factor atom; 8 rows x 16 B core matrices in it
SF_COLUMNS = 4                              #: TMEM columns one atom (128 rows x 4 blocks) fills
SF_VECTOR, SF_ROWS, SF_BLOCKS = 32, 128, 4  #: K elements per factor; rows and factors per row of an atom


def sf_packed_rows(rows: int, k: int, tile_atoms: int = 1, block: int = SF_VECTOR) -> int:
    """Rows (of 128 bytes) of the packed scale factors of a ``rows x k`` block-scaled operand
    with one factor per ``block`` K elements: one 512-byte atom (4 rows) per 128 rows and 4
    factors, the atoms of a row block padded to whole k-tiles of ``tile_atoms`` atoms
    (:func:`sf_tile_atoms`)."""
    return -(-rows // SF_ROWS) * sf_row_block_atoms(k, tile_atoms, block) * SF_BLOCKS


def sf_tile_atoms(dtype: str, block: int = SF_VECTOR) -> int:
    """Scale-factor atoms per operand and k-tile of element type ``dtype`` with one factor per
    ``block`` K elements: its k-tile over ``4 block`` (MXFP8 1, MXFP4 2, NVFP4 4)."""
    return mma_traits(dtype).k_tile // (block * SF_BLOCKS)


def sf_row_block_atoms(k: int, tile_atoms: int = 1, block: int = SF_VECTOR) -> int:
    """Atoms of one 128-row block of the packed factors of ``k`` K elements (whole k-tiles)."""
    per_tile = block * SF_BLOCKS * tile_atoms
    return -(-k // per_tile) * tile_atoms

SWIZZLE_FIELD = {0: 0, 128: 2, 64: 4, 32: 6}   #: sm_100 descriptor bits 61-63
FIXED_BITS = 1 << 46                        #: the constant 0b001 at bits 46-48


def issuing(elect: bool):
    """The context one tcgen05 instruction is emitted in: ``elect`` -- the whole warp runs the
    issuing code and each instruction gets its own ``elect.sync``
    (:data:`~cutedsl.atom.sync.ELECT_EACH`); otherwise the caller is already one thread."""
    from .sync import ELECT_EACH, elected
    return elected(ELECT_EACH if elect else None)


def instr_descriptor(m: int, n: int, a_dtype: str, b_dtype: str, a_major: str = "K", b_major: str = "K") -> int:
    """The 32-bit instruction descriptor of an f32-accumulating ``tcgen05.mma`` (see the module
    docstring for the fields)."""
    return (D_F32 << 4 | FORMAT[a_dtype] << 7 | FORMAT[b_dtype] << 10 | int(a_major == "MN") << 15
            | int(b_major == "MN") << 16 | (n >> 3) << 17 | (m >> 4) << 24)


def scaled_instr_descriptor(n: int, a_dtype: str, b_dtype: str, a_sf: int = 0, b_sf: int = 0,
                            ue8m0: bool = True, m: int = 128) -> int:
    """The 32-bit instruction descriptor of a ``kind::mxf8f6f4`` / ``mxf4`` / ``mxf4nvf4``
    ``.block_scale`` MMA (M = ``m``: 128, or a CTA pair's 256; both operands K-major; CUTLASS
    ``UMMA::InstrDescriptorBlockScaled``): B's scale-factor id bits 4-5, A/B formats 7-9 /
    10-12, N >> 3 at 17-22, scale format bit 23 (1 UE8M0, 0 UE4M3), M >> 4 at 24-28, A's
    scale-factor id bits 29-30 (the ids pick the first byte -- factor -- of each row's 32-bit
    scale word the instruction uses)."""
    return (b_sf << 4 | SCALED_FORMAT[a_dtype] << 7 | SCALED_FORMAT[b_dtype] << 10 | (n >> 3) << 17
            | int(ue8m0) << 23 | (m >> 4) << 24 | a_sf << 29)


def smem_descriptor_bits(address: int, layout: SmemMatrix) -> int:
    """The 64-bit sm_100 matrix descriptor (Python int) of the tile at shared byte ``address``."""
    return (_hi_bits(layout) << 32 | ((layout.lbo & ADDR_MASK) >> ADDR_SHIFT) << 16
            | (address & ADDR_MASK) >> ADDR_SHIFT)


def _hi_bits(layout: SmemMatrix) -> int:
    return ((SWIZZLE_FIELD[layout.swizzle] << 61 | FIXED_BITS) >> 32) | ((layout.sbo & ADDR_MASK) >> ADDR_SHIFT)


@attrs.frozen
class UmmaDescriptor(Descriptor):
    """A tcgen05 operand descriptor: :class:`~cutedsl.atom.wgmma.Descriptor`'s low word (start,
    LBO) with the sm_100 high word (SBO, fixed bits, 3-bit swizzle field)."""

    def _assemble(self):
        return V.to_type(self.lo, "i64", signed=False) | V.const(_hi_bits(self.layout) << 32, "i64")


def _ptr(address, space: int):
    a = address if str(address.type) == "i32" else V.to_type(address, "i32", signed=False)
    return llvm.inttoptr(ir.Type.parse(f"!llvm.ptr<{space}>"), a)


class TensorMemory:
    """``columns`` columns of the CTA's tensor memory, their address kept in the 4-byte shared
    slot at ``slot`` (shared address, IR integer). ``cta_group`` 2: allocated in both CTAs of
    a pair (the same warp of each runs alloc/dealloc; CUTLASS ``Allocator2Sm``). ``ValueError``
    unless ``columns`` is a power of two in 32..512 (PTX ISA tcgen05.alloc)."""

    def __init__(self, slot, columns: int, cta_group: int = 1):
        if columns < 32 or columns > TMEM_COLUMNS or columns & (columns - 1):
            raise ValueError(f"tensor memory columns must be a power of two in 32..{TMEM_COLUMNS}, got {columns}")
        self.slot, self.columns, self.cta_group = slot, columns, cta_group

    @property
    def _group(self):
        return ir.Attribute.parse(f"#nvvm.cta_group<cta_{self.cta_group}>")

    @staticmethod
    def columns_for(n: int) -> int:
        """The allocation (power of two >= 32 columns) an ``n``-column f32 accumulator needs."""
        c = 32
        while c < n:
            c *= 2
        return c

    def alloc(self) -> None:
        """``tcgen05.alloc``: executed by one whole warp; writes the address to the slot."""
        nvvm.tcgen05_alloc(_ptr(self.slot, 3), V.i32(self.columns), group=self._group)

    def address(self):
        """The allocation's TMEM address (unsigned i32), read from the slot (after a CTA barrier
        and :meth:`fence_after`)."""
        return V.Scalar(llvm.load(ir.IntegerType.get_signless(32), _ptr(self.slot, 3)), signed=False)

    def dealloc(self, address) -> None:
        """``tcgen05.dealloc`` by one whole warp, once no MMA or load uses the columns."""
        nvvm.tcgen05_dealloc(_ptr(address, 6), V.i32(self.columns), group=self._group)

    def relinquish(self) -> None:
        """``tcgen05.relinquish_alloc_permit``: the CTA allocates no more (lets a next CTA on
        the SM allocate without waiting)."""
        nvvm.tcgen05_relinquish_alloc_permit(group=self._group)

    @staticmethod
    def fence_after() -> None:
        """``tcgen05.fence::after_thread_sync``: order later tcgen05 operations after a thread
        synchronisation."""
        nvvm.tcgen05_fence(ir.Attribute.parse("#nvvm.tcgen05_fence<after>"))

    @staticmethod
    def fence_before() -> None:
        """``tcgen05.fence::before_thread_sync``: order earlier tcgen05 operations before a
        thread synchronisation."""
        nvvm.tcgen05_fence(ir.Attribute.parse("#nvvm.tcgen05_fence<before>"))


class Umma(SmemOperands):
    """``tcgen05.mma.cta_group::G`` of ``m`` x ``n`` (16..256, step 16) per k-tile from shared A
    (``dtype``, ``a_major``) and B (``b_dtype``, ``b_major``: None = as the buffer declares), f32
    in TMEM. ``cta_group`` 1: ``m`` = 128 or 64 (rows ``16 q .. 16 q + 15`` at lanes ``32 q .. 32 q
    + 15``), one CTA. ``cta_group`` 2 (a CTA pair, CUTLASS's 2SM
    MMA): ``m`` = 256 or 128; issued by the pair's even CTA, each CTA holding half of A's rows
    and half of B's N rows at the same shared offsets and receiving its ``m / 2`` rows of D in its
    own TMEM (``m`` = 128: its 64 rows at lanes 0..63 for the first ``n / 2`` columns and at lanes
    64..127 for the rest, ``n / 2`` columns wide). Each CTA's layout:
    :func:`~cutedsl.atom.tmem_fragment.accumulator_split` (``m``, ``cta_group``).
    ``ValueError`` for shapes or operand pairs the PTX ISA has no instruction for."""

    descriptor_cls = UmmaDescriptor
    M = {1: (128, 64), 2: (256, 128)}
    N_STEP, N_MAX = 16, 256

    def __init__(self, m: int, n: int, dtype: str = "f16", b_major: str | None = None, b_dtype: str | None = None,
                 a_major: str = "K", cta_group: int = 1):
        if cta_group not in self.M:
            raise ValueError(f"tcgen05.mma cta_group must be 1 or 2, got {cta_group}")
        self.cta_group = cta_group
        if m not in self.M[cta_group]:
            raise ValueError(f"tcgen05.mma M must be {' or '.join(map(str, self.M[cta_group]))} with cta_group "
                             f"{cta_group}, got {m}")
        if not (self.N_STEP <= n <= self.N_MAX and n % self.N_STEP == 0):
            raise ValueError(f"tcgen05.mma N must be a multiple of {self.N_STEP} in {self.N_STEP}..{self.N_MAX} "
                             f"for M = {m}, got {n}")
        b_dtype = b_dtype or dtype
        subbyte = bool({dtype, b_dtype} & SUBBYTE)      # 4-/6-bit: the block-scaled kinds only
        why = packed_pair_reason(dtype, b_dtype, a_major, b_major or "K") if subbyte else \
            operand_pair_reason(dtype, b_dtype)
        if why:
            raise ValueError(why)
        if not subbyte and KIND[dtype] != KIND[b_dtype]:
            raise ValueError(f"tcgen05.mma takes A and B of one kind, got {dtype} and {b_dtype}")
        self.traits = mma_traits(dtype)
        self.m, self.n, self.dtype, self.b_dtype = m, n, dtype, b_dtype
        self.a_major, self.b_major = a_major, b_major

    @property
    def label(self) -> str:
        return f"tcgen05.mma.cta_group::{self.cta_group} m{self.m}n{self.n}k{self.traits.k_step}"

    @property
    def a_rows(self) -> int:
        return self.m // self.cta_group

    @property
    def b_rows(self) -> int:
        return self.n // self.cta_group

    @property
    def group_attr(self):
        return ir.Attribute.parse(f"#nvvm.cta_group<cta_{self.cta_group}>")

    def mma_scaled(self, d, a, b, sfa, sfb, accumulate=True, scale: BlockScale = MX_SCALE, elect=False) -> None:
        """A block-scaled k-tile: ``k_steps`` ``tcgen05.mma.kind::{mxf8f6f4|mxf4|mxf4nvf4}
        .block_scale`` into D at ``d``, with the factors at TMEM ``sfa`` / ``sfb`` (i32;
        :func:`sf_tile_atoms` atoms from :meth:`copy_scales`, :data:`SF_COLUMNS` columns apart).
        ``scale``: MX (UE8M0 per 32: kind::mxf8f6f4, or kind::mxf4 for e2m1) or NV (NVFP4: e2m1
        with UE4M3 per 16, kind::mxf4nvf4 ``.block16``). Each instruction takes ``k_step /
        scale.block`` factors per row (MXFP8 1, MXFP4 2, NVFP4 4): step ``j``'s first block ``b``
        is byte ``b % 4`` (the scale-factor id) of atom ``b // 4``. One thread, or the warp with
        ``elect`` (:func:`issuing`). (MX uses the
        kinds' default vector, one factor per 32 elements: the ``.block32`` spelling aborts LLVM
        22's instruction selection, as ``.block16`` does below PTX 8.8.)"""
        da, db = self._descriptors(a, b)
        if self.m != SCALED_M[self.cta_group] or da.layout.major != "K" or db.layout.major != "K":
            raise ValueError("block-scaled MMAs are built for M = 128 (a CTA pair: 256) with K-major A and B")
        if self.dtype not in SCALED_KIND:
            raise ValueError(f"block-scaled MMAs take {', '.join(SCALED_KIND)} operands, got {self.dtype}")
        nv = scale == NV_SCALE
        if nv and self.dtype not in PACKED_BITS:
            raise ValueError(f"NVFP4 scaling (UE4M3 per 16) is for e2m1 operands (kind::mxf4nvf4), got {self.dtype}")
        kind = ir.Attribute.parse(f"#nvvm.block_scale_kind<{'mxf4nvf4' if nv else SCALED_KIND[self.dtype]}>")
        vec = {"block_scale": ir.Attribute.parse("#nvvm.tcgen05_mma_block_scale<block16>")} if nv else {}
        dptr = _ptr(d, 6)
        per_step = self.traits.k_step // scale.block
        ptrs = {}
        for j, aj, bj, en in self._k_steps(da, db, accumulate):
            atom, sf_id = divmod(j * per_step, SF_BLOCKS)
            if atom not in ptrs:
                ptrs[atom] = (_ptr(sfa + atom * SF_COLUMNS if atom else sfa, 6),
                              _ptr(sfb + atom * SF_COLUMNS if atom else sfb, 6))
            idesc = V.i32(scaled_instr_descriptor(self.n, self.dtype, self.b_dtype, sf_id, sf_id, ue8m0=not nv,
                                                  m=self.m))
            with issuing(elect):
                nvvm.tcgen05_mma_block_scale(kind, self.group_attr, dptr, aj, bj, idesc, en, *ptrs[atom], **vec)

    @staticmethod
    def scales_descriptor(smem_address):
        """The low word (i32: start address >> 4) of the descriptor :meth:`copy_scales` reads
        the 512-byte scale-factor atom at shared ``smem_address`` (i32 or i64) through. A
        pipelined loop computes stage 0's once and adds ``stage bytes >> 4`` per stage: 32-bit
        uniform adds instead of 64-bit descriptor arithmetic per atom and k-tile."""
        a = smem_address if str(smem_address.type) == "i32" else V.to_type(smem_address, "i32", signed=False)
        return (a & ADDR_MASK) >> ADDR_SHIFT

    def copy_scales(self, taddr, desc_lo, elect=False) -> None:
        """``tcgen05.cp.cta_group::G.32x128b.warpx4`` (G: this MMA's ``cta_group``): the
        512-byte scale-factor atom whose descriptor low word is ``desc_lo``
        (:meth:`scales_descriptor`) into TMEM columns ``taddr .. + 3`` of every lane quarter
        (CUTLASS's SF copy; a no-swizzle descriptor with 128-byte core-matrix stride); with a CTA
        pair each CTA copies the atom at that shared address into its own tensor memory. One
        thread (or the warp with ``elect``, :func:`issuing`); ordered before the same thread's
        later MMAs."""
        desc = V.to_type(desc_lo, "i64", signed=False) | V.const(
            (SF_CORE_BYTES >> ADDR_SHIFT) << 32 | FIXED_BITS, "i64")
        with issuing(elect):
            nvvm.tcgen05_cp(ir.Attribute.parse("#nvvm.tcgen05_cp_shape<shape_32x128b>"), _ptr(taddr, 6), desc,
                            multicast=ir.Attribute.parse("#nvvm.tcgen05_cp_multicast<warpx4>"),
                            group=self.group_attr)

    def mma(self, d, a, b, accumulate=True, elect=False) -> None:
        """Issue one k-tile: ``k_steps`` instructions into D at TMEM address ``d`` (i32). Call
        from one thread. ``a``/``b``: ``SmemTile`` (layout checked) or descriptors;
        ``accumulate`` (bool or IR i1): add to D on the first k-step (later ones always do);
        ``elect``: the whole warp calls this, an elected lane issues (:func:`issuing`)."""
        if self.dtype not in KIND:
            raise ValueError(f"{self.dtype} operands need the block-scaled MMA (mma_scaled)")
        da, db = self._descriptors(a, b)
        idesc = V.i32(instr_descriptor(self.m, self.n, self.dtype, self.b_dtype, da.layout.major, db.layout.major))
        kind = ir.Attribute.parse(f"#nvvm.tcgen05_mma_kind<{KIND[self.dtype]}>")
        dptr = _ptr(d, 6)
        for _j, aj, bj, en in self._k_steps(da, db, accumulate):
            with issuing(elect):
                nvvm.tcgen05_mma(kind, self.group_attr, dptr, aj, bj, idesc, en)

    def mma_tmem_a(self, d, a, b, accumulate=True, elect=False) -> None:
        """Issue one k-tile with A from tensor memory (PTX ISA 9.7.16.10.9 tcgen05.mma, the
        ``[d], [a-tmem], b-desc`` form; FlashAttention-4's ``P V``): ``k_steps`` instructions into
        D at TMEM address ``d`` (i32), A at TMEM address ``a`` (i32: row ``m`` at lane ``m``, the
        k-tile's K elements packed little-endian into 32-bit columns, ``k_step x bytes / 4``
        columns per step), B a ``SmemTile`` or descriptor. With ``cta_group`` 2 (M = 256, a CTA
        pair; PTX ISA 9.7.16.10.9 allows ``[a-tmem]`` with either ``.cta_group``) each CTA holds its
        128 rows of A at the same TMEM address in its own tensor memory, as it holds its rows of D
        (PTX ISA 9.7.16.10.5 "Data path layout organization", layout A -- M = 256 with cta_group::2:
        rows ``128 r ..`` at lanes 0..127 of CTA ``r`` of the pair), and B's N rows are split between the two CTAs' shared memory.
        ``ValueError`` unless 128 rows per CTA (M = 128 with ``cta_group`` 1, 256 with 2) and a
        16-bit kind (what this form is built and tested for here)."""
        if self.a_rows != TMEM_LANES or KIND.get(self.dtype) != "f16":
            raise ValueError(f"tcgen05.mma with A in tensor memory is built for 128 rows per CTA (M = 128 with "
                             f"cta_group 1, M = 256 with cta_group 2), f16/bf16 operands; got {self.label} "
                             f"{self.dtype}")
        db = b if isinstance(b, Descriptor) else self.descriptor(b, "B")
        idesc = V.i32(instr_descriptor(self.m, self.n, self.dtype, self.b_dtype, "K", db.layout.major))
        kind = ir.Attribute.parse(f"#nvvm.tcgen05_mma_kind<{KIND[self.dtype]}>")
        dptr = _ptr(d, 6)
        step_cols = K_STEP_BYTES // TMEM_COLUMN_BYTES         # 8 columns of 32 bits per k16 step
        for j in range(self.traits.k_steps):
            if j == 0 and not isinstance(accumulate, bool):
                en = accumulate
            else:
                en = V.const(int(accumulate is True or j > 0), "i1")
            aj = _ptr(a + j * step_cols if j else a, 6)
            bj = db.offset(db.layout.k_step_offset(j)).value()
            with issuing(elect):
                nvvm.tcgen05_mma(kind, self.group_attr, dptr, aj, bj, idesc, en)

    def _descriptors(self, a, b) -> tuple:
        """The A and B descriptors (``SmemTile`` operands checked and described; descriptors kept)."""
        return (a if isinstance(a, Descriptor) else self.descriptor(a, "A"),
                b if isinstance(b, Descriptor) else self.descriptor(b, "B"))

    def _k_steps(self, da, db, accumulate):
        """``(j, A descriptor, B descriptor, enable-input-d)`` of each k-step of a k-tile: the
        start addresses moved ``j`` steps in; D is accumulated from step 1 on, and on step 0 as
        ``accumulate`` (bool or IR i1) says."""
        for j in range(self.traits.k_steps):
            if j:
                en = V.const(1, "i1")
            else:
                en = V.const(int(accumulate), "i1") if isinstance(accumulate, bool) else accumulate
            yield (j, da.offset(da.layout.k_step_offset(j)).value(), db.offset(db.layout.k_step_offset(j)).value(),
                   en)

    def commit(self, barrier_address, cta_mask=None, elect=False) -> None:
        """``tcgen05.commit`` (by the issuing thread): one arrive on the mbarrier at shared
        address ``barrier_address`` (i32) once every MMA this thread issued has completed;
        with ``cta_mask`` (IR i16, bit r = cluster rank r) on the barrier at the same offset in
        each of those CTAs (``.multicast::cluster``). ``elect``: see :func:`issuing`."""
        mask = None if cta_mask is None else V.to_type(cta_mask, "i16", signed=False)
        with issuing(elect):
            nvvm.tcgen05_commit(_ptr(barrier_address, 3), multicast_mask=mask, group=self.group_attr)


def __getattr__(name):
    """The register side of the accumulator lives in :mod:`.tmem_fragment` (which builds on
    this module); its names still resolve here, on first use."""
    if name in ("TmemFragment", "TmemLayout", "quarter_row"):
        from . import tmem_fragment
        return getattr(tmem_fragment, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["TensorMemory", "Umma", "UmmaDescriptor", "TmemFragment", "TmemLayout", "quarter_row", "instr_descriptor",
           "scaled_instr_descriptor", "smem_descriptor_bits"]
