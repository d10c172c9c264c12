"""A batched GEMM with a fused bias + GELU epilogue: one weight matrix shared by a batch.

    D[l] = gelu(A[l] @ W + bias)        A: (L, M, K) bf16, W: (K, N) bf16, D: (L, M, N) f32

A 3-D operand makes ``Gemm`` run its batched kernel (rank-3 tensor maps; the batch is part of
the persistent tile scheduler's work index); the 2-D W is read by every batch (no copies).
"""
import ml_dtypes
import numpy as np

from cutedsl import Gemm, GemmConfig
from cutedsl.collective import fusion

rng = np.random.default_rng()
L, m, n, k = 4, 100, 136, 200                 # not tile multiples
a = rng.standard_normal((L, m, k), dtype=np.float32).astype(ml_dtypes.bfloat16)
w = rng.standard_normal((k, n), dtype=np.float32).astype(ml_dtypes.bfloat16)
bias = rng.standard_normal(n, dtype=np.float32)

cfg = GemmConfig.for_problem(m, n, k, "bf16", l=L, epilogue=["bias:col", "gelu"])
gemm = Gemm(cfg)
d = gemm(a, w, bias=bias)

ref = fusion.reference(cfg.fusion, np.matmul(a.astype(np.float64), w.astype(np.float64)), {"bias": bias}, "f32")
err = np.max(np.abs(d - ref)) / np.max(np.abs(ref))
assert d.shape == (L, m, n) and err < 1e-5, err
print(f"checked: {L} x gelu(A[l] @ W + bias), {m}x{n}x{k}, {cfg.schedule} {cfg.tile}, max rel err {err:.2e}")
