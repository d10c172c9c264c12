"""Ahead-of-time export (issue 22): gemm.save(path) / cutedsl.load(path) runs the saved kernel
with no MLIR (here on the emulator, in a process where importing MLIR fails)."""
import json
import subprocess
import sys

import pytest

import cutedsl
from cutedsl import Gemm, GemmConfig
from cutedsl.collective import GlobalEpilogue
from cutedsl.errors import ArgumentError, CacheError

CFG = GemmConfig(tile=(64, 64, 64), schedule="pingpong", dtype="bf16", out_dtype="f32")


def test_saved_gemm_runs_without_mlir(tmp_path, sim):
    out = Gemm(CFG, sim).save(tmp_path / "g")
    assert sorted(p.name for p in out.iterdir()) == ["cutedsl.json", "kernel"]
    assert sorted(p.name for p in (out / "kernel").iterdir()) == ["kernel.cubin", "kernel.json", "kernel.ptx"]
    code = f"""
import sys; sys.modules['mlir'] = None            # no MLIR on this 'GPU box'
import numpy as np, ml_dtypes, cutedsl
g = cutedsl.load({str(out)!r}, backend="sim")
rng = np.random.default_rng(3)
a = rng.integers(-2, 3, (130, 70)).astype(ml_dtypes.bfloat16); b = rng.integers(-2, 3, (70, 90)).astype(ml_dtypes.bfloat16)
assert np.array_equal(g(a, b), a.astype(np.float64) @ b.astype(np.float64))
print(g.config.schedule, g.compiled.entry)
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.split() == ["pingpong", "gemm_pingpong"]


def test_bad_exports_are_refused(tmp_path, sim):
    with pytest.raises(CacheError, match="is not a saved cutedsl GEMM"):
        cutedsl.load(tmp_path / "nothing")
    out = Gemm(CFG, sim).save(tmp_path / "g")
    ptx = out / "kernel" / "kernel.ptx"
    ptx.write_text(ptx.read_text() + "// edited\n")
    with pytest.raises(CacheError, match="checksum mismatch"):
        cutedsl.load(out, backend=sim)
    out2 = Gemm(CFG, sim).save(tmp_path / "g2")
    m = json.loads((out2 / "cutedsl.json").read_text())
    m["config"]["epilogue"] = "global"                  # the kernel would take a pointer D now
    (out2 / "cutedsl.json").write_text(json.dumps(m))
    with pytest.raises(CacheError, match=r"does not match what this cutedsl builds for its config"):
        cutedsl.load(out2, backend=sim)
    with pytest.raises(ArgumentError, match="only a Gemm built from a GemmConfig alone"):
        Gemm(GemmConfig(epilogue="global"), sim, epilogue=GlobalEpilogue).save(tmp_path / "x")
