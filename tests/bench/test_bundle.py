"""The GPU bundle and the lease run, dry-run here: scripts/gpu_run.sh --dry-run builds a small
bundle, checks its size, and runs every step on the emulator as on a GPU machine without MLIR
(MLIR imports blocked); every kernel comes from the bundle's cache, every result lands flat in
OUT, and steps that no longer fit the budget are skipped and recorded so."""
import json
import os
import pathlib
import shutil
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
STATUS = {"env": "ok", "tests": "ok", "bench": "ok", "attention": "ok", "startup": "ok"}


def _env(**kw):
    env = {k: v for k, v in os.environ.items() if k not in ("CUTEDSL_CACHE_DIR", "GPU_RUN_BUDGET_S", "STEPS")}
    env.update({"PYTHONPATH": str(ROOT), **kw})
    return env


def _script(*args, **env):
    return subprocess.run(["bash", str(ROOT / "scripts" / "gpu_run.sh"), *map(str, args)], cwd=ROOT,
                          env=_env(PYTHON=sys.executable, GPU_RUN_PLAN="smoke", **env), capture_output=True,
                          text=True, timeout=900)


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    """A smoke bundle built by the dry run itself (the env step only: verify)."""
    d = tmp_path_factory.mktemp("bundle")
    r = _script("--dry-run", d / "b", d / "out", STEPS="env")
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"dry run: building bundle {d / 'b'} (plan smoke)" in r.stdout
    line = next(x for x in r.stdout.splitlines() if x.startswith("dry run: working tree "))
    assert line.endswith("(limit 60 MiB)")
    return d / "b"


@pytest.fixture
def no_mlir(tmp_path):
    """A directory that, on PYTHONPATH, hides MLIR from every Python process started with it
    (``sitecustomize`` runs at start-up: ``import mlir`` fails and ``find_spec`` finds nothing),
    as on the GPU machine."""
    d = tmp_path / "block"
    d.mkdir()
    (d / "sitecustomize.py").write_text("import sys\nsys.modules['mlir'] = None\n")
    return d


