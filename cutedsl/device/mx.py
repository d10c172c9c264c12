"""Host-side MX (microscaling) tensors for the block-scaled Blackwell GEMMs: quantise, pack the
elements and scale factors the way the kernel's TMA and ``tcgen05.cp`` read them, dequantise for
references.

OCP Microscaling Formats (MX) v1.0: a block of 32 consecutive elements along K shares one E8M0
scale ``2^(e - 127)``; the elements are e4m3 or e5m2 (MXFP8) or e2m1 (MXFP4: 0, 0.5, 1, 1.5, 2,
3, 4, 6 and negatives). :func:`quantize` picks each block's exponent as ``floor(log2(amax)) -
emax`` (``emax``: the element format's largest normal exponent, 8 for e4m3, 15 for e5m2, 2 for
e2m1) and rounds ``x / scale`` to the element grid with saturation.

**Packed e2m1** (:func:`pack_fp4`): two elements per byte along the last axis, element ``2i``
in the low nibble of byte ``i`` (what ``tcgen05.mma.kind::mxf4`` reads from shared memory and
TMA's ``16U4_ALIGN8B`` layout holds). ``Gemm`` packs numpy ``float4_e2m1fn`` operands itself.

**Packed scales** (:func:`pack_scales`, CUTLASS's scale-factor atom for ``tcgen05.cp.32x128b
.warpx4``): 128 rows x 4 blocks per 512-byte atom, the factor of row ``i`` and block ``j`` at
byte ``(i % 32) * 16 + (i // 32) * 4 + j``; atoms ordered row block by row block, K block by K
block within (``atom = (r // 128) * A + kb // 4`` with ``A`` atoms per row block: whole k-tiles,
1 atom per k-tile for MXFP8, 2 for MXFP4), as a ``(atoms * 4, 128)`` uint8 array (one atom = 4
rows of 128 bytes, the kernel's TMA box). Padding: factor 127 (1.0).
"""
from __future__ import annotations

import ml_dtypes
import numpy as np

from ..atom.tcgen05 import SF_ATOM_BYTES as ATOM_BYTES, SF_BLOCKS as ATOM_BLOCKS, SF_ROWS as ATOM_ROWS
from ..atom.mma_traits import MX_DTYPES, element_type
from ..atom.tcgen05 import SF_VECTOR as BLOCK, sf_packed_rows, sf_row_block_atoms, sf_tile_atoms
from ..errors import ArgumentError, ArgumentTypeError

E8M0_BIAS = 127
LANES = 32                      #: TMEM lanes per quarter: rows i and i + 32 share an atom row
#: element type -> (numpy type, largest normal exponent)
ELEMENTS = {"e4m3": (ml_dtypes.float8_e4m3fn, 8), "e5m2": (ml_dtypes.float8_e5m2, 15),
            "e2m1": (ml_dtypes.float4_e2m1fn, 2)}
NIBBLE = 4


