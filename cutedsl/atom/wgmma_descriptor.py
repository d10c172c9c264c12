"""WGMMA matrix descriptors (PTX ISA "Matrix Descriptor Format" of ``wgmma``): the 64-bit value
naming a shared-memory operand tile -- start address >> 4 in bits 0-13, leading-dimension byte offset
(LBO) >> 4 in bits 16-29, stride byte offset (SBO) >> 4 in bits 32-45, swizzle mode in bits 62-63 --
derived from the tile's declared layout (:class:`SmemMatrix`), built in IR (:func:`make_descriptor`)
and moved through a ring (:class:`Descriptor`). The tile layouts they assume are those of
:mod:`cutedsl.atom.wgmma`'s docstring."""
from __future__ import annotations

import attrs

from ..ir._lazy import lazy
from ..errors import ConfigError
from .mma_traits import DEFAULT_SWIZZLE, MmaTraits, mma_traits

S = lazy("cutedsl.ir.smem_tile")
llvm = lazy("mlir.dialects.llvm")
V = lazy("cutedsl.ir.values")

SWIZZLE_FIELD = {128: 1, 64: 2, 32: 3, 0: 0}     # descriptor bits 62-63
ADDR_MASK = 0x3FFFF                               # descriptor address fields: 18 bits, in 16-byte units
ADDR_SHIFT = 4


