"""Device arrays: what a backend's memory looks like to the host side of every kernel.

:class:`DeviceArray` is a strided view (shape in elements, strides in bytes, numpy order)
of backend memory. Foreign GPU arrays (torch, cupy, anything with
``__cuda_array_interface__`` or DLPack on a CUDA device) are described by
:func:`describe`, without copies.

**Ownership** (who frees what):

* ``Backend.alloc`` returns a raw ``DeviceBuffer``; whoever called it frees it with
  ``Backend.free`` (exactly once).
* :func:`to_device` and :func:`empty` return a ``DeviceArray`` whose ``owner`` is an
  :class:`OwnedBuffer`: the memory is freed when the last array or view sharing that owner is
  garbage collected, or at once by :meth:`DeviceArray.free` (views then dangle).
* Foreign arrays (torch, cupy, a ``DeviceArray`` you pass in) are never freed by cutedsl; a
  ``DeviceArray`` wrapping one keeps it alive through ``owner``.

**Checked before every launch** (:meth:`DeviceArray.check_allocation`): an array cutedsl
allocated knows its allocation (base address, size in bytes, alive or freed), so a freed array,
or a view whose first or last byte lies outside its allocation, is an ``ArgumentError`` naming
the operand and the allocation before anything runs; :meth:`DeviceArray.view` checks offset,
shape and strides when the view is made. Foreign arrays (``__cuda_array_interface__``, torch)
carry no allocation bounds cutedsl can see: their device, dtype, alignment and strides are
checked (the TMA rules), their extent and lifetime are the caller's to keep right.
"""
from __future__ import annotations

import os
import weakref

import attrs
import numpy as np

from ..dtypes import DType, dtype as _dtype
from ..errors import ArgumentError, ArgumentTypeError


class OwnedBuffer:
    """A backend allocation of ``nbytes`` bytes (``buf``: its ``DeviceBuffer``) that frees itself:
    on :meth:`release`, or when the last reference to this object is garbage collected."""

    __slots__ = ("buf", "nbytes", "_fin", "__weakref__")

    def __init__(self, backend, nbytes: int):
        self.nbytes = max(int(nbytes), 1)
        self.buf = backend.alloc(self.nbytes)
        self._fin = weakref.finalize(self, _in_owner_process(os.getpid(), backend.free), self.buf)
        self._fin.atexit = False          # at exit the process's device memory goes anyway

    @property
    def alive(self) -> bool:
        return self._fin.alive

    def release(self) -> None:
        """Free the memory now (idempotent)."""
        self._fin()


def _in_owner_process(pid, fn):
    """``fn`` as a finalizer that does nothing in a forked child (the compiler's lowering
    worker): the memory is the parent's, and a backend lock held by another parent thread at
    the fork would never be released in the child."""
    def call(*args):
        if os.getpid() == pid:
            fn(*args)
    return call


def _release_call(backend, owned, tmaps, callbacks=()):
    for fn in callbacks:
        fn()
    for arr in owned:
        arr.free()
    release = getattr(backend, "release_tensor_map", None)
    for t in tmaps:
        if release is not None:
            release(t)
    owned.clear()
    tmaps.clear()


class CallScratch:
    """What one prepared launch owns: device arrays cutedsl allocated for it (``arrays``:
    staging copies, a result copied back to the host) and the tensor maps it encoded
    (``tmaps``); ``keep`` holds the caller's arrays for as long as the launch may run.
    Released once: by :meth:`release`, or when garbage collected (then also the
    :meth:`on_release` callbacks run, e.g. a workspace going back to its pool)."""

    __slots__ = ("arrays", "tmaps", "keep", "_callbacks", "_fin", "__weakref__")

    def __init__(self, backend):
        self.arrays, self.tmaps, self.keep, self._callbacks = [], [], (), []
        self._fin = weakref.finalize(self, _in_owner_process(os.getpid(), _release_call), backend,
                                     self.arrays, self.tmaps, self._callbacks)
        self._fin.atexit = False

    def release(self) -> None:
        self._fin()

    def on_release(self, fn) -> None:
        """Call ``fn()`` when this scratch is released (before its arrays are freed)."""
        self._callbacks.append(fn)

    @property
    def alive(self) -> bool:
        """False once released: what it owned (parameter block, tensor maps) is gone."""
        return self._fin.alive


