"""Blackwell's 2-SM GEMM (CUTLASS's 2SM kernel): a CTA pair along M shares one 256-row
tcgen05.mma (cta_group::2). Each CTA loads its own 128 rows of A and half of the tile's columns
of B; both CTAs' loads complete on the even CTA's barriers, whose elected thread issues the MMA
for the pair; the commit is multicast to both CTAs, and each CTA's epilogue reads its 128 rows
from its own tensor memory. With tile=(64, N) the pair shares a 128-row MMA instead (64 rows per
CTA; each CTA's accumulator in N / 2 columns of tensor memory, the second half of its columns in
lanes 64..127).

Without a Blackwell GPU the sm_100a kernel runs on the PTX emulator."""
import ml_dtypes
import numpy as np

from cutedsl import Gemm, GemmConfig

rng = np.random.default_rng()
m, n, k = 600, 300, 200                      # 3 x 3 pair tiles of 256 x 128, ragged at both edges
a = rng.standard_normal((m, k), dtype=np.float32).astype(ml_dtypes.bfloat16)
b = rng.standard_normal((k, n), dtype=np.float32).astype(ml_dtypes.bfloat16)
ref = a.astype(np.float64) @ b.astype(np.float64)
for tile in ((128, 128, 64), (64, 128, 64)):     # a 256-row and a 128-row pair MMA
    cfg = GemmConfig(arch="sm_100a", schedule="warp_specialized", cluster=(2, 1), mma_sm=2, sm_count=4,
                     dtype="bf16", out_dtype="bf16", tile=tile)
    gemm = Gemm(cfg)
    d = gemm(a, b)
    err = np.max(np.abs(d.astype(np.float64) - ref)) / np.max(np.abs(ref))
    assert err < 1e-2, err                   # one bf16 rounding of the f32 result
    sass = gemm.compiled.resources.sass
    print(f"checked: sm_100a 2SM GEMM {m}x{n}x{k} bf16, pair MMA M = {2 * tile[0]} on {gemm.backend.name}, "
          f"max rel err {err:.2e}; SASS has {sass.get('UTCHMMA', 0)} UTCHMMA (.2CTA)")
