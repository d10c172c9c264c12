"""Host-side MX (microscaling) tensors for the block-scaled Blackwell GEMMs: quantise, pack the
scale factors the way the kernel's TMA and ``tcgen05.cp`` read them, dequantise for references.

OCP Microscaling Formats (MX) v1.0: a block of 32 consecutive elements along K shares one E8M0
scale ``2^(e - 127)``; the elements are e4m3 or e5m2 (MXFP8). :func:`quantize` picks each
block's exponent as ``floor(log2(amax)) - emax`` (``emax``: the element format's largest
normal exponent, 8 for e4m3, 15 for e5m2) and rounds ``x / scale`` to the element grid with
saturation.

**Packed scales** (:func:`pack_scales`, CUTLASS's scale-factor atom for ``tcgen05.cp.32x128b
.warpx4``): 128 rows x 4 blocks per 512-byte atom, the factor of row ``i`` and block ``j`` at
byte ``(i % 32) * 16 + (i // 32) * 4 + j``; atoms ordered row block by row block, K block by K
block within (``atom = (r // 128) * ceil(KB / 4) + kb // 4``), as a ``(atoms * 4, 128)`` uint8
array (one atom = 4 rows of 128 bytes, the kernel's TMA box). Padding: factor 127 (1.0).
"""
from __future__ import annotations

import ml_dtypes
import numpy as np

from ..atom.tcgen05 import SF_ATOM_BYTES as ATOM_BYTES, SF_BLOCKS as ATOM_BLOCKS, SF_ROWS as ATOM_ROWS
from ..atom.mma_traits import MX_DTYPES  # noqa: F401  (re-exported: the config dtypes of MX inputs)
from ..atom.tcgen05 import SF_VECTOR as BLOCK, sf_packed_rows
from ..errors import ArgumentError, ArgumentTypeError

E8M0_BIAS = 127
LANES = 32                      #: TMEM lanes per quarter: rows i and i + 32 share an atom row
#: element type -> (numpy type, largest normal exponent)
ELEMENTS = {"e4m3": (ml_dtypes.float8_e4m3fn, 8), "e5m2": (ml_dtypes.float8_e5m2, 15)}


def blocks(k: int) -> int:
    """Scale factors per row of ``k`` elements."""
    return -(-k // BLOCK)


def packed_rows(rows: int, k: int) -> int:
    """Rows (of 128 bytes) of the packed scales of a ``rows x k`` operand."""
    return sf_packed_rows(rows, k)


def quantize(x, element: str = "e4m3"):
    """``(q, scales)``: ``x`` (rows x K, real) as MX: ``q`` of the element type (ml_dtypes) and
    ``scales`` (rows x ceil(K / 32)) uint8 E8M0 exponents, ``x ~= q * 2^(scales - 127)`` per
    32-element block. ``ArgumentError`` for another rank or element type."""
    if element not in ELEMENTS:
        raise ArgumentError(f"MX element type must be one of {', '.join(ELEMENTS)}, got {element!r}")
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


def pack_scales(scales) -> np.ndarray:
    """The packed ``(atoms * 4, 128)`` uint8 layout (module docstring) of ``scales`` (rows x
    blocks E8M0, uint8 or ml_dtypes float8_e8m0fnu). ``ArgumentTypeError`` for another dtype."""
    s = np.asarray(scales)
    if s.dtype == ml_dtypes.float8_e8m0fnu:
        s = s.view(np.uint8)
    if s.dtype != np.uint8 or s.ndim != 2:
        raise ArgumentTypeError(f"scales must be a 2-D uint8 (E8M0) array (rows, ceil(K / 32)), got "
                                f"{s.dtype} shape {s.shape}")
    rows, kb = s.shape
    rb, kt = -(-rows // ATOM_ROWS), -(-kb // ATOM_BLOCKS)
    full = np.full((rb * ATOM_ROWS, kt * ATOM_BLOCKS), E8M0_BIAS, np.uint8)
    full[:rows, :kb] = s
    t = full.reshape(rb, ATOM_ROWS // LANES, LANES, kt, ATOM_BLOCKS)     # (rb, i // 32, i % 32, kt, j)
    atoms = t.transpose(0, 3, 2, 1, 4).reshape(rb * kt, ATOM_BYTES)      # byte (i % 32) * 16 + (i // 32) * 4 + j
    return np.ascontiguousarray(atoms.reshape(rb * kt * ATOM_BLOCKS, ATOM_ROWS))


__all__ = ["quantize", "dequantize", "pack_scales", "packed_rows", "blocks", "BLOCK", "MX_DTYPES", "ELEMENTS"]
