"""Host-side MX (microscaling) tensors for the block-scaled Blackwell GEMMs: quantise, pack the
elements and scale factors the way the kernel's TMA and ``tcgen05.cp`` read them, dequantise for
references.

OCP Microscaling Formats (MX) v1.0: a block of 32 consecutive elements along K shares one E8M0
scale ``2^(e - 127)``; the elements are e4m3 or e5m2 (MXFP8) or e2m1 (MXFP4: 0, 0.5, 1, 1.5, 2,
3, 4, 6 and negatives). :func:`quantize` picks each block's exponent as ``floor(log2(amax)) -
emax`` (``emax``: the element format's largest normal exponent, 8 for e4m3, 15 for e5m2, 2 for
e2m1) and rounds ``x / scale`` to the element grid with saturation. NVFP4 (NVIDIA's 4-bit
format, ``"nvfp4"``): e2m1 with a UE4M3 factor (an e4m3 with sign 0) per 16 elements, the
block's ``amax / 6`` rounded to e4m3.

**NaN, Inf and overflow.** OCP MX v1.0 defines E8M0 ``0xFF`` as NaN and a block with a NaN
scale as NaN in every element, whatever they hold; its reference quantiser (microsoft/microxcaling)
sets the shared exponent to NaN when the block's largest magnitude overflows it, which a NaN or
an Inf does. :func:`quantize` gives a
block holding a NaN or a +-Inf the NaN factor (E8M0 ``0xFF``; NVFP4: UE4M3 ``0x7F``) in every
format, so the whole block dequantises to NaN, never to a finite number: no element format can
carry an Inf through a finite scale (e4m3, e2m3, e3m2 and e2m1 have none; e2m3, e3m2 and e2m1
have no NaN either). The block's elements are then 0, or the element format's NaN (e4m3, e5m2)
where ``x`` was not finite. A finite block too large for any factor (MX: ``amax`` of
``2^128 * 2^emax`` or more, only reachable from float64; NVFP4: ``amax > 6 * 448 = 2688``, as
NVFP4 has no per-tensor scale here) is refused (``ArgumentError`` naming the row and block)
instead of saturating. A block too small for the smallest factor underflows towards 0, as any
float conversion does.

**Packed e2m1** (:func:`pack_fp4`): two elements per byte along the last axis, element ``2i``
in the low nibble of byte ``i`` (what ``tcgen05.mma.kind::mxf4`` reads from shared memory and
TMA's ``16U4_ALIGN8B`` layout holds). ``Gemm`` packs numpy ``float4_e2m1fn`` operands itself;
:func:`to_device` packs once into a device-resident ``e2m1x2`` array (torch's
``float4_e2m1fn_x2`` layout) that ``Gemm`` then reads in place, call after call.

**Packed e2m3 / e3m2** (MXFP6, :func:`pack_fp6`): 6 bits per element, little-endian along the
last axis, rows padded to 128 elements (TMA's ``16U6_ALIGN16B`` reads 16 packed elements and
writes them into a 16-byte slot of shared memory, the layout ``kind::mxf8f6f4`` reads).
``Gemm`` packs numpy ``float6_e2m3fn`` / ``float6_e3m2fn`` operands itself.

**Packed scales** (:func:`pack_scales`, CUTLASS's scale-factor atom for ``tcgen05.cp.32x128b
.warpx4``): 128 rows x 4 blocks per 512-byte atom, the factor of row ``i`` and block ``j`` at
byte ``(i % 32) * 16 + (i // 32) * 4 + j``; atoms ordered row block by row block, K block by K
block within (``atom = (r // 128) * A + kb // 4`` with ``A`` atoms per row block: whole k-tiles,
1 atom per k-tile for MXFP8, 2 for MXFP4, 4 for NVFP4), as a ``(atoms * 4, 128)`` uint8 array
(one atom = 4 rows of 128 bytes, the kernel's TMA box). Padding: the factor 1.0 (E8M0 127,
UE4M3 0x38).
"""
from __future__ import annotations

import attrs
import ml_dtypes
import numpy as np

from ..atom.tcgen05 import SF_ATOM_BYTES as ATOM_BYTES, SF_BLOCKS as ATOM_BLOCKS, SF_ROWS as ATOM_ROWS
from ..atom.mma_traits import DTYPE_SCALES, MX_DTYPES, MX_SCALE, element_type
from ..atom.tcgen05 import SF_VECTOR as BLOCK, sf_packed_rows, sf_row_block_atoms, sf_tile_atoms
from ..errors import ArgumentError, ArgumentTypeError

