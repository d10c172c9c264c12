"""Chapter 5: the warp-specialized GEMM — a producer warpgroup (40 registers, one thread issues
every TMA load) and a consumer warpgroup (232 registers, WGMMA + epilogue) meet only on the
pipeline's full/empty mbarriers, so loads run ahead of the math by up to `stages` k-tiles."""
import numpy as np

from cutedsl import Gemm, GemmConfig

rng = np.random.default_rng()
m, n, k = 300, 200, 520                    # 3x2 tiles, 9 k-tiles, nothing a tile multiple
a = rng.integers(-4, 5, (m, k)).astype(np.float16)   # small integers: the result is exact
b = rng.integers(-4, 5, (k, n)).astype(np.float16)
cfg = GemmConfig(tile=(128, 128, 64), stages=4, schedule="warp_specialized")
gemm = Gemm(cfg)
d = gemm(a, b)
assert np.array_equal(d, a.astype(np.float64) @ b.astype(np.float64))

# the producer gives registers back, the consumer takes them: setmaxnreg.dec 40 / .inc 232
ptx, r = " ".join(gemm.compiled.ptx.split()), gemm.compiled.resources
assert "setmaxnreg.dec.sync.aligned.u32 40;" in ptx and "setmaxnreg.inc.sync.aligned.u32 232;" in ptx
print(f"checked: warp-specialized GEMM {m}x{n}x{k} on {gemm.backend.name} is exact; "
      f"{gemm.compiled.block[0]} threads (producer + consumer warpgroup), {r.registers} registers at launch, "
      f"{r.sass['USETMAXREG']} USETMAXREG, {r.sass['HGMMA']} HGMMA, {r.spill_stores} spill bytes")
