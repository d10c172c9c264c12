"""The cache key covers all code that generates a kernel, user code included (issue 15).

Each scenario edits user code between runs of fresh processes that share one cache directory;
the edited kernel must be rebuilt (and compute the new result on the emulator), an unedited
one must come from the cache, and a machine without MLIR must refuse the stale entry."""
import json
import os
import subprocess
import sys
import textwrap

from cutedsl.compiler.identity import code_identity, kernel_key

BASE = """
from cutedsl.collective.epilogue import GlobalEpilogue

class ScaledBase(GlobalEpilogue):
    scale = 2.0

    def visit(self, value, row, col):
        return value * self.scale
"""
EPI = """
from base_epi import ScaledBase

class MyEpilogue(ScaledBase):
    pass
"""
HELPERS = """
def shift(v):
    return v + 5.0
"""
HELPER_EPI = """
from cutedsl.collective.epilogue import GlobalEpilogue

class ShiftEpilogue(GlobalEpilogue):
    def visit(self, value, row, col):
        from helpers import shift          # a function-level import counts too
        return shift(value)
"""
KERNEL = """
from cutedsl.kernel.gemm import SingleTileGemmKernel

class MyKernel(SingleTileGemmKernel):
    name = "my_single_tile"

    def define(self):
        return super().define()
"""
RUN = """
import json, sys
if "--no-mlir" in sys.argv:
    sys.modules["mlir"] = None             # a GPU box without MLIR running from the cache
import numpy as np
from cutedsl import Gemm, GemmConfig
from cutedsl.errors import CacheError
from my_epi import MyEpilogue
from helper_epi import ShiftEpilogue
from my_kernel import MyKernel

out = {}
cfg = GemmConfig(tile=(64, 64, 64), schedule="single_tile", epilogue="global")
rng = np.random.default_rng(int(sys.argv[1]))
a = rng.integers(-3, 4, (70, 40)).astype(np.float16)
b = rng.integers(-3, 4, (40, 90)).astype(np.float16)
ref = a.astype(np.float64) @ b.astype(np.float64)
for name, epi, run in (("base", MyEpilogue, True), ("helper", ShiftEpilogue, False)):
    try:
        g = Gemm(cfg, "sim", epilogue=epi)
        if run:
            d = g(a, b)
            out[name + "_factor"] = float(np.round((d.astype(np.float64) / np.where(ref == 0, 1, ref))[ref != 0].mean(), 6))
            out[name + "_exact"] = bool(np.array_equal(d, ref * out[name + "_factor"]))
        ptx = g.compiled.ptx
        out[name] = {"hit": g.kernel.last_cache_hit, "ptx_has_3": "0f40400000" in ptx, "ptx_has_5": "0f40A00000" in ptx}
    except CacheError as e:
        out[name] = {"error": "CacheError"}
try:
    k = MyKernel(tile_m=64, tile_n=64, epilogue=__import__("cutedsl").collective.epilogue.GlobalEpilogue)
    k.compile()
    out["kernel"] = {"hit": k.last_cache_hit}
except CacheError:
    out["kernel"] = {"error": "CacheError"}
except RuntimeError as e:
    out["kernel"] = {"error": str(e)}
print(json.dumps(out))
"""


