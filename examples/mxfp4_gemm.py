"""Block-scaled 4-bit GEMMs on Blackwell (sm_100a): A and B quantised to e2m1 (0, 0.5, 1, 1.5,
2, 3, 4, 6 and negatives) with one scale factor per block along K -- MXFP4 (OCP Microscaling:
an E8M0 power of two per 32 elements) and NVFP4 (a UE4M3, an unsigned e4m3, per 16).
Gemm packs numpy e2m1 operands two per byte on the way to the device (mx.to_device packs them
once into device-resident arrays, read in place); the kernel loads 256-element
k-tiles (128 bytes) by TMA, copies the scale atoms into tensor memory (tcgen05.cp) and issues
tcgen05.mma.kind::mxf4.block_scale (MXFP4, two factors per instruction) or
kind::mxf4nvf4.block_scale.block16 (NVFP4, four).

Without a Blackwell GPU the sm_100a kernel runs on the PTX emulator."""
import numpy as np

from cutedsl import Gemm, GemmConfig
from cutedsl.device import mx
from cutedsl.runtime import arrays

rng = np.random.default_rng()
m, n, k = 300, 200, 301                      # ragged tiles, K odd: the last byte holds half an element pair
x = rng.standard_normal((m, k))
w = rng.standard_normal((n, k))              # a weight, stored (N, K): K-major B
exact = x @ w.T
for dtype in ("mxfp4", "nvfp4"):
    qa, sa = mx.quantize(x, dtype)           # e2m1 values (one per byte in numpy), factor codes
    qb, sb = mx.quantize(w, dtype)
    gemm = Gemm(GemmConfig(arch="sm_100a", dtype=dtype, out_dtype="bf16"))
    d = gemm(qa, qb.T, a_scales=mx.pack_scales(sa, dtype), b_scales=mx.pack_scales(sb, dtype))
    ref = mx.dequantize(qa, sa, dtype) @ mx.dequantize(qb, sb, dtype).T    # what the quantised inputs multiply to
    err = np.max(np.abs(d.astype(np.float64) - ref)) / np.max(np.abs(ref))
    assert err < 1e-2, err                   # one bf16 rounding
    # the same GEMM on device-resident operands, packed once (K odd: each gets one zero element)
    da, dw = mx.to_device(gemm.backend, qa), mx.to_device(gemm.backend, qb)
    d_dev = gemm(da, dw.T, a_scales=mx.pack_scales(sa, dtype), b_scales=mx.pack_scales(sb, dtype))
    assert np.array_equal(arrays.to_host(d_dev), d)          # read in place, the same bits
    q_err = np.max(np.abs(ref - exact)) / np.max(np.abs(exact))
    print(f"checked: {dtype.upper()} GEMM {m}x{n}x{k} -> bf16 on {gemm.backend.name}: max rel err {err:.1e} vs the "
          f"dequantised product ({q_err:.1e} from quantising the f64 inputs to 4 bits)")
