"""64-row accumulators on sm_100a (issue 24), the two ways a BLOCK_M 64 tile runs:

* **one CTA's M = 64 MMA** (``tile=(64, N)``, CUTLASS's 1SM 64 x N tile, for problems with few
  rows): rows ``16 q .. 16 q + 15`` of the accumulator lie at lanes ``32 q .. 32 q + 15``; the
  epilogue warp of quarter ``q`` loads them with ``tcgen05.ld.16x32bx2`` whose half-split puts
  the second ``N / 2`` columns in its lanes 16..31;
* **a CTA pair's M = 128 MMA** (``tile=(64, N)``, ``mma_sm=2``, cluster (2, 1), CUTLASS's 2SM
  kernel with a 128-row MMA tile, what CuTe DSL runs for 128 x N on a 2x1 cluster): each CTA
  loads its 64 rows of A and half of B's N rows, the even CTA issues
  ``tcgen05.mma.cta_group::2`` with M = 128, and each CTA's 64 x N accumulator lies in N / 2
  TMEM columns, the second half of its columns in lanes 64..127 (the epilogue warps of quarters
  2 and 3 store those).

Real compiled PTX on the emulator, ragged shapes, exact small-integer inputs."""
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
    (dict(tile=(64, 64, 64), epilogue="tma", out_dtype="f16"),
     r"with BLOCK_M 64 the sm_100a TMA-store epilogue stores BLOCK_N / 2 = 32 columns per warp in 64-column "
     r"sub-tiles of f16: use BLOCK_N >= 128 or epilogue='global'"),
    (dict(tile=(64, 128, 64), decomposition="stream-k"), r"stream-K / split-K on sm_100a are built for BLOCK_M 128"),
    (dict(tile=(64, 128, 64), mma_sm=2), r"mma_sm=2 \(one MMA shared by a CTA pair: 256 or 128 rows\) runs on "
                                         r"cluster \(2, 1\)"),
    (dict(tile=(64, 128, 64), schedule="single_tile"), r"tile BLOCK_M must be 128, got 64"),
])
def test_m64_config_errors(kw, match):
    with pytest.raises(ConfigError, match=match):
        GemmConfig(arch="sm_100a", **kw)


@pytest.mark.parametrize("dtype,tile_n,b_major,out,cluster", [
    ("f16", 64, "K", "f32", (1, 1)),
    ("bf16", 128, "MN", "bf16", (1, 1)),
    ("f16", 256, "K", "f16", (1, 1)),
    ("e5m2", 128, "K", "f32", (2, 1)),
    ("tf32", 128, "K", "f32", (1, 2)),
])
def test_m64_exact(dtype, tile_n, b_major, out, cluster, rng, sim):
    """One CTA per 64 x tile_n tile on 3 SMs (several tiles each), ragged edges; clusters with
    TMA multicast of B (2x1) and of A (1x2)."""
    k_tile = K_TILE[dtype]
    cfg = GemmConfig(arch="sm_100a", dtype=dtype, out_dtype=out, tile=(64, tile_n, k_tile), b_major=b_major,
                     cluster=cluster, stages=3, sm_count=3 if cluster == (1, 1) else 4)
    m = 3 * 64 + int(rng.integers(1, 64))
    n = 2 * tile_n + int(rng.integers(1, tile_n))
    k = 2 * k_tile + int(rng.integers(1, k_tile))
    run(cfg, m, n, k, rng, sim)


def test_m64_batched_fused(rng, sim):
    """Fused nodes read each element at the row and column the 16x32bx2 layout gives it."""
    cfg = GemmConfig(arch="sm_100a", tile=(64, 128, 64), batched=True, sm_count=2,
                     epilogue=["scale_a:row", "bias:col", "relu", "global"])
    m, n, k = 100, 200, 70
    a = rng.integers(-4, 5, (2, m, k)).astype(np.float16)
    b = rng.integers(-4, 5, (k, n)).astype(np.float16)
    sa = rng.integers(-2, 3, m).astype(np.float32)
    bias = rng.integers(-9, 10, n).astype(np.float32)
    d = Gemm(cfg, sim)(a, b, scale_a=sa, bias=bias)
    ref = np.maximum(np.matmul(a.astype(np.float64), b.astype(np.float64)) * sa[:, None] + bias, 0)
    assert np.array_equal(d.astype(np.float64), ref)


