"""The schedule options of the main job: ``--schedule``, ``--cluster``, ``--raster``,
``--swizzle``, ``--sm-count`` reach the kernel, and mistakes are one line naming the option."""
import json

import pytest

from cutedsl import cli


def test_pingpong_cluster_from_the_command_line():
    args = cli._parser().parse_args(["gemm", "--m", "150", "--n", "300", "--k", "100", "--schedule", "pingpong",
                                     "--tile", "64x128x64", "--cluster", "2x1", "--raster", "N", "--swizzle", "2",
                                     "--sm-count", "2", "--backend", "sim", "--check"])
    rep, status = cli.run_gemm(args)
    assert status == 0 and rep["passed"] is True and rep["max_rel_err"] < 1e-5, rep
    assert rep["schedule"] == "pingpong" and rep["cluster"] == [2, 1] and rep["raster"] == "N"
    assert rep["swizzle"] == 2 and rep["grid"] == [2, 1, 1] and rep["threads"] == 384
    assert rep["sass"]["USETMAXREG"] == 2


@pytest.mark.parametrize("argv,option,match", [
    (["--cluster", "3x1"], "--cluster", r"expected 1x1, 2x1, 1x2, 2x2, 4x1 or 1x4 \(cluster_m x cluster_n\), got '3x1'"),
    (["--swizzle", "3"], "--swizzle", r"invalid choice: 3"),
    (["--raster", "K"], "--raster", r"invalid choice: 'K'"),
    (["--sm-count", "0"], "--sm-count", r"1\.\.4096, got '0'"),
    (["--schedule", "multistage", "--cluster", "2x1"], "--cluster", r"needs a warp-specialized schedule"),
    (["--schedule", "cooperative", "--tile", "64x128x64"], "--tile/--schedule", r"too small to split"),
])
def test_schedule_option_mistakes(argv, option, match, capsys):
    import re
    try:
        status = cli.main(["gemm", "--m", "70", "--n", "64", "--k", "64", "--backend", "none"] + argv)
    except SystemExit as e:
        status = e.code
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert status == 2 and out == "" and len(lines) == 1, err
    assert lines[0].startswith(f"python -m cutedsl gemm: error: argument {option}: "), lines[0]
    assert re.search(match, lines[0]), lines[0]


@pytest.mark.parametrize("schedule,argv,warned", [
    ("multistage", ["--raster", "N", "--sm-count", "4"], "--raster/--sm-count"),
    ("single_tile", ["--swizzle", "2"], "--swizzle"),
    ("multistage", ["--raster", "M", "--swizzle", "1"], None),       # defaults: nothing to say
    ("cooperative", ["--raster", "N", "--swizzle", "2", "--sm-count", "4"], None),
])
def test_scheduler_options_ignored_by_a_schedule_are_warned_about(schedule, argv, warned, capsys):
    status = cli.main(["gemm", "--m", "70", "--n", "64", "--k", "64", "--backend", "none", "--json",
                       "--schedule", schedule, "--tile", "128x128x64"] + argv)
    out, err = capsys.readouterr()
    assert status == 0 and json.loads(out)["schedule"] == schedule      # stdout stays one JSON object
    if warned is None:
        assert err == "", err
    else:
        assert err == (f"python -m cutedsl gemm: warning: {warned} ignored: schedule {schedule!r} has one CTA "
                       f"per tile in launch order (only warp_specialized, cooperative, pingpong use them)\n")


def test_adversarial_mode_seed_from_the_environment_is_reported(monkeypatch, capsys):
    # CUTEDSL_SIM_CHAOS reaches the CLI's launches; the report names the seed to replay them
    monkeypatch.setenv("CUTEDSL_SIM_CHAOS", "3")
    status = cli.main(["gemm", "--m", "70", "--n", "72", "--k", "40", "--backend", "sim", "--check"])
    out = capsys.readouterr().out
    assert status == 0, out
    assert "adversarial mode, seed 3 (CUTEDSL_SIM_CHAOS=3)" in out and "PASS" in out


