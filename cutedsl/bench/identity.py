"""Emulator-vs-GPU bit identity: small-integer inputs make every product and partial sum exact
in f32, so the GPU's D must equal the emulator's bit for bit (and the float64 product)."""
from __future__ import annotations

import numpy as np

from ..errors import CuteDSLError
from . import configs as _configs

#: a problem that is no tile multiple in any dimension
SHAPE = (190, 333, 300)


def check(cfgs, backend, emulator, seed: int = 0, shape=SHAPE) -> list:
    """For each config: run ``backend`` and ``emulator`` on the same integer inputs in [-4, 4];
    rows with ``identical`` (bitwise, GPU vs emulator), ``exact`` (vs float64) or ``error``."""
    from ..device import Gemm
    from ..dtypes import dtype as _dtype
    m, k, n = shape
    rng = np.random.default_rng(seed)
    rows = []
    for cfg in cfgs:
        npd = _dtype(cfg.dtype).numpy
        a = rng.integers(-4, 5, (m, k)).astype(npd)
        b = rng.integers(-4, 5, (k, n)).astype(npd)
        row = {"config": _configs.label(cfg), "m": m, "n": n, "k": k, "backend": backend.name}
        try:
            d_dev = Gemm(cfg, backend)(a, b)
            d_sim = Gemm(cfg, emulator)(a, b)
        except CuteDSLError as e:
            row.update(identical=False, exact=False, error=f"{type(e).__name__}: {e}")
        else:
            ref = a.astype(np.float64) @ b.astype(np.float64)
            row.update(identical=bool(np.array_equal(d_dev.view(np.uint8), d_sim.view(np.uint8))),
                       exact=bool(np.array_equal(d_dev.astype(np.float64), ref)))
        rows.append(row)
    return rows
