"""A block-scaled MXFP4 GEMM on Blackwell (sm_100a): A and B quantised to e2m1 (4-bit: 0, 0.5, 1,
1.5, 2, 3, 4, 6 and negatives) with one E8M0 scale per 32 elements along K (OCP Microscaling).
Gemm packs the e2m1 operands two per byte on the way to the device; the kernel loads 256-element
k-tiles (128 bytes) by TMA, copies two scale atoms per operand into tensor memory (tcgen05.cp) and
issues tcgen05.mma.kind::mxf4.block_scale, two factors per instruction.

Without a Blackwell GPU the sm_100a kernel runs on the PTX emulator."""
import numpy as np

from cutedsl import Gemm, GemmConfig
from cutedsl.device import mx

rng = np.random.default_rng()
m, n, k = 300, 200, 301                      # ragged tiles, K odd: the last byte holds half an element pair
x = rng.standard_normal((m, k))
w = rng.standard_normal((n, k))              # a weight, stored (N, K): K-major B
qa, sa = mx.quantize(x, "e2m1")              # e2m1 values (one per byte in numpy), E8M0 exponents
qb, sb = mx.quantize(w, "e2m1")
gemm = Gemm(GemmConfig(arch="sm_100a", dtype="mxfp4", out_dtype="bf16"))
d = gemm(qa, qb.T, a_scales=mx.pack_scales(sa, "mxfp4"), b_scales=mx.pack_scales(sb, "mxfp4"))
ref = mx.dequantize(qa, sa) @ mx.dequantize(qb, sb).T      # what the quantised inputs multiply to
err = np.max(np.abs(d.astype(np.float64) - ref)) / np.max(np.abs(ref))
assert err < 1e-2, err                       # one bf16 rounding
q_err = np.max(np.abs(ref - x @ w.T)) / np.max(np.abs(x @ w.T))
print(f"checked: MXFP4 GEMM {m}x{n}x{k} -> bf16 on {gemm.backend.name}: max rel err {err:.1e} vs the dequantised "
      f"product ({q_err:.1e} from quantising the f64 inputs to 4 bits)")
