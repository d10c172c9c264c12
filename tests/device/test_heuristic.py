"""Config choice for a problem shape (issue 22): GemmConfig.for_problem's documented model on a
table of shapes, with its reasons; Gemm("auto") runs the chosen kernels bit-exactly on the
emulator; the CLI's default --schedule auto."""
import json

import numpy as np
import pytest

from cutedsl import Gemm, GemmConfig
from cutedsl.device.heuristic import score
from cutedsl.errors import ConfigError

# (M, N, K) -> (tile, schedule, cluster, raster, swizzle) on 132 SMs
TABLE = [
    ((8192, 8192, 8192), ((128, 256, 64), "cooperative", (2, 1), "M", 2)),    # many tiles, long K
    ((4096, 4096, 256), ((128, 256, 64), "cooperative", (2, 1), "M", 2)),     # short K, but 128x256: no ping-pong
    ((7296, 256, 4096), ((128, 128, 64), "multistage", (1, 1), "auto", 1)),   # the paper's shape: one wave
    ((1000, 1000, 1000), ((128, 64, 64), "multistage", (1, 1), "auto", 1)),
    ((128, 128, 4096), ((64, 64, 64), "multistage", (1, 1), "auto", 1)),      # 4 tiles: the most CTAs
    ((1, 1, 1), ((64, 64, 64), "multistage", (1, 1), "auto", 1)),
    ((1024, 4224, 256), ((128, 128, 64), "pingpong", (2, 1), "N", 2)),          # 264 tiles = 2 waves, 4 k-tiles
    ((1100, 700, 64), ((64, 128, 64), "multistage", (1, 1), "auto", 1)),
]


@pytest.mark.parametrize("mnk,want", TABLE, ids=[str(t[0]) for t in TABLE])
def test_model_on_a_table_of_shapes(mnk, want):
    cfg = GemmConfig.for_problem(*mnk)
    assert (cfg.tile, cfg.schedule, cfg.cluster, cfg.raster, cfg.swizzle) == want
    persistent_fields = {"cluster", "raster", "swizzle"} if cfg.schedule != "multistage" else set()
    assert cfg.stages == "auto" and set(cfg.reasons) == {"tile", "schedule", "stages"} | persistent_fields
    text = cfg.explain()
    assert text.splitlines()[0].startswith(f"tile: {want[0][0]}x{want[0][1]}: score ")
    assert "wave efficiency" in text and f"schedule: {want[1]}" in text


def test_score_is_the_documented_product():
    s, wave, fill, inten = score(1000, 1000, 128, 64, 132)
    assert (round(wave, 4), round(fill, 4), round(inten, 4)) == (round(128 / 132, 4), round(1e6 / (128 * 128 * 64), 4),
                                                                  round((128 * 64 / 192) / (128 * 256 / 384), 4))
    assert s == pytest.approx(wave * fill * inten)


def test_given_fields_are_kept_and_the_rest_chosen():
    cfg = GemmConfig.for_problem(4096, 4096, 4096, "bf16", out_dtype="bf16", b_major="K", tile=(128, 128, 64))
    assert (cfg.dtype, cfg.out_dtype, cfg.b_major, cfg.tile) == ("bf16", "bf16", "K", (128, 128, 64))
    assert cfg.reasons["tile"] == "given" and cfg.schedule in ("cooperative", "pingpong")
    # one stage: no warp-specialized schedule runs it, so the model falls back to multistage
    one = GemmConfig.for_problem(4096, 4096, 2048, stages=1)
    assert one.schedule == "multistage" and "cannot run the given fields" in one.reasons["schedule"]
    assert GemmConfig.for_problem(2048, 2048, 2048, sm_count=8).sm_count == 8
    assert GemmConfig().explain() == "set by hand (not chosen by GemmConfig.for_problem)"


def test_bad_requests_are_config_errors():
    with pytest.raises(ConfigError, match="for_problem: m must be a positive int, got 0"):
        GemmConfig.for_problem(0, 10, 10)
    with pytest.raises(ConfigError, match="takes f16, bf16, e4m3, e5m2 or tf32 operands, got 'f32'"):
        GemmConfig.for_problem(10, 10, 10, "f32")
    with pytest.raises(ConfigError, match="no configuration fits"):
        GemmConfig.for_problem(10, 10, 10, tile=(96, 64, 64))


def test_auto_gemm_runs_the_chosen_kernel_per_shape(sim, rng):
    import ml_dtypes
    g = Gemm("auto", sim, out_dtype="f32")
    for (m, n, k), dt in (((150, 70, 100), np.float16), ((90, 130, 64), ml_dtypes.bfloat16)):
        a = rng.integers(-3, 4, (m, k)).astype(dt)
        b = rng.integers(-3, 4, (k, n)).astype(dt)
        np.testing.assert_array_equal(g(a, b), a.astype(np.float64) @ b.astype(np.float64))
        assert g.last_config == GemmConfig.for_problem(m, n, k, "f16" if dt is np.float16 else "bf16",
                                                       sm_count=sim.sm_count)     # the backend's SMs
    assert len(g._gemms) == 2 and g.gemm_for(g.last_config) is g.gemm_for(g.last_config)
    with pytest.raises(ConfigError, match="out_dtype must be"):
        Gemm("auto", sim, out_dtype="f64")


def test_cli_default_is_auto_and_reports_why(capsys):
    from cutedsl import cli
    assert cli.main(["gemm", "--m", "1000", "--n", "1000", "--k", "1000", "--backend", "none", "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["schedule"] == "multistage" and rep["tile"] == [128, 64, 64]
    assert rep["chosen"]["schedule"].startswith("multistage: 128 tiles fit one wave")
    assert cli.main(["gemm", "--m", "1000", "--n", "1000", "--k", "1000", "--backend", "none",
                     "--tile", "64x64x64", "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["tile"] == [64, 64, 64] and rep["chosen"]["tile"] == "given"