def _lease(bundle, out, block, *args):
    env = _env(PYTHONPATH=f"{ROOT}:{block}", CUTEDSL_CACHE_DIR=str(pathlib.Path(bundle) / "cache"))
    return subprocess.run([sys.executable, "-m", "cutedsl.bench.lease", "--bundle", str(bundle), "--out", str(out),
                           "--dry-run", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)


def test_bundle_manifest(bundle):
    from cutedsl import GemmConfig
    from cutedsl.bench.bundle import MAX_BYTES
    from cutedsl.bench.plans import PLANS, SMOKE_ATTENTION, attention_kernels, problem_configs
    from cutedsl.compiler.cache import source_hash
    m = json.loads((bundle / "manifest.json").read_text())
    assert m["plan"] == "smoke" and m["source_hash"] == source_hash()
    # the attention forward the attention step times (head dim 128, full and causal), compiled by key
    assert m["attention"] == [list(x) for x in SMOKE_ATTENTION] == [["forward", 128, False, False],
                                                                    ["forward", 128, True, False]]
    assert [a["keys"] for a in m["attention_kernels"]] == [[k.cache_key()[0] for k in attention_kernels(x)]
                                                           for x in SMOKE_ATTENTION]
    assert [(p["set"], p["shape"], p["dry_shape"]) for p in m["problems"]] == [
        ("square", [130, 70, 96], [130, 70, 96]), ("fp8", [64, 200, 128], [64, 200, 128])]
    for p, row in zip(m["problems"], PLANS["smoke"]["problems"]):
        assert [GemmConfig(**{**f, "tile": tuple(f["tile"]), "cluster": tuple(f["cluster"])}) for f in p["configs"]] \
            == problem_configs(row, 0)
    # the problems' configs, the main job's, the two attention forwards, the one the captured gpu test compiled
    assert len(m["kernels"]) == 3 and len(m["entries"]) == 6 and 0 < m["size_bytes"] < MAX_BYTES
    assert m["tests_compiled"][0]["new_entries"] and m["tests"] == PLANS["smoke"]["tests"]
    assert m["export"] == "export/main" and (bundle / "export/main/cutedsl.json").is_file()


def test_dry_run_runs_every_step_without_mlir(bundle, no_mlir, tmp_path):
    out = tmp_path / "out"
    r = _script("--dry-run", bundle, out, PYTHONPATH=str(no_mlir))
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"dry run: reusing bundle {bundle} (plan smoke, verified)" in r.stdout
    s = json.loads((out / "summary.json").read_text())
    assert s["dry_run"] and s["budget_s"] == 360 and s["mlir_importable"] is False
    assert {x["step"]: x["status"] for x in s["steps"]} == STATUS
    log = (out / "gpu_run.log").read_text()
    assert "5 plan kernels found, 6 entries checked" in log and "0 problems" in log
    assert "test_family_bit_identical[multistage] PASSED" in log      # the emulator stood in for the GPU
    bench = json.loads((out / "bench.json").read_text())
    assert [(p["set"], p["timed"], p["failed"]) for p in bench["problems"]] == [("square", 1, 0), ("fp8", 1, 0)]
    rows = [r for st in bench["sets"] for r in st["rows"]]
    assert [(r["m"], r["n"], r["k"], r["check"]) for r in rows] == [(130, 70, 96, "pass"), (64, 200, 128, "pass")]
    assert "none claimed" in bench["header"]["timings"]
    att = json.loads((out / "attention.json").read_text())      # tiny shapes against the float64 reference
    assert [(r["batch"], r["seqlen"], r["heads"], r["causal"], r["check"]) for r in att["rows"]] == [
        (1, 130, 1, False, "pass"), (2, 70, 1, True, "pass")]
    assert all(r["ms"] is None and r["wall_ms"] > 0 and r["max_rel_diff"] <= r["tolerance"] for r in att["rows"])
    assert att["summary"] == {"geomean_ratio_flash": None, "geomean_ratio_cudnn": None, "timed": 2, "skipped": 0,
                              "failed": 0, "problems": 2} and "none claimed" in att["header"]["timings"]
    start = json.loads((out / "startup.json").read_text())
    assert "error" not in start["cold_start"][0] and start["cold_start"][0]["load_export_s"] > 0
    assert start["launch"]["gemm_call_us"] > 0 and "no measurement" in start["note"]
    files = sorted(p.name for p in out.iterdir())
    assert files == ["attention.json", "bench.csv", "bench.json", "gpu_run.log", "gpu_tests.xml", "startup.json",
                     "summary.json"]
    # the table at the end of the output (what the device tool's reply shows)
    tail = r.stdout[r.stdout.index("--- gpu run "):]
    assert "tests      ok " in tail and "1 passed, 0 failed, 0 errors, 0 skipped" in tail
    assert "attention  ok " in tail and "square 130x70x96" in tail and "cold start 1: process" in tail
    assert "--- attention forward vs SDPA" in tail and "b2  s70     causal" in tail


def test_attention_step_skips_a_bundle_without_attention_kernels(bundle, no_mlir, tmp_path):
    plain = tmp_path / "plain"
    shutil.copytree(bundle, plain)
    m = json.loads((plain / "manifest.json").read_text())
    m["attention"] = []
    (plain / "manifest.json").write_text(json.dumps(m))
    out = tmp_path / "out"
    r = _lease(plain, out, no_mlir, "--steps", "attention")
    assert r.returncode == 0, r.stdout + r.stderr
    step, = json.loads((out / "summary.json").read_text())["steps"]
    assert (step["status"], step["why"]) == ("skipped", "no attention kernels in this bundle")
    assert not (out / "attention.json").exists()


def test_budget_skips_steps_that_no_longer_fit(bundle, no_mlir, tmp_path):
    out = tmp_path / "out"
    r = _lease(bundle, out, no_mlir, "--budget", "40", "--steps", "env,tests,startup")
    assert r.returncode == 0, r.stdout + r.stderr
    steps = json.loads((out / "summary.json").read_text())["steps"]
    assert [(x["step"], x["status"]) for x in steps] == [("env", "ok"), ("tests", "skipped"), ("startup", "ok")]
    env, tests, startup = steps
    assert env["limit_s"] == 10          # its minimum: the later steps' minimums (80 s) exceed the budget
    assert tests["why"] == f"needs 60 s, {tests['left_s']:.0f} s left" and tests["left_s"] < 40
    assert startup["limit_s"] == startup["left_s"] and not (out / "gpu_tests.xml").exists()


def test_a_step_past_its_limit_is_interrupted_then_killed(tmp_path, monkeypatch):
    from cutedsl.bench import lease
    monkeypatch.setattr(lease, "GRACE_S", 1)
    log = tmp_path / "log"
    log.write_text("")
    rc, timed_out = lease._run([sys.executable, "-c", "import time; print('started', flush=True); time.sleep(60)"],
                               dict(os.environ), log, 1)
    assert timed_out and rc != 0 and "KeyboardInterrupt" in log.read_text()        # SIGINT first
    stubborn = "import signal, time; signal.signal(signal.SIGINT, signal.SIG_IGN); time.sleep(60)"
    rc, timed_out = lease._run([sys.executable, "-c", stubborn], dict(os.environ), log, 1)
    assert timed_out and rc == -9                                                  # then SIGKILL


def test_runner_reports_a_kernel_missing_from_the_bundle(bundle, no_mlir, tmp_path):
    broken = tmp_path / "broken"
    shutil.copytree(bundle, broken)
    for d in (broken / "cache").iterdir():
        if d.is_dir():                       # entries are directories; build locks are files
            shutil.rmtree(d)
    shutil.rmtree(broken / "export")
    out = tmp_path / "out"
    r = _lease(broken, out, no_mlir, "--steps", "env,bench,attention,startup")
    assert r.returncode == 1
    log = (out / "gpu_run.log").read_text()
    assert "missing from the cache: multistage 64x64x64 s7" in log
    assert "missing from the cache: attention forward d128 causal (AttentionFwdKernel)" in log
    assert "the exported main job does not load" in log
    steps = json.loads((out / "summary.json").read_text())["steps"]
    assert [(x["step"], x["status"], x["rc"]) for x in steps] == [("env", "failed", 1), ("bench", "failed", 1),
                                                                 ("attention", "failed", 1), ("startup", "failed", 1)]
    rows = [r for s in json.loads((out / "bench.json").read_text())["sets"] for r in s["rows"]]
    rows += json.loads((out / "attention.json").read_text())["rows"]
    assert len(rows) == 4 and all(r["check"] == "error" and "MLIR" in r["error"] for r in rows), rows  # nothing compiled


def test_verify_refuses_a_bundle_of_another_plan_version(bundle, tmp_path):
    """The run reads its steps from the manifest: a bundle built before the plan changed would
    run the old plan, so --verify (the env step, and the dry run's reuse check) says rebuild."""
    stale = tmp_path / "stale"
    shutil.copytree(bundle, stale)
    m = json.loads((stale / "manifest.json").read_text())
    m["tests"], m["problems"] = ["tests/device/test_gpu.py"], m["problems"][:1]
    (stale / "manifest.json").write_text(json.dumps(m))
    r = subprocess.run([sys.executable, "-m", "cutedsl", "bundle", "--out", str(stale), "--verify"], cwd=ROOT,
                       env=_env(), capture_output=True, text=True, timeout=300)
    assert r.returncode == 1
    assert ("PROBLEM: the bundle's plan 'smoke' differs from this checkout's in tests, problems: rebuild it "
            "(python -m cutedsl bundle --plan smoke)") in r.stdout


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
        "def test_fill():\n"
        "    from cutedsl.runtime.cuda import CudaBackend\n"
        "    be = CudaBackend(); be.memset(be.alloc(8), 1, 8)\n"
        "    raise AssertionError('not reached: a device fill stops the test, as a launch does')\n"
        "def test_broken():\n"
        "    assert 1 == 2\n")
    cache = tmp_path / "cache"
    env = _env(CUTEDSL_CACHE_DIR=str(cache))
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "cutedsl.bench.capture", "-p",
                        "no:cacheprovider", "-m", "gpu", str(t)], cwd=tmp_path, env=env, capture_output=True,
                       text=True, timeout=600)
    assert "1 failed, 2 skipped" in r.stdout, r.stdout + r.stderr
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
    """bundle --arch sm_100a: the plan's problems (the model's sm_100a pick) and main job retargeted (--arch added, the
    sm_90a-only --schedule dropped), no gpu tests; every kernel is an sm_100a one and --verify
    finds them all."""
    from cutedsl.bench.bundle import plan_configs, plan_for
    p = plan_for("smoke", "sm_100a")
    assert "--schedule" not in p["main_args"] and p["main_args"][-2:] == ["--arch", "sm_100a"]
    assert p["tests"] == [] and p["arch"] == "sm_100a"
    assert plan_for("smoke", "sm_90a") == plan_for("smoke")
    assert {c.arch for c in plan_configs(plan_for("gpu", "sm_100a"))} == {"sm_100a"}
    out = tmp_path / "b"
    r = subprocess.run([sys.executable, "-m", "cutedsl", "bundle", "--out", str(out), "--plan", "smoke", "--arch",
                        "sm_100a"], cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "(schedules: single_tile, warp_specialized)" in r.stdout
    m = json.loads((out / "manifest.json").read_text())
    assert m["arch"] == "sm_100a" and m["tests_compiled"] == []
    assert len(m["kernels"]) == 3 and all(" sm_100a" in k["config"] for k in m["kernels"]), m["kernels"]
    assert json.loads((out / "export/main/cutedsl.json").read_text())["config"]["arch"] == "sm_100a"
    v = subprocess.run([sys.executable, "-m", "cutedsl", "bundle", "--out", str(out), "--verify"], cwd=ROOT,
                       env=_env(), capture_output=True, text=True, timeout=600)
    assert v.returncode == 0 and "0 problems" in v.stdout, v.stdout + v.stderr


def test_bench_step_survives_a_worker_killed_in_a_config(bundle, no_mlir, tmp_path):
    """A GPU fault kills the process that launched the kernel (seen on an H200: one config of a
    782-row plan lost the step's pass 2). The bench step runs in a worker that journals each
    config: ``--crash-on`` aborts the worker before the fp8 problem's config, as a fault would;
    that config gets a ``fault`` row naming the exit status, the other problem keeps its row, and
    the step's status says something failed."""
    manifest = json.loads((pathlib.Path(bundle) / "manifest.json").read_text())
    from cutedsl import GemmConfig
    from cutedsl.bench.configs import label
    from cutedsl.bench.lease_bench import _config
    victim = label(GemmConfig(**_config(manifest["problems"][1]["configs"][0])))
    env = _env(PYTHONPATH=f"{ROOT}:{no_mlir}", CUTEDSL_CACHE_DIR=str(pathlib.Path(bundle) / "cache"))
    out = tmp_path / "bench.json"
    r = subprocess.run([sys.executable, "-m", "cutedsl.bench.lease_bench", "--bundle", str(bundle), "--backend", "sim",
                        "--json", str(out), "--csv", str(tmp_path / "bench.csv"), "--crash-on", victim],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 1, r.stdout + r.stderr
    assert f"the worker died (status -6) in {victim} on problem 1: recorded as a fault, restarting (1 of 8)" in r.stdout
    rows = {(x["problem"], x["config"]): x for s in json.loads(out.read_text())["sets"] for x in s["rows"]}
    assert rows[(1, victim)]["check"] == "fault" and "exit status -6" in rows[(1, victim)]["error"]
    assert [x["check"] for (i, _), x in rows.items() if i == 0] == ["pass"]
    summary = json.loads(out.read_text())["problems"]
    assert (summary[0]["failed"], summary[1]["failed"]) == (0, 1)