E8M0_BIAS = 127
E8M0_NAN = 0xFF                 #: OCP MX v1.0: the E8M0 scale's only special value, NaN
UE4M3_NAN = 0x7F                #: e4m3fn's NaN (S.1111.111) with sign 0: NVFP4's NaN factor
LANES = 32                      #: TMEM lanes per quarter: rows i and i + 32 share an atom row
#: element type -> (numpy type, largest normal exponent)
ELEMENTS = {"e4m3": (ml_dtypes.float8_e4m3fn, 8), "e5m2": (ml_dtypes.float8_e5m2, 15),
            "e2m3": (ml_dtypes.float6_e2m3fn, 2), "e3m2": (ml_dtypes.float6_e3m2fn, 4),
            "e2m1": (ml_dtypes.float4_e2m1fn, 2)}
SIX = 6                     #: bits of an MXFP6 element
PADDED_GROUP = 128          #: a 6-bit tensor map's row: a multiple of 128 elements (cuda.h, 16U6_ALIGN16B)
NIBBLE = 4
E4M3 = ml_dtypes.float8_e4m3fn       #: NVFP4's factors: UE4M3 codes (sign bit 0)


def _scheme(dtype: str):
    """(element type, :class:`BlockScale`) of a block-scaled config dtype or an element type
    (an element alone: OCP MX scaling)."""
    e = element_type(dtype)
    if e not in ELEMENTS:
        raise ArgumentError(f"block-scaled dtype must be one of {', '.join(list(MX_DTYPES) + list(ELEMENTS))}, "
                            f"got {dtype!r}")
    return e, DTYPE_SCALES.get(dtype, MX_SCALE)


