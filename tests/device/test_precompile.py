"""Compiling many configs with a process pool (issue 22): ``compile_all`` and
``python -m cutedsl compile``; the bundle uses the same pool."""
import json
import subprocess
import sys

from cutedsl import GemmConfig
from cutedsl.compiler import KernelCache
from cutedsl.device.precompile import compile_all

CFGS = [GemmConfig(tile=(64, 64, 64), stages=2), GemmConfig(schedule="pingpong", tile=(64, 128, 64)),
        GemmConfig(schedule="single_tile", tile=(64, 64, 64), epilogue="global")]


def test_pool_fills_the_cache_and_reports_per_config(tmp_path):
    seen = []
    res = compile_all(CFGS, jobs=2, cache_dir=tmp_path, progress=lambda d, t, r: seen.append((d, t)))
    assert [r.config for r in res] == CFGS and all(r.error is None and r.key for r in res)
    assert sorted(seen) == [(1, 3), (2, 3), (3, 3)]
    assert len(KernelCache(tmp_path).entries()) == 3
    again = compile_all(CFGS, jobs=1, cache_dir=tmp_path)
    assert all(r.hit for r in again) and [r.key for r in again] == [r.key for r in res]


def test_a_failing_config_does_not_lose_the_others(tmp_path, monkeypatch):
    from cutedsl.device import precompile
    real = precompile._compile_one

    def flaky(fields, cache_dir, grouped=False):
        if fields["schedule"] == "pingpong":           # as _compile_one reports an exception
            return None, 0.0, False, None, "RuntimeError: boom"
        return real(fields, cache_dir, grouped)
    monkeypatch.setattr(precompile, "_compile_one", flaky)
    res = compile_all(CFGS, jobs=1, cache_dir=tmp_path)
    assert [r.error for r in res] == [None, "RuntimeError: boom", None]


def test_cli_compile(tmp_path):
    env = {**__import__("os").environ, "CUTEDSL_CACHE_DIR": str(tmp_path)}
    run = lambda *a: subprocess.run([sys.executable, "-m", "cutedsl", "compile", *a],  # noqa: E731
                                    capture_output=True, text=True, env=env, timeout=600)
    r = run("--config", "tile=64x64x64,stages=2", "--config", "schedule=pingpong,tile=64x128x64", "--jobs", "2",
            "--json")
    assert r.returncode == 0, r.stderr
    rep = json.loads(r.stdout)
    assert rep["failed"] == 0 and len(rep["configs"]) == 2 and all(c["key"] for c in rep["configs"])
    r = run("--config", "tile=64x64x64,stages=2")
    assert r.returncode == 0 and "[1/1] multistage 64x64x64 s2: cached" in r.stdout, r.stdout + r.stderr
    r = run()
    assert r.returncode == 2 and "name at least one config" in r.stderr
    r = run("--config", "tile=96x64x64")
    assert r.returncode == 2 and "argument --config: " in r.stderr and "BLOCK_M" in r.stderr
