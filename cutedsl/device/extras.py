"""Extra GEMM arguments (epilogue parameters such as a bias or a C matrix), checked like A and B.

A kernel's parameters besides ``a``, ``b``, ``d``, ``m``, ``n``, ``k`` are the call's keyword
arguments. A pointer ``Param`` may declare ``shape`` (ints and ``"m"``/``"n"``/``"k"``) and
``dtype``; arrays passed for it are validated before anything is launched.
"""
from __future__ import annotations

import numpy as np

from ..dtypes import dtype as _dtype
from ..errors import ArgumentError, ArgumentTypeError
from . import arrays


def check_names(params, extra) -> list:
    """The kernel's extra parameters (``params`` minus a, b, d, m, n, k) after checking the
    call's keyword arguments ``extra`` against them: ``ArgumentError`` for an unknown keyword
    (listing the accepted names) or a missing one."""
    fixed = {"a", "b", "d", "m", "n", "k"}
    declared = [p for p in params if p.name not in fixed]
    names = [p.name for p in declared]
    unknown = sorted(set(extra) - set(names))
    if unknown:
        accepted = ", ".join(["a", "b", "out"] + names)
        raise ArgumentError(f"unknown keyword argument(s) {', '.join(map(repr, unknown))}; this GEMM "
                            f"accepts: {accepted}")
    for p in declared:
        if p.name not in extra:
            raise ArgumentError(f"missing epilogue argument {p.name!r} ({p.kind})")
    return declared


def value(be, p, v, dims, keep, owned):
    """The launch value of extra parameter ``p`` given ``v`` (backend ``be``). A ``ptr`` takes
    an array (numpy: copied to the device into ``owned``, freed with the call's scratch; device
    arrays: used in place and kept alive in ``keep``), checked against the ``shape`` (entries
    resolved through ``dims`` = ``{"m": M, "n": N, "k": K}``) and ``dtype`` the parameter
    declares: ``ArgumentError`` / ``ArgumentTypeError`` naming the parameter otherwise."""
    if p.kind != "ptr":
        return v
    dev = arrays.describe(v, p.name)
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
        want = tuple(dims[s] if isinstance(s, str) else s for s in p.shape)
        if tuple(shape) != want:
            spelled = "(" + ", ".join(map(str, p.shape)) + ("," if len(p.shape) == 1 else "") + ")"
            raise ArgumentError(f"{p.name} must have shape {spelled} = {want} for this problem, "
                                f"got {tuple(shape)}")
    if dev is None:
        arr = arrays.to_device(be, np.ascontiguousarray(host))
        owned.append(arr)
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
