"""Grouped GEMM on sm_100a (issue 38): ``GroupedGemm(GemmConfig(arch="sm_100a"))`` runs the
persistent tcgen05 kernel (TMA warp, MMA warp, epilogue warps, accumulator in tensor memory)
holding the same grouped problem visitor as the sm_90a kernels -- per-group tensor maps from one
global table, the group's M, N, K per work tile. The real compiled sm_100a PTX on the emulator
(race checks on; eager and adversarial seeds), groups of M = 0, 1, K = 0 and ragged M, N, K
different per group, small integers (every partial sum exact: equal to float64 numpy); CTA
pairs; the CLI and the bench ``moe`` set; the main loops in SASS are the single-problem kernel's;
what it cannot run, refused by name."""
import numpy as np
import pytest

from cutedsl import GemmConfig, GroupedGemm
from cutedsl.errors import ConfigError
from cutedsl.sim import SimBackend

from test_sm100 import K_TILE, NP

OUT = {**NP, "f32": np.float32}


def problems(rng, shapes, dtype="f16", b_major="MN"):
    a = [rng.integers(-3, 4, (m, k)).astype(NP[dtype]) for m, n, k in shapes]
    b = [rng.integers(-3, 4, (k, n)).astype(NP[dtype]) for m, n, k in shapes]
    if b_major == "K":              # memory order picks the layout: (N, K) row-major, seen as (K, N)
        b = [np.ascontiguousarray(y.T).T for y in b]
    return a, b


def ragged_shapes(rng, tile_m, tile_n, k_tile):
    """M = 0, M = 1, N = 0, K = 0, and four groups of different M, N, K, none a tile multiple
    (two spanning more than one tile each way), shuffled."""
    def odd(t, lo, hi):
        x = int(rng.integers(lo * t + 1, hi * t))
        return x if x % t else x + 1
    shapes = [(0, 40, 64), (1, 9, 17), (33, 0, 50), (70, 50, 0),
              (odd(tile_m, 1, 3), odd(tile_n, 1, 3), odd(k_tile, 1, 3)),
              (odd(tile_m, 0, 1), odd(tile_n, 2, 3), odd(k_tile, 0, 1)),
              (odd(tile_m, 2, 3), odd(tile_n, 0, 1), odd(k_tile, 2, 4)),
              (int(rng.integers(2, 20)), int(rng.integers(2, 20)), int(rng.integers(2, 20)))]
    rng.shuffle(shapes)
    return shapes


def check(shapes, a, b, d, out_dtype, rng, scale=1.0, relu=False):
    assert len(d) == len(shapes)
    for g, (s, x, y, z) in enumerate(zip(shapes, a, b, d)):
        want = scale * (x.astype(np.float64) @ y.astype(np.float64))
        if relu:
            want = np.maximum(want, 0)
        assert z.shape == s[:2] and z.dtype == OUT[out_dtype], (g, s, z.shape, z.dtype)
        assert np.array_equal(z, want.astype(z.dtype)), f"group {g} {s} seed {rng.seed_value}"


@pytest.mark.sim_kernel
@pytest.mark.parametrize("tile,epilogue", [((128, 64), "global"), ((128, 64), "tma"), ((64, 128), "global")])
def test_groups_exact(tile, epilogue, rng, sim_seed):
    """2 SMs for 10+ work units: each CTA walks units of several groups (its accumulator
    double buffer alternating across groups)."""
    shapes = ragged_shapes(rng, *tile, K_TILE["f16"])
    gg = GroupedGemm(GemmConfig(arch="sm_100a", tile=tile + (64,), stages=2, epilogue=epilogue),
                     SimBackend(sm_count=2, race_check=True))
    assert type(gg.kernel).__name__ == "Sm100GroupedGemmKernel"
    a, b = problems(rng, shapes)
    check(shapes, a, b, gg(a, b), "f32", rng)


