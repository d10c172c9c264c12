"""Kernel arguments on the host: a declared parameter's value from the caller's, and the TMA
rules an array behind a tensor map obeys. Shared by every kernel family (the launch binding,
:mod:`cutedsl.runtime.binding`).

A pointer or tensor-map ``ParamSpec`` may declare ``shape`` (ints and size names such as
``"m"``/``"n"``/``"k"``) and ``dtype``; arrays passed for it are validated before anything is
launched.
"""
from __future__ import annotations

import os

import numpy as np

from ..dtypes import PACKED_TMA, dtype as _dtype
from ..errors import ArgumentError, ArgumentTypeError
from . import arrays


#: the integer kernel parameter kinds and the values they hold
INT_RANGES = {"i32": (-2 ** 31, 2 ** 31 - 1), "u32": (0, 2 ** 32 - 1), "i64": (-2 ** 63, 2 ** 63 - 1)}
F32_MAX = float(np.finfo(np.float32).max)


def scalar(p, v):
    """``v`` checked for scalar kernel parameter ``p`` (``f32``, ``i32``, ``u32``, ``i64``):
    ``ArgumentTypeError`` unless it is a real number (f32) or an int, ``ArgumentError`` naming
    the parameter and the range unless it is finite and fits the kind (an f32 holds
    |v| <= 3.4028235e38; a NaN or Inf scalar would make the whole result non-finite)."""
    ok = (float, int, np.floating, np.integer) if p.kind == "f32" else (int, np.integer)
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, ok):
        raise ArgumentTypeError(f"{p.name} must be a {'real number' if p.kind == 'f32' else 'int'} "
                                f"({p.kind} kernel parameter), got {v!r}")
    if p.kind == "f32":
        f = float(v)
        if not np.isfinite(f) or abs(f) > F32_MAX:
            raise ArgumentError(f"{p.name} must be finite and fit an f32 kernel parameter (|{p.name}| <= "
                                f"{F32_MAX:.8g}), got {v!r}")
    elif p.kind in INT_RANGES:
        lo, hi = INT_RANGES[p.kind]
        if not lo <= int(v) <= hi:
            raise ArgumentError(f"{p.name} must fit a {p.kind} kernel parameter ({lo}..{hi}), got {v!r}")
    return v


def check_scalars(declared, extra) -> None:
    """:func:`scalar` for every scalar parameter among ``declared`` (before anything is
    compiled or allocated)."""
    for p in declared:
        if p.kind not in ("ptr", "tensormap"):
            scalar(p, extra[p.name])


