"""Blackwell's persistent warp-specialized GEMM: a TMA warp, an MMA warp (one elected thread
issues tcgen05.mma) and four epilogue warps reading the accumulator from tensor memory, which
holds two accumulators so the epilogue of one tile overlaps the MMAs of the next. A 2x1 cluster
multicasts B to both CTAs; a fused bias + GELU runs in the epilogue.

Without a Blackwell GPU the sm_100a kernel runs on the PTX emulator, with its race checks on the
tensor memory (MMA writes vs the epilogue's loads, buffer reuse) and the shared-memory ring."""
import numpy as np

from cutedsl import Gemm, GemmConfig
from cutedsl.collective import fusion

rng = np.random.default_rng()
m, n, k = 520, 300, 200                      # 5 x 3 tiles of 128 x 128, partial at both edges
a = rng.standard_normal((m, k), dtype=np.float32).astype(np.float16)
b = rng.standard_normal((k, n), dtype=np.float32).astype(np.float16)
bias = rng.standard_normal(n, dtype=np.float32)
cfg = GemmConfig(arch="sm_100a", schedule="warp_specialized", cluster=(2, 1), sm_count=4,
                 epilogue=["bias:col", "gelu"])
gemm = Gemm(cfg)
d = gemm(a, b, bias=bias)
ref = fusion.reference(cfg.fusion, a.astype(np.float64) @ b.astype(np.float64), {"bias": bias}, "f32")
err = np.max(np.abs(d - ref)) / np.max(np.abs(ref))
assert err < 1e-5, err
print(f"checked: sm_100a warp-specialized GEMM {m}x{n}x{k} + bias + gelu, cluster 2x1 on 4 SMs "
      f"({gemm.backend.name}), max rel err {err:.2e}")

# Few rows (e.g. a decode step's tokens): BLOCK_M 64, one CTA's M = 64 MMA -- its accumulator in the
# first 16 lanes of each TMEM lane quarter, which the epilogue reads with tcgen05.ld.16x32bx2
m2 = 48
small = Gemm(GemmConfig(arch="sm_100a", tile=(64, 128, 64), sm_count=4))
d2 = small(a[:m2], b)
ref2 = a[:m2].astype(np.float64) @ b.astype(np.float64)
err2 = np.max(np.abs(d2 - ref2)) / np.max(np.abs(ref2))
assert err2 < 1e-5, err2
print(f"checked: sm_100a GEMM {m2}x{n}x{k} with 64-row tiles ({small.backend.name}), max rel err {err2:.2e}")
