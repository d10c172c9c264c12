"""Subclassing a collective: an epilogue computing relu(A @ B + bias[col]).

The subclass adds a kernel parameter (a bias pointer) and overrides the elementwise hook;
the mainloop, the TMA store and everything else are inherited. The same subclass runs on
sm_90a and on sm_100a (there its hooks sit on the tensor-memory TMA-store epilogue).
"""
import numpy as np

from cutedsl import Gemm, GemmConfig
from cutedsl.collective import TmaStoreEpilogue
from cutedsl.ir import GlobalPtr, Param, select


class BiasReluEpilogue(TmaStoreEpilogue):
    def extra_params(self):
        return [Param("bias", "ptr", shape=("n",), dtype="f32")]   # checked per call

    def visit(self, value, row, col, ctx):
        col = select(col < ctx.n.unsigned(), col, 0)        # partial tiles: never read past N
        v = value + GlobalPtr(ctx.args.bias, "f32").load(col)
        return select(v > 0.0, v, 0.0)


rng = np.random.default_rng()
m, n, k = 150, 100, 128
a = rng.standard_normal((m, k), dtype=np.float32).astype(np.float16)
b = rng.standard_normal((k, n), dtype=np.float32).astype(np.float16)
bias = rng.standard_normal(n, dtype=np.float32)
ref = np.maximum(a.astype(np.float64) @ b.astype(np.float64) + bias, 0.0)
for arch in ("sm_90a", "sm_100a"):
    gemm = Gemm(GemmConfig(arch=arch, epilogue="tma", stages=2), epilogue=BiasReluEpilogue)
    d = gemm(a, b, bias=bias)
    err = np.max(np.abs(d - ref)) / np.max(np.abs(ref))
    assert err < 1e-5 and (d >= 0).all(), err
    print(f"checked on {arch}: relu(A @ B + bias) {m}x{n}x{k}, max rel err {err:.2e}, {np.mean(d == 0):.0%} zeros")
