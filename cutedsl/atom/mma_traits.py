"""MMA operand traits: every shared-memory number of a tensor-core operand, from its element type.

CUTLASS derives an MMA's shapes and transaction bytes from ``sizeof_bits`` of its element
types (``MMA_Traits``); Mosaic GPU derives the K tile as ``swizzle // element bytes``. Here one
:class:`MmaTraits` per (element type, swizzle) is the only source of: the K tile (one swizzle
row of a K-major operand), the K step of one instruction, the MN-major box width, the bytes
of a tile, the core-matrix group stride (SBO) and the majors the instruction accepts. Buffers,
WGMMA descriptors, TMA boxes and expect-tx byte counts are derived from it, so a new element
type (fp8: k_tile 128; tf32: 32) is an entry in :data:`ELEMENT_BYTES` and :data:`MAJORS`,
not an edit across layers. Sub-byte types (:data:`PACKED_BITS`: e2m1, two per byte, read by
``tcgen05.mma.kind::mxf4``) live in memory as bytes: their buffers, boxes and tensor maps are
``u8`` (:attr:`MmaTraits.storage`) with :attr:`MmaTraits.k_box` bytes of K per row.

PTX ISA sources: "Asynchronous Warpgroup Level Matrix Multiply-Accumulate" — shapes
m64nNk16 (f16/bf16), m64nNk8 (tf32), m64nNk32 (e4m3/e5m2): every shape consumes 32 bytes of K
per instruction; "Matrix Descriptor" / "Shared Memory Matrix Layout" — 8-row core-matrix
groups, swizzle modes of 32/64/128 bytes; 8-bit and tf32 operands must be K-major.
"""
from __future__ import annotations

import attrs

from ..dtypes import PACKED_TMA
from ..errors import ConfigError, one_of

#: bytes per element of the operand types the WGMMA atom is built for (tf32: f32 words in memory)
ELEMENT_BYTES = {"f16": 2, "bf16": 2, "e4m3": 1, "e5m2": 1, "tf32": 4}
#: the majors (A, B) each operand may have, per element width: the PTX ISA transposes only
#: 16-bit operands (``imm-trans-a/b``); 8-bit and tf32 operands must be K-major
MAJORS = {16: (("K", "MN"), ("K", "MN")), 8: (("K",), ("K",)), 32: (("K",), ("K",)), 4: (("K",), ("K",))}
#: sub-byte operand types (tcgen05 only), packed little-endian into bytes: bits per element
PACKED_BITS = {"e2m1": 4}
#: 6-bit operand types (MXFP6, ``tcgen05.mma.kind::mxf8f6f4``): packed in global memory, each in a
#: byte of shared memory (16 elements per 16 bytes, the padded layout TMA's ``16U6_ALIGN16B``
#: writes), so their shared-memory geometry is an 8-bit type's
PADDED_6BIT = {"e2m3": 6, "e3m2": 6}
#: the tensor-map type that moves them: 16 packed 6-bit elements into a 16-byte shared slot
PADDED_TMA = next(t.name for t in PACKED_TMA.values() if t.bits == 6 and t.smem_group_bytes == 16)
SUBBYTE = {*PACKED_BITS, *PADDED_6BIT}     #: operand types narrower than a byte in global memory
F8F6 = ("e4m3", "e5m2", *PADDED_6BIT)      #: the types one kind::mxf8f6f4 MMA mixes with 6-bit ones
ELEMENT_BITS = {**{t: 8 * b for t, b in ELEMENT_BYTES.items()}, **PACKED_BITS, **{t: 8 for t in PADDED_6BIT}}
BYTE_BITS = 8
#: operand types one instruction may mix (A type, B type): the fp8 kinds with each other
MIXES = {("e4m3", "e5m2"), ("e5m2", "e4m3")}
SWIZZLES = (128, 64, 32)
DEFAULT_SWIZZLE = 128   #: the widest swizzle: conflict-free WGMMA reads and TMA writes
K_STEP_BYTES = 32       #: K bytes one wgmma instruction consumes (k16 x 2 B, k8 x 4 B, k32 x 1 B)
ATOM_M = 64             #: rows of one wgmma instruction (m64nNkK)
CORE_ROWS = 8           #: rows of a core-matrix group: the swizzle pattern repeats every 8 rows


