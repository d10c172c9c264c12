"""Which configs a sweep and the bundle take, and the bench CLI's argument errors."""
import pytest

from cutedsl import GemmConfig
from cutedsl import cli
from cutedsl.bench import configs
from cutedsl.errors import ConfigError


def test_schedules_are_discovered_from_gemm_config(monkeypatch):
    got = configs.accepted_schedules()
    assert {"multistage", "single_tile"} <= set(got)
    for s in got:
        GemmConfig(schedule=s)                  # every one is accepted
    monkeypatch.setattr(configs, "KNOWN_SCHEDULES", (*configs.KNOWN_SCHEDULES, "no_such_schedule"))
    assert "no_such_schedule" not in configs.accepted_schedules()


def test_stage_study_configs_skip_what_does_not_fit():
    cfgs = configs.sweep_configs("stages", tiles=[(128, 256, 64)], schedules=["multistage", "single_tile"])
    got = [c.resolved_stages() for c in cfgs]
    fits = [s for s in range(1, 8) if configs.try_config(tile=(128, 256, 64), stages=s) is not None]
    assert got == fits and 1 in got and 7 not in got       # 7 stages of 128x256 overflow shared memory
    assert all(c.schedule == "multistage" for c in cfgs)     # single_tile cannot hold a 128x256 tile
    sq = configs.sweep_configs("square", tiles=[(128, 128, 64)], schedules=["multistage", "single_tile"])
    assert [(c.schedule, c.stages) for c in sq] == [("multistage", "auto"), ("single_tile", "auto")]


def test_parse_config_and_labels():
    c = configs.parse_config("tile=128x256x64, stages=3, schedule=multistage", {"out_dtype": "f16"})
    assert c == GemmConfig(tile=(128, 256, 64), stages=3, out_dtype="f16")
    assert configs.label(c) == "multistage 128x256x64 s3"
    assert configs.label(GemmConfig(b_major="K", stages=2)) == "multistage 128x128x64 s2 b_major=K f16->f32"
    with pytest.raises(ValueError, match="'colour' is not a GemmConfig field"):
        configs.parse_config("colour=red")
    with pytest.raises(ValueError, match="must look like key=value"):
        configs.parse_config("tile")
    with pytest.raises(ConfigError, match="BLOCK_N"):
        configs.parse_config("tile=128x96x64")
    c = configs.parse_config("schedule=pingpong,cluster=2x1,raster=N,swizzle=2,sm_count=4")
    assert c == GemmConfig(schedule="pingpong", cluster=(2, 1), raster="N", swizzle=2, sm_count=4)
    assert configs.label(c) == "pingpong 128x128x64 s6 raster=N swizzle=2 sm_count=4 cluster=2x1 f16->f32"
    with pytest.raises(ValueError):
        configs.parse_config("schedule=pingpong,swizzle=two")
    c = configs.parse_config("arch=sm_100a,tile_scheduler=clc,mma_sm=2,cluster=2x1,stages=4")
    assert c.tile_scheduler == "clc" and configs.label(c) == \
        "warp_specialized 128x128x64 s4 epilogue=global mma_sm=2 tile_scheduler=clc cluster=2x1 sm_100a f16->f32"


@pytest.mark.parametrize("argv,msg", [
    (["--set", "cubes"], "argument --set: cubes unknown; choose from square, skinny, paper, stages, wave, moe, attention, attention-bwd or all"),
    (["--schedule", "bogus"], "argument --schedule: bogus not accepted; choose from multistage"),
    (["--config", "tile=128x96x64"], "argument --config: tile BLOCK_N must be 64, 128 or 256, got 96"),
    (["--tile", "128x128"], "argument --tile: expected BLOCK_MxBLOCK_NxBLOCK_K"),
    (["--stages", "9"], "argument --stages: expected 'auto' or an integer in 1..7, got '9'"),
    (["--iters", "0", "--backend", "sim"], "argument --iters: expected an integer in 1..100000, got '0'"),
    (["--backend", "sim", "--tile", "100x100x64"],      # says why, not only that every combination failed
     "rejects every combination; the first: tile BLOCK_M must be 64 or 128, got 100)"),
    (["--backend", "sim", "--json", "/nonexistent-dir/r.json"],   # refused before the sweep runs
     "argument --json: cannot write '/nonexistent-dir/r.json': directory '/nonexistent-dir' does not exist"),
    (["--backend", "sim", "--plot", "/nonexistent-dir/r.png"],
     "argument --plot: cannot write '/nonexistent-dir/r.png': directory '/nonexistent-dir' does not exist"),
])
def test_bench_argument_errors_exit_2(argv, msg, capsys):
    with pytest.raises(SystemExit) as e:
        raise SystemExit(cli.main(["bench", *argv]))
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("python -m cutedsl bench: error: ") and msg in err and err.count("\n") == 1


@pytest.mark.parametrize("argv,label", [
    (["--dtype", "e4m3", "--b-dtype", "e5m2", "--out-dtype", "bf16"], "b_major=K e4m3xe5m2->bf16"),
    (["--dtype", "tf32", "--out-dtype", "f32"], "b_major=K tf32->f32"),
])
def test_bench_new_dtypes_on_the_emulator(argv, label, capsys):
    """fp8 (mixed too) and tf32 sweeps: BLOCK_K follows the dtype, B defaults to K-major, and
    every point passes the check against the float64 reference (issue 20)."""
    from cutedsl.cli import main
    rc = main(["bench", "--backend", "sim", "--set", "square", "--schedule", "pingpong", "--tile", "128x128x"
               + ("128" if argv[1] != "tf32" else "32"), "--iters", "1", "--warmup", "0", *argv])
    out = capsys.readouterr().out
    assert rc == 0 and label in out and "FAIL" not in out and "pass" in out


def test_bench_sm100a_on_the_emulator(capsys):
    """--arch sm_100a sweeps the Blackwell kernels (single_tile, warp_specialized) -- on the
    emulator here -- and every point passes the float64 check (issue 24)."""
    from cutedsl.cli import main
    rc = main(["bench", "--arch", "sm_100a", "--backend", "sim", "--set", "square", "--tile", "128x128x64",
               "--iters", "1", "--warmup", "0"])
    out = capsys.readouterr().out
    assert rc == 0 and "warp_specialized 128x128x64" in out and "single_tile 128x128x64" in out
    assert "FAIL" not in out and out.count("pass") >= 4


@pytest.mark.parametrize("dtype", ["mxfp8", "mxfp6", "nvfp4"])
def test_bench_block_scaled_on_the_emulator(dtype, capsys):
    """Block-scaled inputs: randn quantized along K with their packed factors, checked against
    the dequantized product in float64 (issue 24)."""
    from cutedsl.cli import main
    rc = main(["bench", "--arch", "sm_100a", "--dtype", dtype, "--backend", "sim", "--set", "square",
               "--iters", "1", "--warmup", "0"])
    out = capsys.readouterr().out
    assert rc == 0 and f"{dtype}->f16" in out and "FAIL" not in out and out.count("pass (") == 2, out