@attrs.frozen
class DeviceArray:
    """``shape`` (elements) and ``strides`` (bytes) view of backend memory at address ``ptr``.

    ``owner`` keeps the allocation alive: an :class:`OwnedBuffer` (memory cutedsl allocated,
    freed with the last array referring to it), or the foreign array it describes.
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

    def __dlpack_device__(self):
        """``(kDLCUDA, 0)`` for CUDA memory; the emulator's memory is no device DLPack knows."""
        from . import dlpack
        if getattr(self.backend, "name", None) != "cuda":
            raise BufferError("only DeviceArrays of the CUDA backend can be shared through DLPack")
        return (dlpack.KDL_CUDA, 0)

    def __dlpack__(self, stream=None, **_ignored):
        """A DLPack capsule of this CUDA array, zero-copy (the consumer keeps it alive until it
        is done). cutedsl's launches are synchronous, so no stream ordering is needed."""
        from . import dlpack
        dev_type, dev_id = self.__dlpack_device__()
        return dlpack.to_capsule(self.ptr, self.shape, self.strides, self.dtype.name, dev_type, dev_id, self)

    @property
    def __cuda_array_interface__(self):
        if getattr(self.backend, "name", None) != "cuda":
            raise AttributeError("__cuda_array_interface__ exists only for CUDA device arrays")
        return {"shape": self.shape, "strides": self.strides, "typestr": self.dtype.numpy.str,
                "data": (self.ptr, False), "version": 3}

    def view(self, offset: int = 0, shape=None, strides=None) -> "DeviceArray":
        """A view starting ``offset`` bytes further (shape in elements, strides in bytes; both
        default to this array's). ``ArgumentTypeError`` for non-integer values, ``ArgumentError``
        for negative sizes, a rank mismatch, or a view of memory cutedsl allocated that would
        reach outside that allocation or that was freed."""
        shape = self.shape if shape is None else _int_tuple("view(): shape", shape)
        strides = self.strides if strides is None else _int_tuple("view(): strides", strides)
        if isinstance(offset, bool) or not isinstance(offset, (int, np.integer)):
            raise ArgumentTypeError(f"view(): offset must be an int number of bytes, got {type(offset).__name__}")
        if len(shape) != len(strides):
            raise ArgumentError(f"view(): shape {shape} and strides {strides} differ in rank")
        if any(d < 0 for d in shape):
            raise ArgumentError(f"view(): shape {shape} has a negative size")
        v = attrs.evolve(self, ptr=self.ptr + int(offset), shape=shape, strides=strides)
        v.check_allocation("view()")
        return v

    @property
    def mT(self) -> "DeviceArray":
        """The view with the last two axes swapped (no copy): e.g. ``b.mT`` hands a K-major
        ``(N, K)`` array to a GEMM as its ``(K, N)`` B. ``ArgumentError`` below 2-D."""
        if self.ndim < 2:
            raise ArgumentError(f"mT needs a 2-D or 3-D array, got shape {self.shape}")
        swap = lambda t: tuple(t[:-2]) + (t[-1], t[-2])      # noqa: E731
        return attrs.evolve(self, shape=swap(self.shape), strides=swap(self.strides))

    @property
    def T(self) -> "DeviceArray":
        """The transpose of a 2-D array (no copy; as numpy's ``.T``). ``ArgumentError`` for other
        ranks (use :attr:`mT` for a batch of matrices)."""
        if self.ndim != 2:
            raise ArgumentError(f"T is the transpose of a 2-D array, got shape {self.shape} (mT swaps the last two axes)")
        return self.mT

    def byte_span(self) -> tuple | None:
        """``(first, end)``: byte offsets from ``ptr`` of the lowest byte the view covers and one
        past its highest (negative strides included); None for an empty view."""
        if any(d == 0 for d in self.shape):
            return None
        lo = sum(min(0, st * (d - 1)) for d, st in zip(self.shape, self.strides))
        hi = sum(max(0, st * (d - 1)) for d, st in zip(self.shape, self.strides))
        return lo, hi + self.dtype.nbytes

    def check_allocation(self, name: str = "array") -> None:
        """``ArgumentError`` naming ``name`` when this array's memory (allocated by cutedsl) was
        freed, or when its first or last byte lies outside that allocation. Foreign memory is not
        checked here (see the module docstring)."""
        own = self.owner
        while isinstance(own, DeviceArray):          # a wrapper of one of ours
            own = own.owner
        if not isinstance(own, OwnedBuffer):
            return
        base, size = own.buf.ptr, own.nbytes
        if not own.alive:
            raise ArgumentError(f"{name}: its device memory ({size} bytes at 0x{base:x}) was freed "
                                f"(DeviceArray.free()); a freed array or a view of it cannot be used")
        span = self.byte_span()
        if span is None:
            return
        first, end = self.ptr + span[0] - base, self.ptr + span[1] - base
        if first < 0 or end > size:
            where = "starts before" if first < 0 else "runs past the end of"
            raise ArgumentError(f"{name}: shape {self.shape} with strides {self.strides} (bytes) at offset "
                                f"{self.ptr - base} covers bytes [{first}, {end}) and {where} its allocation "
                                f"of {size} bytes at 0x{base:x}")

    def is_c_contiguous(self) -> bool:
        expect = self.dtype.nbytes
        for s, st in zip(reversed(self.shape), reversed(self.strides)):
            if s > 1 and st != expect:
                return False
            expect *= s
        return True

    def free(self) -> None:
        """Free memory cutedsl allocated for this array now (idempotent); this array and its
        views must not be used afterwards. ``ArgumentError`` for foreign memory (free it
        through its own framework)."""
        if not isinstance(self.owner, OwnedBuffer):
            raise ArgumentError("free(): this DeviceArray views memory cutedsl did not allocate")
        self.owner.release()

    def numpy(self) -> np.ndarray:
        """Copy to a new host array (the view must be C-contiguous)."""
        if not self.is_c_contiguous():
            raise ValueError("numpy() needs a C-contiguous device array")
        out = np.empty(self.shape, self.dtype.numpy)
        self.backend.copy_to_host(out, _Buf(self.ptr), 0)
        return out