def test_schedule_and_cluster_choices_are_the_configs(monkeypatch):
    """The CLI takes its schedules and clusters from ``GemmConfig``'s lists (one source)."""
    from cutedsl.device import config
    monkeypatch.setattr(config, "SCHEDULES", (*config.SCHEDULES, "stream_k"))
    monkeypatch.setattr(config, "CLUSTERS", (*config.CLUSTERS, (8, 1)))
    args = cli._parser().parse_args(["gemm", "--m", "1", "--n", "1", "--k", "1", "--schedule", "stream_k",
                                     "--cluster", "8x1"])
    assert args.schedule == "stream_k" and args.cluster == (8, 1)
    with pytest.raises(SystemExit):
        cli._parser().parse_args(["gemm", "--m", "1", "--n", "1", "--k", "1", "--cluster", "3x1"])


def test_split_k_from_the_command_line():
    """--decomposition split-k --splits 3 on the emulator: the report says how the problem
    was divided, and the result checks."""
    args = cli._parser().parse_args(["gemm", "--m", "200", "--n", "90", "--k", "300", "--schedule", "cooperative",
                                     "--tile", "128x64x64", "--decomposition", "split-k", "--splits", "3",
                                     "--sm-count", "3", "--backend", "sim", "--check"])
    rep, status = cli.run_gemm(args)
    assert status == 0 and rep["passed"] is True, rep
    assert rep["decomposition"] == {"asked": "split-k", "mode": "split-k", "tiles": 4, "k_tiles": 5, "clusters": 3,
                                    "dp_tiles": 0, "split_tiles": 4, "units": 12, "splits": 3,
                                    "utilisation": rep["decomposition"]["utilisation"]}
    assert rep["grid"] == [3, 1, 1]


def test_decomposition_option_mistakes(capsys):
    status = cli.main(["gemm", "--m", "70", "--n", "64", "--k", "64", "--backend", "none", "--schedule",
                       "cooperative", "--tile", "128x64x64", "--decomposition", "split-k"])
    err = capsys.readouterr().err.strip()
    assert status == 2 and err == ("python -m cutedsl gemm: error: argument --decomposition: decomposition "
                                   "'split-k' needs splits, an int in 2..256 (pieces of each tile's K), got None"), err


def test_groups_from_the_command_line():
    """--groups: one launch, one report entry per group (M = 0, K = 0 and odd shapes), all checked."""
    args = cli._parser().parse_args(["gemm", "--groups", "150x70x100,0x64x64,1x9x17,64x64x0", "--schedule", "pingpong",
                                     "--tile", "64x64x64", "--sm-count", "3", "--backend", "sim", "--check"])
    rep, status = cli.run_gemm(args)
    assert status == 0 and rep["passed"] is True, rep
    assert [(g["m"], g["n"], g["k"]) for g in rep["groups"]] == [(150, 70, 100), (0, 64, 64), (1, 9, 17), (64, 64, 0)]
    assert all(g["passed"] and g["max_rel_err"] < 1e-5 for g in rep["groups"]) and rep["schedule"] == "pingpong"


@pytest.mark.parametrize("argv,msg", [
    (["--groups", "3x4"], "argument --groups: expected MxNxK,MxNxK,... (extents 0..2147483647), got '3x4'"),
    (["--groups", "3x4x5", "--m", "5"], "argument --groups: give the problems either as --groups or as --m/--n/--k "
                                        "(and --batch), not both (--m was given)"),
    (["--n", "5"], "argument --m/--n/--k: the problem size is required (or --groups MxNxK,... for a grouped GEMM)"),
    (["--groups", "3x4x5", "--schedule", "multistage"], "GroupedGemm runs the persistent schedules (cooperative, "
                                                        "pingpong), got schedule 'multistage'"),
])
def test_groups_option_mistakes(argv, msg, capsys):
    try:
        status = cli.main(["gemm", "--backend", "none"] + argv)
    except SystemExit as e:
        status = e.code
    err = capsys.readouterr().err.strip().splitlines()
    assert status == 2 and len(err) == 1 and msg in err[0], err
