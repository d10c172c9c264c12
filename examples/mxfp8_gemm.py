"""A block-scaled MXFP8 GEMM on Blackwell (sm_100a): A and B quantised to e4m3 with one E8M0
scale per 32 elements along K (OCP Microscaling), the scales packed into the 512-byte atoms the
kernel loads by TMA and copies into tensor memory (tcgen05.cp) for
tcgen05.mma.kind::mxf8f6f4.block_scale.

Without a Blackwell GPU the sm_100a kernel runs on the PTX emulator."""
import numpy as np

from cutedsl import Gemm, GemmConfig
from cutedsl.device import mx

rng = np.random.default_rng()
m, n, k = 300, 200, 400                      # ragged tiles, K not a multiple of the 128-element k-tile
x = rng.standard_normal((m, k)) * 3
w = rng.standard_normal((n, k))              # a weight, stored (N, K): K-major B
qa, sa = mx.quantize(x, "e4m3")              # e4m3 values, E8M0 exponents (m, ceil(k / 32))
qb, sb = mx.quantize(w, "e4m3")
gemm = Gemm(GemmConfig(arch="sm_100a", dtype="mxfp8", out_dtype="bf16"))
d = gemm(qa, qb.T, a_scales=mx.pack_scales(sa), b_scales=mx.pack_scales(sb))
ref = mx.dequantize(qa, sa) @ mx.dequantize(qb, sb).T      # what the quantised inputs multiply to
err = np.max(np.abs(d.astype(np.float64) - ref)) / np.max(np.abs(ref))
assert err < 1e-2, err                       # one bf16 rounding
q_err = np.max(np.abs(ref - x @ w.T)) / np.max(np.abs(x @ w.T))
print(f"checked: MXFP8 GEMM {m}x{n}x{k} -> bf16 on {gemm.backend.name}: max rel err {err:.1e} vs the dequantised "
      f"product ({q_err:.1e} from quantising the f64 inputs)")
