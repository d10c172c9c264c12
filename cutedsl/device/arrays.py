"""Device arrays: what a backend's memory looks like to the Device layer.

:class:`DeviceArray` is a strided view (shape in elements, strides in bytes, numpy order)
of backend memory. Foreign GPU arrays (torch, cupy, anything with
``__cuda_array_interface__`` or DLPack on a CUDA device) are described by
:func:`describe`, without copies.
"""
from __future__ import annotations

import attrs
import numpy as np

from ..dtypes import DType, dtype as _dtype
from ..errors import ArgumentTypeError


@attrs.frozen
class DeviceArray:
    """``shape`` (elements) and ``strides`` (bytes) view of backend memory at address ``ptr``.

    ``owner`` keeps the allocation alive (a ``DeviceBuffer``, or the foreign array).
    """
    ptr: int
    shape: tuple = attrs.field(converter=tuple)
    strides: tuple = attrs.field(converter=tuple)
    dtype: DType
    backend: object = attrs.field(eq=False, repr=False)
    owner: object = attrs.field(eq=False, repr=False, default=None)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def nbytes(self) -> int:
        n = self.dtype.nbytes
        for s in self.shape:
            n *= s
        return n

    @property
    def __cuda_array_interface__(self):
        if getattr(self.backend, "name", None) != "cuda":
            raise AttributeError("__cuda_array_interface__ exists only for CUDA device arrays")
        return {"shape": self.shape, "strides": self.strides, "typestr": self.dtype.numpy.str,
                "data": (self.ptr, False), "version": 3}

    def view(self, offset: int = 0, shape=None, strides=None) -> "DeviceArray":
        """A view starting ``offset`` bytes further (shape/strides default to this array's)."""
        return attrs.evolve(self, ptr=self.ptr + offset, shape=shape or self.shape,
                            strides=strides or self.strides)

    def is_c_contiguous(self) -> bool:
        expect = self.dtype.nbytes
        for s, st in zip(reversed(self.shape), reversed(self.strides)):
            if s > 1 and st != expect:
                return False
            expect *= s
        return True

    def numpy(self) -> np.ndarray:
        """Copy to a new host array (the view must be C-contiguous)."""
        if not self.is_c_contiguous():
            raise ValueError("numpy() needs a C-contiguous device array")
        out = np.empty(self.shape, self.dtype.numpy)
        self.backend.copy_to_host(out, _Buf(self.ptr), 0)
        return out


@attrs.frozen
class _Buf:
    ptr: int


def to_device(backend, host, pitch_align: int = 1) -> DeviceArray:
    """Copy a numpy array to ``backend``; with ``pitch_align`` (bytes) the rows of a 2-D array
    are padded so the row stride is a multiple of it (what TMA needs: 16)."""
    host = np.asarray(host)
    dt = _dtype(host.dtype)
    if host.ndim == 2 and pitch_align > 1:
        rows, cols = host.shape
        row_bytes = cols * dt.nbytes
        pitch = -(-row_bytes // pitch_align) * pitch_align
        if pitch != row_bytes:
            staged = np.zeros((rows, pitch // dt.nbytes), dt.numpy)
            staged[:, :cols] = host
            buf = backend.alloc(max(staged.nbytes, 1))
            backend.copy_to_device(buf, staged)
            return DeviceArray(buf.ptr, host.shape, (pitch, dt.nbytes), dt, backend, buf)
    host = np.ascontiguousarray(host)
    buf = backend.alloc(max(host.nbytes, 1))
    backend.copy_to_device(buf, host)
    return DeviceArray(buf.ptr, host.shape, host.strides, dt, backend, buf)


def empty(backend, shape, dt, pitch_align: int = 1) -> DeviceArray:
    """Allocate an uninitialised 2-D/1-D device array (rows padded to ``pitch_align`` bytes)."""
    dt = _dtype(dt)
    shape = tuple(shape)
    if len(shape) == 2:
        pitch = -(-shape[1] * dt.nbytes // pitch_align) * pitch_align
        strides = (pitch, dt.nbytes)
        nbytes = pitch * shape[0]
    else:
        strides = (dt.nbytes,)
        nbytes = shape[0] * dt.nbytes
    buf = backend.alloc(max(nbytes, 1))
    return DeviceArray(buf.ptr, shape, strides, dt, backend, buf)


def zero_fill(arr: DeviceArray) -> None:
    """Set every byte of a 2-D/1-D device array (row padding included) to zero."""
    nbytes = arr.strides[0] * arr.shape[0] if arr.ndim == 2 else arr.nbytes
    arr.backend.copy_to_device(_Buf(arr.ptr), np.zeros(max(nbytes, 1), np.uint8))


def to_host(arr: DeviceArray) -> np.ndarray:
    """Copy a (possibly row-pitched) 2-D or 1-D device array into a new C-contiguous host array."""
    e = arr.dtype.nbytes
    if arr.ndim == 2 and arr.strides[1] == e and arr.strides[0] % e == 0:
        rows, cols = arr.shape
        staged = np.empty((rows, arr.strides[0] // e), arr.dtype.numpy)
        arr.backend.copy_to_host(staged, _Buf(arr.ptr), 0)
        return np.ascontiguousarray(staged[:, :cols])
    return arr.numpy()


def describe(x):
    """Describe a foreign device array as ``(ptr, shape, strides_bytes, DType, framework)``;
    None when ``x`` is not a device array (e.g. a numpy array)."""
    if isinstance(x, DeviceArray):
        return x.ptr, x.shape, x.strides, x.dtype, "cutedsl"
    if type(x).__module__.split(".")[0] == "torch":
        import torch  # noqa: F401 - only reached when the caller passed a torch tensor
        if x.is_cuda:
            names = {"torch.float16": "f16", "torch.bfloat16": "bf16", "torch.float32": "f32"}
            dt = _dtype(names.get(str(x.dtype), "x"))
            e = dt.nbytes
            return x.data_ptr(), tuple(x.shape), tuple(s * e for s in x.stride()), dt, "torch"
        return None
    cai = getattr(x, "__cuda_array_interface__", None)
    if cai is not None:
        dt = _dtype(np.dtype(cai["typestr"]) if cai["typestr"] != "<V2" else "bf16")
        shape = tuple(cai["shape"])
        strides = cai.get("strides")
        if strides is None:
            st, acc = [], dt.nbytes
            for s in reversed(shape):
                st.append(acc)
                acc *= s
            strides = tuple(reversed(st))
        fw = type(x).__module__.split(".")[0]
        return cai["data"][0], shape, tuple(strides), dt, fw
    if isinstance(x, np.ndarray) or hasattr(x, "__array__"):
        return None
    raise ArgumentTypeError(f"unsupported array type {type(x).__name__}: pass a numpy array, a "
                            f"cutedsl DeviceArray or a CUDA array (torch, cupy)")
