"""Reading a DLPack tensor without any framework (the DLPack C ABI through ctypes).

:func:`describe_dlpack` takes any object with ``__dlpack__`` / ``__dlpack_device__`` (torch,
cupy, jax, numpy, ...) and returns ``(ptr, shape, strides in bytes, DType, device type)`` of
its memory, zero-copy: the capsule is read, not consumed, so the producer keeps ownership and
its deleter runs when the capsule goes (the caller keeps the producer alive while the memory
is used). Source: DLPack ``dlpack.h`` v0.8 (``DLManagedTensor``, ``DLTensor``, device and
dtype codes) and the Python array API's ``__dlpack__`` protocol.
"""
from __future__ import annotations

import ctypes

from ..dtypes import dtype as _dtype
from ..errors import ArgumentError, ArgumentTypeError

KDL_CPU, KDL_CUDA, KDL_CUDA_HOST, KDL_CUDA_MANAGED = 1, 2, 3, 13
_DEVICE_NAMES = {1: "CPU", 2: "CUDA", 3: "CUDA host (pinned)", 13: "CUDA managed", 4: "OpenCL", 7: "Vulkan",
                 8: "Metal", 10: "ROCm"}
#: (type code, bits) -> cutedsl dtype name; codes: 0 int, 1 uint, 2 float, 4 bfloat, and
#: DLPack 1.1's 10 float8_e4m3fn, 12 float8_e5m2
_DTYPES = {(2, 16): "f16", (2, 32): "f32", (2, 64): "f64", (4, 16): "bf16", (0, 32): "i32", (0, 64): "i64",
           (1, 8): "u8", (1, 16): "u16", (1, 32): "u32", (1, 64): "u64", (0, 8): "i8",
           (10, 8): "e4m3", (12, 8): "e5m2"}


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", DLDevice), ("ndim", ctypes.c_int32), ("dtype", DLDataType),
                ("shape", ctypes.POINTER(ctypes.c_int64)), ("strides", ctypes.POINTER(ctypes.c_int64)),
                ("byte_offset", ctypes.c_uint64)]


class DLManagedTensor(ctypes.Structure):
    pass


DLManagedTensor._fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p),
                            ("deleter", ctypes.CFUNCTYPE(None, ctypes.POINTER(DLManagedTensor)))]

_get_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_get_pointer.restype, _get_pointer.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]


def is_dlpack(x) -> bool:
    return hasattr(x, "__dlpack__") and hasattr(x, "__dlpack_device__")


def device_of(x) -> tuple:
    """``(device type, device id)`` from ``__dlpack_device__``."""
    t, i = x.__dlpack_device__()
    return int(t), int(i)


def describe_dlpack(x, name: str = "array") -> tuple:
    """``(ptr, shape, strides_bytes, DType, device_type)`` of a DLPack producer (see module
    docstring). ``ArgumentTypeError`` for a dtype cutedsl has no name for or vector lanes;
    ``ArgumentError`` for a capsule that cannot be read."""
    try:
        cap = x.__dlpack__()
    except Exception as e:       # noqa: BLE001 - a producer's own refusal (e.g. a stream argument)
        raise ArgumentError(f"{name}: its __dlpack__() failed ({type(e).__name__}: {e})") from None
    try:
        ptr = _get_pointer(cap, b"dltensor")
    except ValueError:
        raise ArgumentError(f"{name}: __dlpack__() did not return a 'dltensor' capsule") from None
    t = DLManagedTensor.from_address(ptr).dl_tensor
    code, bits, lanes = t.dtype.code, t.dtype.bits, t.dtype.lanes
    dt_name = _DTYPES.get((code, bits))
    if dt_name is None or lanes != 1:
        raise ArgumentTypeError(f"{name}: DLPack dtype (code {code}, {bits} bits, {lanes} lanes) has no cutedsl "
                                f"type (f16, bf16, f32, integers)")
    dt = _dtype(dt_name)
    shape = tuple(int(t.shape[i]) for i in range(t.ndim))
    if t.strides:
        strides = tuple(int(t.strides[i]) * dt.nbytes for i in range(t.ndim))
    else:                        # NULL strides: compact row-major
        strides, acc = [], dt.nbytes
        for s in reversed(shape):
            strides.append(acc)
            acc *= s
        strides = tuple(reversed(strides))
    data = (t.data or 0) + int(t.byte_offset)
    del cap                      # unconsumed: its destructor calls the producer's deleter
    return data, shape, strides, dt, int(t.device.device_type)


