"""Stream-K and split-K GEMMs run for real (compiled PTX on the emulator, every resident CTA
live, so the clusters that share a tile wait on each other through global memory) on shapes
that are not tile multiples: exact on small integers, bit-identical from run to run and
under adversarial interleavings; the workspace is reused and left clean; the consumer main
loops in SASS match the data-parallel kernels'."""
import numpy as np
import pytest

from cutedsl import Gemm, GemmConfig
from cutedsl.compiler.sass_loops import hot_loop
from cutedsl.compiler.toolchain import sass
from cutedsl.errors import ArgumentError, ConfigError
from cutedsl.kernel.warp_specialized import CooperativeGemmKernel, PingpongGemmKernel
from cutedsl.problem import GemmProblem

TILE = {"cooperative": (128, 64, 64), "pingpong": (64, 64, 64)}


def operands(rng, m, n, k, l=None, integer=True):
    lead = (l,) if l else ()
    if integer:         # every partial sum exact in f32, so any reduction order is exact
        return (rng.integers(-4, 5, lead + (m, k)).astype(np.float16),
                rng.integers(-4, 5, lead + (k, n)).astype(np.float16))
    return (rng.standard_normal(lead + (m, k), dtype=np.float32).astype(np.float16),
            rng.standard_normal(lead + (k, n), dtype=np.float32).astype(np.float16))


def ref(a, b):
    return a.astype(np.float64) @ b.astype(np.float64)


@pytest.mark.parametrize("decomposition,splits", [("stream-k", None), ("split-k", 3), ("heuristic", None)])
@pytest.mark.parametrize("schedule", ["cooperative", "pingpong"])
def test_exact(schedule, decomposition, splits, rng, sim):
    """3 x 2 tiles over 4 SMs (a partial wave: stream-K shares all 6 tiles' k-iterations), K
    of 7 k-tiles, the last partial."""
    bm, bn, _ = TILE[schedule]
    m, n = 2 * bm + int(rng.integers(1, bm)), bn + int(rng.integers(1, bn))
    k = 64 * 6 + int(rng.integers(1, 64))
    cfg = GemmConfig(schedule=schedule, tile=TILE[schedule], stages=3, sm_count=4, decomposition=decomposition,
                     splits=splits)
    g = Gemm(cfg, sim)
    dec = g.kernel.scheduler.decompose(GemmProblem(m, n, k))
    assert dec.mode == ("split-k" if splits else "stream-k") and dec.sk_tiles == 6
    a, b = operands(rng, m, n, k)
    d = g(a, b)
    assert np.array_equal(d, ref(a, b)), f"{cfg} {m}x{n}x{k} seed {rng.seed_value}"


def test_hybrid_cluster_batched_fused(rng, sim):
    """Data-parallel wave + stream-K on 2x1 clusters over a batch of 3, with beta * C (loaded
    by TMA), bias and ReLU fused into the one epilogue the final piece runs."""
    cfg = GemmConfig(schedule="cooperative", tile=(128, 64, 64), stages=2, sm_count=4, cluster=(2, 1),
                     decomposition="stream-k", epilogue=["beta", "bias:col", "relu"], out_dtype="f16")
    m, n, k, l = 200, 150, 64 * 5 - 3, 3
    g = Gemm(cfg, sim)
    dec = g.batched_gemm().kernel.scheduler.decompose(GemmProblem(m, n, k, l))
    # 9 cluster tiles (3 per batch) on 2 clusters of 2: three data-parallel waves, then 3 tiles shared
    assert (dec.tiles, dec.clusters, dec.dp_tiles, dec.sk_tiles) == (9, 2, 6, 3)
    a, b = operands(rng, m, n, k, l)
    c = rng.integers(-3, 4, (l, m, n)).astype(np.float16)
    bias = rng.integers(-3, 4, n).astype(np.float32)
    d = g(a, b, beta=0.5, c=c, bias=bias)
    want = np.maximum(ref(a, b) + 0.5 * c + bias, 0)
    assert np.array_equal(d.astype(np.float64), want.astype(np.float16).astype(np.float64))


@pytest.mark.parametrize("schedule", ["cooperative", "pingpong"])
def test_bit_identical_runs_and_clean_workspace(schedule, rng, sim):
    """Random normal inputs: two runs, and a run under another adversarial interleaving, give
    the same bits (the reduction order is fixed); the workspace comes back to the Gemm's pool with every semaphore at 0 and is reused."""
    from cutedsl.runtime import arrays
    cfg = GemmConfig(schedule=schedule, tile=TILE[schedule], stages=2, sm_count=3, decomposition="stream-k",
                     epilogue="global")
    bm, bn, _ = TILE[schedule]
    m, n, k = bm + 9, bn + 5, 64 * 8 - 11
    a, b = operands(rng, m, n, k, integer=False)
    g = Gemm(cfg, sim)
    d1 = g(a, b)
    assert len(g._workspaces) == 1
    ws = g._workspaces._free[0]
    d2 = g(a, b)
    assert np.array_equal(d1, d2)
    assert len(g._workspaces) == 1 and g._workspaces._free[0] is ws       # reused, not reallocated
    sizes = g.kernel.workspace(GemmProblem(m, n, k))
    assert sizes["workspace"] == 4 * bm * bn * 4                          # 4 tiles split, f32
    from cutedsl.runtime.workspace import layout
    off = layout(sizes)[0]["locks"]
    locks = arrays.to_host(ws)[off:off + sizes["locks"]].view(np.uint32)
    assert not locks.any(), locks
    err = np.max(np.abs(d1 - ref(a, b))) / np.max(np.abs(ref(a, b)))
    assert err < 2e-5, err
    from cutedsl.sim import SimBackend       # another interleaving of the CTAs: the same bits
    assert np.array_equal(Gemm(cfg, SimBackend(chaos=int(rng.integers(1, 1000))))(a, b), d1)


