"""Kernel cache robustness: concurrent writers, malformed/tampered metadata, unwritable
directories, no leftovers after a kill, and the switches that turn caching off."""
import errno
import json
import multiprocessing
import os
import subprocess
import sys
import warnings

import pytest

from cutedsl.compiler import CompiledKernel, KernelCache, TensorMapSpec
from cutedsl.compiler import cache as cache_mod
from cutedsl.errors import CacheError
from cutedsl.kernel import SaxpyKernel

CONFIG = {"kernel": "fake", "n": 1}


def fake_kernel(tag="a") -> CompiledKernel:
    """A complete artifact without compiling anything (the cache only stores bytes)."""
    return CompiledKernel(entry="fake", ptx=f"// ptx {tag}\n", cubin=b"\x7fELF" + tag.encode() * 64,
                          params=[], block=(128, 1, 1), dynamic_smem=1024,
                          tensor_maps=[TensorMapSpec("a", "f16", (128, 64), swizzle=128)])


def _hammer(root, barrier, rounds, q):
    """One process: publish and read the same entry ``rounds`` times; report any failure."""
    try:
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            c = KernelCache(root)
            barrier.wait()
            for _ in range(rounds):
                c.put(CONFIG, fake_kernel())
                k = c.get(CONFIG)
                assert k is not None and k.ptx == "// ptx a\n"
        q.put(("ok", [str(x.message) for x in w]))
    except BaseException as e:   # noqa: BLE001 - reported to the parent
        q.put(("error", f"{type(e).__name__}: {e}"))


