"""Tensor-map objects: the 128 bytes a TMA instruction reads through its tensor-map operand.

Two encodings, both 128 bytes:

* **Host-encoded** (:func:`register_tensor_map`, what ``SimBackend.encode_tensor_map`` returns):
  ``MAGIC`` + a registry id naming a map validated by
  :func:`cutedsl.runtime.backend.check_tensor_map`.
* **Field layout** (tensor maps built or edited on the device with ``tensormap.replace``). A
  ``CUtensorMap`` is opaque: the PTX ISA defines its *fields*, not their bit positions, so the
  emulator uses its own little-endian layout:

  ==========  ==================================================================================
  bytes       field
  ==========  ==================================================================================
  0..7        ``global_address`` (u64)
  8..27       ``global_dim[0..4]`` (u32 each, elements, innermost first)
  32..63      ``global_stride[0..3]`` (u64 each, bytes; ``[i]`` is the stride of dimension i+1)
  64..83      ``box_dim[0..4]`` (u32)
  84..103     ``element_stride[0..4]`` (u32)
  104..109    ``rank`` (rank - 1: zero-based, as in the ISA), ``elemtype``, ``interleave_layout``,
              ``swizzle_mode``, ``swizzle_atomicity``, ``fill_mode`` (u8 each, the ISA's encodings)
  ==========  ==================================================================================

  Memory zero-filled with ``st.shared`` and completed field by field (what Triton's
  ``tl.make_tensor_descriptor`` emits) is therefore a tensor map. :func:`decode` validates it
  with the same driver rules as host maps when a TMA uses it.
"""
from __future__ import annotations

import itertools
import struct
from functools import lru_cache

import numpy as np

from ...compiler.artifact import TensorMapSpec
from ...runtime.backend import check_tensor_map
from ...dtypes import PACKED_TMA, dtype as _dt
from ...errors import TensorMapError

MAGIC = b"CUTEDSL-SIM-TMAP"
_REGISTRY = {}
_IDS = itertools.count(1)


