"""The layer test kit ``cutedsl.testing`` (issue 38): its harnesses without pytest, its pytest
plugin in a fresh pytest run outside this repository's conftest, and its import rules."""
import os
import pathlib
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from cutedsl.errors import ArgumentError
from cutedsl.testing import SeededRng, adversarial, run_alu, seed_id, sim_seeds
from test_layering_runtime import PKG, imported_modules

ROOT = PKG.parent


def test_only_the_plugin_imports_pytest():
    """The harnesses work from a script; only the plugin needs pytest."""
    users = sorted(str(f.relative_to(PKG)) for f in (PKG / "testing").rglob("*.py")
                   for _line, mod in imported_modules(f) if mod == "pytest" or mod.startswith("pytest."))
    assert users == ["testing/plugin.py"]


def test_importing_the_kit_imports_neither_pytest_nor_mlir():
    code = ("import sys, cutedsl; a = 'pytest' in sys.modules or 'cutedsl.testing' in sys.modules\n"
            "import cutedsl.testing; print(a, 'pytest' in sys.modules, 'mlir' in sys.modules)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                       env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert r.stdout.split() == ["False", "False", "False"], r.stderr


def test_seeded_rng_is_default_rng_with_its_seed_named():
    r = SeededRng(1234)
    assert isinstance(r, np.random.Generator) and r.seed_value == 1234 and repr(r) == "SeededRng(seed=1234)"
    assert np.array_equal(r.standard_normal(5), np.random.default_rng(1234).standard_normal(5))
    assert len({SeededRng().seed_value for _ in range(8)}) > 1          # fresh OS seeds
    with pytest.raises(ArgumentError, match="seed must be a non-negative int or None, got -1"):
        SeededRng(-1)


def test_seeds_and_adversarial_context(monkeypatch):
    assert sim_seeds(0) == [None] and sim_seeds(3) == [None, 1, 2, 3]
    assert [seed_id(s) for s in sim_seeds(2)] == ["eager", "chaos1", "chaos2"]
    with pytest.raises(ArgumentError, match="int >= 0, got -2"):
        sim_seeds(-2)
    monkeypatch.setenv("CUTEDSL_SIM_CHAOS", "9")
    with adversarial(4):
        assert os.environ["CUTEDSL_SIM_CHAOS"] == "4"
        with adversarial(None):
            assert "CUTEDSL_SIM_CHAOS" not in os.environ
        assert os.environ["CUTEDSL_SIM_CHAOS"] == "4"
    assert os.environ["CUTEDSL_SIM_CHAOS"] == "9"
    with pytest.raises(ArgumentError, match="seed must be an int or None"):
        with adversarial("1"):
            pass


def test_run_alu_and_its_refusals():
    a = np.array([1, -7, 2 ** 31 - 1], np.int32)
    b = np.array([2, 3, 1], np.int32)
    assert run_alu("add.s32 {d}, {a}, {b}", ["s32", "s32"], [a, b], np.int32).tolist() == [3, -4, -2 ** 31]
    assert run_alu("setp.lt.s32 {d}, {a}, {b}", ["s32", "s32"], [a, b], "pred").tolist() == [True, True, False]
    with pytest.raises(ArgumentError, match=r"unknown operand type\(s\) \['i32'\]"):
        run_alu("add.s32 {d}, {a}, {b}", ["i32", "s32"], [a, b], np.int32)
    with pytest.raises(ArgumentError, match="equal lengths of 1..32"):
        run_alu("add.s32 {d}, {a}, {b}", ["s32", "s32"], [a, b[:2]], np.int32)


def test_run_kernel_copies_arrays_back_and_checks_the_argument_count():
    """A kernel composed from IR values: out[t] = 3 * x[t] + t for 96 threads; the writable
    arrays hold what the kernel left in device memory, a read-only input is left alone."""
    import cutedsl.ir as cir
    from cutedsl.testing import build_kernel, normalize_ptx, run_kernel

    def body(args, smem):
        t = cir.thread_idx()
        x, out = cir.GlobalPtr(args.x, "i32"), cir.GlobalPtr(args.out, "i32")
        out.store(cir.i64(t), x.load(cir.i64(t)) * 3 + t.to("i32"))

    k = build_kernel(body, params=[("x", "ptr"), ("out", "ptr")], block=(96, 1, 1), name="tri")
    assert k.entry == "tri" and ".reqntid 96, 1, 1" in normalize_ptx(k.ptx)
    x = np.arange(-40, 56, dtype=np.int32)
    x.flags.writeable = False
    out = np.full(96, -1, np.int32)
    emu = run_kernel(k, [x, out])
    assert np.array_equal(out, 3 * x + np.arange(96)) and emu.backend.last_launch["ctas"] == 1
    with pytest.raises(ArgumentError, match=r"kernel 'tri' takes 2 arguments \(x, out\), got 1"):
        run_kernel(k, [out])


# -- the plugin in a fresh pytest run, outside this repository's conftest -------------------

USER_TESTS = '''
import os
import numpy as np
import pytest
from cutedsl.testing import run_alu

SEEN = []

def test_sim_fixture_reruns(sim, sim_seed):
    from cutedsl.sim import SimBackend
    assert isinstance(sim, SimBackend)
    assert os.environ.get("CUTEDSL_SIM_CHAOS") == (None if sim_seed is None else str(sim_seed))
    a = np.arange(4, dtype=np.uint32)
    assert run_alu("add.u32 {d}, {a}, {b}", ["u32", "u32"], [a, a], np.uint32).tolist() == [0, 2, 4, 6]

@pytest.mark.sim_kernel
def test_marked(sim_seed):
    pass

def test_plain(rng):
    assert rng.standard_normal(3).tolist() == np.random.default_rng(rng.seed_value).standard_normal(3).tolist()
    if os.environ.get("WANT_SEED"):
        assert rng.seed_value == int(os.environ["WANT_SEED"])

@pytest.mark.sim_kernel
def test_fails(rng, sim_seed):
    assert os.environ.get("MAKE_FAIL") != "1", rng
'''


def _pytest(tmp_path, *args, env=(), write_user_tests=True):
    """``pytest -v ARGS`` in ``tmp_path``, a project of its own whose conftest enables the plugin."""
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    (tmp_path / "conftest.py").write_text('pytest_plugins = ["cutedsl.testing.plugin"]\n')
    if write_user_tests:
        (tmp_path / "test_user.py").write_text(textwrap.dedent(USER_TESTS))
    e = {k: v for k, v in os.environ.items() if k not in ("CUTEDSL_SIM_CHAOS", "CUTEDSL_TEST_SIM_SEEDS",
                                                          "CUTEDSL_TEST_RNG_SEED", "PYTEST_ADDOPTS")}
    e.update({"PYTHONPATH": str(ROOT), **dict(env)})
    return subprocess.run([sys.executable, "-m", "pytest", "-v", "-p", "no:cacheprovider", *args],
                          cwd=tmp_path, capture_output=True, text=True, env=e, timeout=300)


def _ids(out):
    return sorted(line.split()[0].split("::")[1] for line in out.splitlines() if " PASSED" in line)


def test_plugin_reruns_under_seeds_in_a_fresh_run(tmp_path):
    r = _pytest(tmp_path, "--sim-seeds", "2")
    assert r.returncode == 0, r.stdout + r.stderr
    assert _ids(r.stdout) == ["test_fails[chaos1]", "test_fails[chaos2]", "test_fails[eager]",
                              "test_marked[chaos1]", "test_marked[chaos2]", "test_marked[eager]", "test_plain",
                              "test_sim_fixture_reruns[chaos1]", "test_sim_fixture_reruns[chaos2]",
                              "test_sim_fixture_reruns[eager]"]
    r = _pytest(tmp_path, "--sim-seeds", "0", "--rng-seed", "77", env={"WANT_SEED": "77"})
    assert r.returncode == 0 and _ids(r.stdout) == ["test_fails", "test_marked", "test_plain",
                                                   "test_sim_fixture_reruns"], r.stdout
    # a seed fixed by whoever runs the tests: no reruns, the emulator sees that seed
    r = _pytest(tmp_path, "-k", "marked", env={"CUTEDSL_SIM_CHAOS": "5"})
    assert r.returncode == 0 and _ids(r.stdout) == ["test_marked"], r.stdout


def test_plugin_names_the_seeds_of_a_failure(tmp_path):
    r = _pytest(tmp_path, "-k", "fails", "--sim-seeds", "1", "--rng-seed", "4242", env={"MAKE_FAIL": "1"})
    assert r.returncode == 1 and "2 failed" in r.stdout, r.stdout
    assert r.stdout.count("rng seed 4242 (replay: --rng-seed 4242)") == 2
    assert r.stdout.count("emulator adversarial seed 1 (CUTEDSL_SIM_CHAOS=1)") == 1
    assert "AssertionError: SeededRng(seed=4242)" in r.stdout


def test_plugin_refuses_negative_seed_count(tmp_path):
    r = _pytest(tmp_path, "--sim-seeds", "-1")
    assert r.returncode == 4 and "--sim-seeds must be >= 0 (0: eager only), got -1" in r.stderr, r.stdout + r.stderr


def test_readme_example_runs_as_written(tmp_path):
    """The README's "Testing your kernels" example, copied into a fresh project with the plugin."""
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Testing your kernels", 1)[1]
    code = section.split("```python\n", 1)[1].split("```", 1)[0]
    (tmp_path / "test_warp_sum.py").write_text(code)
    r = _pytest(tmp_path, "test_warp_sum.py", write_user_tests=False)
    assert r.returncode == 0, r.stdout + r.stderr
    assert _ids(r.stdout) == ["test_ptx", "test_sums[chaos1]", "test_sums[eager]"]
