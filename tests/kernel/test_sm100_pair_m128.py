"""A CTA pair's M = 128 MMA on sm_100a (issue 24; CUTLASS's 2SM kernel with a 128-row MMA tile,
what CuTe DSL runs for 128 x N on a 2x1 cluster): ``tile=(64, N)``, ``mma_sm=2``, cluster (2, 1)
-- each CTA loads its 64 rows of A and half of B's N rows, the even CTA issues
``tcgen05.mma.cta_group::2`` with M = 128, and each CTA's 64 x N accumulator lies in N / 2 TMEM
columns, the second half of its columns in lanes 64..127 (the epilogue warps of quarters 2 and 3
store those). Real compiled PTX on the emulator, ragged shapes, exact small-integer inputs."""
import numpy as np
import pytest

from cutedsl import Gemm, GemmConfig
from cutedsl.errors import ConfigError

from test_sm100 import K_TILE, run


@pytest.mark.parametrize("dtype,tile_n,b_major,out", [
    ("f16", 64, "K", "f32"),
    ("bf16", 128, "MN", "bf16"),
    ("f16", 256, "K", "f16"),
    ("e4m3", 128, "K", "f32"),
    ("tf32", 64, "K", "f32"),
])
def test_pair_m128_exact(dtype, tile_n, b_major, out, rng, sim):
    """128 x tile_n per pair on 4 SMs (2 pairs walking 3 x 3 pair tiles or more), ragged edges."""
    k_tile = K_TILE[dtype]
    cfg = GemmConfig(arch="sm_100a", dtype=dtype, out_dtype=out, tile=(64, tile_n, k_tile), b_major=b_major,
                     cluster=(2, 1), mma_sm=2, stages=3, sm_count=4)
    m = 2 * 128 + int(rng.integers(1, 128))
    n = 2 * tile_n + int(rng.integers(1, tile_n))
    k = 2 * k_tile + int(rng.integers(1, k_tile))
    run(cfg, m, n, k, rng, sim)


def test_pair_m128_batched_fused(rng, sim):
    """Row scale, column bias and ReLU read each element at the row and column the split
    accumulator layout gives it; a batch with B shared."""
    cfg = GemmConfig(arch="sm_100a", tile=(64, 128, 64), mma_sm=2, cluster=(2, 1), batched=True, sm_count=2,
                     epilogue=["scale_a:row", "bias:col", "relu", "global"])
    m, n, k = 150, 200, 70
    a = rng.integers(-4, 5, (3, m, k)).astype(np.float16)
    b = rng.integers(-4, 5, (k, n)).astype(np.float16)
    sa = rng.integers(-2, 3, m).astype(np.float32)
    bias = rng.integers(-9, 10, n).astype(np.float32)
    d = Gemm(cfg, sim)(a, b, scale_a=sa, bias=bias)
    ref = np.maximum(np.matmul(a.astype(np.float64), b.astype(np.float64)) * sa[:, None] + bias, 0)
    assert np.array_equal(d.astype(np.float64), ref)


def test_pair_m128_kernel_sass():
    """Per k-tile the even CTA's MMA loop issues 4 UTCHMMA.2CTA and one multicast release, within
    CuTe DSL's pair M = 128 loop (45; producer 35: docs/measurements.md), no spills; each CTA
    allocates 2 x N / 2 TMEM columns (the split accumulator, double-buffered) and its stage holds
    64 rows of A and N / 2 of B."""
    from cutedsl.compiler import toolchain
    from cutedsl.compiler.sass_loops import kernel_hot_loop
    cfg = GemmConfig(arch="sm_100a", tile=(64, 128, 64), mma_sm=2, cluster=(2, 1), b_major="K", stages=4)
    kern = cfg.kernel()
    assert kern.acc_columns == 64 and kern.mainloop.b_tile_rows == 64
    k = kern.compile()
    assert k.resources.spill_stores == 0 and "tcgen05.alloc.cta_group::2" in k.ptx
    assert kern.mainloop.pair_stage_bytes == (2 * 64 + 128) * 64 * 2    # the even CTA's barrier: both CTAs' loads
    ring = 4 * (64 + 64) * 64 * 2                                   # per CTA: 64 rows of A, N / 2 of B
    assert ring <= k.resources.dynamic_smem < ring + 2048, k.resources  # + barriers, TMEM address
    ops = {ln.split()[1] for ln in toolchain.sass(k.cubin).splitlines() if "UTC" in ln and len(ln.split()) > 1}
    assert {"UTCHMMA.2CTA", "UTCBAR.2CTA.MULTICAST"} <= ops, ops
    loop = kernel_hot_loop(k, "UTCHMMA")
    assert loop["histogram"]["UTCHMMA"] == 4 and loop["instructions"] <= 45, loop
    prod = kernel_hot_loop(k, "UTMALDG")
    assert prod["instructions"] / (prod["histogram"]["UTMALDG"] / 2) <= 35, prod


@pytest.mark.parametrize("kw,match", [
    (dict(tile=(64, 128, 64)), r"BLOCK_M 64 on sm_100a is a CTA pair's half of an M = 128 tcgen05.mma: mma_sm=2, "
                               r"cluster \(2, 1\) \(CLI --mma-sm 2 --cluster 2x1\)"),
    (dict(tile=(64, 128, 64), cluster=(2, 1)), r"BLOCK_M 64 on sm_100a is a CTA pair's half"),
    (dict(tile=(64, 128, 64), mma_sm=2, cluster=(2, 1), epilogue="tma"),
     r"the sm_100a TMA-store epilogue is built for 128-row accumulators: with BLOCK_M 64 .* use epilogue='global'"),
    (dict(tile=(64, 128, 64), mma_sm=2), r"mma_sm=2 \(one MMA shared by a CTA pair: 256 or 128 rows\) runs on cluster \(2, 1\)"),
    (dict(tile=(64, 128, 64), schedule="single_tile"), r"tile BLOCK_M must be 128, got 64"),
])
def test_pair_m128_config_errors(kw, match):
    with pytest.raises(ConfigError, match=match):
        GemmConfig(arch="sm_100a", **kw)


def test_kernel_class_refuses_m64_without_a_pair():
    from cutedsl.kernel.warp_specialized_sm100 import Sm100WarpSpecializedGemmKernel
    with pytest.raises(ValueError, match=r"Sm100WarpSpecializedGemmKernel\(tile_m=64\): BLOCK_M 64 on sm_100a"):
        Sm100WarpSpecializedGemmKernel(tile_m=64, tile_n=128, arch="sm_100a")
