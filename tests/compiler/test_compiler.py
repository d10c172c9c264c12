"""Compiler: PTX from the gpu.binary object, ptxas/nvdisasm reports, abort containment, dumps,
artifact persistence and the on-disk cache."""
import os

import pytest

from cutedsl.compiler import CompiledKernel, KernelCache, compile_kernel
from cutedsl.compiler.lowering import lower_to_ptx
from cutedsl.compiler.toolchain import sass_histogram, tool_path
from cutedsl.errors import CacheError, CompileError, DumpError
from cutedsl.ir import If, KernelBuilder, Param, block_idx, thread_idx
from cutedsl.ir.gmem import GlobalPtr
from cutedsl.kernel import SaxpyKernel


def saxpy_builder(name="saxpy_t"):
    kb = KernelBuilder(name, [Param("x", "ptr"), Param("y", "ptr"), Param("n", "i32"), Param("alpha", "f32")])
    with kb.build() as a:
        i = block_idx() * 128 + thread_idx()
        x, y = GlobalPtr(a.x, "f32"), GlobalPtr(a.y, "f32")
        with If(i < a.n.unsigned()):
            y.store(i, a.alpha * x.load(i) + y.load(i))
    return kb


def test_tools_come_from_site_packages():
    for t in ("ptxas", "nvdisasm"):
        p = tool_path(t)
        assert "site-packages" in p and os.access(p, os.X_OK)


def test_compile_report_and_ptx():
    k = compile_kernel(saxpy_builder())
    assert k.ptx.startswith("//") and ".target sm_90a" in k.ptx and ".version 8.3" in k.ptx
    assert ".visible .entry saxpy_t(" in k.ptx and ".reqntid 128, 1, 1" in k.ptx
    assert k.cubin[:4] == b"\x7fELF"
    r = k.resources
    assert 0 < r.registers <= 32 and r.spill_stores == r.spill_loads == 0
    assert r.sass["LDG"] == 2 and r.sass["STG"] == 1 and r.sass["EXIT"] >= 1
    assert [p.kind for p in k.params] == ["ptr", "ptr", "i32", "f32"]


def test_tensormap_params_become_byval_grid_constants():
    from cutedsl.kernel import TmaSaxpyKernel
    k = TmaSaxpyKernel().compile(use_cache=False)
    assert ".param .align 64 .b8 saxpy_tma_param_0[128]" in k.ptx
    assert "cvta.param.u64" in k.ptx
    assert k.resources.sass["UTMALDG"] == 2 and k.resources.sass["UTMASTG"] == 1


def test_mlir_abort_is_contained(tmp_path):
    """The child dies quietly: no "Fatal Python error" from a faulthandler the parent enabled."""
    import faulthandler
    import sys
    kb = saxpy_builder("boom")
    from mlir import ir
    with kb.context:
        f = kb.module.body.operations[0].regions[0].blocks[0].operations[0]
        # known_block_size + nvvm.maxntid makes MLIR assert (process abort) during lowering
        f.attributes["known_block_size"] = ir.Attribute.parse("array<i32: 128, 1, 1>")
        f.attributes["nvvm.maxntid"] = ir.Attribute.parse("array<i32: 128, 1, 1>")
    report = tmp_path / "faulthandler.txt"
    was_enabled = faulthandler.is_enabled()
    with open(report, "w") as f:
        faulthandler.enable(file=f)
        try:
            with pytest.raises(CompileError, match="MLIR aborted.*SIGABRT") as e:
                lower_to_ptx(kb.module, [])
        finally:
            faulthandler.enable(file=sys.__stderr__) if was_enabled else faulthandler.disable()
    assert "DictionaryAttr element names must be unique" in str(e.value)
    assert report.read_text() == "" and "Fatal Python error" not in str(e.value)


def test_ptxas_failure_is_reported():
    from cutedsl.compiler.toolchain import ptxas
    with pytest.raises(CompileError, match="ptxas failed"):
        ptxas(".version 8.3\n.target sm_90a\n.address_size 64\n.visible .entry k() { bogus.op; }\n")