@attrs.frozen
class SmemMatrix:
    """A WGMMA operand tile in shared memory: ``rows`` is its M (A) or N (B) extent, ``major``
    ``"K"`` or ``"MN"``; its element type and swizzle fix every offset through
    :class:`~cutedsl.atom.mma_traits.MmaTraits` (one k-tile of K per tile)."""
    rows: int
    dtype: str = "f16"
    major: str = attrs.field(default="K", validator=attrs.validators.in_(("K", "MN")))
    swizzle: int = DEFAULT_SWIZZLE

    def __attrs_post_init__(self):
        t = self.traits
        if self.swizzle != DEFAULT_SWIZZLE:
            raise ValueError(f"only {DEFAULT_SWIZZLE}-byte swizzled WGMMA operands are supported")
        if self.major not in t.majors_b:
            raise ValueError(f"{self.dtype} operands are K-major only (WGMMA transposes 16-bit operands only)")
        if self.major == "MN" and self.rows % t.mn_box:
            raise ValueError(f"an MN-major operand needs a multiple of {t.mn_box} rows, got {self.rows}")

    @property
    def traits(self) -> MmaTraits:
        try:
            return mma_traits(self.dtype, self.swizzle)
        except ConfigError as e:
            raise ValueError(str(e)) from None

    @property
    def lbo(self) -> int:
        """Leading byte offset: K-major swizzled layouts ignore it (the ISA's value 1, i.e. 16 B);
        MN-major: the next box of ``mn_box`` columns."""
        return (1 << ADDR_SHIFT) if self.major == "K" else self.traits.mn_box_bytes

    @property
    def sbo(self) -> int:
        """Stride byte offset: the next 8-row core-matrix group."""
        return self.traits.core_group_bytes

    def k_step_offset(self, j: int) -> int:
        """Byte offset of k-step ``j`` (``k_step`` elements of K) from the tile start."""
        t = self.traits
        return t.k_step_bytes * j if self.major == "K" else t.k_step * t.row_bytes * j

    def block_offset(self, b: int) -> int:
        """Byte offset of the ``b``-th ``atom_m``-row block: ``atom_m`` K-major rows, or (MN-major)
        the ``atom_m / mn_box`` boxes of ``mn_box`` MN-columns holding them."""
        t = self.traits
        if self.major == "K":
            return t.tile_bytes(t.atom_m) * b
        if t.atom_m % t.mn_box:
            raise ValueError(f"an MN-major block of {t.atom_m} rows spans part of a {t.mn_box}-wide box")
        return (t.atom_m // t.mn_box) * t.mn_box_bytes * b

    @property
    def tile_bytes(self) -> int:
        return self.traits.tile_bytes(self.rows)


def descriptor_bits(address: int, layout: SmemMatrix) -> int:
    """The 64-bit matrix descriptor (Python int) of the tile at shared byte ``address``."""
    return _const_bits(layout) | ((address & ADDR_MASK) >> ADDR_SHIFT)


def _const_bits(layout: SmemMatrix) -> int:
    # PTX ISA "Matrix Descriptor Format": start address bits 0-13, LBO 16-29, SBO 32-45,
    # swizzle mode 62-63; addresses and offsets in 16-byte units
    return ((SWIZZLE_FIELD[layout.swizzle] << 62) | (((layout.sbo & ADDR_MASK) >> ADDR_SHIFT) << 32)
            | (((layout.lbo & ADDR_MASK) >> ADDR_SHIFT) << 16))


def descriptor_lo(address, layout: SmemMatrix) -> Scalar:
    """Bits 0-31 of the matrix descriptor (start address >> 4, LBO >> 4) of the tile at shared
    byte ``address`` (i32 or i64 IR value; only its low 18 bits matter), as an unsigned i32."""
    a = V.u32(address) if str(address.type) != "i32" else address.unsigned()
    return ((a & ADDR_MASK) >> ADDR_SHIFT) | (_const_bits(layout) & 0xFFFFFFFF)


def assemble_descriptor(lo, layout: SmemMatrix) -> Scalar:
    """The 64-bit descriptor from its low word ``lo`` (i32, see :func:`descriptor_lo`) and the
    layout's constant high word (SBO, swizzle). Keeping the address arithmetic in 32 bits
    with a constant high word lets ptxas build descriptors in uniform registers (no 64-bit
    adds, no R2UR per WGMMA)."""
    return V.to_type(lo, "i64", signed=False) | V.const(_const_bits(layout) >> 32 << 32, "i64")


def descriptor_anchor(origin_address, layout: SmemMatrix) -> tuple:
    """``(wide, high)``: ``origin_address >> 4`` (i64 IR, a 1024-byte aligned shared address) with
    ``layout``'s constant high word ``high`` (SBO, swizzle) and no LBO, through
    :func:`cutedsl.ir.values.opaque` (an opaque ``mov.b64``): emitted inside a loop, it is the one 64-bit value
    from which every descriptor of that high word is a constant add (:meth:`Descriptor.anchored`),
    so the loop keeps one uniform register pair live instead of one register per descriptor."""
    high = _const_bits(layout) >> 32
    v = assemble_descriptor((V.u32(origin_address) & ADDR_MASK) >> ADDR_SHIFT, layout)
    return V.opaque(v), high


def make_descriptor(address, layout: SmemMatrix) -> Scalar:
    """The 64-bit matrix descriptor of the tile at shared byte ``address`` (i32 or i64 IR
    value); same bits as :func:`descriptor_bits`."""
    return assemble_descriptor(descriptor_lo(address, layout), layout)


@attrs.frozen
class Descriptor:
    """A WGMMA operand descriptor kept as its low word ``lo`` (unsigned i32 IR value: start
    address >> 4 and LBO >> 4) and its ``layout`` (which fixes the constant high word).

    From :meth:`WarpgroupMMA.descriptor` (layout checked against the buffer). A pipelined
    mainloop computes stage 0's once and moves it with :meth:`stage` — one 32-bit
    multiply-add in uniform registers instead of 64-bit address arithmetic per k-tile.
    Shared addresses are below 2^18, so the 14-bit start field never overflows.

    After :meth:`rematerialized` it is also carried whole: ``wide`` (i64 IR value as of the last
    runtime move) plus ``wide_off`` constant 16-byte units, so a k-step's descriptor is one
    ``UIADD3.64`` instead of a 32-bit add and a move of the constant high word (no move carries
    out of the low word: same bits)."""
    lo: object
    layout: SmemMatrix
    wide: object = None
    wide_off: int = 0

    def _moved(self, units) -> "Descriptor":
        lo = self.lo + units
        if self.wide is None:
            return attrs.evolve(self, lo=lo)
        if isinstance(units, int):
            return attrs.evolve(self, lo=lo, wide_off=self.wide_off + units)
        return attrs.evolve(self, lo=lo, wide=self.wide + V.to_type(units, "i64", signed=False))

    def offset(self, nbytes) -> "Descriptor":
        """The descriptor ``nbytes`` further (Python int or IR integer, a multiple of 16)."""
        unit = 1 << ADDR_SHIFT
        if isinstance(nbytes, int):
            if nbytes % unit:
                raise ValueError(f"descriptor offsets are multiples of {unit} B, got {nbytes}")
            return self._moved(nbytes >> ADDR_SHIFT) if nbytes else self
        return self._moved(V.u32(nbytes) >> ADDR_SHIFT)

    def stage(self, index, stage_bytes: int) -> "Descriptor":
        """The descriptor of stage ``index`` (IR i32) of a ring whose stages are ``stage_bytes``
        apart (a multiple of 16), this being stage 0's."""
        if stage_bytes % (1 << ADDR_SHIFT):
            raise ValueError(f"stage size {stage_bytes} B is not a multiple of {1 << ADDR_SHIFT}")
        return self._moved(V.u32(index) * (stage_bytes >> ADDR_SHIFT))

    def rematerialized(self) -> "Descriptor":
        """This descriptor, whole, through :func:`cutedsl.ir.values.opaque` (a ``mov.b64`` with side effects),
        to call inside a loop: LLVM then cannot hoist the per-k-step descriptors derived from it
        out of the loop into 64-bit vector registers (which spill beside large accumulators);
        ptxas forms them per iteration in uniform registers, each one 64-bit add. Same bits."""
        return attrs.evolve(self, wide=V.Scalar(V.opaque(self.value()), signed=False), wide_off=0)

    def value(self) -> Scalar:
        """The 64-bit descriptor (i64 IR value)."""
        if self.wide is not None:
            return self.wide + V.const(self.wide_off, "i64") if self.wide_off else self.wide
        return self._assemble()

    def stepper(self):
        """``at(nbytes) -> i64``: the descriptor ``nbytes`` further (int, a multiple of 16, else
        ``ValueError``), emitted where called -- one WGMMA k-tile's k-steps / m-blocks. The
        descriptor is assembled once behind an opaque ``mov.b64`` (a :meth:`rematerialized` one
        already is) and each step is one 64-bit add of ``nbytes >> 4`` (the 14-bit start field
        never carries), which ptxas forms with one ``UIADD3.64`` (as in FlashAttention-3's SASS);
        left visible, LLVM folds the constant high word into every add and ptxas re-forms each
        pair (a 32-bit add + ``UMOV``, or a carry chain)."""
        base = []

        def at(nbytes: int):
            if nbytes % (1 << ADDR_SHIFT):
                raise ValueError(f"descriptor offsets are multiples of {1 << ADDR_SHIFT} B, got {nbytes}")
            if self.wide is not None:
                return self.offset(nbytes).value()
            if not base:
                base.append(V.Scalar(llvm.inline_asm(V.mlir_type("i64"), [self.value()], "mov.b64 $0, $1;", "=l,l"),
                                     signed=False))
            return base[0] + V.const(nbytes >> ADDR_SHIFT, "i64") if nbytes else base[0]
        return at

    def _assemble(self) -> Scalar:
        return assemble_descriptor(self.lo, self.layout)

    @classmethod
    def anchored(cls, anchor, layout: SmemMatrix, static_bytes: int) -> "Descriptor":
        """The descriptor of the ``layout`` tile ``static_bytes`` past the origin of ``anchor``
        (a :func:`descriptor_anchor`) as that value plus one constant: the start address field is
        linear in the address and the LBO bits (16-29) never carry into the high word, so
        ``(origin + s) >> 4 | bits == anchor + (s >> 4) + low bits`` exactly. Raises
        ``ValueError`` when ``layout``'s high word (SBO, swizzle) is not the anchor's or the
        offset is no multiple of 16 B."""
        wide, high = anchor
        bits = _const_bits(layout)
        if bits >> 32 != high:
            raise ValueError(f"descriptor high word {bits >> 32:#x} differs from the anchor's {high:#x}")
        if static_bytes % (1 << ADDR_SHIFT) or static_bytes < 0:
            raise ValueError(f"descriptor offsets are non-negative multiples of {1 << ADDR_SHIFT} B, "
                             f"got {static_bytes}")
        off = (static_bytes >> ADDR_SHIFT) + (bits & 0xFFFFFFFF)
        return cls(V.to_type(wide + V.const(off, "i64"), "i32").unsigned(), layout, wide, off)