def test_sass_main_loops_unchanged():
    """The fix-up runs after the main loop: the consumer loops per k-tile are the
    data-parallel kernels' (within 5 instructions, the issue's bound), no spills."""
    for cls, tile in ((CooperativeGemmKernel, (128, 256)), (PingpongGemmKernel, (128, 128))):
        counts = []
        for dec in ("data-parallel", "stream-k"):
            k = cls(*tile, stages=3, decomposition=dec).compile()
            r = k.resources
            assert r.spill_stores == r.spill_loads == r.stack == 0, r
            counts.append(hot_loop(sass(k.cubin))["instructions"])
        assert counts[1] <= counts[0] + 5, (cls.name, counts)
        ptx = k.ptx
        assert "ld.acquire.gpu.global.b32" in ptx and "st.release.gpu.global.b32" in ptx


@pytest.mark.parametrize("fields,msg", [
    (dict(schedule="cooperative", tile=(128, 64, 64), decomposition="split-k"),
     "decomposition 'split-k' needs splits, an int in 2..256 (pieces of each tile's K), got None"),
    (dict(schedule="cooperative", tile=(128, 64, 64), decomposition="stream-k", splits=2),
     "splits=2 is for decomposition 'split-k', got decomposition 'stream-k'"),
    (dict(schedule="multistage", decomposition="stream-k"),
     "decomposition 'stream-k' needs a persistent schedule (cooperative, pingpong on sm_90a): its CTAs share "
     "tiles, got schedule 'multistage'"),
    (dict(arch="sm_100a", schedule="single_tile", decomposition="split-k", splits=2),
     "decomposition 'split-k' needs a persistent schedule (warp_specialized on sm_100a): its CTAs share tiles, "
     "got schedule 'single_tile'"),
    (dict(schedule="pingpong", decomposition="streamk"),
     "decomposition must be 'heuristic', 'data-parallel', 'split-k' or 'stream-k', got 'streamk'"),
])
def test_config_errors(fields, msg):
    with pytest.raises(ConfigError) as e:
        GemmConfig(**fields)
    assert str(e.value) == msg


def test_more_ctas_than_resident_is_refused(rng):
    """Clusters that wait on each other must all be resident: a launch sized for more SMs
    than the device has is refused before anything runs."""
    from cutedsl.sim import SimBackend
    cfg = GemmConfig(schedule="cooperative", tile=(128, 64, 64), sm_count=8, decomposition="stream-k")
    a, b = operands(rng, 300, 300, 640)
    with pytest.raises(ArgumentError, match="stream-k launches 8 CTAs that wait on each other, but the device "
                                            "holds 2 at once"):
        Gemm(cfg, SimBackend(sm_count=2))(a, b)


@pytest.mark.sim_kernel
@pytest.mark.parametrize("fields", [dict(decomposition="stream-k", sm_count=3),
                                    dict(decomposition="split-k", splits=3, sm_count=4),
                                    dict(decomposition="heuristic", sm_count=5, out_dtype="bf16"),
                                    dict(decomposition="stream-k", sm_count=3, epilogue="tma", out_dtype="bf16")])
def test_sm100a_pieces_reduced_in_tensor_memory_order(fields, rng, sim):
    """sm_100a's persistent kernel with stream-K / split-K pieces: the epilogue warps reduce each
    piece's tensor-memory rows through the workspace (tmem_epilogue.store_partial) and the
    piece ending a tile stores it (global or TMA-store epilogue); exact on ragged shapes, eager
    and adversarial."""
    m, n = 128 + int(rng.integers(1, 128)), 128 + int(rng.integers(1, 128))
    k = 64 * int(rng.integers(9, 16)) + int(rng.integers(1, 64))
    a = rng.integers(-3, 4, (m, k)).astype(np.float16)
    b = rng.integers(-3, 4, (k, n)).astype(np.float16)
    cfg = GemmConfig(arch="sm_100a", tile=(128, 128, 64), stages=2, **fields)
    d = Gemm(cfg, sim)(a, b)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    if cfg.out_dtype == "f32":
        assert np.array_equal(np.asarray(d, np.float64), ref), rng.seed_value
    else:
        assert np.array_equal(d, ref.astype(np.float32).astype(d.dtype)), rng.seed_value