def device_name(t: int) -> str:
    return _DEVICE_NAMES.get(t, f"device type {t}")


# -- producing: a cutedsl DeviceArray on CUDA memory as a DLPack capsule --------------------
_LIVE: dict = {}                 # address of a DLManagedTensor we made -> (struct, shape, strides, owner)
_DELETER_T = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
# the destructor gets the dying capsule as a raw pointer: no Python reference may be taken to it
_CAPSULE_DESTRUCTOR_T = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
_capsule_new = ctypes.pythonapi.PyCapsule_New
_capsule_new.restype, _capsule_new.argtypes = ctypes.py_object, [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
_raw_is_valid = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p)(
    ("PyCapsule_IsValid", ctypes.pythonapi))
_raw_get_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", ctypes.pythonapi))
_TO_CODE = {v: k for k, v in _DTYPES.items()}


@_DELETER_T
def _deleter(addr):
    _LIVE.pop(addr, None)        # the consumer is done: drop our struct and the owner reference


@_CAPSULE_DESTRUCTOR_T
def _capsule_destructor(cap):
    # an unconsumed capsule (its name is still "dltensor") owns the tensor: release it
    if _raw_is_valid(cap, b"dltensor"):
        _LIVE.pop(_raw_get_pointer(cap, b"dltensor"), None)


def to_capsule(ptr: int, shape, strides_bytes, dtype_name: str, device_type: int, device_id: int, owner):
    """A ``"dltensor"`` capsule describing ``shape`` x ``dtype_name`` at ``ptr`` (strides in
    bytes, whole elements), keeping ``owner`` alive until the consumer calls the deleter."""
    code = _TO_CODE.get(dtype_name)
    if code is None:
        raise ArgumentTypeError(f"DLPack has no type for cutedsl dtype {dtype_name!r}")
    esize = code[1] // 8
    if any(s % esize for s in strides_bytes):
        raise ArgumentError(f"DLPack strides are in elements: {strides_bytes} B is not a multiple of {esize} B")
    nd = len(shape)
    shp = (ctypes.c_int64 * nd)(*shape)
    st = (ctypes.c_int64 * nd)(*[s // esize for s in strides_bytes])
    m = DLManagedTensor()
    m.dl_tensor.data, m.dl_tensor.ndim, m.dl_tensor.byte_offset = ptr, nd, 0
    m.dl_tensor.device = DLDevice(device_type, device_id)
    m.dl_tensor.dtype = DLDataType(code[0], code[1], 1)
    m.dl_tensor.shape, m.dl_tensor.strides = shp, st
    m.deleter = ctypes.cast(_deleter, type(m.deleter))
    addr = ctypes.addressof(m)
    _LIVE[addr] = (m, shp, st, owner)
    return _capsule_new(addr, b"dltensor", ctypes.cast(_capsule_destructor, ctypes.c_void_p))


def live_exports() -> int:
    """DLPack tensors handed out and not yet released by their consumers."""
    return len(_LIVE)


def wrap_like(dd, fw: str):
    """The device result as the caller's framework's array (torch, cupy; another DLPack
    producer's framework through its ``from_dlpack``), else the DeviceArray."""
    if fw == "torch":
        import torch
        # DLPack, not __cuda_array_interface__: the latter has no bf16 typestr (numpy's '<V2'),
        # which torch.as_tensor refuses; DLPack carries kDLBfloat
        return torch.from_dlpack(dd)
    if fw == "cupy":
        import cupy
        return cupy.asarray(dd)
    if fw.startswith("dlpack:") and getattr(dd.backend, "name", None) == "cuda":
        import importlib
        mod = {"jax": "jax.numpy", "jaxlib": "jax.numpy"}.get(fw[7:], fw[7:])
        try:
            return importlib.import_module(mod).from_dlpack(dd)
        except (ImportError, AttributeError):
            return dd                     # a framework without from_dlpack: cutedsl's array
    return dd