@pytest.mark.sim_kernel
@pytest.mark.parametrize("tile_m,b_major,epilogue", [(128, "MN", "global"), (64, "K", "tma")])
def test_cta_pairs(tile_m, b_major, epilogue, rng, sim_seed):
    """mma_sm=2 on a 2x1 cluster: a work unit is one pair tile (2 x tile_m rows) of one group;
    both CTAs swap in the group's maps, the even CTA's MMA covers both."""
    shapes = [(1, 9, 17)] + [tuple(int(x) for x in rng.integers((2, 2, 2), (2 * 2 * tile_m, 300, 200)))
                             for _ in range(3)] + [(0, 5, 5)]
    cfg = GemmConfig(arch="sm_100a", tile=(tile_m, 128, 64), stages=2, cluster=(2, 1), mma_sm=2, b_major=b_major,
                     epilogue=epilogue, out_dtype="f16")
    a, b = problems(rng, shapes, b_major=b_major)
    check(shapes, a, b, GroupedGemm(cfg, SimBackend(sm_count=4))(a, b), "f16", rng)


@pytest.mark.sim_kernel
def test_cluster_fp8_alpha_relu(rng, sim_seed):
    """A 1x2 cluster (A multicast), e4m3 operands with B K-major, alpha and ReLU fused, bf16 out."""
    cfg = GemmConfig(arch="sm_100a", dtype="e4m3", tile=(128, 64, 128), stages=2, cluster=(1, 2), b_major="K",
                     epilogue=["alpha", "relu"], out_dtype="bf16")
    shapes = [(130, 70, 200), (5, 150, 129), (1, 1, 1)]
    a, b = problems(rng, shapes, "e4m3", "K")
    d = GroupedGemm(cfg, SimBackend(sm_count=2))(a, b, alpha=0.5)
    check(shapes, a, b, d, "bf16", rng, scale=0.5, relu=True)


def test_only_empty_groups_launch_nothing(rng):
    """Every group empty (M, N or K = 0): empty or zero results, no launch."""
    be = SimBackend()
    shapes = [(0, 8, 8), (8, 0, 8), (8, 8, 0)]
    a, b = problems(rng, shapes)
    d = GroupedGemm(GemmConfig(arch="sm_100a", tile=(128, 64, 64), stages=2), be)(a, b)
    assert [z.shape for z in d] == [(0, 8), (8, 0), (8, 8)] and not d[2].any()
    assert be.last_launch == {}


def test_composed_visitor_declares_the_launch():
    """The kernel holds the visitor (no mixin): its scheduler is the visitor's, its parameters
    the visitor's declaration (D's addresses only for the global epilogue), its table rows the
    mainloop's A/B maps and the epilogue's D map."""
    from cutedsl.collective.grouped import GroupedProblems, GroupedTileScheduler
    from cutedsl.kernel.warp_specialized_sm100 import Sm100WarpSpecializedGemmKernel
    gg = GroupedGemm(GemmConfig(arch="sm_100a", tile=(128, 64, 64), stages=2, epilogue=["alpha", "global"]), "none")
    k = gg.kernel
    assert isinstance(k, Sm100WarpSpecializedGemmKernel) and isinstance(k.groups, GroupedProblems)
    assert k.scheduler is k.groups.scheduler and type(k.scheduler) is GroupedTileScheduler
    assert [p.name for p in k.params()] == ["maps", "d_ptrs", "alpha", "problems", "groups", "units"]
    assert list(k.map_specs()) == ["a", "b"]
    t = GroupedGemm(GemmConfig(arch="sm_100a", tile=(128, 64, 64), stages=2, epilogue="tma"), "none").kernel
    assert [p.name for p in t.params()] == ["maps", "problems", "groups", "units"]
    assert list(t.map_specs()) == ["a", "b", "d"] and t.map_specs()["d"].box == t.epilogue.tensor_maps()[0].box


@pytest.mark.parametrize("kw", [dict(), dict(cluster=(2, 1), mma_sm=2)])
def test_sass_main_loops_match_single_problem_kernel(kw):
    """Per k-tile the MMA warp's and the producer warp's loops are the single-problem kernel's
    instruction for instruction count (the group's maps are swapped in per tile, outside them)."""
    from cutedsl.compiler.sass_loops import kernel_hot_loop
    from cutedsl.kernel.grouped import Sm100GroupedGemmKernel
    cfg = GemmConfig(arch="sm_100a", tile=(128, 256, 64), stages=4, b_major="K", **kw)
    loops = []
    for k in (cfg.kernel(), cfg.kernel(kernel_cls=Sm100GroupedGemmKernel)):
        c = k.compile()
        assert c.resources.spill_stores == c.resources.spill_loads == 0
        mma, prod = kernel_hot_loop(c, "UTCHMMA"), kernel_hot_loop(c, "UTMALDG")
        assert mma["histogram"]["UTCHMMA"] == 4 and "R2UR" not in prod["histogram"], (type(k).__name__, mma, prod)
        loops.append((mma["instructions"], prod["instructions"]))
    assert loops[1] == loops[0], loops


