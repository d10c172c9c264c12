"""Ahead-of-time export (issue 22): gemm.save(path) / cutedsl.load(path) runs the saved kernel
with no MLIR (here on the emulator, in a process where importing MLIR fails)."""
import hashlib
import json
import subprocess
import sys

import pytest

import cutedsl
from cutedsl import Gemm, GemmConfig
from cutedsl.collective import GlobalEpilogue
from cutedsl.errors import ArgumentError, ArgumentTypeError, CacheError

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
    with pytest.raises(CacheError, match=r"cutedsl.json: checksum mismatch"):
        cutedsl.load(out2, backend=sim)
    _reseal(out2 / "cutedsl.json", m)
    with pytest.raises(CacheError, match=r"does not match what this cutedsl builds for its config.*"
                                         r"parameters: saved kernel 'a:tensormap, b:tensormap, d:tensormap"):
        cutedsl.load(out2, backend=sim)
    with pytest.raises(ArgumentError, match="only a Gemm built from a GemmConfig alone"):
        Gemm(GemmConfig(epilogue="global"), sim, epilogue=GlobalEpilogue).save(tmp_path / "x")


def _reseal(manifest_path, m):
    """Write manifest ``m`` with a recomputed checksum (SHA-256 of its canonical JSON without
    ``sha256``), as someone editing it on purpose would: load must still check the fields."""
    m = {k: v for k, v in m.items() if k != "sha256"}
    m["sha256"] = hashlib.sha256(json.dumps(m, sort_keys=True).encode()).hexdigest()
    manifest_path.write_text(json.dumps(m))


MULTI = GemmConfig(tile=(64, 64, 64), schedule="multistage")


@pytest.mark.parametrize("field, value, named", [
    ("tile", [128, 128, 64], r"tile: saved kernel \[64, 64, 64\], config gives \[128, 128, 64\]"),
    ("dtype", "bf16", r"dtype: saved kernel 'f16', config gives 'bf16'"),
    ("out_dtype", "bf16", r"out_dtype: saved kernel 'f32', config gives 'bf16'"),
    ("stages", 3, r"stages: saved kernel \d+, config gives 3"),
])
def test_edited_manifest_is_refused_naming_the_field(tmp_path, field, value, named):
    """Issue 40: an edited manifest ran a 64x64 kernel as 128x128 (wrong results) or an f16
    kernel on bf16 bits. The manifest is checksummed; resealed, the field is compared with what
    the saved kernel was built for."""
    out = Gemm(MULTI, "sim").save(tmp_path / "g")
    m = json.loads((out / "cutedsl.json").read_text())
    m["config"][field] = value
    (out / "cutedsl.json").write_text(json.dumps(m))
    with pytest.raises(CacheError, match=r"cutedsl.json: checksum mismatch \(the manifest was edited"):
        cutedsl.load(out, backend="sim")
    _reseal(out / "cutedsl.json", m)
    with pytest.raises(CacheError, match=named):
        cutedsl.load(out, backend="sim")


def test_kernel_of_another_export_is_refused(tmp_path):
    """Each part is intact, but the kernel is not the one the manifest was saved with."""
    a = Gemm(MULTI, "sim").save(tmp_path / "a")
    b = Gemm(CFG, "sim").save(tmp_path / "b")
    for f in ("kernel.json", "kernel.ptx", "kernel.cubin"):
        (a / "kernel" / f).write_bytes((b / "kernel" / f).read_bytes())
    with pytest.raises(CacheError, match=r"kernel/kernel.json is not the kernel cutedsl.json was saved with"):
        cutedsl.load(a, backend="sim")


def test_save_never_overwrites_what_it_did_not_write(tmp_path):
    """Issue 40: save into a user's folder overwrote its cutedsl.json; a file path gave
    FileExistsError / NotADirectoryError."""
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "cutedsl.json").write_text('{"my": "settings"}')
    with pytest.raises(ArgumentError, match=r"'.*mine' is not empty and holds no cutedsl export"):
        Gemm(MULTI, "sim").save(mine)
    assert (mine / "cutedsl.json").read_text() == '{"my": "settings"}'
    assert sorted(p.name for p in mine.iterdir()) == ["cutedsl.json"]
    f = tmp_path / "file"
    f.write_text("keep")
    for target in (f, f / "sub"):
        with pytest.raises(ArgumentError, match=r"exists and is not a folder|not a directory|is not a folder"):
            Gemm(MULTI, "sim").save(target)
    assert f.read_text() == "keep"
    empty = tmp_path / "empty"
    empty.mkdir()
    assert Gemm(MULTI, "sim").save(empty) == empty                  # an empty folder is fine
    assert Gemm(CFG, "sim").save(empty) == empty                    # so is replacing our own export
    assert cutedsl.load(empty, backend="sim").config == CFG
    (empty / "kernel" / "notes.txt").write_text("mine")
    with pytest.raises(ArgumentError, match=r"holds files this export did not write \(notes.txt\)"):
        Gemm(MULTI, "sim").save(empty)


@pytest.mark.parametrize("path", [None, 3, ["dir"]])
def test_path_that_is_no_path(tmp_path, path):
    with pytest.raises(ArgumentTypeError, match=r"cutedsl.load\(\): path must be a directory path"):
        cutedsl.load(path)
    with pytest.raises(ArgumentTypeError, match=r"save\(\): path must be a directory path"):
        Gemm(MULTI, "sim").save(path)