class TensorMap:
    """Decoded tensor map: ``dims``/``box`` innermost first (elements), ``strides`` in bytes for
    dims 0..rank-1 (``strides[0] = e``), ``esize`` bytes, ``swizzle`` span bytes, ``oob``.
    A packed sub-byte map is kept in global bytes: ``bits`` per element (dims[0], box[0] and
    coordinate 0 scaled by it; 0 for the byte-sized types). 16U4_ALIGN8B: shared memory holds the
    packed bytes as global memory does. The ALIGN16B types: ``group`` (8 or 12) data bytes of
    every 16 elements land in a 16-byte slot of shared memory, the rest of the slot zero
    (cuda.h: "8 byte gaps" / "4 byte gaps"); rows of 128 elements, 128 bytes in shared memory."""
    __slots__ = ("id", "address", "dims", "strides", "box", "esize", "swizzle", "oob", "dtype",
                 "nan_bits", "enc", "bits", "group", "plans")

    def __init__(self, enc):
        spec = enc.spec
        self.enc = enc
        self.plans = {}     # tma_box's issue plans of this map (fields never change after decode)
        self.address = int(enc.address)
        self.dims = tuple(int(d) for d in enc.dims)
        self.box = tuple(int(b) for b in enc.box)
        self.bits = self.group = 0
        packed = PACKED_TMA.get(spec.dtype)
        if packed is not None:
            self.bits = packed.bits
            self.dims = (self.dims[0] * packed.bits // 8,) + self.dims[1:]
            self.box = (self.box[0] * packed.bits // 8,) + self.box[1:]
            if packed.smem_group_bytes == 16:
                self.group = 16 * packed.bits // 8
        dt = _dt("u8" if packed is not None else spec.dtype)
        self.esize = dt.nbytes
        self.strides = (self.esize,) + tuple(int(s) for s in enc.strides)
        self.swizzle = int(spec.swizzle)
        self.oob = spec.oob
        self.dtype = dt.numpy
        self.nan_bits = 0
        if spec.oob == "nan":
            self.nan_bits = int(np.array(np.nan, np.float64).astype(self.dtype).view(f"u{self.esize}"))

    @property
    def box_bytes(self):
        n = self.esize
        for b in self.box:          # plain ints: np.prod costs microseconds per TMA
            n *= b
        return n


def register_tensor_map(enc) -> bytes:
    """Register an EncodedTensorMap; return its 128-byte blob."""
    tm = TensorMap(enc)
    tm.id = next(_IDS)
    _REGISTRY[tm.id] = tm
    return MAGIC + struct.pack("<QQ", tm.id, 0x5EED) + bytes(128 - 32)


def decode_blob(blob: bytes) -> TensorMap | None:
    """The registered map a host-encoded blob names, or None for any other 128 bytes."""
    if len(blob) != 128 or blob[:16] != MAGIC:
        return None
    tid, chk = struct.unpack_from("<QQ", blob, 16)
    if chk != 0x5EED:
        return None
    return _REGISTRY.get(tid)


SIZE = 128          #: bytes of a tensor-map object (``.b1024``)
_LAYOUT = struct.Struct("<Q5I4x4Q5I5I6B18x")
assert _LAYOUT.size == SIZE

#: PTX ``elemtype`` encodings the emulator moves -> cutedsl dtype names (FTZ and packed
#: sub-byte types are rejected when the map is used)
ELEMTYPE = {0: "u8", 1: "u16", 2: "u32", 3: "i32", 4: "u64", 5: "i64", 6: "f16", 7: "f32", 9: "f64",
            10: "bf16", 11: "tf32", 13: "16u4_align8b"}
_ELEMTYPE_OF = {"u8": 0, "i8": 0, "e4m3": 0, "e5m2": 0, "u16": 1, "u32": 2, "i32": 3, "u64": 4, "i64": 5,
                "f16": 6, "f32": 7, "f64": 9, "bf16": 10, "tf32": 11, "16u4_align8b": 13}
SWIZZLE = {0: 0, 1: 32, 2: 64, 3: 128}
#: field name -> (register type, takes an ordinal, ordinal limit)
FIELDS = {"global_address": ("b64", False, 0), "rank": ("b32", False, 0), "box_dim": ("b32", True, 5),
          "global_dim": ("b32", True, 5), "global_stride": ("b64", True, 4), "element_stride": ("b32", True, 5),
          "elemtype": ("b32", False, 0), "interleave_layout": ("b32", False, 0), "swizzle_mode": ("b32", False, 0),
          "swizzle_atomicity": ("b32", False, 0), "fill_mode": ("b32", False, 0)}


class Fields:
    """The fields of one tensor map (see the module docstring)."""
    __slots__ = ("global_address", "global_dim", "global_stride", "box_dim", "element_stride", "rank",
                 "elemtype", "interleave_layout", "swizzle_mode", "swizzle_atomicity", "fill_mode")

    @classmethod
    def unpack(cls, blob: bytes) -> "Fields":
        v = _LAYOUT.unpack(blob)
        f = cls()
        f.global_address = v[0]
        f.global_dim, f.global_stride = list(v[1:6]), list(v[6:10])
        f.box_dim, f.element_stride = list(v[10:15]), list(v[15:20])
        (f.rank, f.elemtype, f.interleave_layout, f.swizzle_mode, f.swizzle_atomicity,
         f.fill_mode) = v[20:26]
        return f

    @classmethod
    def of_tensor_map(cls, tm) -> "Fields":
        """Fields of a decoded host map (:class:`TensorMap`)."""
        r = len(tm.dims)
        f = cls()
        f.global_address = tm.address
        f.global_dim = [int(d) for d in tm.enc.dims] + [0] * (5 - r)     # elements (packed types too)
        f.global_stride = list(tm.strides[1:]) + [0] * (5 - r)
        f.box_dim = [int(b) for b in tm.enc.box] + [0] * (5 - r)
        f.element_stride = [1] * r + [0] * (5 - r)
        f.rank = r - 1
        f.elemtype = _ELEMTYPE_OF[tm.enc.spec.dtype]
        f.interleave_layout = f.swizzle_atomicity = 0
        f.swizzle_mode = {v: k for k, v in SWIZZLE.items()}[tm.swizzle]
        f.fill_mode = 1 if tm.oob == "nan" else 0
        return f

    def pack(self) -> bytes:
        return _LAYOUT.pack(self.global_address, *self.global_dim, *self.global_stride, *self.box_dim,
                            *self.element_stride, self.rank, self.elemtype, self.interleave_layout,
                            self.swizzle_mode, self.swizzle_atomicity, self.fill_mode)


@lru_cache(maxsize=1024)
def decode_fields(blob: bytes):
    """Validate a field-layout map and return its :class:`TensorMap`; raises ``TensorMapError``."""
    f = Fields.unpack(blob)
    rank = f.rank + 1
    if rank > 5:
        raise TensorMapError(f"rank field {f.rank} (rank {rank}) is outside TMA's 1..5")
    if f.elemtype not in ELEMTYPE:
        raise TensorMapError(f"elemtype {f.elemtype} is not supported by the emulator")
    if f.interleave_layout:
        raise TensorMapError(f"interleave_layout {f.interleave_layout} (interleaved maps) is not supported")
    if f.swizzle_mode not in SWIZZLE:
        raise TensorMapError(f"swizzle_mode {f.swizzle_mode} is not a Hopper swizzle (0..3)")
    if f.swizzle_atomicity:
        raise TensorMapError(f"swizzle_atomicity {f.swizzle_atomicity} is not supported on sm_90")
    if f.fill_mode > 1:
        raise TensorMapError(f"fill_mode {f.fill_mode} is not 0 (zero) or 1 (NaN)")
    dtype = ELEMTYPE[f.elemtype]
    spec = TensorMapSpec("device tensor map", dtype, tuple(f.box_dim[:rank][::-1]), SWIZZLE[f.swizzle_mode],
                         "nan" if f.fill_mode else "zero")
    esize = 0 if dtype in PACKED_TMA else _dt(dtype).nbytes      # packed elements have no byte stride
    shape = f.global_dim[:rank][::-1]
    strides = ([esize] + f.global_stride[:rank - 1])[::-1]
    enc = check_tensor_map(spec, f.global_address, shape, strides)
    for i, s in enumerate(f.element_stride[:rank]):
        if not 1 <= s <= 8:
            raise TensorMapError(f"element_stride[{i}] is {s}, TMA allows 1..8")
        if s != 1:
            raise TensorMapError(f"element_stride[{i}] is {s}: element strides other than 1 are not "
                                 f"supported by the emulator")
    tm = TensorMap(enc)
    tm.id = -1
    return tm


def fields_of(blob: bytes) -> Fields:
    """Fields of any 128-byte tensor-map object: a host-encoded blob or the field layout."""
    tm = decode_blob(blob)
    return Fields.of_tensor_map(tm) if tm is not None else Fields.unpack(blob)


def decode(blob: bytes) -> TensorMap:
    """The tensor map a 128-byte object holds: a host-encoded blob, else the device field layout
    (validated like ``cuTensorMapEncodeTiled``; raises ``TensorMapError`` naming the broken rule)."""
    tm = decode_blob(blob)
    return tm if tm is not None else decode_fields(bytes(blob))