def test_dumps(tmp_path):
    compile_kernel(saxpy_builder("dumped"), dump_dir=tmp_path)
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["dumped.after.mlir", "dumped.before.mlir", "dumped.ptx", "dumped.ptxas.log", "dumped.sass"]
    assert "gpu.func @dumped" in (tmp_path / "dumped.before.mlir").read_text()
    assert "llvm.func @dumped" in (tmp_path / "dumped.after.mlir").read_text()
    assert "STG" in (tmp_path / "dumped.sass").read_text()


def test_dump_dir_that_cannot_be_written(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(DumpError, match="cannot write dumps"):
        compile_kernel(saxpy_builder(), dump_dir=blocker / "sub")
    monkeypatch.setenv("CUTEDSL_DUMP_DIR", str(blocker / "sub"))
    with pytest.raises(DumpError):
        compile_kernel(saxpy_builder())


def test_artifact_roundtrip_and_corruption(tmp_path):
    k = compile_kernel(saxpy_builder())
    k.save(tmp_path / "k")
    k2 = CompiledKernel.load(tmp_path / "k")
    assert k2 == k
    (tmp_path / "k" / "kernel.cubin").write_bytes(b"garbage")
    with pytest.raises(CacheError, match="checksum mismatch"):
        CompiledKernel.load(tmp_path / "k")
    (tmp_path / "k" / "kernel.json").write_text("{not json")
    with pytest.raises(CacheError, match="cannot read"):
        CompiledKernel.load(tmp_path / "k")


def test_cache_hit_and_recovery_from_corrupt_entry(tmp_path):
    cache = KernelCache(tmp_path)
    kern = SaxpyKernel(block=64)
    k1 = kern.compile(cache=cache)
    assert kern.last_cache_hit is False
    k2 = kern.compile(cache=cache)
    assert kern.last_cache_hit is True and k2.cubin == k1.cubin and k2.key == k1.key
    entry = next(p for p in tmp_path.rglob("kernel.ptx"))
    entry.write_text("corrupted")
    with pytest.warns(UserWarning, match="corrupt cache entry"):
        k3 = kern.compile(cache=cache)
    assert kern.last_cache_hit is False and k3.ptx == k1.ptx


def test_cached_load_is_fast(tmp_path):
    import time
    cache = KernelCache(tmp_path)
    SaxpyKernel(block=96).compile(cache=cache)
    t = time.perf_counter()
    SaxpyKernel(block=96).compile(cache=cache)
    assert time.perf_counter() - t < 0.05


def test_sass_histogram_parser():
    text = """
        /*0040*/                   HGMMA.64x128x16.F32 R24, gdesc[UR4].tnspB, RZ, !UPT ;
        /*0050*/              @!P0 BRA `(.L_x_1) ;
        /*0060*/                   UTMALDG.2D [UR8], [UR4] ;
    """
    assert sass_histogram(text) == {"BRA": 1, "HGMMA": 1, "UTMALDG": 1}
    assert sass_histogram(text, detailed=True)["HGMMA.64x128x16.F32"] == 1


def test_compile_does_not_wait_for_the_sass_histogram(monkeypatch, tmp_path):
    """Issue 22: nvdisasm (~0.3 s of a ~0.6 s cold compile) runs when the SASS histogram is
    first read, not while compiling; a cached entry keeps it unknown until read."""
    from cutedsl import GemmConfig
    from cutedsl.compiler import KernelCache, toolchain
    calls = []
    real = toolchain.sass
    monkeypatch.setattr(toolchain, "sass", lambda cubin: calls.append(1) or real(cubin))
    k = GemmConfig(tile=(64, 64, 64), stages=2).kernel().compile(cache=KernelCache(tmp_path))
    assert calls == [] and k._resources.sass is None and k.resources.registers > 0
    assert k.resources.sass["HGMMA"] >= 1 and calls == [1]
    assert k.resources.sass["HGMMA"] >= 1 and calls == [1]          # once per object
    again = GemmConfig(tile=(64, 64, 64), stages=2).kernel().compile(cache=KernelCache(tmp_path))
    assert again._resources.sass is None and again.resources.sass == k.resources.sass
