"""Subclassing a collective: an epilogue computing relu(A @ B + bias[col]).

The subclass adds a kernel parameter (a bias pointer) and overrides the elementwise hook;
the mainloop, the TMA store and everything else are inherited.
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
gemm = Gemm(GemmConfig(stages=2), epilogue=BiasReluEpilogue)
d = gemm(a, b, bias=bias)
ref = np.maximum(a.astype(np.float64) @ b.astype(np.float64) + bias, 0.0)
err = np.max(np.abs(d - ref)) / np.max(np.abs(ref))
assert err < 1e-5 and (d >= 0).all(), err
print(f"checked: relu(A @ B + bias) {m}x{n}x{k}, max rel err {err:.2e}, {np.mean(d == 0):.0%} zeros")
