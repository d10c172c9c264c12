"""Chapter 3: a GEMM tile from atoms — TMA -> mbarrier -> WGMMA -> store, no pipelining."""
import numpy as np

from cutedsl import Gemm, GemmConfig

rng = np.random.default_rng()
m, n, k = 100, 120, 64                     # one 128x128x64 tile, partially out of bounds
a = rng.standard_normal((m, k), dtype=np.float32).astype(np.float16)
b = rng.standard_normal((k, n), dtype=np.float32).astype(np.float16)
gemm = Gemm(GemmConfig(schedule="single_tile", epilogue="global"))
d = gemm(a, b)
ref = a.astype(np.float64) @ b.astype(np.float64)
err = np.max(np.abs(d - ref)) / np.max(np.abs(ref))
assert err < 1e-5, err
print(f"checked: single-tile GEMM {m}x{n}x{k} f16 -> f32, max rel err {err:.2e}")
