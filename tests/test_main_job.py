"""The main job runs as a user runs it (emulator backend here)."""
import json
import re
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent


def test_main_job_on_the_emulator_passes():
    r = subprocess.run([sys.executable, "-m", "cutedsl", "gemm", "--m", "300", "--n", "200", "--k", "160",
                        "--backend", "sim", "--check", "--json"], capture_output=True, text=True, cwd=ROOT,
                       timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    rep = json.loads(r.stdout)
    assert rep["backend"] == "sim" and rep["passed"] is True and rep["max_rel_err"] < 1e-5
    for key in ("time_ms", "tflops", "registers", "sass", "smem_bytes", "compile_s"):
        assert key in rep


def test_main_job_check_failure_sets_exit_status(monkeypatch):
    from cutedsl import cli
    monkeypatch.setitem(cli.TOLERANCE, "f32", -1.0)        # nothing can pass a negative tolerance
    args = cli._parser().parse_args(["gemm", "--m", "70", "--n", "64", "--k", "64", "--backend", "sim",
                                     "--check", "--stages", "1"])
    rep, status = cli.run_gemm(args)
    assert status == 1 and rep["passed"] is False


MISTAKES = [   # (arguments, option named, what the message must say)
    (["--m", "-5"], "--m", r"expected an integer in 1\.\.2\^31-1, got '-5'"),
    (["--m", "0"], "--m", r"1\.\.2\^31-1, got '0'"),
    (["--n", "2147483648"], "--n", r"1\.\.2\^31-1, got '2147483648'"),
    (["--k", "1.5"], "--k", r"expected an integer in 1\.\.2\^31-1, got '1.5'"),
    (["--stages", "x"], "--stages", r"expected 'auto' or an integer in 1\.\.7, got 'x'"),
    (["--stages", "9"], "--stages", r"1\.\.7, got '9'"),
    (["--seed", "-1"], "--seed", r"expected an integer in 0\.\.2\^64-1, got '-1'"),
    (["--iters", "0"], "--iters", r"1\.\.100000, got '0'"),
    (["--tile", "big"], "--tile", r"expected BLOCK_MxBLOCK_NxBLOCK_K such as 128x128x64, got 'big'"),
    (["--tile", "96x128x64"], "--tile", r"BLOCK_M must be 64 or 128, got 96"),
    (["--tile", "128x256x64", "--stages", "5"], "--tile/--stages", r"past the 232448 B limit"),
    (["--stages", "7"], "--stages", r"past the 232448 B limit"),
    (["--schedule", "single_tile", "--stages", "3"], "--stages/--schedule", r"exactly one stage"),
    (["--dtype", "f32"], "--dtype", r"invalid choice: 'f32' \(choose from 'f16', 'bf16', 'e4m3', 'e5m2', 'tf32', 'mxfp8', 'mxfp8-e5m2', 'mxfp6', 'mxfp6-e3m2', 'mxfp4', 'nvfp4'\)"),
    (["--m", "10000000"], "--m/--n/--k", r"gridDim.y = 78125 CTAs.*; the hardware allows 1\.\.65535 on y"),
    (["--dump", "/dev/null/x"], "--dump", r"cannot write dumps to '/dev/null/x'"),
    # issue 40: a ZeroDivisionError in the model; OverflowError packing the parameter after compiling;
    # non-finite scalars ran and reported "max rel err nan -> FAIL"
    (["--schedule", "auto", "--tile", "0x0x0"], "--tile", r"tile must be three positive ints .*got \(0, 0, 0\)"),
    (["--alpha", "1e40"], "--alpha", r"expected a finite number with \|value\| <= 3.4028235e\+38 .*got '1e40'"),
    (["--alpha", "inf"], "--alpha", r"expected a finite number .*got 'inf'"),
    (["--alpha", "nan"], "--alpha", r"expected a finite number .*got 'nan'"),
    (["--beta=-1e39"], "--beta", r"expected a finite number .*got '-1e39'"),
]


@pytest.mark.parametrize("backend", ["none", "sim", "cuda", "auto"])
@pytest.mark.parametrize("argv,option,match", MISTAKES, ids=[" ".join(m[0]) for m in MISTAKES])
def test_user_mistakes_give_one_line_naming_the_option(argv, option, match, backend, capsys):
    from cutedsl import cli
    from cutedsl.runtime.cuda import CudaBackend
    if option == "--dump" and backend == "cuda" and not CudaBackend.available()[0]:
        option, match = "--backend", "CUDA backend unavailable"   # found first: nothing to compile for
    full = ["gemm", "--m", "70", "--n", "64", "--k", "64", "--backend", backend, "--schedule", "multistage"]
    try:
        status = cli.main(full + argv)      # later options win: argv overrides the defaults above
    except SystemExit as e:
        status = e.code
    out, err = capsys.readouterr()
    assert status == 2 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(f"python -m cutedsl gemm: error: argument {option}: "), lines[0]
    assert re.search(match, lines[0]), lines[0]


def test_missing_gpu_names_the_backend_option(capsys):
    from cutedsl import cli
    from cutedsl.runtime.cuda import CudaBackend
    if CudaBackend.available()[0]:
        pytest.skip("a GPU is present")
    assert cli.main(["gemm", "--m", "70", "--n", "64", "--k", "64", "--backend", "cuda"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("python -m cutedsl gemm: error: argument --backend: "
                                               "CUDA backend unavailable")


def test_user_mistake_in_a_real_process_has_no_traceback():
    r = subprocess.run([sys.executable, "-m", "cutedsl", "gemm", "--m", "-5", "--n", "8", "--k", "8",
                        "--backend", "none"], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr == ("python -m cutedsl gemm: error: argument --m: expected an integer in 1..2^31-1, "
                        "got '-5' (see --help)\n")


def test_problem_too_big_for_memory_is_one_line():
    # 1 x (2^31-1) x 1 passes the grid limits but needs 8 GiB of operands: capped at 6 GB here
    import resource
    limit = lambda: resource.setrlimit(resource.RLIMIT_AS, (6 * 10 ** 9, 6 * 10 ** 9))  # noqa: E731
    r = subprocess.run([sys.executable, "-m", "cutedsl", "gemm", "--m", "1", "--n", "2147483647", "--k", "1",
                        "--backend", "sim"], capture_output=True, text=True, cwd=ROOT, timeout=120, preexec_fn=limit)
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert r.stderr.startswith("python -m cutedsl gemm: error: argument --m/--n/--k: the problem does not fit "
                               "in memory here: Unable to allocate 8.00 GiB")


def test_backend_none_reports_the_checked_grid(capsys):
    from cutedsl import cli
    assert cli.main(["gemm", "--m", "300", "--n", "200", "--k", "64", "--backend", "none", "--json",
                     "--schedule", "multistage"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["grid"] == [2, 3, 1] and rep["executed"] is False


def test_backend_none_says_once_that_nothing_ran(capsys):
    from cutedsl import cli
    assert cli.main(["gemm", "--m", "300", "--n", "200", "--k", "64", "--backend", "none"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[-1] == "  note: backend 'none' requested: nothing is executed"
    assert sum("execute" in line for line in out) == 1


def test_output_into_a_closed_pipe_ends_quietly():
    # as ``python -m cutedsl gemm ... | head -3`` once head has exited: no BrokenPipeError traceback
    p = subprocess.Popen([sys.executable, "-m", "cutedsl", "gemm", "--m", "100", "--n", "64", "--k", "64",
                          "--backend", "none"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT)
    p.stdout.close()                                    # the reader is gone before anything is written
    err = p.stderr.read().decode()
    assert p.wait(timeout=120) == 141 and err == ""


def test_dump_dir_env_writes_dumps_also_when_the_kernel_is_cached(tmp_path, monkeypatch, capsys):
    from cutedsl import cli
    argv = ["gemm", "--m", "100", "--n", "64", "--k", "64", "--stages", "1", "--backend", "none", "--json"]
    assert cli.main(argv) == 0                              # the kernel is now in the cache
    monkeypatch.setenv("CUTEDSL_DUMP_DIR", str(tmp_path / "dumps"))
    assert cli.main(argv) == 0
    rep = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert rep["cached"] is False
    names = sorted(p.name for p in (tmp_path / "dumps").iterdir())
    assert names == [f"gemm_multistage.{s}" for s in ("after.mlir", "before.mlir", "ptx", "ptxas.log", "sass")]


BAD_ENV = [("CUTEDSL_SIM_TIME_LIMIT", "soon", "is not a number of seconds"),
           ("CUTEDSL_SIM_TIME_LIMIT", "-3", "must be a finite number of seconds > 0"),
           ("CUTEDSL_SIM_CHAOS", "x", "is not an integer seed"),
           ("CUTEDSL_CACHE", "maybe", r"is not understood \(accepted: on, off")]


@pytest.mark.parametrize("json_out", [False, True])
@pytest.mark.parametrize("name,value,match", BAD_ENV, ids=[f"{n}={v}" for n, v, _ in BAD_ENV])
def test_bad_environment_is_refused_before_compiling(name, value, match, json_out, monkeypatch, capsys):
    """Issue 29 item 5: reported at start-up (nothing compiled), one line on stderr, exit 2; with
    --json also one JSON object with "error" on stdout (never "executed": true)."""
    from cutedsl import cli
    from cutedsl.device.gemm import Gemm
    monkeypatch.setenv(name, value)
    monkeypatch.setattr(Gemm, "compiled", property(lambda self: pytest.fail("compiled before the check")))
    status = cli.main(["gemm", "--m", "70", "--n", "64", "--k", "64", "--backend", "sim"] + ["--json"] * json_out)
    out, err = capsys.readouterr()
    assert status == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"python -m cutedsl gemm: error: environment: {name}={value!r} ")
    assert re.search(match, lines[0])
    if json_out:
        assert list(json.loads(out)) == ["error"] and name in json.loads(out)["error"]
    else:
        assert out == ""


def test_check_with_backend_none_is_a_usage_error(capsys):
    from cutedsl import cli
    assert cli.main(["gemm", "--m", "70", "--n", "64", "--k", "64", "--backend", "none", "--check"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err == ("python -m cutedsl gemm: error: argument --check/--backend: --check compares a "
                                 "result, and --backend none runs nothing\n")


@pytest.mark.parametrize("argv", [["--m", "-5"], ["--dtype", "f32"], ["--m", "10000000"], ["--alpha", "1e40"]])
def test_json_argument_errors_print_one_json_object(argv, capsys):
    from cutedsl import cli
    full = ["gemm", "--m", "70", "--n", "64", "--k", "64", "--backend", "none", "--json", "--schedule", "multistage"] + argv
    try:
        status = cli.main(full)
    except SystemExit as e:
        status = e.code
    out, err = capsys.readouterr()
    assert status == 2 and len(err.strip().splitlines()) == 1
    obj = json.loads(out)
    assert list(obj) == ["error"] and argv[0] in obj["error"]


def test_failure_before_launch_is_not_executed(monkeypatch, capsys):
    from cutedsl import cli
    from cutedsl.device.gemm import Gemm
    from cutedsl.errors import ArgumentError

    def refuse(self, *a, **k):
        raise ArgumentError("a: refused before launch")
    monkeypatch.setattr(Gemm, "prepare", refuse)
    status = cli.main(["gemm", "--m", "70", "--n", "64", "--k", "64", "--stages", "1", "--backend", "sim", "--json"])
    out, err = capsys.readouterr()
    rep = json.loads(out)
    assert status == 2 and rep["executed"] is False and rep["error"] == "ArgumentError: a: refused before launch"
    assert err == "python -m cutedsl gemm: error: ArgumentError: a: refused before launch\n"


@pytest.mark.parametrize("argv", [["--stages", "7", "--schedule", "warp_specialized"],
                                  ["--schedule", "warp_specialized", "--stages", "7"]])
def test_a_valid_config_is_accepted_whatever_the_option_order(argv, capsys):
    """Issue 19: the CLI validated field by field in option order and refused this valid config
    with the multistage kernel's shared-memory error."""
    from cutedsl import cli
    assert cli.main(["gemm", "--m", "70", "--n", "64", "--k", "64", "--backend", "none", "--json"] + argv) == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["schedule"] == "warp_specialized" and rep["stages"] == 7


@pytest.mark.parametrize("argv,named", [
    (["compile", "--json", "--jobs", "0"], "--jobs"),
    (["compile", "--json"], "--config/--set"),
    (["tune", "--json", "--m", "0", "--n", "1", "--k", "1"], "--m"),
    (["tune", "--json", "--m", "64", "--n", "64", "--k", "64", "--limit", "0"], "--limit"),
])
def test_every_json_command_prints_one_json_object_on_failure(argv, named, capsys):
    """Issue 40: compile --json / tune --json argument errors printed no JSON."""
    from cutedsl import cli
    try:
        status = cli.main(argv)
    except SystemExit as e:
        status = e.code
    out, err = capsys.readouterr()
    assert status == 2 and len(err.strip().splitlines()) == 1
    obj = json.loads(out)
    assert list(obj) == ["error"] and obj["error"].startswith(f"argument {named}: ")


def test_bad_dump_dir_from_the_environment_is_named(tmp_path, monkeypatch, capsys):
    """Issue 40: a CUTEDSL_DUMP_DIR that cannot be written was blamed on --dump."""
    from cutedsl import cli
    bad = tmp_path / "file"
    bad.write_text("")
    monkeypatch.setenv("CUTEDSL_DUMP_DIR", str(bad))
    status = cli.main(["gemm", "--m", "70", "--n", "64", "--k", "64", "--backend", "sim", "--schedule", "multistage",
                       "--stages", "1", "--json"])
    out, err = capsys.readouterr()
    assert status == 2 and "--dump" not in err and len(err.strip().splitlines()) == 1
    assert err.startswith(f"python -m cutedsl gemm: error: EnvVarError: CUTEDSL_DUMP_DIR='{bad}' cannot be used: "
                          f"cannot write dumps to '{bad}'")
    assert json.loads(out)["error"].startswith("EnvVarError: CUTEDSL_DUMP_DIR=")


@pytest.mark.parametrize("fusion", [["--beta", "1"], ["--aux"], ["--beta", "0.5", "--aux", "--act", "relu"]])
def test_batched_fused_epilogue_check_passes(fusion, capsys):
    """Issue 40: --batch 2 --beta 1 --check (and --aux) failed on the C / aux arrays the CLI built
    itself, (1, M, N) instead of (L, M, N)."""
    from cutedsl import cli
    status = cli.main(["gemm", "--m", "70", "--n", "66", "--k", "64", "--batch", "2", "--backend", "sim",
                       "--schedule", "multistage", "--tile", "64x64x64", "--stages", "2", "--check", "--json"] + fusion)
    out, err = capsys.readouterr()
    rep = json.loads(out)
    assert status == 0 and rep["passed"] is True and rep["l"] == 2, (rep.get("error"), err)
    assert rep["max_rel_err"] < 1e-5


def test_bundle_into_a_file_is_one_line(tmp_path, capsys):
    """Issue 40: bundle --out FILE raised NotADirectoryError."""
    from cutedsl import cli
    f = tmp_path / "file"
    f.write_text("keep")
    assert cli.main(["bundle", "--out", str(f)]) == 1
    out, err = capsys.readouterr()
    assert err == f"error: {f} exists and is not a folder: give --out a new path or a bundle folder\n"
    assert f.read_text() == "keep"


def test_report_describes_the_kernel_the_call_runs(tmp_path, monkeypatch, capsys):
    """A persistent schedule with ``raster="auto"`` on a problem with more tile columns than rows
    runs its raster-N variant (the operands' layout asks for it): the main job compiles and
    reports that kernel only, not the config's own as well, and checks its result."""
    from cutedsl import cli
    monkeypatch.setenv("CUTEDSL_CACHE_DIR", str(tmp_path / "cache"))
    assert cli.main(["gemm", "--m", "130", "--n", "650", "--k", "100", "--schedule", "pingpong", "--backend", "sim",
                     "--check", "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["raster"] == "N" and rep["passed"] is True, rep
    kernels = [d for d in (tmp_path / "cache").iterdir() if d.is_dir()]
    assert len(kernels) == 1, kernels
