"""Chapter 3 on Blackwell (the EuroLLVM 2025 talk's kernel): a GEMM tile with the accumulator in
tensor memory -- TMA -> mbarrier -> tcgen05.mma (one thread) -> tcgen05.commit -> tcgen05.ld.

Without a Blackwell GPU the compiled sm_100a kernel runs on the PTX emulator, which checks its
tensor-memory use (allocation, lane quarters, commit -> wait before the loads) as it goes."""
import numpy as np

from cutedsl import Gemm, GemmConfig

rng = np.random.default_rng()
m, n, k = 200, 120, 150                    # 2 x 1 tiles of 128 x 128, 3 k-tiles, all partial
a = rng.standard_normal((m, k), dtype=np.float32).astype(np.float16)
b = rng.standard_normal((k, n), dtype=np.float32).astype(np.float16)
cfg = GemmConfig(arch="sm_100a", schedule="single_tile")      # epilogue "global": from registers
gemm = Gemm(cfg)
d = gemm(a, b)
ref = a.astype(np.float64) @ b.astype(np.float64)
err = np.max(np.abs(d - ref)) / np.max(np.abs(ref))
assert err < 1e-5, err
sass = gemm.compiled.resources.sass
print(f"checked: sm_100a single-tile GEMM {m}x{n}x{k} f16 -> f32 on {gemm.backend.name}, max rel err {err:.2e}; "
      f"SASS has {sass.get('UTCHMMA', 0)} UTCHMMA, {sass.get('LDTM', 0)} LDTM")
