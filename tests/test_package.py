"""Package-level guarantees: cheap import without MLIR, layering, the main job's report."""
import ast
import json
import pathlib
import subprocess
import sys

import pytest

PKG = pathlib.Path(__file__).resolve().parent.parent / "cutedsl"
# low -> high; compiler+ir are the foundation; the runtime (backends, arrays, launch) is below the
# device layer and beside atom/collective/kernel (tests/test_layering_runtime.py); sim sits beside the runtime
LAYERS = ["compiler", "ir", "atom", "collective", "kernel", "runtime", "device"]


def test_import_is_cheap_and_does_not_import_mlir():
    code = ("import time, sys; t = time.perf_counter(); import cutedsl; dt = time.perf_counter() - t; "
            "print(dt, 'mlir' in sys.modules)")
    best = min(float(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                    check=True).stdout.split()[0]) for _ in range(3))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split()[1] == "False"
    assert best <= 0.3, f"import cutedsl took {best:.3f} s"


def test_device_layer_loads_without_mlir():
    """A GPU box without MLIR: config, cache and backends import with numpy + cuda-python only."""
    code = ("import sys; sys.modules['mlir'] = None\n"
            "from cutedsl.device import Gemm, GemmConfig, get_backend\n"
            "from cutedsl.compiler import KernelCache, CompiledKernel\n"
            "GemmConfig(); print('ok')")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.stdout.strip() == "ok", r.stderr


def _imports(path):
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level >= 1:
            mod = (node.module or "").split(".")[0]
            if node.level == 2 or (node.level == 1 and path.parent == PKG):
                yield mod


@pytest.mark.parametrize("layer", LAYERS)
def test_lower_layers_never_import_higher(layer):
    higher = set(LAYERS[LAYERS.index(layer) + 1:]) | {"cli"}
    if layer not in ("runtime", "device"):     # the runtime's backend registry may load the emulator
        higher.add("sim")
    for f in (PKG / layer).rglob("*.py"):
        bad = set(_imports(f)) & higher
        assert not bad, f"{f.relative_to(PKG)} imports higher layer(s) {bad}"


def test_main_job_without_execution_reports_json():
    r = subprocess.run([sys.executable, "-m", "cutedsl", "gemm", "--m", "1000", "--n", "1000", "--k", "1000",
                        "--backend", "none", "--json", "--schedule", "multistage"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    rep = json.loads(r.stdout)
    for key in ("backend", "m", "n", "k", "dtype", "tile", "stages", "registers", "spills", "smem_bytes",
                "sass", "compile_s"):
        assert key in rep
    assert rep["backend"] == "none" and rep["executed"] is False and rep["spills"] == 0
    assert rep["sass"]["HGMMA"] in (8, 16) and rep["stages"] == 6 and rep["smem_bytes"] <= 232448


def test_main_job_rejects_bad_config():
    r = subprocess.run([sys.executable, "-m", "cutedsl", "gemm", "--m", "10", "--n", "10", "--k", "10",
                        "--tile", "128x128x32", "--backend", "none"], capture_output=True, text=True)
    assert r.returncode == 2 and "BLOCK_K must be 64" in r.stderr


def test_version_and_info():
    """Issue 22: ``--version`` and ``info`` (versions, GPU/driver, cache, backends and why not)."""
    from cutedsl import __version__
    r = subprocess.run([sys.executable, "-m", "cutedsl", "--version"], capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout.strip() == f"cutedsl {__version__}"
    r = subprocess.run([sys.executable, "-m", "cutedsl", "info", "--json"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    rep = json.loads(r.stdout)
    assert rep["cutedsl"] == __version__ and rep["backends"]["sim"]["usable"] is True
    assert rep["toolchain"]["usable"] and rep["toolchain"]["ptxas"] not in ("", None)
    assert rep["archs"] == ["sm_90a", "sm_100a"] and isinstance(rep["cache"]["entries"], int)
    if not rep["gpu"]["usable"]:
        assert rep["backends"]["cuda"]["why_not"]            # says why, never just "no"
    r = subprocess.run([sys.executable, "-m", "cutedsl", "info"], capture_output=True, text=True)
    assert r.returncode == 0 and "backend sim: usable" in r.stdout and "cache:" in r.stdout


def test_wheel_has_every_runtime_file_and_runs_the_main_job(tmp_path):
    """Issue 22: a wheel built from a clean copy of the sources holds the package and nothing
    else (no tests, docs, examples); installed on its own (not editable), it runs the README's
    main job on the emulator."""
    import shutil
    import zipfile
    root = PKG.parent
    src = tmp_path / "src"
    shutil.copytree(root, src, ignore=shutil.ignore_patterns(".venv", ".git", "build", "*.egg-info", "__pycache__",
                                                             ".pytest_cache", ".hypothesis", "out"))
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", str(src), "--no-deps", "--no-build-isolation",
                        "-w", str(tmp_path / "dist"), "-q"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]
    (whl,) = (tmp_path / "dist").glob("cutedsl-*.whl")
    names = zipfile.ZipFile(whl).namelist()
    assert not [n for n in names if not n.startswith(("cutedsl/", "cutedsl-"))], names
    assert not [n for n in names if n.startswith(("tests/", "docs/", "examples/"))]
    shipped = {n for n in names if n.endswith(".py")}
    sources = {str(p.relative_to(root)) for p in PKG.rglob("*.py")}
    assert shipped == sources, sources ^ shipped
    site = tmp_path / "site"
    r = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--target", str(site), str(whl), "-q"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]
    env = {**__import__("os").environ, "PYTHONPATH": str(site), "PYTHONSAFEPATH": "1"}
    code = ("import sys, runpy, cutedsl; assert cutedsl.__file__.startswith(%r), cutedsl.__file__; "
            "sys.argv = ['cutedsl', 'gemm', '--m', '200', '--n', '130', '--k', '100', '--stages', '2', "
            "'--backend', 'sim', '--check', '--json']; runpy.run_module('cutedsl', run_name='__main__')") % str(site)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    rep = json.loads(r.stdout)
    assert rep["passed"] is True and rep["backend"] == "sim"
