"""An fp8 GEMM with torch._scaled_mm-style scales and a fused bias + GELU epilogue.

    D = gelu(scale_a[row] * scale_b[col] * (A @ B) + bias[col])      A, B: e4m3, D: bf16

The inputs are quantised per row of A / per column of B (amax / 448, e4m3's largest value);
the kernel multiplies the f32 accumulator by the two scale vectors, adds the bias and applies
GELU before rounding to bf16 -- all in the epilogue (GemmConfig(epilogue=[...]) nodes).
"""
import ml_dtypes
import numpy as np

from cutedsl import Gemm, GemmConfig
from cutedsl.collective import fusion

rng = np.random.default_rng()
m, n, k = 200, 136, 320                      # not tile multiples
x = rng.standard_normal((m, k), dtype=np.float32)
w = rng.standard_normal((k, n), dtype=np.float32)
E4M3_MAX = float(ml_dtypes.finfo(ml_dtypes.float8_e4m3fn).max)
scale_a = (np.abs(x).max(axis=1) / E4M3_MAX).astype(np.float32)          # (M,)
scale_b = (np.abs(w).max(axis=0) / E4M3_MAX).astype(np.float32)          # (N,)
a8 = (x / scale_a[:, None]).astype(ml_dtypes.float8_e4m3fn)
b8 = (w / scale_b[None, :]).astype(ml_dtypes.float8_e4m3fn)
bias = rng.standard_normal(n, dtype=np.float32)

cfg = GemmConfig(dtype="e4m3", out_dtype="bf16", epilogue=["scale_a:row", "scale_b:col", "bias:col", "gelu"])
d = Gemm(cfg)(a8, b8, scale_a=scale_a, scale_b=scale_b, bias=bias)

args = {"scale_a": scale_a, "scale_b": scale_b, "bias": bias}
ref = fusion.reference(cfg.fusion, a8.astype(np.float64) @ b8.astype(np.float64), args, "bf16")
err = np.max(np.abs(d.astype(np.float64) - ref)) / np.max(np.abs(ref))
assert d.dtype == ml_dtypes.bfloat16 and err < 8e-3, err
print(f"checked: fp8 {m}x{n}x{k}, tile {cfg.tile}, B {cfg.b_major}-major; max rel err {err:.2e} vs the "
      f"model of the kernel's inputs")
