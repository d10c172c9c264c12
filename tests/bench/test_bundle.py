"""The GPU bundle, dry-run here: build a small bundle, then run scripts/gpu_run.sh as on a GPU
machine without MLIR (MLIR imports blocked, GPU steps on the emulator) and check that every
kernel comes from the bundle's cache."""
import json
import os
import pathlib
import shutil
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _env(**kw):
    env = {k: v for k, v in os.environ.items() if k != "CUTEDSL_CACHE_DIR"}
    env.update({"PYTHONPATH": str(ROOT), **kw})
    return env


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    out = tmp_path_factory.mktemp("bundle") / "b"
    r = subprocess.run([sys.executable, "-m", "cutedsl", "bundle", "--out", str(out), "--plan", "smoke"],
                       cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    return out


@pytest.fixture
def no_mlir(tmp_path):
    """A directory that, on PYTHONPATH, hides MLIR from every Python process started with it
    (``sitecustomize`` runs at start-up: ``import mlir`` fails and ``find_spec`` finds nothing),
    as on the GPU machine."""
    d = tmp_path / "block"
    d.mkdir()
    (d / "sitecustomize.py").write_text("import sys\nsys.modules['mlir'] = None\n")
    return d


def _run(bundle, out, block, steps=None):
    env = _env(PYTHON=sys.executable, GPU_RUN_DRY="1", PYTHONPATH=str(block))
    if steps:
        env["STEPS"] = steps
    return subprocess.run(["bash", str(ROOT / "scripts" / "gpu_run.sh"), str(bundle), str(out)], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=600)


def test_bundle_manifest(bundle):
    from cutedsl.bench.bundle import MAX_BYTES
    from cutedsl.compiler.cache import source_hash
    m = json.loads((bundle / "manifest.json").read_text())
    assert m["plan"] == "smoke" and m["source_hash"] == source_hash()
    assert [k["config"] for k in m["kernels"]] == ["multistage 128x128x64 s2"]
    assert len(m["entries"]) == 1 and 0 < m["size_bytes"] < MAX_BYTES
    assert m["bench_args"][:2] == ["--set", "square"]
    assert m["export"] == "export/main" and (bundle / "export/main/cutedsl.json").is_file()


def test_runner_dry_run_finds_every_kernel_without_mlir(bundle, no_mlir, tmp_path):
    out = tmp_path / "out"
    r = _run(bundle, out, no_mlir)
    log = (out / "gpu_run.log").read_text()
    assert r.returncode == 0, r.stdout + log
    summary = (out / "summary.txt").read_text().split("\n")
    assert [s.split()[0] for s in summary if s] == ["env", "verify", "main", "identity", "bench"]
    assert all(" exit   0 " in s for s in summary if s)
    assert "MLIR is not importable here" in log
    assert "1 plan configs found, 1 entries checked" in log and "0 problems" in log
    assert "loaded from the export" in log                     # the main job ran the bundle's export
    bench = json.loads((out / "bench.json").read_text())
    rows = bench["sets"][0]["rows"]
    assert rows and all(r["check"] == "pass" for r in rows)
    assert "none claimed" in bench["header"]["timings"]
    ident = json.loads((out / "identity.json").read_text())["identity"]
    assert ident and all(r["identical"] and r["exact"] for r in ident)
    files = sorted(p.name for p in out.iterdir())
    assert len(files) <= 8 and all((out / f).is_file() for f in files)      # flat, what the GPU tool returns
    assert {"gpu_run.log", "summary.txt", "bench.json", "bench.csv", "bench.png", "identity.json"} <= set(files)


def test_runner_reports_a_kernel_missing_from_the_bundle(bundle, no_mlir, tmp_path):
    broken = tmp_path / "broken"
    shutil.copytree(bundle, broken)
    for d in (broken / "cache").iterdir():
        if d.is_dir():                       # entries are directories; build locks are files
            shutil.rmtree(d)
    shutil.rmtree(broken / "export")
    out = tmp_path / "out"
    r = _run(broken, out, no_mlir, steps="verify main")
    log = (out / "gpu_run.log").read_text()
    assert r.returncode != 0
    assert "missing from the cache: multistage 128x128x64 s2" in log
    assert "the exported main job does not load" in log
    assert "argument --load: " in log and "is not a saved cutedsl GEMM" in log    # nothing was compiled
    summary = (out / "summary.txt").read_text()
    assert "verify    exit   1" in summary and "main      exit   2" in summary


def test_capture_plugin_compiles_gpu_tests_and_keeps_real_failures(tmp_path):
    t = tmp_path / "test_fake_gpu.py"
    t.write_text(
        "import numpy as np, pytest\n"
        "from cutedsl import Gemm, GemmConfig\n"
        "pytestmark = pytest.mark.gpu\n"
        "def test_runs():\n"
        "    from cutedsl.runtime.cuda import CudaBackend\n"
        "    a = np.ones((70, 64), np.float16); b = np.ones((64, 40), np.float16)\n"
        "    Gemm(GemmConfig(stages=2, out_dtype='f16'), CudaBackend())(a, b)\n"
        "    raise AssertionError('not reached: the launch stops the test')\n"
        "def test_broken():\n"
        "    assert 1 == 2\n")
    cache = tmp_path / "cache"
    env = _env(CUTEDSL_CACHE_DIR=str(cache))
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "cutedsl.bench.capture", "-p",
                        "no:cacheprovider", "-m", "gpu", str(t)], cwd=tmp_path, env=env, capture_output=True,
                       text=True, timeout=600)
    assert "1 failed, 1 skipped" in r.stdout, r.stdout + r.stderr
    assert len([p for p in cache.iterdir() if p.is_dir()]) == 1     # the kernel is in the cache


