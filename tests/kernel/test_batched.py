"""Batched GEMM (issue 20): D[l] = A[l] @ B[l] with rank-3 tensor maps, on every schedule and
cluster shape, with operands shared by the whole batch, padded batch strides, fp8 and fused
epilogues -- the compiled kernels on the emulator, shapes that are not tile multiples, fresh
random integer inputs (exact in f32: the result must equal the float64 reference)."""
import ml_dtypes
import numpy as np
import pytest

from cutedsl import Gemm, GemmConfig
from cutedsl.runtime import arrays
from cutedsl.errors import ArgumentError, ConfigError
from cutedsl.problem import GemmProblem


def ints(rng, shape, dt=np.float16):
    return rng.integers(-3, 4, shape).astype(dt)


@pytest.mark.parametrize("schedule,tile,cluster,b_major,epilogue", [
    ("multistage", (128, 256), (1, 1), "MN", "tma"),
    ("single_tile", (64, 128), (1, 1), "K", "global"),
    ("warp_specialized", (64, 128), (2, 1), "K", "tma"),
    ("cooperative", (128, 64), (1, 2), "MN", "global"),
    ("pingpong", (64, 64), (2, 1), "MN", "tma"),
])
def test_batches_on_every_schedule(schedule, tile, cluster, b_major, epilogue, rng, sim):
    """L = 3 batches, then A shared by every batch (2-D), then B shared: 2 SMs make the
    persistent schedules walk tiles across batch boundaries."""
    tm, tn = tile
    cfg = GemmConfig(schedule=schedule, tile=(tm, tn, 64), cluster=cluster, b_major=b_major, epilogue=epilogue,
                     sm_count=2, stages="auto" if schedule == "single_tile" else 2)
    g = Gemm(cfg, sim)
    m, n, k = tm + int(rng.integers(1, tm)), int(rng.integers(1, tn)) + tn // 2, 64 + int(rng.integers(1, 64))
    for la, lb in ((3, 3), (1, 3), (3, 1)):
        a = ints(rng, (la, m, k) if la > 1 else (m, k))
        b = ints(rng, (lb, k, n) if lb > 1 else (k, n))
        d = g(a, b)
        ref = np.matmul(a.astype(np.float64), b.astype(np.float64))
        assert d.shape == (3, m, n) and np.array_equal(d.astype(np.float64), ref), (la, lb, rng.seed_value)
    bk = g.batched_gemm().kernel
    assert bk.batched and [p.name for p in bk.params()][-3:] == ["l", "la", "lb"]
    if schedule in ("multistage", "single_tile", "warp_specialized"):   # one CTA per tile: batch in grid z
        tiles = bk.grid(GemmProblem(m, n, k, 5))
        assert tiles[2] == (5 if schedule != "warp_specialized" else 1)


def test_device_operands_with_padded_batch_stride(rng, sim):
    """Device arrays whose batches are further apart than their rows (a view into a larger
    allocation), and an explicit out of shape (L, M, N)."""
    L, m, k, n = 4, 70, 96, 72
    big = ints(rng, (L, m + 5, k))                      # 5 spare rows between batches
    a_dev = arrays.to_device(sim, big)
    a = a_dev.view(shape=(L, m, k))
    b_host = ints(rng, (L, k, n))
    out = arrays.empty(sim, (L, m, n), "f32", pitch_align=16)
    g = Gemm(GemmConfig(schedule="cooperative", tile=(128, 64, 64), sm_count=3), sim)
    g(a, arrays.to_device(sim, b_host), out=out)
    ref = np.matmul(big[:, :m].astype(np.float64), b_host.astype(np.float64))
    assert np.array_equal(arrays.to_host(out), ref)