def blocks(k: int, dtype: str = "mxfp8") -> int:
    """Scale factors per row of ``k`` elements (one per 32; NVFP4: per 16)."""
    return -(-k // _scheme(dtype)[1].block)


def packed_rows(rows: int, k: int, dtype: str = "mxfp8") -> int:
    """Rows (of 128 bytes) of the packed scales of a ``rows x k`` operand of block-scaled ``dtype``."""
    e, sc = _scheme(dtype)
    return sf_packed_rows(rows, k, sf_tile_atoms(e, sc.block), sc.block)


def _real(x, who: str) -> np.ndarray:
    """``x`` as float64; ``ArgumentTypeError`` unless it holds real numbers (numpy bool, int,
    float, or an ml_dtypes float/int type)."""
    try:
        a = np.asarray(x)
    except (ValueError, TypeError) as e:
        raise ArgumentTypeError(f"{who} must be an array of real numbers, got {type(x).__name__} ({e})") from None
    ok = a.dtype.kind in "biuf"
    if a.dtype.kind == "V":             # ml_dtypes' types (bfloat16, float8_*, float4_*, int4...)
        for info in (ml_dtypes.finfo, ml_dtypes.iinfo):
            try:
                info(a.dtype)
                ok = True
            except (TypeError, ValueError):
                pass
    if not ok:
        fix = "; pass x.real (and x.imag) yourself" if a.dtype.kind == "c" else ""
        raise ArgumentTypeError(f"{who} must hold real numbers (float, int or an ml_dtypes type), got dtype "
                                f"{a.dtype}{fix}")
    return a.astype(np.float64)


def quantize(x, element: str = "e4m3"):
    """``(q, scales)``: ``x`` (rows x K, real) block-scaled: ``q`` of the element type
    (ml_dtypes) and ``scales`` (rows x blocks) uint8 factor codes. ``element``: e4m3, e5m2 or
    e2m1 (OCP MX: E8M0 exponents per 32 elements, ``x ~= q * 2^(scales - 127)``), a config dtype
    (``"mxfp4"``), or ``"nvfp4"``: e2m1 with a UE4M3 factor per 16 elements, the block's
    ``amax / 6`` rounded to e4m3 (no per-tensor scale: fold one into ``alpha``).
    A block holding a NaN or an Inf gets the NaN factor (E8M0 0xFF, UE4M3 0x7F: it dequantises
    to NaN in every format; module docstring). ``ArgumentError`` for another rank, or a finite
    block too large for any factor (NVFP4: ``amax > 2688``); ``ArgumentTypeError`` for
    complex, string or object input."""
    element, sc = _scheme(element)
    x = _real(x, "quantize(x)")
    if x.ndim != 2:
        raise ArgumentError(f"quantize takes a 2-D (rows, K) array, got shape {x.shape}")
    npt, emax = ELEMENTS[element]
    rows, k = x.shape
    kb = -(-k // sc.block)
    xp = np.zeros((rows, kb * sc.block))
    xp[:, :k] = x
    xb = xp.reshape(rows, kb, sc.block)
    with np.errstate(invalid="ignore"):
        amax = np.abs(xb).max(axis=2)           # NaN when the block holds one, Inf for an Inf
    special = ~np.isfinite(amax)
    amax = np.where(special, 0.0, amax)
    lim = float(ml_dtypes.finfo(npt).max)
    if sc.fmt == "ue4m3":
        tiny, big = float(ml_dtypes.finfo(E4M3).smallest_subnormal), float(ml_dtypes.finfo(E4M3).max)
        _refuse_overflow(amax / lim > big, amax, f"{lim:g} * {big:g} = {lim * big:g} (the largest UE4M3 factor "
                         f"{big:g} times e2m1's {lim:g}); divide x by a per-tensor scale and fold it into alpha")
        codes = np.where(amax > 0, np.clip(amax / lim, tiny, big), 1.0).astype(E4M3).view(np.uint8)
        codes = np.where(special, np.uint8(UE4M3_NAN), codes)
    else:
        with np.errstate(divide="ignore"):
            e = np.where(amax > 0, np.floor(np.log2(np.where(amax > 0, amax, 1.0))) - emax, 0)
        _refuse_overflow(e > E8M0_BIAS, amax, f"2^{E8M0_BIAS + emax + 1} (the largest E8M0 factor 2^{E8M0_BIAS} "
                         f"times {element}'s range); scale x down first")
        codes = (np.clip(e, -E8M0_BIAS, E8M0_BIAS).astype(np.int64) + E8M0_BIAS).astype(np.uint8)
        codes = np.where(special, np.uint8(E8M0_NAN), codes)
    with np.errstate(invalid="ignore"):
        scaled = np.clip(xb / scale_values(codes, sc)[:, :, None], -lim, lim)
    # a NaN-scale block: its element format's NaN where x was not finite (if it has one), else 0
    keep_nan = element in ("e4m3", "e5m2")
    scaled = np.where(special[:, :, None], np.where(~np.isfinite(xb) & keep_nan, np.nan, 0.0), scaled)
    q = scaled.astype(npt).reshape(rows, kb * sc.block)[:, :k]
    return np.ascontiguousarray(q), codes


def _refuse_overflow(over, amax, limit: str) -> None:
    if over.any():
        r, b = (int(i) for i in np.argwhere(over)[0])
        raise ArgumentError(f"quantize(x): the largest magnitude of row {r}, block {b} is {amax[r, b]:g}, over "
                            f"{limit} ({int(over.sum())} block(s))")


def _codes(scales, who: str) -> np.ndarray:
    """Factor codes as uint8: uint8, an integer array in 0..255, or ml_dtypes float8_e8m0fnu /
    float8_e4m3fn (their bits)."""
    s = np.asarray(scales)
    if s.dtype in (ml_dtypes.float8_e8m0fnu, E4M3):
        return s.view(np.uint8)
    if s.dtype.kind not in "iu":
        raise ArgumentTypeError(f"{who} must be uint8 factor codes (or float8_e8m0fnu / float8_e4m3fn), got "
                                f"dtype {s.dtype}")
    if s.size and (s.min() < 0 or s.max() > 0xFF):
        raise ArgumentError(f"{who}: factor codes are bytes 0..255, got {s.min()}..{s.max()}")
    return s.astype(np.uint8)


def scale_values(codes, scale=MX_SCALE) -> np.ndarray:
    """float64 values of factor ``codes`` (uint8): UE8M0 ``2^(e - 127)`` (0xFF: NaN, OCP MX
    v1.0), or UE4M3 (the e4m3 of the low 7 bits; 0x7F: NaN)."""
    c = _codes(codes, "scale codes")
    if scale.fmt == "ue4m3":
        return (c & np.uint8(0x7F)).view(E4M3).astype(np.float64)
    return np.where(c == E8M0_NAN, np.nan, np.ldexp(1.0, c.astype(np.int64) - E8M0_BIAS))


def dequantize(q, scales, dtype: str = "mxfp8") -> np.ndarray:
    """float64 ``q`` times its block's factor (``(..., rows, K)`` with ``(..., rows, blocks)``
    factors: a batch too); ``dtype`` names the scaling (``"nvfp4"``: UE4M3 per 16; otherwise
    E8M0 per 32). A NaN factor gives NaN for its whole block. ``ArgumentError`` when the
    shapes disagree (naming both), ``ArgumentTypeError`` for non-real ``q`` or non-code
    ``scales``."""
    sc = _scheme(dtype)[1]
    q = _real(q, "dequantize(q)")
    s = _codes(scales, "dequantize(scales)")
    want = q.shape[:-1] + (-(-q.shape[-1] // sc.block),) if q.ndim else None
    if q.ndim == 0 or s.shape != want:
        raise ArgumentError(f"dequantize: q of shape {q.shape} takes scales of shape {want} (one factor per "
                            f"{sc.block} elements of the last axis, {dtype!r}), got {s.shape}")
    return q * np.repeat(scale_values(s, sc), sc.block, axis=-1)[..., :q.shape[-1]]


def random_scales(rng, rows: int, k: int, dtype: str = "mxfp8") -> np.ndarray:
    """Random factor codes near 1 (rows x blocks uint8) for test inputs of block-scaled
    ``dtype``: E8M0 ``2^-3 .. 2^3``, or UE4M3 ``0.5 .. 2``."""
    sc = _scheme(dtype)[1]
    lo, hi = (sc.one - 3, sc.one + 4) if sc.fmt == "ue8m0" else (0x30, 0x41)     # e4m3 0x30 = 0.5, 0x40 = 2
    return rng.integers(lo, hi, (rows, blocks(k, dtype))).astype(np.uint8)


def _has_axis(q, who: str) -> None:
    if q.ndim == 0:
        raise ArgumentError(f"{who} packs along the last axis (K): give an array of shape (..., K), got a 0-d "
                            f"array (np.atleast_1d(q) for one element)")


def pack_fp4(q) -> np.ndarray:
    """e2m1 values (``float4_e2m1fn``, any shape ``(..., K)``) packed two per byte along the last
    axis: uint8 ``(..., ceil(K / 2))`` (module docstring). ``ArgumentTypeError`` for another dtype,
    ``ArgumentError`` for a 0-d array."""
    q = np.asarray(q)
    if q.dtype != ml_dtypes.float4_e2m1fn:
        raise ArgumentTypeError(f"pack_fp4 takes ml_dtypes.float4_e2m1fn values, got {q.dtype}")
    _has_axis(q, "pack_fp4")
    codes = q.view(np.uint8) & np.uint8(0xF)
    if q.shape[-1] % 2:
        codes = np.concatenate([codes, np.zeros(q.shape[:-1] + (1,), np.uint8)], axis=-1)
    return np.ascontiguousarray(codes[..., 0::2] | (codes[..., 1::2] << np.uint8(NIBBLE)))


def pack_fp6(q) -> np.ndarray:
    """e2m3 / e3m2 values (``float6_e2m3fn`` / ``float6_e3m2fn``, any shape ``(..., K)``) packed 6
    bits each along the last axis, little-endian (element ``i`` in bits ``6i .. 6i + 5`` of the
    row; four elements per three bytes), the row padded with zeros to a multiple of 128 elements
    (what the 16U6_ALIGN16B tensor map takes): uint8 ``(..., ceil(K / 128) * 96)``.
    ``ArgumentTypeError`` for another dtype, ``ArgumentError`` for a 0-d array."""
    q = np.asarray(q)
    if q.dtype not in (ml_dtypes.float6_e2m3fn, ml_dtypes.float6_e3m2fn):
        raise ArgumentTypeError(f"pack_fp6 takes ml_dtypes.float6_e2m3fn or float6_e3m2fn values, got {q.dtype}")
    _has_axis(q, "pack_fp6")
    k = q.shape[-1]
    kp = -(-k // PADDED_GROUP) * PADDED_GROUP
    codes = np.zeros(q.shape[:-1] + (kp,), np.uint32)
    codes[..., :k] = q.view(np.uint8) & np.uint8((1 << SIX) - 1)
    c = codes.reshape(q.shape[:-1] + (kp // 4, 4))                 # 4 elements = 24 bits = 3 bytes
    word = sum(c[..., j] << np.uint32(SIX * j) for j in range(4))
    out = np.stack([(word >> np.uint32(8 * j)) & 0xFF for j in range(3)], axis=-1).astype(np.uint8)
    return np.ascontiguousarray(out.reshape(q.shape[:-1] + (kp // 4 * 3,)))


def to_device(backend, q):
    """Pack e2m1 values (``float4_e2m1fn``, shape ``(..., K)``, K along the last axis) two per
    byte (:func:`pack_fp4`) into a new device array of ``backend`` (a ``Gemm``'s ``.backend``):
    ``DeviceArray`` of dtype ``e2m1x2``, shape ``(..., ceil(K / 2))`` (bytes; an odd K gets a
    zero element, so the GEMM sees K + 1), rows padded to a 16-byte pitch (TMA's rule). A GEMM
    reads it as a K-major operand: pass ``A`` as is and a weight stored ``(N, K)`` as ``w.T``
    (``w.mT`` for a batch). ``ArgumentTypeError`` for another dtype or a non-backend."""
    from ..dtypes import dtype as _dtype
    from ..runtime import arrays
    q = np.asarray(q)
    if q.dtype != ml_dtypes.float4_e2m1fn:
        raise ArgumentTypeError(f"mx.to_device(backend, q) packs ml_dtypes.float4_e2m1fn values (MXFP4 / NVFP4 "
                                f"elements), got {q.dtype} (MXFP8 operands are device arrays as they are; MXFP6 "
                                f"ones are taken as host arrays)")
    arr = arrays.to_device(backend, pack_fp4(q), pitch_align=16)
    return attrs.evolve(arr, dtype=_dtype("e2m1x2"))      # the same memory, read as packed pairs


def pack_scales(scales, dtype: str = "mxfp8") -> np.ndarray:
    """The packed ``(atoms * 4, 128)`` uint8 layout (module docstring) of ``scales`` (rows x
    blocks factor codes: uint8, or ml_dtypes float8_e8m0fnu / float8_e4m3fn) for operands of
    block-scaled ``dtype`` (``"mxfp8"``, ``"mxfp8-e5m2"``, ``"mxfp4"``, ``"nvfp4"``, or an
    element type); a batch ``(L, rows, blocks)`` packs to ``(L, atoms * 4, 128)``, each batch
    as one matrix. Padding is the code of 1.0. ``ArgumentTypeError`` for another dtype of
    ``scales``."""
    s = np.asarray(scales)
    if s.dtype in (ml_dtypes.float8_e8m0fnu, E4M3):
        s = s.view(np.uint8)
    if s.dtype == np.uint8 and s.ndim == 3:
        return np.ascontiguousarray(np.stack([pack_scales(x, dtype) for x in s]))
    if s.dtype != np.uint8 or s.ndim != 2:
        raise ArgumentTypeError(f"scales must be a 2-D uint8 array of factor codes (rows, blocks), or 3-D for a "
                                f"batch, got {s.dtype} shape {s.shape}")
    e, sc = _scheme(dtype)
    rows, kb = s.shape
    rb = -(-rows // ATOM_ROWS)
    kt = sf_row_block_atoms(kb * sc.block, sf_tile_atoms(e, sc.block), sc.block)
    full = np.full((rb * ATOM_ROWS, kt * ATOM_BLOCKS), sc.one, np.uint8)
    full[:rows, :kb] = s
    t = full.reshape(rb, ATOM_ROWS // LANES, LANES, kt, ATOM_BLOCKS)     # (rb, i // 32, i % 32, kt, j)
    atoms = t.transpose(0, 3, 2, 1, 4).reshape(rb * kt, ATOM_BYTES)      # byte (i % 32) * 16 + (i // 32) * 4 + j
    return np.ascontiguousarray(atoms.reshape(rb * kt * ATOM_BLOCKS, ATOM_ROWS))


__all__ = ["quantize", "dequantize", "pack_scales", "pack_fp4", "pack_fp6", "to_device", "packed_rows", "blocks", "scale_values", "random_scales",
           "BLOCK", "MX_DTYPES", "ELEMENTS"]