@attrs.frozen
class MmaTraits:
    """Operand traits for element type ``dtype`` in ``swizzle``-byte swizzled shared memory.
    Sizes: elements unless named ``*_bytes``."""
    dtype: str
    swizzle: int = DEFAULT_SWIZZLE

    def __attrs_post_init__(self):
        if self.dtype not in ELEMENT_BITS:
            raise ConfigError(f"the WGMMA atom takes {one_of(ELEMENT_BYTES, quote=False)} operands, "
                              f"got {self.dtype!r}")
        if self.swizzle not in SWIZZLES:
            raise ConfigError(f"operand swizzle must be one of {SWIZZLES} bytes, got {self.swizzle!r}")

    @property
    def bits(self) -> int:
        """Bits per element (4 for the packed e2m1)."""
        return ELEMENT_BITS[self.dtype]

    @property
    def elem_bytes(self) -> int:
        """Bytes per :attr:`storage` element (1 for a packed type's bytes)."""
        return max(self.bits // BYTE_BITS, 1)

    @property
    def packed(self) -> bool:
        """Whether elements are packed several to a byte (held as ``u8`` in buffers and maps)."""
        return self.bits < BYTE_BITS

    @property
    def storage(self) -> str:
        """The element type buffers, TMA boxes and tensor maps hold: the dtype, or ``u8`` bytes
        (packed types; 6-bit types in shared memory)."""
        return "u8" if self.packed or self.dtype in PADDED_6BIT else self.dtype

    @property
    def tma_dtype(self) -> str:
        """The type of the operand's tensor maps: :attr:`storage`, or for a 6-bit type the
        packed ``16u6_align16b`` (global memory packed, shared memory padded to bytes)."""
        return PADDED_TMA if self.dtype in PADDED_6BIT else self.storage

    @property
    def k_tile(self) -> int:
        """K elements of one k-tile: one swizzle row of a K-major operand (64 for 16-bit)."""
        return self.swizzle * BYTE_BITS // self.bits

    @property
    def k_box(self) -> int:
        """K extent of one k-tile in :attr:`storage` elements (a box's and a buffer's inner
        extent): ``k_tile``, or the row's bytes for a packed type."""
        return self.row_bytes if self.packed else self.k_tile

    @property
    def k_step(self) -> int:
        """K elements of one MMA instruction (16 for 16-bit types)."""
        return K_STEP_BYTES * BYTE_BITS // self.bits

    @property
    def k_steps(self) -> int:
        """Instructions per k-tile along K."""
        return self.k_tile // self.k_step

    @property
    def row_bytes(self) -> int:
        """Bytes of one K-major operand row of a k-tile (= one MN-major K row of a box)."""
        return self.swizzle

    @property
    def mn_box(self) -> int:
        """MN elements of one box of an MN-major operand (one swizzle row wide)."""
        return self.swizzle * BYTE_BITS // self.bits

    @property
    def mn_box_bytes(self) -> int:
        """Bytes of one MN-major box: ``k_tile`` K rows of ``row_bytes``."""
        return self.k_tile * self.row_bytes

    @property
    def atom_m(self) -> int:
        return ATOM_M

    @property
    def core_group_bytes(self) -> int:
        """Bytes of an 8-row core-matrix group (the descriptors' stride byte offset, SBO)."""
        return CORE_ROWS * self.swizzle

    @property
    def k_step_bytes(self) -> int:
        """Bytes of K one instruction consumes in a K-major row."""
        return K_STEP_BYTES

    @property
    def majors_a(self) -> tuple:
        return MAJORS[self.bits][0]

    @property
    def majors_b(self) -> tuple:
        return MAJORS[self.bits][1]

    def tile_bytes(self, rows: int) -> int:
        """Bytes of one k-tile of an operand with ``rows`` rows (M or N): ``rows`` swizzle rows."""
        return rows * self.row_bytes


@attrs.frozen
class BlockScale:
    """How a block-scaled input scales its elements: one factor of format ``fmt`` per ``block``
    consecutive K elements (``one``: the factor's code of 1.0, what padding holds). ``mx``: OCP
    Microscaling, UE8M0 ``2^(e - 127)`` per 32; ``nv``: NVFP4, UE4M3 (an unsigned e4m3) per 16."""
    name: str
    block: int
    fmt: str
    one: int


MX_SCALE = BlockScale("mx", 32, "ue8m0", 127)
NV_SCALE = BlockScale("nv", 16, "ue4m3", 0x38)
BLOCK_SCALES = {s.name: s for s in (MX_SCALE, NV_SCALE)}
#: block-scaled input types (sm_100a): config dtype -> element type, and -> its scaling
MX_DTYPES = {"mxfp8": "e4m3", "mxfp8-e5m2": "e5m2", "mxfp6": "e2m3", "mxfp6-e3m2": "e3m2", "mxfp4": "e2m1",
             "nvfp4": "e2m1"}
DTYPE_SCALES = {"mxfp8": MX_SCALE, "mxfp8-e5m2": MX_SCALE, "mxfp6": MX_SCALE, "mxfp6-e3m2": MX_SCALE,
                "mxfp4": MX_SCALE, "nvfp4": NV_SCALE}


def block_scale(dtype) -> BlockScale:
    """The :class:`BlockScale` of a block-scaled config dtype, or of its name (``"mx"``/``"nv"``;
    ``True``: ``"mx"``). ``ConfigError`` for anything else."""
    if dtype is True:
        return MX_SCALE
    s = DTYPE_SCALES.get(dtype) or BLOCK_SCALES.get(dtype) if isinstance(dtype, str) else None
    if s is None:
        raise ConfigError(f"block scaling must be one of {one_of(tuple(DTYPE_SCALES) + tuple(BLOCK_SCALES))}, "
                          f"got {dtype!r}")
    return s


def element_type(dtype):
    """The element type of a config dtype: itself, or an MX dtype's element (``"mxfp8"`` -> e4m3)."""
    return MX_DTYPES.get(dtype, dtype) if isinstance(dtype, str) else dtype


def mma_traits(dtype: str, swizzle: int = DEFAULT_SWIZZLE) -> MmaTraits:
    """The :class:`MmaTraits` of operand type ``dtype`` (``ConfigError`` for a type the atom lacks)."""
    return MmaTraits(dtype, swizzle)


def packed_pair_reason(a_dtype: str, b_dtype: str, a_major: str = "K", b_major: str = "K") -> str | None:
    """Why a tcgen05 MMA cannot multiply ``a_dtype`` by ``b_dtype`` when either is a sub-byte
    type (:data:`SUBBYTE`), or None: a 6-bit type (:data:`PADDED_6BIT`) mixes with the types of
    :data:`F8F6` (``kind::mxf8f6f4``), a packed one (:data:`PACKED_BITS`) multiplies itself only
    (``kind::mxf4``), both operands K-major (packed along K). None as well when neither is a
    sub-byte type (other rules apply)."""
    if a_dtype in PADDED_6BIT or b_dtype in PADDED_6BIT:
        if a_dtype not in F8F6 or b_dtype not in F8F6:
            return (f"6-bit operands mix with {', '.join(F8F6)} only (tcgen05.mma.kind::mxf8f6f4), got "
                    f"{a_dtype} x {b_dtype}")
        if (a_major, b_major) != ("K", "K"):
            return (f"{a_dtype} x {b_dtype} operands must be K-major (a_major='K', b_major='K'), got "
                    f"a_major={a_major!r}, b_major={b_major!r}")
        return None
    packed = [t for t in (a_dtype, b_dtype) if t in PACKED_BITS]
    if not packed:
        return None
    if a_dtype != b_dtype:
        return (f"packed {packed[0]} multiplies packed {packed[0]} only (tcgen05.mma.kind::mxf4), got "
                f"{a_dtype} x {b_dtype}")
    if (a_major, b_major) != ("K", "K"):
        return (f"{a_dtype} operands must be K-major (packed along K): a_major='K', b_major='K' (B stored as "
                f"(N, K)), got a_major={a_major!r}, b_major={b_major!r}")
    return None


def operand_pair_reason(a_dtype: str, b_dtype: str) -> str | None:
    """Why one WGMMA cannot multiply ``a_dtype`` by ``b_dtype`` operands, or None: the types
    must be equal or an fp8 mix (e4m3 x e5m2), as the PTX ISA's ``.atype``/``.btype`` allow."""
    for t in (a_dtype, b_dtype):
        if t not in ELEMENT_BYTES:
            return f"the WGMMA atom takes {one_of(ELEMENT_BYTES, quote=False)} operands, got {t!r}"
    if a_dtype != b_dtype and (a_dtype, b_dtype) not in MIXES:
        return (f"A and B must have the same type, or mix e4m3 with e5m2 (PTX wgmma .atype/.btype), "
                f"got {a_dtype} x {b_dtype}")
    return None
