"""Split-K GEMM written only by subclassing collectives: each output tile is reduced by SPLITS
CTAs (grid z), each over its own range of k-tiles — a tile scheduler's decision — and they add
their partial tiles into D atomically (``red.global.add.f32``, ``AtomicAddEpilogue``: no
workspace, D zero-filled by ``Gemm``).

Everything else (argument checks, TMA descriptors, the pipelined mainloop, output allocation,
launch) is the library's: the kernel subclass only names the two collectives, and
``Gemm(config, kernel=SplitKGemmKernel)`` runs it.
"""
import numpy as np

from cutedsl import Gemm, GemmConfig
from cutedsl.collective import AtomicAddEpilogue, TileScheduler
from cutedsl.ir import block_idx, select
from cutedsl.kernel import MultistageGemmKernel
from cutedsl.problem import GemmProblem


# -- split-K: the whole algorithm ---------------------------------------------------------
class SplitKScheduler(TileScheduler):
    splits = 3                                        # CTAs per output tile (grid z)

    def grid(self, problem):                         # problem: a GemmProblem (M, N, K, L)
        x, y, _ = super().grid(problem)
        return (x, y, self.splits)

    def k_tile_range(self, k_tiles):
        per = (k_tiles + self.splits - 1) // self.splits    # k-tiles per split (the last may get fewer)
        first = block_idx("z") * per
        left = select(k_tiles > first, k_tiles - first, 0)  # 0: a split past the end adds zeros
        return first, select(left < per, left, per)


class SplitKGemmKernel(MultistageGemmKernel):
    scheduler_cls = SplitKScheduler                   # which tile and which k-tiles a CTA runs
    epilogue_cls = AtomicAddEpilogue                  # partial tiles are added into D
# -- end of split-K ------------------------------------------------------------------------


rng = np.random.default_rng()
m, n, k = 150, 100, 64 * 7 - 20                       # 2 x 2 partial tiles; 7 k-tiles: 3 + 3 + 1
a = rng.standard_normal((m, k), dtype=np.float32).astype(np.float16)
b = rng.standard_normal((k, n), dtype=np.float32).astype(np.float16)
gemm = Gemm(GemmConfig(tile=(128, 64, 64), stages=2, epilogue="global"), kernel=SplitKGemmKernel)
assert gemm.kernel.grid(GemmProblem(m, n, k)) == (2, 2, 3)
d = gemm(a, b)
ref = a.astype(np.float64) @ b.astype(np.float64)
err = np.max(np.abs(d - ref)) / np.max(np.abs(ref))
assert err < 2e-5, err
print(f"checked: split-K ({SplitKScheduler.splits} splits) {m}x{n}x{k}, max rel err {err:.2e}, "
      f"{gemm.compiled.resources.sass.get('REDG', 0)} REDG in SASS")
