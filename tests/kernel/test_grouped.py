"""Grouped GEMM (``GroupedGemm``): G problems of different M, N, K in one persistent launch on
the emulator -- groups of M = 0, 1, K = 0 and non-multiples of the tile, both persistent
schedules, both epilogue kinds, a cluster, scalar fused nodes, device operands -- exact on
small integers; bad input refused before anything runs; the main loops in SASS are the
single-problem kernels'."""
import numpy as np
import pytest

from cutedsl import GemmConfig, GroupedGemm
from cutedsl.compiler.sass_loops import hot_loop
from cutedsl.compiler.toolchain import sass
from cutedsl.errors import ArgumentError, ArgumentTypeError, ConfigError

TILE = {"cooperative": (128, 64, 64), "pingpong": (64, 64, 64)}


def problems(rng, shapes):
    a = [rng.integers(-3, 4, (m, k)).astype(np.float16) for m, n, k in shapes]
    b = [rng.integers(-3, 4, (k, n)).astype(np.float16) for m, n, k in shapes]
    return a, b


def random_shapes(rng):
    """M = 0, M = 1, K = 0 and odd shapes, shuffled."""
    shapes = [(0, 40, 64), (1, 9, 17), (70, 50, 0)]
    shapes += [tuple(int(x) for x in rng.integers((2, 1, 1), (260, 200, 200))) for _ in range(4)]
    rng.shuffle(shapes)
    return shapes


@pytest.mark.parametrize("epilogue", ["tma", "global"])
@pytest.mark.parametrize("schedule", ["cooperative", "pingpong"])
def test_groups_exact(schedule, epilogue, rng, sim):
    shapes = random_shapes(rng)
    gg = GroupedGemm(GemmConfig(schedule=schedule, tile=TILE[schedule], stages=2, sm_count=3, epilogue=epilogue),
                     sim)
    a, b = problems(rng, shapes)
    d = gg(a, b)
    assert len(d) == len(shapes)
    for g, (s, x, y, z) in enumerate(zip(shapes, a, b, d)):
        assert z.shape == s[:2] and z.dtype == np.float32, (g, s, z.shape)
        assert np.array_equal(z, x.astype(np.float64) @ y), f"group {g} {s} seed {rng.seed_value}"


def test_cluster_alpha_relu_f16_out_k_major_b(rng, sim):
    """2x1 clusters (B multicast), alpha and ReLU fused, f16 out, B K-major: every group."""
    cfg = GemmConfig(schedule="cooperative", tile=(128, 64, 64), stages=2, sm_count=4, cluster=(2, 1),
                     epilogue=["alpha", "relu"], out_dtype="f16", b_major="K")
    shapes = [(300, 70, 130), (129, 64, 64), (5, 300, 40)]
    a, b = problems(rng, shapes)
    d = GroupedGemm(cfg, sim)(a, b, alpha=0.5)
    for s, x, y, z in zip(shapes, a, b, d):
        want = np.maximum(0.5 * (x.astype(np.float64) @ y), 0).astype(np.float16)
        assert np.array_equal(z, want), s


def test_device_operands_give_device_results(rng, sim):
    from cutedsl.runtime import arrays
    shapes = [(100, 60, 70), (20, 130, 64)]
    a, b = problems(rng, shapes)
    gg = GroupedGemm(GemmConfig(schedule="pingpong", tile=(64, 64, 64), stages=2, sm_count=2), sim)
    da = [arrays.to_device(sim, x, pitch_align=16) for x in a]
    db = [arrays.to_device(sim, y, pitch_align=16) for y in b]
    d = gg(da, db)
    assert all(isinstance(z, arrays.DeviceArray) for z in d)
    for x, y, z in zip(a, b, d):
        assert np.array_equal(arrays.to_host(z), x.astype(np.float64) @ y)


def test_sass_main_loops_match_single_problem_kernels():
    from cutedsl.kernel.grouped import GroupedCooperativeGemmKernel, GroupedPingpongGemmKernel
    from cutedsl.kernel.warp_specialized import CooperativeGemmKernel, PingpongGemmKernel
    for grouped, plain in ((GroupedCooperativeGemmKernel, CooperativeGemmKernel),
                           (GroupedPingpongGemmKernel, PingpongGemmKernel)):
        loops = []
        for cls in (plain, grouped):
            k = cls(128, 128, stages=3).compile()
            assert k.resources.spill_stores == k.resources.spill_loads == 0
            loops.append(hot_loop(sass(k.cubin))["instructions"])
        assert loops[1] <= loops[0] + 5, (grouped.name, loops)


@pytest.mark.parametrize("call,exc,msg", [
    (lambda gg, a, b: gg(a, b[:1]), ArgumentError, "a_list has 2 groups, b_list 1: one A and one B per group"),
    (lambda gg, a, b: gg([], []), ArgumentError, "a grouped GEMM takes 1..65536 groups, got 0"),
    (lambda gg, a, b: gg(a[0], b[0]), ArgumentTypeError, "a_list must be a list of arrays (one per group), got ndarray"),
    (lambda gg, a, b: gg([a[0], a[1][:, :10]], b), ArgumentError,
     "group 1: a.shape[1] (10) != b.shape[0] (64): inner dimensions must match"),
    (lambda gg, a, b: gg([a[0], a[1].astype(np.float32)], b), ArgumentTypeError,
     "a_list[1] has dtype float32, the config expects f16 (numpy: float16)"),
    (lambda gg, a, b: gg(a, b, beta=1.0), ArgumentError, "unknown keyword argument(s) 'beta'"),
])
def test_bad_calls(call, exc, msg, rng, sim):
    gg = GroupedGemm(GemmConfig(schedule="cooperative", tile=(128, 64, 64), stages=2), sim)
    a, b = problems(rng, [(10, 20, 30), (40, 50, 64)])
    with pytest.raises(exc) as e:
        call(gg, a, b)
    assert str(e.value).startswith(msg), str(e.value)


@pytest.mark.parametrize("fields,msg", [
    (dict(schedule="multistage"), "GroupedGemm runs the persistent schedules (cooperative, pingpong), got schedule "
                                  "'multistage'"),
    (dict(schedule="cooperative", tile=(128, 64, 64), epilogue=["bias:col"]),
     "GroupedCooperativeGemmKernel: a grouped GEMM takes scalar epilogue arguments only (alpha, scales, "
     "activations), not the arrays ['bias']"),
    (dict(schedule="pingpong", tile=(64, 64, 64), decomposition="stream-k"),
     "GroupedPingpongGemmKernel: a grouped GEMM runs whole tiles: decomposition must be 'data-parallel', got "
     "'stream-k'"),
])
def test_config_refusals(fields, msg):
    with pytest.raises(ConfigError) as e:
        GroupedGemm(GemmConfig(**fields), "sim")
    assert str(e.value) == msg
