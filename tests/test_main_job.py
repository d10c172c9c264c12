"""The main job runs as a user runs it (emulator backend here)."""
import json
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
