"""SAXPY on a backend: ``y <- alpha * x + y`` (f32 vectors), plain or through TMA."""
from __future__ import annotations

import numpy as np

from ..errors import ArgumentError, ArgumentTypeError
from ..runtime import arrays


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
    ck = kern.compile()
    dx, dy = arrays.to_device(be, x), arrays.to_device(be, y)
    tmaps = []
    try:
        if tma:
            specs = {t.param: t for t in ck.tensor_maps}
            tmaps = [be.encode_tensor_map(specs[p], d.ptr, (n,), (4,)) for p, d in (("x", dx), ("y", dy))]
            vals = {"x": tmaps[0], "y": tmaps[1], "alpha": alpha}
        else:
            vals = {"x": dx.ptr, "y": dy.ptr, "n": n, "alpha": alpha}
        be.launch(be.load(ck), kern.grid(n), ck.pack_params(vals), block=ck.block, smem=ck.dynamic_smem)
        be.synchronize()
        return arrays.to_host(dy)
    finally:                       # the call's device memory and tensor maps go with it
        dx.free()
        dy.free()
        for t in tmaps:
            be.release_tensor_map(t)
