"""6- and 4-bit ``tcgen05.mma`` inputs (sm_100a): the e2m3 / e3m2 / e2m1 values and the two ways
shared memory holds them (issue 23). Used by :mod:`cutedsl.sim.instructions.tcgen05_mma`.

**Values** (OCP Microscaling Formats v1.0, the ``float6_e2m3fn`` / ``float6_e3m2fn`` /
``float4_e2m1fn`` of ml_dtypes): finite only, no NaN or infinity; e2m1 holds 0, 0.5, 1, 1.5, 2,
3, 4, 6 and their negatives.

**Padded layout** (``kind::f8f6f4`` and ``kind::mxf8f6f4``; PTX ISA "Packing format used for
matrix A and B by .kind::f8f6f4", the driver's ``CU_TENSOR_MAP_DATA_TYPE_16U6_ALIGN16B`` /
``16U4_ALIGN16B`` that TMA writes): every element keeps the 8-bit element's place in the
canonical layout at the granularity of 16 elements -- each 16-byte chunk of a K-major row holds
16 consecutive K elements packed little-endian from its first bit (e2m3/e3m2: 12 bytes then 4
bytes of padding; e2m1: 8 bytes then 8 of padding). An instruction's K = 32 elements are 32
bytes of a row, as for e4m3.

**Packed layout** (``kind::mxf4`` / ``kind::mxf4nvf4``, ``CU_TENSOR_MAP_DATA_TYPE_16U4_ALIGN8B``):
two e2m1 per byte, element ``2i`` in the low nibble of byte ``i``; an instruction's K = 64
elements are 32 bytes of a row.

Both are K-major only (the instruction descriptor's transpose bits must be 0).
"""
from __future__ import annotations

import ml_dtypes
import numpy as np

#: element type -> (bits, ml_dtypes type)
FORMATS = {"e2m3": (6, ml_dtypes.float6_e2m3fn), "e3m2": (6, ml_dtypes.float6_e3m2fn),
           "e2m1": (4, ml_dtypes.float4_e2m1fn)}
CHUNK = 16          #: elements (and bytes) of one chunk of the padded layout
ROW_BYTES = 32      #: bytes of K one instruction reads per row (K-major)


def _lut(t: str) -> np.ndarray:
    bits, npt = FORMATS[t]
    return np.arange(1 << bits, dtype=np.uint8).view(npt).astype(np.float64)


LUTS = {t: _lut(t) for t in FORMATS}


def _codes(raw: np.ndarray, bits: int, count: int) -> np.ndarray:
    """The first ``count`` little-endian ``bits``-bit fields of each row of bytes ``raw``."""
    b = np.unpackbits(raw, axis=-1, bitorder="little")[..., :bits * count]
    b = b.reshape(raw.shape[:-1] + (count, bits))
    return (b.astype(np.int64) << np.arange(bits)).sum(axis=-1)


def unpack(raw: np.ndarray, t: str, packed: bool) -> np.ndarray:
    """Values (rows, K) of type ``t`` from a K-major operand's bytes ``raw`` (rows, 32): the
    packed e2m1 layout (K = 64) or the padded one (K = 32); see the module docstring."""
    bits = FORMATS[t][0]
    rows = raw.shape[0]
    if packed:
        codes = _codes(raw, bits, ROW_BYTES * 8 // bits)
    else:
        chunks = raw.reshape(rows, ROW_BYTES // CHUNK, CHUNK)
        codes = _codes(chunks[..., :CHUNK * bits // 8], bits, CHUNK).reshape(rows, -1)
    return LUTS[t][codes]


__all__ = ["FORMATS", "unpack", "ROW_BYTES"]
