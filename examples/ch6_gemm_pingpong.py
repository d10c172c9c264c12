"""Chapter 6: the persistent ping-pong GEMM. A few CTAs stay resident and walk the output tiles
(rasterized along N in strips of 2); inside each CTA two consumer warpgroups take alternate
tiles, so one runs its epilogue while the other's WGMMAs run. Clusters of 2 CTAs along M share
each B tile through TMA multicast."""
import numpy as np

from cutedsl import Gemm, GemmConfig

rng = np.random.default_rng()
m, n, k = 330, 400, 200                    # 3x4 tiles of 128x128, 4 k-tiles, nothing a multiple
a = rng.integers(-4, 5, (m, k)).astype(np.float16)
b = rng.integers(-4, 5, (k, n)).astype(np.float16)
cfg = GemmConfig(tile=(128, 128, 64), stages=3, schedule="pingpong", cluster=(2, 1),
                 raster="N", swizzle=2, sm_count=4)          # 4 SMs = 2 clusters: each CTA walks 4 tiles
gemm = Gemm(cfg)
d = gemm(a, b)
assert np.array_equal(d, a.astype(np.float64) @ b.astype(np.float64))
grid = gemm.grid(m, n, k)
assert grid == (4, 1, 1) and gemm.compiled.cluster == (2, 1, 1)
assert ".multicast::cluster" in gemm.compiled.ptx           # B slices go to both CTAs of a cluster
print(f"checked: ping-pong GEMM {m}x{n}x{k} on {gemm.backend.name} is exact; grid {grid} "
      f"in clusters of 2 for 12 tiles, {gemm.compiled.block[0]} threads (2 consumer warpgroups + producer)")
