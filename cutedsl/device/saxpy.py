"""SAXPY on a backend: ``y <- alpha * x + y`` (f32 vectors), plain or through TMA."""
from __future__ import annotations

import numpy as np

from ..errors import ArgumentError, ArgumentTypeError
from ..runtime import arrays
from ..runtime.binding import Binding


def saxpy(alpha: float, x, y, *, tma: bool = False, backend="auto"):
    """Return ``alpha * x + y`` computed by the SAXPY kernel (``tma=True``: the TMA variant).

    ``x``, ``y``: 1-D float32 numpy arrays of equal length n (1 <= n < 2^31). Raises
    ``ArgumentTypeError``/``ArgumentError`` before any launch.
    """
    from ..kernel import SaxpyKernel, TmaSaxpyKernel
    from ..runtime.selection import get_backend
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float, np.integer, np.floating)):
        raise ArgumentTypeError(f"alpha must be a float, got {type(alpha).__name__}")
    x, y = np.asarray(x), np.asarray(y)
    for name, v in (("x", x), ("y", y)):
        if v.dtype != np.float32:
            raise ArgumentTypeError(f"{name} must be float32, got {v.dtype}")
        if v.ndim != 1 or v.size == 0:
            raise ArgumentError(f"{name} must be a non-empty 1-D array, got shape {v.shape}")
    if x.shape != y.shape:
        raise ArgumentError(f"x and y lengths differ: {x.shape[0]} vs {y.shape[0]}")
    n = x.shape[0]
    if n >= 2 ** 31:
        raise ArgumentError(f"n = {n} exceeds the kernel's 32-bit size limit")
    be = get_backend(backend) if isinstance(backend, str) else backend
    kern = TmaSaxpyKernel() if tma else SaxpyKernel()
    bind = Binding(be, kern.compile())
    try:                           # the call's device memory and tensor maps go with the binding
        dx, dy = bind.own(arrays.to_device(be, x)), bind.own(arrays.to_device(be, y))
        if tma:
            bind.tensor_map("x", dx)
            bind.tensor_map("y", dy)
        else:
            bind.pointer("x", dx)
            bind.pointer("y", dy)
            bind.values["n"] = n
        bind.values["alpha"] = alpha
        bind.launcher(kern.grid(n))()
        bind.finish()
        return arrays.to_host(dy)
    finally:
        bind.release()
