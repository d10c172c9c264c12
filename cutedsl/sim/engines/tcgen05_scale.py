"""Block-scaled ``tcgen05.mma`` (sm_100a): the instruction descriptor of the ``.block_scale`` kinds
and the scale factors in tensor memory (issue 23). Used by :mod:`cutedsl.sim.instructions.tcgen05_mma`.

``tcgen05.mma.cta_group::1.kind::K.block_scale{.scale_vec::VX | .blockB} [d], a, b, idesc,
[sfa], [sfb], enable_input_d`` computes ``D (+)= sum_k A[m,k] SFA[m,k/B] x B[n,k] SFB[n,k/B]``
over the instruction's K, with ``V = K / B`` scale factors per row and operand:

==============  =====  ===================  ==================  =================================
kind            K      elements             scale vector        factor format (descriptor bit 23)
==============  =====  ===================  ==================  =================================
mxf8f6f4        32     e4m3 e5m2 e2m3 e3m2  1X (= block32),     UE8M0
                       e2m1 (padded)        the default
mxf4            64     e2m1 (packed)        2X (= block32),     UE8M0
                                            the default
mxf4nvf4        64     e2m1 (packed)        2X (block32) or     2X: UE8M0; 4X: UE8M0 or UE4M3
                                            4X (block16), named
==============  =====  ===================  ==================  =================================

(PTX ISA "tcgen05.mma" block scaling; ptxas 13.5 refuses a kind::mxf4nvf4 without a vector
size.) A UE8M0 factor ``e`` is ``2^(e - 127)`` (255: NaN); a UE4M3 one is the e4m3 value of its
low 7 bits (unsigned: bit 7 is not part of the format). Element layouts of the 6- and 4-bit
types: :mod:`cutedsl.sim.engines.subbyte`.

**Instruction descriptor** (CUTLASS ``UMMA::InstrDescriptorBlockScaled``; PTX ISA "Instruction
descriptor" of the block-scaled kinds): sparsity bits 0-2 (must be 0), B's scale-factor id bits
4-5, A format 7-9 and B format 10-12 (mxf8f6f4: 0 e4m3, 1 e5m2, 3 e2m3, 4 e3m2, 5 e2m1; mxf4 /
mxf4nvf4: 1 e2m1), negate 13/14 (mxf8f6f4 only), transpose 15/16 (0 for the 6- and 4-bit
types), N >> 3 at 17-22, scale format bit 23 (1 UE8M0, 0 UE4M3), M >> 4 at 24-28, A's
scale-factor id bits 29-30, K size bit 31 (0; 1 is the K = 96 of sm_103, not emulated).

**Scale factors in TMEM** (CUTLASS ``tmem_sf_frg``, 4x1 data path; what ``tcgen05.cp.32x128b
.warpx4`` of its 512-byte shared-memory atom produces): the factors of row ``r`` (of A's M or
B's N) sit in lane ``r % 32`` of each lane quarter, 32-bit column ``column + r // 32``, bytes
``sf id .. sf id + V - 1`` (the id picks which blocks of the four a column holds this
instruction uses: 0..3 with 1X, 0 or 2 with 2X, 0 with 4X). The factor addresses' bits 30-31 are
not read: CuTe's scale-factor pointers carry the sf id there (CuTe DSL's block-scaled GEMM passes
``column | id << 30`` and derives the descriptor's id fields from those bits).
"""
from __future__ import annotations

import ml_dtypes
import numpy as np

from ..frontend.errors import SimRuntimeError
from ..machine.tensor_memory import COLUMNS, QUARTER

FORMATS = {0: "e4m3", 1: "e5m2", 3: "e2m3", 4: "e3m2", 5: "e2m1"}
FP4_FORMATS = {1: "e2m1"}
E8M0_BIAS = 127
#: block-scaled kind -> (instruction K in elements, element formats, vectors allowed, default vector)
SCALED_KINDS = {"mxf8f6f4": (32, FORMATS, (1,), 1), "mxf4": (64, FP4_FORMATS, (2,), 2),
                "mxf4nvf4": (64, FP4_FORMATS, (2, 4), None)}
VECTOR_MODS = {"scale_vec::1X": 1, "scale_vec::2X": 2, "scale_vec::4X": 4}
BLOCK_MODS = {"block32": 32, "block16": 16}
SF_IDS = {1: (0, 1, 2, 3), 2: (0, 2), 4: (0,)}


def scale_vector(kind: str, mods) -> int:
    """Scale factors per row and operand of a block-scaled ``kind`` MMA with modifiers ``mods``;
    ``ValueError`` naming what the kind takes."""
    k, _f, allowed, default = SCALED_KINDS[kind]
    named = [VECTOR_MODS[m] for m in mods if m in VECTOR_MODS] + [k // BLOCK_MODS[m] for m in mods
                                                                    if m in BLOCK_MODS]
    if len(named) > 1 or (not named and default is None):
        raise ValueError(f"kind::{kind} takes one of "
                         f"{', '.join(f'.scale_vec::{v}X (.block{k // v})' for v in allowed)}")
    v = named[0] if named else default
    if v not in allowed:
        raise ValueError(f"kind::{kind} (K = {k}) takes scale vector {' or '.join(f'{a}X' for a in allowed)} "
                         f"(blocks of {' or '.join(str(k // a) for a in allowed)} elements), not {v}X")
    return v