def _run(tmp_path, *flags):
    env = {**os.environ, "CUTEDSL_CACHE_DIR": str(tmp_path / "cache"),
           "PYTHONPATH": os.pathsep.join([str(tmp_path / "user"), os.environ.get("PYTHONPATH", "")])}
    env.pop("CUTEDSL_CACHE", None)
    r = subprocess.run([sys.executable, str(tmp_path / "user" / "run.py"), str(os.getpid()), *flags],
                       env=env, capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


def _write(tmp_path, name, text):
    p = tmp_path / "user" / name
    p.write_text(textwrap.dedent(text))
    os.utime(p, ns=(p.stat().st_atime_ns, p.stat().st_mtime_ns + 10 ** 9))   # mtime moves on


def test_user_code_edits_give_fresh_kernels(tmp_path):
    (tmp_path / "user").mkdir()
    for name, text in (("base_epi.py", BASE), ("my_epi.py", EPI), ("helpers.py", HELPERS),
                       ("helper_epi.py", HELPER_EPI), ("my_kernel.py", KERNEL), ("run.py", RUN)):
        _write(tmp_path, name, text)
    first = _run(tmp_path)
    assert first["base_factor"] == 2.0 and first["base_exact"], first
    assert first["base"]["hit"] is False and first["helper"]["hit"] is False and first["kernel"]["hit"] is False
    again = _run(tmp_path, "--no-mlir")            # unchanged code: every kernel from the cache
    assert again["base"]["hit"] and again["helper"]["hit"] and again["kernel"]["hit"], again
    assert again["base_factor"] == 2.0 and again["base_exact"]

    # edit a base class in another module, a helper called from visit, a kernel's define
    _write(tmp_path, "base_epi.py", BASE.replace("scale = 2.0", "scale = 3.0"))
    _write(tmp_path, "helpers.py", HELPERS.replace("5.0", "3.0"))
    _write(tmp_path, "my_kernel.py", KERNEL.replace("return super().define()", 'raise RuntimeError("edited define")'))

    stale = _run(tmp_path, "--no-mlir")            # without MLIR the old kernels must not come back
    assert stale == {"base": {"error": "CacheError"}, "helper": {"error": "CacheError"},
                     "kernel": {"error": "CacheError"}}, stale
    fresh = _run(tmp_path)
    assert fresh["base"]["hit"] is False and fresh["base_factor"] == 3.0 and fresh["base_exact"], fresh
    assert fresh["helper"] == {"hit": False, "ptx_has_3": True, "ptx_has_5": False}, fresh
    assert first["helper"]["ptx_has_5"] and not first["helper"]["ptx_has_3"]
    assert fresh["kernel"] == {"error": "edited define"}
    assert _run(tmp_path, "--no-mlir")["base"]["hit"] is True   # the new entry serves MLIR-less runs


def _classes(src):
    ns = {"__name__": "user_exec"}
    exec(compile(textwrap.dedent(src), "<string>", "exec"), ns)   # no source file: bytecode is hashed
    return ns


def test_identity_of_classes_without_source_file():
    base = "from cutedsl.collective.epilogue import GlobalEpilogue\nclass E(GlobalEpilogue):\n" \
           "    def visit(self, v, r, c):\n        return v * {}\n"
    e2, e2b, e3 = _classes(base.format(2.0))["E"], _classes(base.format(2.0))["E"], _classes(base.format(3.0))["E"]
    assert code_identity(e2) == code_identity(e2b) != code_identity(e3)
    ident = code_identity(e2)
    assert ident["classes"][:2] == ["user_exec.E", "cutedsl.collective.epilogue.GlobalEpilogue"]
    assert list(ident["code"]) == ["user_exec.E"]
    assert ident["modules"] == {}                     # library modules are covered by the library hash
    helper = "def helper(v):\n    return v + {}\n" + base.format(1.0).replace("v * 1.0", "helper(v)")
    h1, h2 = _classes(helper.format(1.0))["E"], _classes(helper.format(4.0))["E"]
    assert code_identity(h1) != code_identity(h2)   # a file-less helper called from visit counts


def test_classes_without_source_file_see_their_globals(tmp_path, monkeypatch):
    """A notebook cell: ``SCALE = 2.0`` or a user module beside the class, edited between runs."""
    base = "from cutedsl.collective.epilogue import GlobalEpilogue\nSCALE = {}\nclass E(GlobalEpilogue):\n" \
           "    def visit(self, v, r, c):\n        return v * SCALE\n"
    assert code_identity(_classes(base.format(2.0))["E"]) == code_identity(_classes(base.format(2.0))["E"])
    assert code_identity(_classes(base.format(2.0))["E"]) != code_identity(_classes(base.format(3.0))["E"])
    monkeypatch.syspath_prepend(str(tmp_path))
    cell = base.format(1.0).replace("v * SCALE", "nb_helpers.shift(v)") + "import nb_helpers\n"
    ids = []
    for c in ("5.0", "6.0"):
        (tmp_path / "nb_helpers.py").write_text(f"def shift(v):\n    return v + {c}\n")
        monkeypatch.delitem(sys.modules, "nb_helpers", raising=False)
        ids.append(code_identity(_classes(cell)["E"]))
    assert ids[0] != ids[1]                         # an edit of the imported user module counts


def test_class_attributes_set_at_run_time_count(tmp_path, monkeypatch):
    """``SplitK.splits = 2`` in one run and 3 in the next (same source) are different kernels."""
    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "sk_mod.py").write_text("from cutedsl.kernel import MultistageGemmKernel\n\n"
                                       "class SK(MultistageGemmKernel):\n    splits = 3\n    tag = ('a', 1)\n")
    from sk_mod import SK
    before = code_identity(SK)
    monkeypatch.setattr(SK, "splits", 2)
    assert code_identity(SK) != before
    monkeypatch.setattr(SK, "splits", 3)
    assert code_identity(SK) == before and "sk_mod.SK:attrs" in before["code"]
    assert not [k for k in code_identity(SK(stages=2))["code"] if k.startswith("cutedsl.")]