def test_m64_kernel_sass():
    """The MMA loop is the 128-row kernel's (4 UTCHMMA, one release per k-tile), the epilogue
    loads by 16x32bx2 (LDTM), the stage holds 64 rows of A; no spills."""
    from cutedsl.compiler.sass_loops import kernel_hot_loop
    kern = GemmConfig(arch="sm_100a", tile=(64, 128, 64), b_major="K", stages=4).kernel()
    assert kern.split_accumulator == "lane" and kern.acc_columns == 128
    k = kern.compile()
    assert k.resources.spill_stores == 0 and "tcgen05.ld.sync.aligned.16x32bx2.x16.b32" in k.ptx
    assert "tcgen05.mma.cta_group::1" in k.ptx and "LDTM" in k.resources.sass
    loop = kernel_hot_loop(k, "UTCHMMA")
    assert loop["histogram"]["UTCHMMA"] == 4 and loop["histogram"]["UTCBAR"] == 1 and loop["instructions"] <= 42, loop
    prod = kernel_hot_loop(k, "UTMALDG")
    assert prod["instructions"] / (prod["histogram"]["UTMALDG"] / 2) <= 33, prod


def test_accumulator_layouts_of_the_mma_shapes():
    """Each CTA's accumulator layout follows from the MMA's M and CTA count (the atom's rule the
    kernel and both epilogues read); a layout name outside SPLITS is refused."""
    from cutedsl.atom.tmem_fragment import TmemLayout, accumulator_split, lane_columns, tmem_columns
    assert [accumulator_split(m, g) for m, g in ((128, 1), (64, 1), (256, 2), (128, 2))] == \
        [None, "lane", None, "warp"]
    assert [(lane_columns(128, s), tmem_columns(128, s)) for s in (None, "lane", "warp")] == \
        [(128, 128), (64, 128), (64, 64)]
    with pytest.raises(ValueError, match=r"TmemLayout split must be None, 'warp' or 'lane', got 'row'"):
        TmemLayout(16, 0, "row", 64)


@pytest.mark.parametrize("kw,tile_n,out", [
    (dict(), 128, "f16"), (dict(), 64, "f32"), (dict(), 256, "bf16"),
    (dict(mma_sm=2, cluster=(2, 1)), 128, "f16"), (dict(mma_sm=2, cluster=(2, 1)), 256, "f32"),
])
def test_m64_tma_store_epilogue(kw, tile_n, out, rng, sim):
    """The TMA-store epilogue on 64-row accumulators: a pair's M = 128 (warp q stores rows
    32 (q % 2).. of column half q // 2) and one CTA's M = 64 (warp q stages rows 16 q.. of both
    column halves as one sub-tile and stores it as two 16-row boxes); batched + fused too."""
    cfg = GemmConfig(arch="sm_100a", tile=(64, tile_n, 64), epilogue="tma", out_dtype=out, stages=2, sm_count=3,
                     b_major="K", **kw)
    assert cfg.kernel().epilogue.split == ("warp" if kw else "lane")
    m, n, k = 2 * 128 + int(rng.integers(1, 128)), 2 * tile_n + int(rng.integers(1, tile_n)), 100
    run(cfg, m, n, k, rng, sim)


def test_m64_tma_store_batched_fused(rng, sim):
    cfg = GemmConfig(arch="sm_100a", tile=(64, 128, 64), epilogue=["bias:col", "relu", "tma"], batched=True,
                     sm_count=2, out_dtype="f16")
    a = rng.integers(-4, 5, (2, 100, 70)).astype(np.float16)
    b = rng.integers(-4, 5, (70, 200)).astype(np.float16)
    bias = rng.integers(-9, 10, 200).astype(np.float32)
    d = Gemm(cfg, sim)(a, b, bias=bias)
    ref = np.maximum(np.matmul(a.astype(np.float64), b.astype(np.float64)) + bias, 0)
    assert np.array_equal(d, ref.astype(np.float16))
