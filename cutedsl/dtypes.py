"""Element types known to cutedsl, without importing MLIR.

Each :class:`DType` gives the numpy dtype (``ml_dtypes`` for bf16/fp8), the size in
bytes, the ``CUtensorMapDataType`` code used by TMA and the MLIR type spelling.
"""
from __future__ import annotations

import attrs
import numpy as np


@attrs.frozen
class DType:
    name: str          #: cutedsl spelling, e.g. ``"f16"``
    nbytes: int        #: bytes per element
    tma_code: int      #: CUtensorMapDataType enum value (-1: TMA cannot move it)
    mlir: str          #: MLIR type spelling
    kind: str          #: "float" | "int" | "uint"

    @property
    def numpy(self) -> np.dtype:
        return _numpy_dtype(self.name)


def _numpy_dtype(name: str) -> np.dtype:
    if name in ("bf16", "e4m3", "e5m2", "e2m1", "e2m3", "e3m2"):
        import ml_dtypes
        return np.dtype({"bf16": ml_dtypes.bfloat16, "e4m3": ml_dtypes.float8_e4m3fn,
                         "e5m2": ml_dtypes.float8_e5m2, "e2m1": ml_dtypes.float4_e2m1fn,
                         "e2m3": ml_dtypes.float6_e2m3fn, "e3m2": ml_dtypes.float6_e3m2fn}[name])
    return np.dtype({"f16": np.float16, "f32": np.float32, "f64": np.float64, "tf32": np.float32,
                     "u8": np.uint8, "u16": np.uint16, "u32": np.uint32, "u64": np.uint64,
                     "i8": np.int8, "i32": np.int32, "i64": np.int64, "e2m1x2": np.uint8}[name])


_TABLE = [
    DType("u8", 1, 0, "ui8", "uint"), DType("u16", 2, 1, "ui16", "uint"),
    DType("u32", 4, 2, "ui32", "uint"), DType("i32", 4, 3, "i32", "int"),
    DType("u64", 8, 4, "ui64", "uint"), DType("i64", 8, 5, "i64", "int"),
    DType("f16", 2, 6, "f16", "float"), DType("f32", 4, 7, "f32", "float"),
    DType("f64", 8, 8, "f64", "float"), DType("bf16", 2, 9, "bf16", "float"),
    # tf32 lives in memory as f32 words (MLIR's own tf32 type is 19 bits wide: memrefs use f32)
    DType("tf32", 4, 11, "f32", "float"), DType("i8", 1, 0, "i8", "int"),
    DType("e4m3", 1, 0, "f8E4M3FN", "float"), DType("e5m2", 1, 0, "f8E5M2", "float"),
    # e2m1 (MXFP4): one element per byte in numpy (ml_dtypes), packed two per byte on the device;
    # the kernels' tensor maps move the packed bytes as u8 (MmaTraits.storage)
    DType("e2m1", 1, -1, "f4E2M1FN", "float"),
    # e2m3 / e3m2 (MXFP6): one element per byte in numpy; packed 6 bits each on the device and
    # moved by 16U6_ALIGN16B tensor maps (MmaTraits.tma_dtype)
    DType("e2m3", 1, -1, "f6E2M3FN", "float"), DType("e3m2", 1, -1, "f6E3M2FN", "float"),
    # e2m1x2: a byte of two e2m1 (element 2i in the low nibble), torch's float4_e2m1fn_x2: the
    # storage type of device-resident MXFP4 / NVFP4 operands (cutedsl.device.mx.to_device);
    # numpy holds it as uint8 (after u8 here, so a numpy uint8 array stays u8)
    DType("e2m1x2", 1, -1, "i8", "float"),
]
#: packed storage type -> (element type, elements per byte): device operands of these types are
#: read as their elements, the contiguous axis counting elements (cutedsl.runtime.tensor_view.TensorView)
PACKED_STORAGE = {"e2m1x2": ("e2m1", 2)}
DTYPES = {d.name: d for d in _TABLE}


@attrs.frozen
class PackedTmaType:
    """A TMA data type of sub-byte elements (``CUtensorMapDataType`` 13-15, cuda.h): groups of 16
    ``bits``-bit values, packed in global memory, ``smem_group_bytes`` per group in shared memory
    (8: packed as in global memory; 16: each group padded to 16 bytes, the layout
    ``tcgen05.mma.kind::f8f6f4`` reads 4- and 6-bit operands in). Tensor-map dims and coordinates
    count elements; a tensor map of one has no element stride."""
    name: str
    bits: int
    tma_code: int
    smem_group_bytes: int


PACKED_TMA = {t.name: t for t in (PackedTmaType("16u4_align8b", 4, 13, 8), PackedTmaType("16u4_align16b", 4, 14, 16),
                                  PackedTmaType("16u6_align16b", 6, 15, 16))}


def dtype(x) -> DType:
    """Return the :class:`DType` for a cutedsl name (``"f16"``), a numpy dtype or a DType.

    Raises ``ArgumentTypeError`` for anything else.
    """
    from .errors import ArgumentTypeError
    if isinstance(x, DType):
        return x
    if isinstance(x, str) and x in DTYPES:
        return DTYPES[x]
    try:
        npd = np.dtype(x)
    except TypeError:
        raise ArgumentTypeError(f"unknown dtype {x!r}; known: {', '.join(DTYPES)}") from None
    for d in _TABLE:
        if d.name != "tf32" and d.numpy == npd:
            return d
    raise ArgumentTypeError(f"unsupported dtype {npd}; known: {', '.join(DTYPES)}")


def same_storage(given: str, want: str) -> bool:
    """An array of dtype ``given`` holds ``want`` operands: equal names, or f32 words for tf32
    (the tensor cores read the 19 high bits of each f32)."""
    return given == want or (want == "tf32" and given == "f32")


def tensor_core_value(x, name: str) -> np.ndarray:
    """float64 values the tensor cores multiply when they read array ``x`` as ``name``
    operands: tf32 drops the 13 low mantissa bits of each f32 (truncation, as measured on
    H100; the PTX ISA leaves the rounding of ``.tf32`` operands to the implementation, so
    round with ``cvt.rna.tf32.f32`` first for round-to-nearest); other types exactly."""
    x = np.asarray(x)
    if name == "tf32":
        x = (np.ascontiguousarray(x, np.float32).view(np.uint32) & np.uint32(0xFFFFE000)).view(np.float32)
    return x.astype(np.float64)