def blocks(k: int) -> int:
    """Scale factors per row of ``k`` elements."""
    return -(-k // BLOCK)


def _element(dtype: str) -> str:
    e = element_type(dtype)
    if e not in ELEMENTS:
        raise ArgumentError(f"MX dtype must be one of {', '.join(list(MX_DTYPES) + list(ELEMENTS))}, got {dtype!r}")
    return e


def packed_rows(rows: int, k: int, dtype: str = "mxfp8") -> int:
    """Rows (of 128 bytes) of the packed scales of a ``rows x k`` operand of MX ``dtype``."""
    return sf_packed_rows(rows, k, sf_tile_atoms(_element(dtype)))


def quantize(x, element: str = "e4m3"):
    """``(q, scales)``: ``x`` (rows x K, real) as MX: ``q`` of the element type (ml_dtypes;
    ``element`` e4m3, e5m2 or e2m1, or an MX config dtype such as ``"mxfp4"``) and ``scales``
    (rows x ceil(K / 32)) uint8 E8M0 exponents, ``x ~= q * 2^(scales - 127)`` per 32-element
    block. ``ArgumentError`` for another rank or element type."""
    element = _element(element)
    x = np.asarray(x, np.float64)
    if x.ndim != 2:
        raise ArgumentError(f"quantize takes a 2-D (rows, K) array, got shape {x.shape}")
    npt, emax = ELEMENTS[element]
    rows, k = x.shape
    kb = blocks(k)
    xp = np.zeros((rows, kb * BLOCK))
    xp[:, :k] = x
    xb = xp.reshape(rows, kb, BLOCK)
    amax = np.abs(xb).max(axis=2)
    with np.errstate(divide="ignore"):
        e = np.where(amax > 0, np.floor(np.log2(np.where(amax > 0, amax, 1.0))) - emax, 0)
    e = np.clip(e, -E8M0_BIAS, E8M0_BIAS).astype(np.int64)
    scaled = xb / np.ldexp(1.0, e)[:, :, None]
    lim = float(ml_dtypes.finfo(npt).max)
    q = np.clip(scaled, -lim, lim).astype(npt).reshape(rows, kb * BLOCK)[:, :k]
    return np.ascontiguousarray(q), (e + E8M0_BIAS).astype(np.uint8)


def dequantize(q, scales) -> np.ndarray:
    """float64 ``q * 2^(scales - 127)`` per 32-element block (rows x K)."""
    q = np.asarray(q).astype(np.float64)
    s = np.ldexp(1.0, np.asarray(scales).astype(np.int64) - E8M0_BIAS)
    return q * np.repeat(s, BLOCK, axis=1)[:, :q.shape[1]]


def pack_fp4(q) -> np.ndarray:
    """e2m1 values (``float4_e2m1fn``, any shape ``(..., K)``) packed two per byte along the last
    axis: uint8 ``(..., ceil(K / 2))`` (module docstring). ``ArgumentTypeError`` for another dtype."""
    q = np.asarray(q)
    if q.dtype != ml_dtypes.float4_e2m1fn:
        raise ArgumentTypeError(f"pack_fp4 takes ml_dtypes.float4_e2m1fn values, got {q.dtype}")
    codes = q.view(np.uint8) & np.uint8(0xF)
    if q.shape[-1] % 2:
        codes = np.concatenate([codes, np.zeros(q.shape[:-1] + (1,), np.uint8)], axis=-1)
    return np.ascontiguousarray(codes[..., 0::2] | (codes[..., 1::2] << np.uint8(NIBBLE)))


def pack_scales(scales, dtype: str = "mxfp8") -> np.ndarray:
    """The packed ``(atoms * 4, 128)`` uint8 layout (module docstring) of ``scales`` (rows x
    blocks E8M0, uint8 or ml_dtypes float8_e8m0fnu) for operands of MX ``dtype`` (``"mxfp8"``,
    ``"mxfp8-e5m2"``, ``"mxfp4"``, or the element type). ``ArgumentTypeError`` for another dtype
    of ``scales``."""
    s = np.asarray(scales)
    if s.dtype == ml_dtypes.float8_e8m0fnu:
        s = s.view(np.uint8)
    if s.dtype != np.uint8 or s.ndim != 2:
        raise ArgumentTypeError(f"scales must be a 2-D uint8 (E8M0) array (rows, ceil(K / 32)), got "
                                f"{s.dtype} shape {s.shape}")
    rows, kb = s.shape
    rb, kt = -(-rows // ATOM_ROWS), sf_row_block_atoms(kb * BLOCK, sf_tile_atoms(_element(dtype)))
    full = np.full((rb * ATOM_ROWS, kt * ATOM_BLOCKS), E8M0_BIAS, np.uint8)
    full[:rows, :kb] = s
    t = full.reshape(rb, ATOM_ROWS // LANES, LANES, kt, ATOM_BLOCKS)     # (rb, i // 32, i % 32, kt, j)
    atoms = t.transpose(0, 3, 2, 1, 4).reshape(rb * kt, ATOM_BYTES)      # byte (i % 32) * 16 + (i // 32) * 4 + j
    return np.ascontiguousarray(atoms.reshape(rb * kt * ATOM_BLOCKS, ATOM_ROWS))


__all__ = ["quantize", "dequantize", "pack_scales", "pack_fp4", "packed_rows", "blocks", "BLOCK", "MX_DTYPES",
           "ELEMENTS"]