def test_fp8_and_fused_epilogue_batched(rng, sim):
    from cutedsl.collective import fusion as F
    cfg = GemmConfig(dtype="e4m3", out_dtype="bf16", epilogue=["scale_a:row", "bias:col", "gelu"],
                     schedule="pingpong", sm_count=2)
    L, m, n, k = 3, 90, 140, 200
    a = ints(rng, (L, m, k), ml_dtypes.float8_e4m3fn)
    b = ints(rng, (k, n), ml_dtypes.float8_e4m3fn)       # shared weights
    g = Gemm(cfg, sim)
    args = F.random_args(g.kernel.epilogue.kernel_params(), m, n, rng)
    d = g(a, b, **args)
    ref = F.reference(cfg.fusion, np.matmul(a.astype(np.float64), b.astype(np.float64)), dict(args), "bf16")
    assert d.shape == (L, m, n)
    assert np.max(np.abs(d.astype(np.float64) - ref)) / np.max(np.abs(ref)) < 8e-3


@pytest.mark.parametrize("schedule,epilogue", [("multistage", "tma"), ("cooperative", "global")])
def test_batched_c_and_aux(schedule, epilogue, rng, sim):
    """C and the aux output are (L, M, N) in a batched GEMM; a 2-D C is refused by name."""
    from cutedsl.collective import fusion as F
    cfg = GemmConfig(schedule=schedule, epilogue=["beta", "aux", "relu", epilogue], sm_count=2)
    L, m, n, k = 3, 70, 90, 100
    a, b = ints(rng, (L, m, k)), ints(rng, (k, n))
    g = Gemm(cfg, sim)
    args = F.random_args(g.batched_gemm().kernel.epilogue.kernel_params(), m, n, rng, l=L)
    assert args["c"].shape == args["aux"].shape == (L, m, n)
    d = g(a, b, **args)
    model = dict(args)
    ref = F.reference(cfg.fusion, np.matmul(a.astype(np.float64), b.astype(np.float64)), model, "f32")
    assert np.max(np.abs(d - ref)) < 1e-4 and np.max(np.abs(args["aux"] - model["_aux"])) < 1e-4
    with pytest.raises(ArgumentError, match=r"c must have shape \(l, m, n\) = \(3, 70, 90\)"):
        g(a, b, **{**args, "c": np.ones((m, n), np.float32)})


def test_batch_errors(sim):
    a = np.ones((2, 8, 16), np.float16)
    with pytest.raises(ArgumentError, match=r"gridDim.z = 70000 CTAs; the hardware allows 1..65535"):
        Gemm(GemmConfig(batched=True), sim).grid(8, 8, 8, 70000)
    with pytest.raises(ConfigError, match="batched must be True or False"):
        GemmConfig(batched="yes")
    with pytest.raises(ArgumentError, match="batch sizes differ: a has 2, b has 3"):
        Gemm(GemmConfig(), sim)(a, np.ones((3, 16, 8), np.float16))


def test_persistent_tile_index_spans_batches():
    """The persistent scheduler walks L x tiles units: a CTA's units cross into later batches."""
    cfg = GemmConfig(schedule="cooperative", batched=True, sm_count=4)
    k = cfg.kernel()
    assert k.grid(GemmProblem(200, 200, 64, 1)) == (4, 1, 1)          # 2 x 2 tiles, 4 SMs
    assert k.scheduler.clusters(200, 200, 3) == 4 and GemmConfig(schedule="cooperative", sm_count=16).kernel() \
        .grid(GemmProblem(200, 200, 64, 3)) == (4, 1, 1)                # not batched: L ignored
    assert GemmConfig(schedule="cooperative", batched=True, sm_count=16).kernel().grid(
        GemmProblem(200, 200, 64, 3)) == (12, 1, 1)


def test_cli_batch(capsys):
    import json
    from cutedsl.cli import main
    rc = main(["gemm", "--m", "70", "--n", "60", "--k", "80", "--batch", "3", "--schedule", "pingpong",
               "--backend", "sim", "--check", "--json"])
    rep = json.loads(capsys.readouterr().out)
    assert rc == 0 and rep["passed"] and rep["l"] == 3