def test_key_of_library_kernels_is_stable_and_distinct():
    from cutedsl.kernel.gemm import MultistageGemmKernel
    from cutedsl.collective.epilogue import GlobalEpilogue
    k1, k2 = MultistageGemmKernel(stages=2), MultistageGemmKernel(stages=2)
    assert k1.cache_key() == k2.cache_key()
    assert k1.cache_key()[1]["user_code"]["modules"] == {}
    assert MultistageGemmKernel(stages=3).cache_key()[0] != k1.cache_key()[0]
    assert MultistageGemmKernel(stages=2, epilogue=GlobalEpilogue).cache_key()[0] != k1.cache_key()[0]
    key, ident = kernel_key("x", {"a": 1})
    assert len(key) == 24 and ident["user_code"] == {"classes": [], "modules": {}, "code": {}}


def test_user_module_and_its_imports_are_hashed(tmp_path, monkeypatch):
    (tmp_path / "pkg_u").mkdir()
    (tmp_path / "pkg_u" / "__init__.py").write_text("")
    (tmp_path / "pkg_u" / "helper.py").write_text("K = 1\n")
    (tmp_path / "pkg_u" / "epi.py").write_text(
        "from cutedsl.collective.epilogue import GlobalEpilogue\nimport numpy\nfrom .helper import K\n"
        "class E(GlobalEpilogue):\n    pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    from pkg_u.epi import E
    ident = code_identity(E(64, 64))
    assert sorted(ident["modules"]) == ["pkg_u.epi", "pkg_u.helper"]   # numpy (site-packages) is not user code
    before = ident["modules"]["pkg_u.helper"]
    p = tmp_path / "pkg_u" / "helper.py"
    st = p.stat()
    p.write_text("K = 2\n")              # same size, same timestamp: still a different key
    os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert code_identity(E)["modules"]["pkg_u.helper"] != before

    from cutedsl.kernel.base import Kernel

    class K(Kernel):                      # a collective named by a class attribute counts too
        name = "k"
        epilogue_cls = E

        def config(self):
            return {}
    ident = K().cache_key()[1]["user_code"]
    assert "pkg_u.epi.E" in ident["classes"] and "pkg_u.helper" in ident["modules"]


def test_root_modules_that_generate_code_are_in_the_library_hash(tmp_path, monkeypatch):
    """arch.py (target, budgets) and problem.py shape generated code: an edit must change the key."""
    import shutil
    from cutedsl.compiler import identity
    assert {"dtypes.py", "arch.py", "problem.py"} <= set(identity._CODEGEN_FILES)
    pkg = tmp_path / "cutedsl"
    shutil.copytree(identity._PKG, pkg, ignore=shutil.ignore_patterns("__pycache__", "sim", "bench"))
    monkeypatch.setattr(identity, "_PKG", pkg)
    identity.library_hash.cache_clear()
    before = identity.library_hash()
    (pkg / "arch.py").write_text((pkg / "arch.py").read_text().replace('"+ptx83"', '"+ptx84"'))
    identity.library_hash.cache_clear()
    after = identity.library_hash()
    identity.library_hash.cache_clear()
    assert before != after