def host_memory_bytes() -> int | None:
    """This machine's physical memory in bytes (None where the OS does not say)."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):
        return None


def check_copy(name: str, host: np.ndarray) -> None:
    """``ArgumentError`` naming ``name`` before a numpy array whose copy cannot fit this
    machine's memory is copied (a broadcast or zero-stride view is small in memory but its
    device copy holds every element: ``np.broadcast_to(x, (2**20, 2**20))`` would need 2 TiB)."""
    limit = host_memory_bytes()
    if limit is not None and host.nbytes > limit:
        view = " (a broadcast / zero-stride view: each element is copied)" if 0 in host.strides else ""
        raise ArgumentError(f"{name}: its copy would take {host.nbytes / 2 ** 30:.1f} GiB ({host.shape} x "
                            f"{host.dtype.itemsize} B){view}, more than this machine's {limit / 2 ** 30:.1f} GiB "
                            f"of memory; pass a smaller problem or a device array")


def check_array(p, v, dims) -> tuple:
    """``(device description or None, host array or None, shape, dtype name)`` of the array
    ``v`` passed for pointer / tensor-map parameter ``p``, after checking it against the
    ``dtype`` and ``shape`` ``p`` declares (``dims``: the sizes its shape names), without copying
    anything: ``ArgumentTypeError`` / ``ArgumentError`` naming the parameter. Used by
    :func:`value` and by front ends that check a call before compiling."""
    dev = arrays.describe(v, p.name)
    if dev is None and p.output:
        if not isinstance(v, np.ndarray) or not v.flags.c_contiguous or not v.flags.writeable:
            raise ArgumentError(f"{p.name} is an output: pass a writable C-contiguous numpy array (or a "
                                f"device array) to receive it, got {type(v).__name__}")
    host = None
    if dev is None:
        host = np.asarray(v)
        shape = host.shape
        try:
            dt = _dtype(host.dtype).name
        except ArgumentTypeError:
            dt = str(host.dtype)
    else:
        shape, dt = dev[1], dev[3].name
    if p.dtype is not None and dt != _dtype(p.dtype).name:
        raise ArgumentTypeError(f"{p.name} has dtype {dt}, the kernel expects {p.dtype} "
                                f"(numpy: {_dtype(p.dtype).numpy})")
    if p.shape is not None:
        unknown = [s for s in p.shape if isinstance(s, str) and s not in dims]
        if unknown:
            raise ValueError(f"parameter {p.name!r} declares shape {p.shape}: size {unknown[0]!r} is neither a "
                             f"problem size (m, n, k, l) nor one the kernel's param_dims defines")
        want = tuple(dims[s] if isinstance(s, str) else s for s in p.shape)
        if len(want) == 3 and want[0] == 1 and tuple(shape) == want[1:]:
            want = want[1:]                 # a batch extent of 1 may be left out (shared by every batch)
        if tuple(shape) != want:
            spelled = "(" + ", ".join(map(str, p.shape)) + ("," if len(p.shape) == 1 else "") + ")"
            raise ArgumentError(f"{p.name} must have shape {spelled} = {want} for this problem, "
                                f"got {tuple(shape)}")
    return dev, host, shape, dt


def value(be, p, v, dims, keep, owned, copy_back=None):
    """The launch value of extra parameter ``p`` given ``v`` (backend ``be``). A ``ptr`` takes
    an array (numpy: copied to the device into ``owned``, freed with the call's scratch; device
    arrays: used in place and kept alive in ``keep``), checked against the ``shape`` (entries
    resolved through ``dims`` = ``{"m": M, "n": N, "k": K}``) and ``dtype`` the parameter
    declares: ``ArgumentError`` / ``ArgumentTypeError`` naming the parameter otherwise. For an
    ``output`` parameter a numpy array must be writable, C-contiguous and of exactly that
    dtype; ``(numpy array, device copy)`` is appended to ``copy_back`` for the result to fill.
    A scalar parameter (``f32``, ``i32`` ...) takes a real number (``ArgumentTypeError``). A
    ``tensormap`` parameter (an epilogue operand read by TMA) returns the checked
    ``DeviceArray`` (numpy: a row-pitched device copy) for the caller to encode."""
    if p.kind not in ("ptr", "tensormap"):
        return scalar(p, v)
    dev, host, shape, dt = check_array(p, v, dims)
    if dev is None:
        check_copy(p.name, host)
    if p.kind == "tensormap":       # the array behind a tensor map: the caller encodes it (TMA rules)
        if dev is None:
            arr = arrays.to_device(be, host, pitch_align=16)
            owned.append(arr)
            return arr
        keep.append(v)
        return arrays.DeviceArray(dev[0], tuple(shape), tuple(dev[2]), dev[3], be, v)
    if dev is None:
        arr = arrays.to_device(be, np.ascontiguousarray(host))
        owned.append(arr)
        if p.output:
            copy_back.append((v, arr))
        return arr.ptr
    if p.shape is not None:
        st, acc = [], _dtype(dt).nbytes
        for s in reversed(shape):
            st.append(acc)
            acc *= s
        if tuple(dev[2]) != tuple(reversed(st)):
            raise ArgumentError(f"{p.name} must be C-contiguous (strides {tuple(reversed(st))} B), "
                                f"got strides {tuple(dev[2])} B")
    keep.append(v)
    return dev[0]


def map_extent(spec, arr) -> tuple:
    """``(shape, strides)`` a tensor map of ``spec`` takes for device array ``arr``: the array's,
    or for a packed sub-byte map (``dtypes.PACKED_TMA``) the rows' elements (bytes x 8 / bits)
    with no element stride."""
    t = PACKED_TMA.get(spec.dtype)
    if t is None:
        return arr.shape, arr.strides
    return (tuple(arr.shape[:-1]) + (arr.shape[-1] * 8 // t.bits,), tuple(arr.strides[:-1]) + (0,))


def check_tma_layout(name, arr: "arrays.DeviceArray"):
    """``ArgumentError`` naming ``name`` when ``arr`` (rank 1..3) breaks a TMA rule: contiguous
    rows, 16-byte row (and batch) strides that do not overlap, a 16-byte aligned address
    (PTX ISA 5.5.2, tensor-map constraints)."""
    e, st, sh = arr.dtype.nbytes, arr.strides, arr.shape
    if st[-1] != e:
        raise ArgumentError(f"{name}: innermost stride is {st[-1]} B; TMA needs contiguous rows "
                            f"(stride {e} B) — pass a contiguous array")
    if arr.ndim >= 2 and st[-2] % 16:      # a rank-1 map has no row stride
        raise ArgumentError(f"{name}: row stride is {st[-2]} B; TMA needs a multiple of 16 B "
                            f"(16-byte rule) — pad the leading dimension")
    if arr.ndim >= 2 and st[-2] < sh[-1] * e:
        raise ArgumentError(f"{name}: row stride {st[-2]} B overlaps rows of {sh[-1] * e} B")
    if arr.ndim == 3 and sh[0] > 1 and (st[0] % 16 or st[0] < sh[1] * st[1]):
        raise ArgumentError(f"{name}: batch stride {st[0]} B must be a multiple of 16 B and at least one "
                            f"batch ({sh[1]} rows x {st[1]} B) — batches may not overlap")
    if arr.ptr % 16:
        raise ArgumentError(f"{name}: global address 0x{arr.ptr:x} is not 16-byte aligned (TMA)")


__all__ = ["value", "map_extent", "check_tma_layout"]