def _int_tuple(what: str, v) -> tuple:
    try:
        t = tuple(v)
    except TypeError:
        raise ArgumentTypeError(f"{what} must be a tuple of ints, got {type(v).__name__}") from None
    if not all(isinstance(x, (int, np.integer)) and not isinstance(x, bool) for x in t):
        raise ArgumentTypeError(f"{what} must be a tuple of ints, got {t!r}")
    return tuple(int(x) for x in t)


@attrs.frozen
class _Buf:
    ptr: int


def _check_backend(fn: str, backend, other) -> None:
    """``ArgumentTypeError`` unless ``backend`` is a Backend (the usual slip: arguments swapped)."""
    if not hasattr(backend, "alloc"):
        swapped = " (arguments swapped?)" if hasattr(other, "alloc") else ""
        raise ArgumentTypeError(f"{fn}: backend expected first, got {type(backend).__name__}{swapped}")


def to_device(backend, host, pitch_align: int = 1) -> DeviceArray:
    """Copy a numpy array to ``backend``; with ``pitch_align`` (bytes) the rows of a 2-D array
    are padded so the row stride is a multiple of it (what TMA needs: 16). The result owns
    its memory (see the module docstring). ``ArgumentTypeError`` when ``backend`` is not a
    Backend (e.g. the arguments swapped)."""
    _check_backend("to_device(backend, host)", backend, host)
    host = np.asarray(host)
    dt = _dtype(host.dtype)
    if host.ndim >= 2 and pitch_align > 1:
        cols = host.shape[-1]
        row_bytes = cols * dt.nbytes
        pitch = -(-row_bytes // pitch_align) * pitch_align
        if pitch != row_bytes:
            staged = np.zeros(host.shape[:-1] + (pitch // dt.nbytes,), dt.numpy)
            staged[..., :cols] = host
            own = OwnedBuffer(backend, staged.nbytes)
            backend.copy_to_device(own.buf, staged)
            strides = tuple(int(x) for x in staged.strides[:-1]) + (dt.nbytes,)
            return DeviceArray(own.buf.ptr, host.shape, strides, dt, backend, own)
    host = np.ascontiguousarray(host)
    own = OwnedBuffer(backend, host.nbytes)
    backend.copy_to_device(own.buf, host)
    # numpy calls an array with a size-1 dimension contiguous whatever that dimension's stride
    # (x.T of an (8, 1) array has strides (2, 2)): the device copy gets true C strides
    strides = tuple(int(np.prod(host.shape[i + 1:], dtype=np.int64)) * dt.nbytes for i in range(host.ndim))
    return DeviceArray(own.buf.ptr, host.shape, strides, dt, backend, own)


def empty(backend, shape, dt, pitch_align: int = 1, label: str | None = None) -> DeviceArray:
    """Allocate an uninitialised 1-D, 2-D or 3-D device array (rows padded to ``pitch_align``
    bytes), owning its memory; ``label`` names what it holds in the backend's diagnostics (the
    emulator reports a kernel's read of bytes of it nothing wrote, ``Backend.label``).
    ``ArgumentTypeError`` when ``backend`` is not a Backend."""
    _check_backend("empty(backend, shape, dtype)", backend, shape)
    dt = _dtype(dt)
    shape = tuple(shape)
    if len(shape) >= 2:
        pitch = -(-shape[-1] * dt.nbytes // pitch_align) * pitch_align
        strides = (pitch, dt.nbytes)
        for extent in reversed(shape[1:-1]):
            strides = (strides[0] * extent,) + strides
        nbytes = strides[0] * shape[0]
    else:
        strides = (dt.nbytes,)
        nbytes = shape[0] * dt.nbytes
    own = OwnedBuffer(backend, nbytes)
    if label is not None and hasattr(backend, "label"):     # test doubles may lack it
        backend.label(own.buf, label)
    return DeviceArray(own.buf.ptr, shape, strides, dt, backend, own)


def as_batch(arr: DeviceArray) -> DeviceArray:
    """A 2-D array as one batch of a 3-D ``(1, rows, cols)`` array (what a rank-3 tensor map of
    a batched kernel takes); a 3-D array unchanged."""
    if arr.ndim != 2:
        return arr
    return DeviceArray(arr.ptr, (1,) + arr.shape, (arr.shape[0] * arr.strides[0],) + arr.strides, arr.dtype,
                       arr.backend, arr.owner)


def check_backend_of(x, backend, name: str) -> None:
    """``ArgumentError`` when ``x`` is a ``DeviceArray`` of another backend object than
    ``backend`` (its address means nothing there: a fault, or garbage read on a GPU), or one
    whose memory was freed or does not cover it (:meth:`DeviceArray.check_allocation`)."""
    if isinstance(x, DeviceArray):
        x.check_allocation(name)
    if isinstance(x, DeviceArray) and x.backend is not backend:
        raise ArgumentError(f"{name} is a DeviceArray of another backend object ({getattr(x.backend, 'name', '?')}) "
                            f"than this call's ({getattr(backend, 'name', '?')}): allocate it with that backend, "
                            f"e.g. arrays.to_device(gemm.backend, x)")


def zero_fill(arr: DeviceArray) -> None:
    """Set every byte of a 2-D/1-D device array (row padding included) to zero: the backend's
    :meth:`~cutedsl.runtime.backend.Backend.zero` (on a GPU ``cuMemsetD32Async`` in launch
    order, no host copy)."""
    nbytes = arr.strides[0] * arr.shape[0] if arr.ndim == 2 else arr.nbytes
    arr.backend.zero(_Buf(arr.ptr), nbytes)


def to_host(arr: DeviceArray) -> np.ndarray:
    """Copy a (possibly row-pitched) 1-D, 2-D or 3-D device array into a new C-contiguous host
    array (row-pitched: rows padded, everything outside the rows packed)."""
    e = arr.dtype.nbytes
    st, sh = arr.strides, arr.shape
    packed_outer = all(st[i] == st[i + 1] * sh[i + 1] for i in range(arr.ndim - 2))
    if arr.ndim >= 2 and st[-1] == e and st[-2] % e == 0 and packed_outer:
        staged = np.empty(sh[:-1] + (st[-2] // e,), arr.dtype.numpy)
        arr.backend.copy_to_host(staged, _Buf(arr.ptr), 0)
        return np.ascontiguousarray(staged[..., :sh[-1]])
    return arr.numpy()


def describe(x, name: str = "array"):
    """Describe a foreign device array as ``(ptr, shape, strides_bytes, DType, framework)``;
    None when ``x`` is not a device array (e.g. a numpy array). ``ArgumentTypeError`` naming
    argument ``name`` for anything that is no array at all."""
    if isinstance(x, DeviceArray):
        return x.ptr, x.shape, x.strides, x.dtype, "cutedsl"
    if type(x).__module__.split(".")[0] == "torch":
        import torch  # noqa: F401 - only reached when the caller passed a torch tensor
        if x.is_cuda:
            names = {"torch.float16": "f16", "torch.bfloat16": "bf16", "torch.float32": "f32",
                     "torch.float8_e4m3fn": "e4m3", "torch.float8_e5m2": "e5m2",
                     "torch.float4_e2m1fn_x2": "e2m1x2"}
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
    if isinstance(x, np.ndarray):
        return None
    from . import dlpack
    if dlpack.is_dlpack(x):                  # any DLPack producer (jax, cupy, torch, ...)
        dev_type, _ = dlpack.device_of(x)
        if dev_type == dlpack.KDL_CPU:
            return None                          # host memory: the numpy path (see host_array)
        if dev_type not in (dlpack.KDL_CUDA, dlpack.KDL_CUDA_MANAGED):
            raise ArgumentError(f"{name}: a DLPack array on {dlpack.device_name(dev_type)} memory; cutedsl takes "
                                f"CUDA device memory or host arrays")
        ptr, shape, strides, dt, _ = dlpack.describe_dlpack(x, name)
        return ptr, shape, strides, dt, "dlpack:" + type(x).__module__.split(".")[0]
    if hasattr(x, "__array__"):
        return None
    raise ArgumentTypeError(f"{name}: unsupported array type {type(x).__name__}: pass a numpy array, a "
                            f"cutedsl DeviceArray, a CUDA array (torch, cupy) or any DLPack array")


def host_array(x) -> np.ndarray:
    """A host operand as a numpy array: a DLPack producer on the CPU zero-copy through
    ``np.from_dlpack``, anything else through ``np.asarray``."""
    if not isinstance(x, np.ndarray) and hasattr(x, "__dlpack__") and hasattr(x, "__dlpack_device__"):
        return np.from_dlpack(x)
    return np.asarray(x)


# the operand record lives in its own module; imported here so arrays.TensorView keeps working
from .tensor_view import TensorView  # noqa: E402,F401
