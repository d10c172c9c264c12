"""Cluster launch control on the persistent sm_100a kernel (issue 24; CUTLASS's
``PersistentTileSchedulerSm100``): ``GemmConfig(tile_scheduler="clc")`` launches one CTA per
tile (cluster); the running clusters' first CTA ``try_cancel``s a waiting one (multicast to the
cluster) and every role of every CTA takes the cancelled cluster's tile from the response ring. On the emulator with few SMs most CTAs wait, so
most tiles are done by cancelling CTAs (eager: the next in launch order; adversarial seeds:
random victims and failing requests) -- every tile exactly once, bit-exact."""
import numpy as np
import pytest

from cutedsl import Gemm, GemmConfig
from cutedsl.errors import ConfigError
from cutedsl.sim import SimBackend

from test_sm100 import K_TILE, NP


def launch(cfg, m, n, k, rng, sm_count, l=None, **extra):
    lead = (l,) if l else ()
    a = rng.integers(-4, 5, lead + (m, k)).astype(NP[cfg.dtype])
    b = rng.integers(-4, 5, lead + (k, n)).astype(NP[cfg.dtype])
    if cfg.b_major == "K":
        b = np.ascontiguousarray(np.swapaxes(b, -1, -2)).swapaxes(-1, -2)
    be = SimBackend(sm_count=sm_count)
    d = Gemm(cfg, be)(a, b, **extra)
    return d, np.matmul(a.astype(np.float64), b.astype(np.float64)), be.last_launch


@pytest.mark.sim_kernel
@pytest.mark.parametrize("sm_count", [1, 2, 132])
def test_clc_every_tile_once(sm_count, rng, sim_seed):
    """25 tiles: on 1-2 SMs the resident CTAs cancel the waiting ones and do their tiles; on 132
    every CTA is resident at once and every request fails."""
    cfg = GemmConfig(arch="sm_100a", tile=(128, 64, 64), stages=3, tile_scheduler="clc")
    m, n, k = 4 * 128 + int(rng.integers(1, 128)), 4 * 64 + int(rng.integers(1, 64)), 200
    d, ref, info = launch(cfg, m, n, k, rng, sm_count)
    assert np.array_equal(d, ref)
    assert info["clusters_started"] + info["clusters_cancelled"] == 25
    if sm_count == 132:
        assert info["clusters_cancelled"] == 0
    else:
        assert info["clusters_cancelled"] > 0
        if sim_seed is None:            # eager: every request succeeds while a CTA waits
            assert info["clusters_started"] == info["resident_clusters"]


@pytest.mark.sim_kernel
@pytest.mark.parametrize("dtype,tile,b_major,out", [
    ("bf16", (128, 128), "MN", "bf16"),
    ("e4m3", (128, 256), "K", "f32"),
    ("f16", (64, 128), "K", "f16"),
    ("tf32", (128, 64), "K", "f32"),
])
def test_clc_dtypes_and_tiles(dtype, tile, b_major, out, rng, sim_seed):
    """Other types and tiles (a 128 x 256 tile takes the whole tensor memory: the resident
    CTAs' allocations wait for each other), 2 SMs, ragged edges."""
    cfg = GemmConfig(arch="sm_100a", dtype=dtype, out_dtype=out, tile=tile + (K_TILE[dtype],), b_major=b_major,
                     stages=2, tile_scheduler="clc")
    m, n = 2 * tile[0] + int(rng.integers(1, tile[0])), 2 * tile[1] + int(rng.integers(1, tile[1]))
    k = 2 * K_TILE[dtype] + int(rng.integers(1, K_TILE[dtype]))
    d, ref, info = launch(cfg, m, n, k, rng, 2)
    assert info["clusters_started"] + info["clusters_cancelled"] == 9
    if out == "f32":
        assert np.array_equal(d.astype(np.float64), ref)
    else:
        assert np.array_equal(d, ref.astype(np.float32).astype(d.dtype))


