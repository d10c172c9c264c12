"""GEMM arguments: the call's keyword arguments (epilogue parameters such as a bias or a C
matrix) against the kernel's declared parameters, and A/B in the layout the tensor maps read.

A kernel's parameters besides ``a``, ``b``, ``d``, ``m``, ``n``, ``k`` (and those the kernel
fills itself, :meth:`GemmKernel.host_params`) are the call's keyword arguments; each is checked
and converted by :func:`cutedsl.runtime.params.value`.
"""
from __future__ import annotations

import numpy as np

from ..atom.mma_traits import PADDED_6BIT, SUBBYTE
from ..dtypes import dtype as _dtype
from ..errors import ArgumentError, ArgumentTypeError
from ..runtime import arrays
from ..runtime.params import check_copy, check_scalars  # noqa: F401  (the GEMM front ends' checks)


def check_names(params, extra, internal=()) -> list:
    """The kernel's extra parameters (``params`` minus a, b, d, m, n, k, l, la, lb, the
    ``internal`` names the Device layer fills, e.g. a tile scheduler's, and workspaces) after checking the
    call's keyword arguments ``extra`` against them: ``ArgumentError`` for an unknown keyword
    (listing the accepted names) or a missing one."""
    fixed = {"a", "b", "d", "m", "n", "k", "l", "la", "lb"} | set(internal)   # l, la, lb: a batched kernel's
    declared = [p for p in params if p.name not in fixed and not p.workspace]
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


def operand_array(be, v, major_inner: bool):
    """Device array of operand view ``v`` in the layout the tensor map reads (``major_inner``
    False: the last two axes swapped, K-major B); a host operand is copied (returns
    ``(array, copied)``). Sub-byte elements: host e2m1 packed two per byte, host e2m3/e3m2
    6 bits each (rows padded to 128 elements); a packed ``e2m1x2`` device operand as its bytes
    (``ArgumentError`` unless the pairs run along K); ``ArgumentTypeError`` for a device array
    of one sub-byte element per byte."""
    six = v.dtype is not None and v.dtype.name in PADDED_6BIT
    packed = v.dtype is not None and v.dtype.name in SUBBYTE
    if v.on_host:
        check_copy(v.name, v.host)
        host = v.host if major_inner else np.swapaxes(v.host, -1, -2)  # K-major B: device holds B^T
        if six:                             # e2m3/e3m2: 6 bits each, rows of 128 elements (16U6_ALIGN16B)
            from .mx import pack_fp6
            return arrays.to_device(be, pack_fp6(host), pitch_align=32), True
        if packed:                          # e2m1: two per byte along the rows (K), as TMA moves them
            from .mx import pack_fp4
            host = pack_fp4(host)
        return arrays.to_device(be, host, pitch_align=16), True
    if packed and v.packed == 1:
        to_dev = "" if six else " (or a device array from cutedsl.device.mx.to_device)"
        raise ArgumentTypeError(f"{v.name}: {v.dtype.name} operands are taken as host (numpy) arrays, one "
                                f"element per byte, packed on the way to the device{to_dev}; got a device array of "
                                f"{v.raw_dtype} elements")
    shape, strides = list(v.shape), list(v.strides)
    if not major_inner:
        shape[-2:], strides[-2:] = shape[:-3:-1], strides[:-3:-1]
    if v.packed > 1:                        # e2m1x2 storage: its bytes, rows along K (the MMA's K-major)
        if strides[-1] != 1:
            raise ArgumentError(f"{v.name}: a {v.raw_dtype} operand's packed pairs must run along K (K-major), "
                                f"got strides {tuple(v.strides)} B for shape {tuple(v.shape)} (elements)")
        shape[-1] //= v.packed
        return arrays.DeviceArray(v.ptr, tuple(shape), tuple(strides), _dtype("u8"), be, v.owner), False
    return arrays.DeviceArray(v.ptr, tuple(shape), tuple(strides), v.dtype, be, v.owner), False
