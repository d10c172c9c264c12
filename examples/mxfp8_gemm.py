"""Block-scaled MXFP8 and MXFP6 GEMMs on Blackwell (sm_100a): A and B quantised to e4m3 (MXFP8)
or e2m3 (MXFP6) with one E8M0 scale per 32 elements along K (OCP Microscaling), the scales
packed into the 512-byte atoms the kernel loads by TMA and copies into tensor memory
(tcgen05.cp) for tcgen05.mma.kind::mxf8f6f4.block_scale. Gemm packs the 6-bit operands 6 bits
each on the way to the device; their 16U6_ALIGN16B tensor maps spread them one per byte in
shared memory, the layout the MMA reads.

Without a Blackwell GPU the sm_100a kernel runs on the PTX emulator."""
import numpy as np

from cutedsl import Gemm, GemmConfig
from cutedsl.device import mx

rng = np.random.default_rng()
m, n, k = 300, 200, 400                      # ragged tiles, K not a multiple of the 128-element k-tile
x = rng.standard_normal((m, k)) * 3
w = rng.standard_normal((n, k))              # a weight, stored (N, K): K-major B
exact = x @ w.T
for dtype in ("mxfp8", "mxfp6"):
    qa, sa = mx.quantize(x, dtype)           # e4m3 / e2m3 values, E8M0 exponents (m, ceil(k / 32))
    qb, sb = mx.quantize(w, dtype)
    gemm = Gemm(GemmConfig(arch="sm_100a", dtype=dtype, out_dtype="bf16"))
    d = gemm(qa, qb.T, a_scales=mx.pack_scales(sa, dtype), b_scales=mx.pack_scales(sb, dtype))
    ref = mx.dequantize(qa, sa, dtype) @ mx.dequantize(qb, sb, dtype).T      # what the quantised inputs multiply to
    err = np.max(np.abs(d.astype(np.float64) - ref)) / np.max(np.abs(ref))
    assert err < 1e-2, err                   # one bf16 rounding
    q_err = np.max(np.abs(ref - exact)) / np.max(np.abs(exact))
    print(f"checked: {dtype.upper()} GEMM {m}x{n}x{k} -> bf16 on {gemm.backend.name}: max rel err {err:.1e} vs the "
          f"dequantised product ({q_err:.1e} from quantising the f64 inputs)")