def decode_idesc_scaled(idesc: int, kind: str, vec: int | None = None, group: int = 1) -> dict:
    """The fields of a block-scaled instruction descriptor (module docstring) of a ``kind`` MMA
    with ``vec`` factors per row (default: the kind's); ``SimRuntimeError`` naming the field for
    a value not emulated or not allowed."""
    d = int(idesc) & 0xFFFFFFFF
    k, formats, _allowed, default = SCALED_KINDS[kind]
    vec = vec or default
    f = {"sparse": d & 7, "b_sf": d >> 4 & 3, "a": d >> 7 & 7, "b": d >> 10 & 7, "neg_a": d >> 13 & 1,
         "neg_b": d >> 14 & 1, "mn_a": d >> 15 & 1, "mn_b": d >> 16 & 1, "n": (d >> 17 & 0x3F) << 3,
         "scale_fmt": d >> 23 & 1, "m": (d >> 24 & 0x1F) << 4, "a_sf": d >> 29 & 3, "k_size": d >> 31 & 1,
         "saturate": 0, "shift": 0, "vec": vec, "k": k}
    where = f"block-scaled instruction descriptor 0x{d:08x} (kind::{kind}, {vec}X)"
    if f["sparse"]:
        raise SimRuntimeError(f"{where}: sparsity bits 0-2 set: sparse block-scaled MMAs are not emulated")
    if not f["scale_fmt"] and vec != 4:
        raise SimRuntimeError(f"{where}: scale format bit 23 = 0 (UE4M3): UE4M3 factors need kind::mxf4nvf4 "
                              f"with scale_vec::4X; this MMA takes UE8M0 (bit 23 = 1)")
    if f["k_size"]:
        raise SimRuntimeError(f"{where}: K size bit 31 = 1 (K = 96, sm_103) is not emulated; it must be 0")
    for op, bits in (("a", "7-9"), ("b", "10-12")):
        t = formats.get(f[op])
        if t is None:
            raise SimRuntimeError(f"{where}: {op.upper()} format (bits {bits}) {f[op]} is none of "
                                  f"{', '.join(f'{c} {v}' for c, v in formats.items())}")
        if f["mn_" + op] and t in ("e2m3", "e3m2", "e2m1"):
            raise SimRuntimeError(f"{where}: {op.upper()} is {t}, which must be K-major (transpose bit "
                                  f"{15 if op == 'a' else 16} set)")
        f[op + "_type"] = t
    if (f["neg_a"] or f["neg_b"]) and kind != "mxf8f6f4":
        raise SimRuntimeError(f"{where}: negate (bits 13-14) is for kind::mxf8f6f4 only")
    for op in ("a", "b"):
        if f[op + "_sf"] not in SF_IDS[vec]:
            raise SimRuntimeError(f"{where}: {op.upper()}'s scale-factor id {f[op + '_sf']} (bits "
                                  f"{'29-30' if op == 'a' else '4-5'}); {vec}X takes "
                                  f"{', '.join(map(str, SF_IDS[vec]))}")
    if f["m"] != 128 * group:
        raise SimRuntimeError(f"{where}: M (bits 24-28) = {f['m']}; block-scaled MMAs are emulated with M = "
                              f"{128 * group} on cta_group::{group} (128 rows per CTA)")
    if not (16 <= f["n"] <= 256 and f["n"] % 16 == 0):
        raise SimRuntimeError(f"{where}: N (bits 17-22) = {f['n']}; M = 128 takes N = 16..256 in steps of 16")
    return f


#: bits of a scale-factor TMEM address the MMA does not read: CuTe (DSL and C++) keeps the
#: factor's byte in its 32-bit column -- the sf id, which the instruction takes from the
#: instruction descriptor -- in bits 30-31 of the address it passes (``tmem_sf_frg`` pointers)
SF_ADDRESS_BYTE_BITS = 0xC000_0000


def sf_cells(address: int, rows: int) -> tuple:
    """(lanes, columns) of the scale factors of ``rows`` rows at TMEM ``address`` (module
    docstring), and the address's lane (must be 0; bits 30-31 are ignored,
    :data:`SF_ADDRESS_BYTE_BITS`)."""
    r = np.arange(rows)
    lanes = r % QUARTER + QUARTER * ((r // QUARTER) % 4)
    return lanes, (address & 0xFFFF) + r // QUARTER, (address & ~SF_ADDRESS_BYTE_BITS & 0xFFFF_FFFF) >> 16


def read_scales(data: np.ndarray, address: int, rows: int, sf_id: int, vec: int = 1,
                ue8m0: bool = True) -> np.ndarray:
    """The ``vec`` scale factors of each of ``rows`` rows as float64 multipliers (rows, vec):
    UE8M0 ``2^(e - 127)`` or UE4M3 (module docstring)."""
    lanes, cols, _ = sf_cells(address, rows)
    shifts = 8 * (sf_id + np.arange(vec, dtype=np.uint32))
    e = (data[lanes, cols][:, None] >> shifts[None, :].astype(np.uint32)) & np.uint32(0xFF)
    if not ue8m0:
        return (e & np.uint32(0x7F)).astype(np.uint8).view(ml_dtypes.float8_e4m3fn).astype(np.float64)
    out = np.ldexp(1.0, e.astype(np.int64) - E8M0_BIAS)
    out[e == 0xFF] = np.nan
    return out


def sf_shadow_cells(address: int, rows: int) -> np.ndarray:
    lanes, cols, _ = sf_cells(address, rows)
    return np.unique(lanes * COLUMNS + cols)


__all__ = ["decode_idesc_scaled", "read_scales", "scale_vector", "sf_cells", "sf_shadow_cells", "SCALED_KINDS"]