def test_bundle_into_a_path_that_cannot_be_created_is_one_line(tmp_path):
    (tmp_path / "file").write_text("")
    r = subprocess.run([sys.executable, "-m", "cutedsl", "bundle", "--out", str(tmp_path / "file" / "b")],
                       cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=120)
    assert r.returncode == 1 and r.stderr == f"error: cannot create {tmp_path}/file/b/cache: Not a directory\n"


def test_print_and_verify_without_a_bundle_say_so(tmp_path):
    run = lambda *a: subprocess.run([sys.executable, "-m", "cutedsl", "bundle", "--out", str(tmp_path), *a],  # noqa: E731
                                    cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=120)
    r = run("--print", "source_hash")
    assert r.returncode == 1 and r.stderr.startswith(f"error: no manifest entry 'source_hash' in {tmp_path}: "
                                                     "FileNotFoundError") and r.stderr.count("\n") == 1
    r = run("--verify")
    assert r.returncode == 1 and f"PROBLEM: no readable manifest in {tmp_path}" in r.stdout


def test_bundle_for_sm100a(tmp_path):
    """bundle --arch sm_100a: the plan's bench sets and main job retargeted (--arch added, the
    sm_90a-only --schedule dropped), no gpu tests; every kernel is an sm_100a one and --verify
    finds them all."""
    from cutedsl.bench.bundle import plan_for
    p = plan_for("smoke", "sm_100a")
    assert "--schedule" not in p["bench_args"] and p["bench_args"][-2:] == ["--arch", "sm_100a"]
    assert p["main_args"][-2:] == ["--arch", "sm_100a"] and p["tests"] == []
    assert plan_for("smoke", "sm_90a") == plan_for("smoke")
    from cutedsl.bench.bundle import plan_configs      # the full plan, grouped sets too (sm_100a has grouped GEMM)
    full = plan_for("gpu", "sm_100a")
    grouped = plan_configs(full, grouped=True)
    assert grouped and {c.arch for c in grouped} == {"sm_100a"} and {c.arch for c in plan_configs(full)} == {"sm_100a"}
    out = tmp_path / "b"
    r = subprocess.run([sys.executable, "-m", "cutedsl", "bundle", "--out", str(out), "--plan", "smoke", "--arch",
                        "sm_100a"], cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "(schedules: single_tile, warp_specialized)" in r.stdout
    m = json.loads((out / "manifest.json").read_text())
    assert m["arch"] == "sm_100a" and m["tests_compiled"] == []
    assert m["kernels"] and all(k["config"].endswith("sm_100a") for k in m["kernels"]), m["kernels"]
    assert json.loads((out / "export/main/cutedsl.json").read_text())["config"]["arch"] == "sm_100a"
    v = subprocess.run([sys.executable, "-m", "cutedsl", "bundle", "--out", str(out), "--verify"], cwd=ROOT,
                       env=_env(), capture_output=True, text=True, timeout=600)
    assert v.returncode == 0 and "0 problems" in v.stdout, v.stdout + v.stderr
