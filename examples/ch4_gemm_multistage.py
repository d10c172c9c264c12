"""Chapter 4: the multistage GEMM — a software pipeline of TMA loads over `stages` shared-memory
slots feeding WGMMA, and a TMA-store epilogue."""
import numpy as np

from cutedsl import Gemm, GemmConfig

rng = np.random.default_rng()
m, n, k = 200, 136, 320                    # 2x2 tiles, 5 k-tiles, nothing a tile multiple
a = rng.standard_normal((m, k), dtype=np.float32).astype(np.float16)
b = rng.standard_normal((k, n), dtype=np.float32).astype(np.float16)
cfg = GemmConfig(dtype="f16", out_dtype="f16", tile=(128, 128, 64), stages=3)
gemm = Gemm(cfg)
d = gemm(a, b)
ref = a.astype(np.float64) @ b.astype(np.float64)
err = np.max(np.abs(d.astype(np.float64) - ref)) / np.max(np.abs(ref))
r = gemm.compiled.resources
assert err < 4e-3, err
print(f"checked: 3-stage GEMM {m}x{n}x{k} f16 -> f16 on {gemm.backend.name}: max rel err {err:.2e}; "
      f"{r.registers} registers, {r.sass['HGMMA']} HGMMA, {r.sass['UTMALDG']} UTMALDG in SASS")