@pytest.mark.parametrize("fields,msg", [
    (dict(schedule="single_tile"), "GroupedGemm runs the persistent schedules (warp_specialized), got schedule "
                                   "'single_tile'"),
    (dict(tile_scheduler="clc"), "Sm100GroupedGemmKernel: a grouped GEMM walks its groups' units with the static "
                                 "persistent scheduler: tile_scheduler must be 'static', got 'clc'"),
    (dict(dtype="mxfp8", tile=(128, 128, 128)),
     "Sm100GroupedGemmKernel: a grouped GEMM takes no block-scaled (MX) inputs yet (a row of its table holds A, "
     "B and D maps, not the scale factors'): use an f16, bf16, fp8 or tf32 dtype"),
    (dict(decomposition="stream-k"), "Sm100GroupedGemmKernel: a grouped GEMM runs whole tiles: decomposition "
                                     "must be 'data-parallel', got 'stream-k'"),
    (dict(batched=True), "Sm100GroupedGemmKernel: a grouped GEMM is not batched: give each batch as its own group"),
    (dict(epilogue=["bias:col", "global"]), "Sm100GroupedGemmKernel: a grouped GEMM takes scalar epilogue "
                                            "arguments only (alpha, scales, activations), not the arrays ['bias']"),
])
def test_refusals(fields, msg):
    with pytest.raises(ConfigError) as e:
        GroupedGemm(GemmConfig(**{"arch": "sm_100a", "tile": (128, 64, 64), **fields}), "none")
    assert str(e.value) == msg


def test_cli_groups_on_sm100a():
    """``python -m cutedsl gemm --groups ... --arch sm_100a``: the persistent tcgen05 kernel (the
    architecture's grouped schedule when --schedule is auto), every group checked."""
    from cutedsl import cli
    args = cli._parser().parse_args(["gemm", "--groups", "150x70x100,0x64x64,1x9x17,64x64x0", "--arch", "sm_100a",
                                     "--tile", "128x64x64", "--sm-count", "2", "--backend", "sim", "--check"])
    rep, status = cli.run_gemm(args)
    assert status == 0 and rep["passed"] is True, rep
    assert rep["arch"] == "sm_100a" and rep["schedule"] == "warp_specialized" and rep["threads"] == 192
    assert [(g["m"], g["n"], g["k"]) for g in rep["groups"]] == [(150, 70, 100), (0, 64, 64), (1, 9, 17), (64, 64, 0)]
    # the CLI's operands are random reals: f32 accumulation against float64
    assert all(g["passed"] and g["max_rel_err"] < 1e-5 for g in rep["groups"]), rep["groups"]


def test_bench_moe_set_on_sm100a():
    """The bench ``moe`` set accepts sm_100a: its grouped schedule, run and checked group by group."""
    from cutedsl.bench import configs as C, libs, runner
    from cutedsl.bench.shapes import TINY_GROUPS
    from cutedsl.bench.timing import WallTimer
    from cutedsl.device import Gemm
    cfgs = C.sweep_configs("moe", tiles=[(128, 128, 64)], base={"arch": "sm_100a", "out_dtype": "f16"})
    assert [(c.arch, c.schedule) for c in cfgs] == [("sm_100a", "warp_specialized")]
    be = SimBackend(sm_count=2)
    lib, _ = libs.pick("sim", "numpy", 0)
    s = runner.Sweep(be, lib, WallTimer(be.synchronize), lambda c: Gemm(c, be), iters=1, warmup=0,
                     make_grouped=lambda c: GroupedGemm(c, be))
    out = s.run_set("moe", cfgs)
    assert [r["groups"] for r in out["rows"]] == [len(TINY_GROUPS[0])]
    assert out["rows"][0]["check"] == "pass", out["rows"]