@pytest.mark.sim_kernel
def test_clc_batched_fused_and_mx(rng, sim_seed):
    """Batched with fused nodes (a unit's batch from its id), and a block-scaled MXFP8 GEMM."""
    cfg = GemmConfig(arch="sm_100a", batched=True, tile_scheduler="clc", stages=2,
                     epilogue=["bias:col", "relu", "global"])
    bias = rng.integers(-9, 10, 140).astype(np.float32)
    d, ref, info = launch(cfg, 150, 140, 70, rng, 1, l=3, bias=bias)
    assert np.array_equal(d.astype(np.float64), np.maximum(ref + bias, 0)) and info["clusters_cancelled"] > 0
    from cutedsl.device import mx
    from test_sm100 import mx_operands
    qa, qb, sa, sb = mx_operands(rng, 300, 200, 300, "mxfp8")
    be = SimBackend(sm_count=1)
    d = Gemm(GemmConfig(arch="sm_100a", dtype="mxfp8", stages=2, tile_scheduler="clc"), be)(
        qa, qb.T, a_scales=mx.pack_scales(sa), b_scales=mx.pack_scales(sb))
    assert np.array_equal(d.astype(np.float64), mx.dequantize(qa, sa) @ mx.dequantize(qb, sb).T)
    assert be.last_launch["clusters_cancelled"] > 0


def test_clc_kernel_sass():
    """The try_cancel is SASS UGETNEXTWORKID; the MMA and producer loops are the static
    scheduler's (the requests are per tile, not per k-tile); no spills; the grid has one CTA
    per tile."""
    from cutedsl.compiler import toolchain
    from cutedsl.compiler.sass_loops import kernel_hot_loop
    kw = dict(arch="sm_100a", tile=(128, 256, 64), b_major="K", stages=4)
    clc = Gemm(GemmConfig(tile_scheduler="clc", **kw), "sim")
    k, k0 = clc.compiled, GemmConfig(**kw).kernel().compile()
    assert k.resources.spill_stores == 0 and "clusterlaunchcontrol.try_cancel" in k.ptx
    assert "UGETNEXTWORKID" in {ln.split()[1].split(".")[0] for ln in toolchain.sass(k.cubin).splitlines()
                                if len(ln.split()) > 1}
    for op in ("UTCHMMA", "UTMALDG"):
        assert kernel_hot_loop(k, op)["instructions"] == kernel_hot_loop(k0, op)["instructions"]
    assert clc.grid(1000, 1000, 64, 1) == (8 * 4, 1, 1)


@pytest.mark.sim_kernel
@pytest.mark.parametrize("kw", [dict(cluster=(2, 1)), dict(cluster=(1, 2)), dict(cluster=(2, 2)),
                                dict(cluster=(2, 1), mma_sm=2), dict(cluster=(2, 1), mma_sm=2, tile=(64, 128, 64))])
def test_clc_clusters(kw, rng, sim_seed):
    """Clusters: the first CTA asks with .multicast::cluster::all, the response lands in every
    CTA of the cluster, and every warp of the cluster releases the slot on the first CTA's
    barrier (a pair's odd CTA without its MMA warp); B / A multicast and CTA pairs as usual."""
    cfg = GemmConfig(**{"arch": "sm_100a", "tile": (128, 64, 64), "stages": 3, "tile_scheduler": "clc",
                        "b_major": "K", **kw})
    m, n, k = 4 * 128 + int(rng.integers(1, 128)), 3 * 64 + int(rng.integers(1, 64)), 150
    d, ref, info = launch(cfg, m, n, k, rng, 2)
    assert np.array_equal(d, ref) and info["clusters_cancelled"] > 0
    units = Gemm(cfg, "sim").grid(m, n, k, 1)[0] // (cfg.cluster[0] * cfg.cluster[1])
    assert info["clusters_started"] + info["clusters_cancelled"] == units


@pytest.mark.parametrize("kw,match", [
    (dict(decomposition="stream-k"), r"tile_scheduler='clc' \(cluster launch control\) hands out whole tiles: "
                                     r"decomposition must be 'data-parallel', got 'stream-k'"),
    (dict(arch="sm_90a", schedule="cooperative"), r"tile_scheduler='clc' \(cluster launch control\) needs "
                                                  r"arch='sm_100a' and schedule='warp_specialized', got sm_90a"),
    (dict(tile_scheduler="dynamic"), r"tile_scheduler must be 'static' or 'clc', got 'dynamic'"),
])
def test_clc_config_errors(kw, match):
    with pytest.raises(ConfigError, match=match):
        GemmConfig(**{"arch": "sm_100a", "tile_scheduler": "clc", **kw})


def test_clc_from_the_cli(capsys):
    """``--tile-scheduler clc``: the model keeps one-CTA clusters, the report names the
    scheduler, and the emulator's result passes the float64 check."""
    from cutedsl.cli import main
    rc = main(["gemm", "--arch", "sm_100a", "--m", "300", "--n", "200", "--k", "100", "--tile-scheduler", "clc",
               "--check"])
    out = capsys.readouterr().out
    assert rc == 0 and "cluster launch control" in out and "-> PASS" in out, out
