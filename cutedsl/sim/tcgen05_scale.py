"""Block-scaled ``tcgen05.mma`` (sm_100a): the instruction descriptor of the ``.block_scale`` kinds
and the scale factors in tensor memory (issue 23). Used by :mod:`cutedsl.sim.tcgen05_mma`.

``tcgen05.mma.cta_group::1.kind::mxf8f6f4.block_scale{.scale_vec::1X} [d], a, b, idesc,
[sfa], [sfb], enable_input_d`` computes ``D (+)= sum_k A[m,k] SFA[m,k/32] x B[n,k] SFB[n,k/32]``
over the instruction's K = 32 (one scale per row and operand), an E8M0 scale ``e`` being
``2^(e - 127)`` (255: NaN). Emulated: e4m3 / e5m2 elements (MXFP8); the 6- and 4-bit formats,
``kind::mxf4`` / ``mxf4nvf4`` and UE4M3 scales are refused.

**Instruction descriptor** (CUTLASS ``UMMA::InstrDescriptorBlockScaled``; PTX ISA "Instruction
descriptor" of the block-scaled kinds): sparsity bits 0-2 (must be 0), B's scale-factor id bits
4-5, A format 7-9 and B format 10-12 (0 e4m3, 1 e5m2, 3 e2m3, 4 e3m2, 5 e2m1), negate 13/14,
transpose 15/16, N >> 3 at 17-22, scale format bit 23 (1 = UE8M0), M >> 4 at 24-28, A's
scale-factor id bits 29-30, K size bit 31 (0).

**Scale factors in TMEM** (CUTLASS ``tmem_sf_frg``, 4x1 data path; what ``tcgen05.cp.32x128b
.warpx4`` of its 512-byte shared-memory atom produces): the factor of row ``r`` (of A's M or
B's N) sits in lane ``r % 32`` of each lane quarter, 32-bit column ``column + r // 32``, byte
``sf id`` (the id picks which 32-element block of a 128-element k-tile this instruction uses).
"""
from __future__ import annotations

import numpy as np

from .errors import SimRuntimeError
from .tmem import COLUMNS, QUARTER

FORMATS = {0: "e4m3", 1: "e5m2", 3: "e2m3", 4: "e3m2", 5: "e2m1"}
E8M0_BIAS = 127


def decode_idesc_scaled(idesc: int, kind: str) -> dict:
    """The fields of a block-scaled instruction descriptor (module docstring); ``SimRuntimeError``
    naming the field for a value not emulated or not allowed."""
    d = int(idesc) & 0xFFFFFFFF
    f = {"sparse": d & 7, "b_sf": d >> 4 & 3, "a": d >> 7 & 7, "b": d >> 10 & 7, "neg_a": d >> 13 & 1,
         "neg_b": d >> 14 & 1, "mn_a": d >> 15 & 1, "mn_b": d >> 16 & 1, "n": (d >> 17 & 0x3F) << 3,
         "scale_fmt": d >> 23 & 1, "m": (d >> 24 & 0x1F) << 4, "a_sf": d >> 29 & 3, "k_size": d >> 31 & 1,
         "saturate": 0, "shift": 0}
    where = f"block-scaled instruction descriptor 0x{d:08x} (kind::{kind})"
    if f["sparse"]:
        raise SimRuntimeError(f"{where}: sparsity bits 0-2 set: sparse block-scaled MMAs are not emulated")
    if not f["scale_fmt"]:
        raise SimRuntimeError(f"{where}: scale format bit 23 = 0 (UE4M3): only UE8M0 scales (bit 23 = 1) are "
                              f"emulated (kind::mxf8f6f4 takes UE8M0)")
    if f["k_size"]:
        raise SimRuntimeError(f"{where}: K size bit 31 must be 0 for kind::mxf8f6f4")
    for op, bits in (("a", "7-9"), ("b", "10-12")):
        t = FORMATS.get(f[op])
        if t is None:
            raise SimRuntimeError(f"{where}: {op.upper()} format (bits {bits}) {f[op]} is none of "
                                  f"{', '.join(f'{k} {v}' for k, v in FORMATS.items())}")
        if t not in ("e4m3", "e5m2"):
            raise SimRuntimeError(f"{where}: {op.upper()} format {t}: 6- and 4-bit MX inputs are not emulated yet")
        f[op + "_type"] = t
    if f["m"] != 128:
        raise SimRuntimeError(f"{where}: M (bits 24-28) = {f['m']}; block-scaled MMAs are emulated with M = 128")
    if not (16 <= f["n"] <= 256 and f["n"] % 16 == 0):
        raise SimRuntimeError(f"{where}: N (bits 17-22) = {f['n']}; M = 128 takes N = 16..256 in steps of 16")
    return f


def sf_cells(address: int, rows: int) -> tuple:
    """(lanes, columns) of the scale factors of ``rows`` rows at TMEM ``address`` (module
    docstring), and the address's lane (must be 0)."""
    r = np.arange(rows)
    lanes = r % QUARTER + QUARTER * ((r // QUARTER) % 4)
    return lanes, (address & 0xFFFF) + r // QUARTER, address >> 16


def read_scales(data: np.ndarray, address: int, rows: int, sf_id: int) -> np.ndarray:
    """The E8M0 scale of each of ``rows`` rows as float64 multipliers ``2^(e - 127)``."""
    lanes, cols, _ = sf_cells(address, rows)
    e = (data[lanes, cols] >> np.uint32(8 * sf_id)) & np.uint32(0xFF)
    out = np.ldexp(1.0, e.astype(np.int64) - E8M0_BIAS)
    out[e == 0xFF] = np.nan
    return out


def sf_shadow_cells(address: int, rows: int) -> np.ndarray:
    lanes, cols, _ = sf_cells(address, rows)
    return np.unique(lanes * COLUMNS + cols)


__all__ = ["decode_idesc_scaled", "read_scales", "sf_cells", "sf_shadow_cells"]