def test_concurrent_writers_of_one_entry(tmp_path):
    ctx = multiprocessing.get_context("fork")
    n = 4
    barrier, q = ctx.Barrier(n), ctx.Queue()
    procs = [ctx.Process(target=_hammer, args=(tmp_path, barrier, 40, q)) for _ in range(n)]
    for p in procs:
        p.start()
    results = [q.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(timeout=60)
    assert [r for r in results if r[0] != "ok"] == []
    assert [m for r in results for m in r[1]] == [], "no (false) corrupt-entry warnings"
    leftovers = [p.name for p in tmp_path.rglob(".cutedsl-*") if p.is_dir()]
    assert leftovers == [], "no temp/trash directories left behind"
    assert KernelCache(tmp_path).get(CONFIG).ptx == "// ptx a\n"


def _build_once(root, barrier, log, q):
    import time

    def build():
        with open(log, "a") as f:
            f.write("built\n")
        time.sleep(0.3)                 # long enough for the others to ask meanwhile
        return fake_kernel("b")
    try:
        barrier.wait()
        k, hit = KernelCache(root).get_or_build(CONFIG, build)
        q.put((k.ptx, hit))
    except BaseException as e:   # noqa: BLE001 - reported to the parent
        q.put((f"{type(e).__name__}: {e}", None))


def test_concurrent_misses_build_once(tmp_path):
    ctx = multiprocessing.get_context("fork")
    barrier, q, log = ctx.Barrier(4), ctx.Queue(), tmp_path / "log"
    procs = [ctx.Process(target=_build_once, args=(tmp_path / "c", barrier, log, q)) for _ in range(4)]
    for p in procs:
        p.start()
    results = sorted(q.get(timeout=120) for _ in procs)
    for p in procs:
        p.join(timeout=60)
    assert results == [("// ptx b\n", False)] + [("// ptx b\n", True)] * 3
    assert log.read_text() == "built\n"


def test_failed_build_leaves_no_entry_directory(tmp_path):
    def build():
        raise RuntimeError("define failed")
    with pytest.raises(RuntimeError, match="define failed"):
        KernelCache(tmp_path).get_or_build(CONFIG, build)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.filterwarnings("error")     # a (false) corrupt-entry warning fails the thread
def test_concurrent_writer_threads(tmp_path):
    from concurrent.futures import ThreadPoolExecutor

    def work(i):
        c = KernelCache(tmp_path)
        for _ in range(30):
            c.put(CONFIG, fake_kernel())
            assert c.get(CONFIG).ptx == "// ptx a\n"
    with ThreadPoolExecutor(4) as ex:
        list(ex.map(work, range(4)))
    assert [p.name for p in tmp_path.rglob(".cutedsl-*")] == []


def test_writer_keeps_a_valid_entry_and_replaces_a_broken_one(tmp_path):
    c = KernelCache(tmp_path)
    c.put(CONFIG, fake_kernel("a"))
    c.put(CONFIG, fake_kernel("b"))                 # a valid entry is there: the new copy is dropped
    assert c.get(CONFIG).ptx == "// ptx a\n"
    entry = next(tmp_path.rglob("kernel.json")).parent
    (entry / "kernel.json").write_text("[]")
    c.put(CONFIG, fake_kernel("b"))                 # a broken one is replaced
    assert c.get(CONFIG).ptx == "// ptx b\n"
    assert sorted(p.name for p in entry.parent.iterdir()) == [".lock", entry.name]


def _entry_json(tmp_path):
    return next(tmp_path.rglob("kernel.json"))


def _edit(meta_path, fn):
    meta = json.loads(meta_path.read_text())
    fn(meta)
    meta_path.write_text(json.dumps(meta))


@pytest.mark.parametrize("text", ["[]", "null", "42", '"garbage"', "{not json", ""])
def test_malformed_metadata_is_discarded_and_rebuilt(tmp_path, text):
    c = KernelCache(tmp_path)
    c.put(CONFIG, fake_kernel("a"))
    _entry_json(tmp_path).write_text(text)
    with pytest.warns(UserWarning, match="discarding corrupt cache entry"):
        k, hit = c.get_or_build(CONFIG, lambda: fake_kernel("b"))
    assert not hit and k.ptx == "// ptx b\n"
    assert c.get_or_build(CONFIG, lambda: fake_kernel("c"))[0].ptx == "// ptx b\n"   # rebuilt entry is valid


@pytest.mark.parametrize("field,edit", [
    ("box", lambda m: m["tensor_maps"][0].update(box=[64, 64])),
    ("swizzle", lambda m: m["tensor_maps"][0].update(swizzle=64)),
    ("smem", lambda m: m.update(dynamic_smem=4096)),
    ("block", lambda m: m.update(block=[256, 1, 1])),
])
def test_tampered_metadata_is_detected(tmp_path, field, edit):
    c = KernelCache(tmp_path)
    c.put(CONFIG, fake_kernel("a"))
    _edit(_entry_json(tmp_path), edit)
    with pytest.raises(CacheError, match="checksum mismatch"):
        CompiledKernel.load(_entry_json(tmp_path).parent)
    with pytest.warns(UserWarning, match="corrupt or edited"):
        k, hit = c.get_or_build(CONFIG, fake_kernel)
    assert not hit and k.dynamic_smem == 1024 and k.tensor_maps[0].box == (128, 64)


def test_corrupt_entry_without_toolchain_is_a_clear_error(tmp_path, monkeypatch):
    c = KernelCache(tmp_path)
    c.put(CONFIG, fake_kernel("a"))
    _edit(_entry_json(tmp_path), lambda m: m.update(dynamic_smem=0))
    monkeypatch.setattr(cache_mod, "toolchain_hash", lambda: None)

    def build():
        raise AssertionError("no toolchain: must not build")
    with pytest.warns(UserWarning, match="discarding corrupt"), \
            pytest.raises(CacheError, match=r"not in the cache .*corrupt entry discarded.*no MLIR toolchain"):
        c.get_or_build(CONFIG, build)


def _count_builds():
    n = []

    def build():
        n.append(1)
        return fake_kernel(str(len(n)))
    return n, build


def test_cache_dir_under_a_regular_file_falls_back_with_one_warning(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    c = KernelCache(blocker / "cache")
    n, build = _count_builds()
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        assert c.get_or_build(CONFIG, build)[1] is False
        assert c.get_or_build({"kernel": "other"}, build)[1] is False
        k, hit = KernelCache(blocker / "cache").get_or_build(CONFIG, build)   # kept in memory
    assert hit and k.ptx == "// ptx 1\n" and len(n) == 2
    msgs = [str(x.message) for x in w]
    assert len(msgs) == 1 and "cannot be written" in msgs[0] and "kept in memory" in msgs[0], msgs


def test_read_only_cache_dir_falls_back_with_one_warning(tmp_path, monkeypatch):
    if os.geteuid() == 0:   # root writes anywhere: simulate the read-only mount's EROFS instead
        def ro(*a, **k):
            raise OSError(errno.EROFS, "Read-only file system")
        monkeypatch.setattr(cache_mod.tempfile, "mkdtemp", ro)
    else:
        os.chmod(tmp_path, 0o555)
    c = KernelCache(tmp_path / "ro")
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        for cfg in (CONFIG, {"kernel": "x"}, CONFIG):
            c.get_or_build(cfg, fake_kernel)
    assert len(w) == 1 and "cannot be written" in str(w[0].message)


def test_unwritable_cache_end_to_end_no_traceback(tmp_path):
    """A real compile + emulator run with CUTEDSL_CACHE_DIR under a file: one warning, right result."""
    blocker = tmp_path / "file"
    blocker.write_text("x")
    code = ("import numpy as np\nfrom cutedsl.device.saxpy import saxpy\n"
            "x = np.arange(300, dtype=np.float32); y = np.ones(300, np.float32)\n"
            "for _ in range(2): assert np.array_equal(saxpy(2.0, x, y, backend='sim'), 2 * x + 1)\n"
            "print('ok')")
    env = {**os.environ, "CUTEDSL_CACHE_DIR": str(blocker / "cache")}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr
    assert "Traceback" not in r.stderr and r.stderr.count("cannot be written") == 1, r.stderr


_KILL_IN_PTXAS = """
import os, signal, subprocess, sys
from cutedsl.compiler import toolchain
real = subprocess.run
def run(cmd, *a, **k):
    if "ptxas" in str(cmd[0]) or "nvdisasm" in str(cmd[0]):
        os.kill(os.getpid(), signal.SIG{sig})   # killed while the tool's scratch files exist
    return real(cmd, *a, **k)
toolchain.subprocess.run = run
toolchain.{fn}
"""


@pytest.mark.parametrize("sig", ["KILL", "TERM"])
@pytest.mark.parametrize("fn", ["ptxas('.version 8.3\\n.target sm_90a\\n')", "sass(b'x')"])
def test_no_tool_scratch_files_left_after_a_kill(tmp_path, sig, fn):
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = {**os.environ, "TMPDIR": str(tmp)}
    r = subprocess.run([sys.executable, "-c", _KILL_IN_PTXAS.format(sig=sig, fn=fn)], env=env,
                       capture_output=True, text=True)
    assert r.returncode < 0, r.stderr          # it was killed
    assert list(tmp.iterdir()) == []


def test_cache_off_by_argument_and_environment(tmp_path, monkeypatch):
    c = KernelCache(tmp_path)
    k = SaxpyKernel(block=32)
    k.compile(cache=False)
    assert k.last_cache_hit is False
    monkeypatch.setenv("CUTEDSL_CACHE", "off")
    k.compile(cache=c)
    k.compile(cache=c)
    assert k.last_cache_hit is False and list(tmp_path.iterdir()) == []
    monkeypatch.setenv("CUTEDSL_CACHE", "on")
    k.compile(cache=c)
    k.compile(cache=c)
    assert k.last_cache_hit is True


def test_cache_switch_value_not_understood_warns_once(monkeypatch):
    from cutedsl.compiler import cache as C
    monkeypatch.setattr(C, "_WARNED_SWITCH", set())
    monkeypatch.setenv("CUTEDSL_CACHE", "maybe")
    with pytest.warns(UserWarning, match=r"^CUTEDSL_CACHE='maybe' is not understood \(accepted: on, off, 1, 0, "
                                         r"true, false, yes, no\); caching stays on$"):
        assert C.caching_enabled() is True
    with warnings.catch_warnings():
        warnings.simplefilter("error")              # once per value: the second read is silent
        assert C.caching_enabled() is True
        for v, on in (("OFF", False), ("0", False), ("false", False), ("True", True), ("1", True)):
            monkeypatch.setenv("CUTEDSL_CACHE", v)
            assert C.caching_enabled() is on


def test_gemm_cache_false_writes_nothing(tmp_path, monkeypatch):
    from cutedsl import Gemm, GemmConfig
    monkeypatch.setenv("CUTEDSL_CACHE_DIR", str(tmp_path))
    g = Gemm(GemmConfig(tile=(64, 64, 64), schedule="single_tile", epilogue="global"), "none", cache=False)
    assert g.compiled.resources.sass["HGMMA"] >= 1
    assert g.kernel.last_cache_hit is False and list(tmp_path.iterdir()) == []


def test_info_and_clear(tmp_path):
    c = KernelCache(tmp_path)
    c.put(CONFIG, fake_kernel("a"))
    c.get_or_build({"kernel": "other"}, lambda: fake_kernel("b"))
    info = c.info()
    assert info["root"] == str(tmp_path) and info["entries"] == 2 and info["bytes"] > 2 * 256
    assert "MRO" in info["key_covers"] and len(info["library_hash"]) == 16
    assert {e["kernel"] for e in info["list"]} == {"fake"}
    assert c.clear().removed == 2 and c.info()["entries"] == 0 and list(tmp_path.iterdir()) == []


def test_cli_cache_info_and_clear(tmp_path):
    env = {**os.environ, "CUTEDSL_CACHE_DIR": str(tmp_path)}
    KernelCache(tmp_path).put(CONFIG, fake_kernel("a"))
    run = lambda *a: subprocess.run([sys.executable, "-m", "cutedsl", "cache", *a], env=env,  # noqa: E731
                                    capture_output=True, text=True)
    r = run("info")
    assert r.returncode == 0, r.stderr
    assert str(tmp_path) in r.stdout and "entries: 1" in r.stdout and "key covers" in r.stdout
    r = run("clear")
    assert r.returncode == 0 and "removed 1" in r.stdout, r.stderr
    assert "entries: 0" in run("info").stdout
    (tmp_path / "file").write_text("")
    env["CUTEDSL_CACHE_DIR"] = str(tmp_path / "file" / "cache")          # a path under a regular file
    assert run("info").stdout.splitlines()[0] == (f"cache: {tmp_path}/file/cache  (cannot be written: "
                                                  f"{tmp_path}/file is not a directory; kernels are kept "
                                                  "in memory per process)")
