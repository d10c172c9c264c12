"""``python -m cutedsl bench`` on the CUDA path end to end, without a GPU: the real
``CudaBackend`` and ``Gemm`` (tensor-map encoding, parameter packing, launch) over a null
driver that succeeds at everything and reports 1 ms per event pair."""
import json
import types

import pytest

from cutedsl import cli
from cutedsl.bench import libs, overhead
from cutedsl.runtime import arrays
from cutedsl.dtypes import dtype as _dtype


class NullDeviceLib:
    """Device arrays at fake, 256-byte-aligned addresses; the reference does nothing."""
    name = "null"
    ref_name = "null reference"
    device_resident = True
    times_reference = True
    check_max_macs = None

    def __init__(self, backend):
        self.be, self.next, self.refs = backend, 1 << 40, 0

    def _arr(self, shape, dt):
        d = _dtype(dt)
        a = arrays.DeviceArray(self.next, shape, (shape[1] * d.nbytes, d.nbytes), d, self.be)
        self.next += -(-shape[0] * shape[1] * d.nbytes // 256) * 256
        return a

    randn = empty = _arr

    def matmul(self, a, b, out):
        self.refs += 1

    def transpose(self, x):
        return x.view(shape=x.shape[::-1], strides=x.strides[::-1])

    def max_rel_diff(self, d, ref):
        return 0.0

    def flusher(self, nbytes):
        self.flush_bytes = nbytes
        return lambda: None

    def synchronize(self):
        pass

    def release(self):
        pass

    def info(self):
        return {"array_library": "null"}


def test_bench_cli_on_the_cuda_path(monkeypatch, tmp_path, capsys):
    be, drv = overhead.null_cuda_backend(monkeypatch.setattr)
    be.name = "cuda"
    lib = NullDeviceLib(be)
    monkeypatch.setattr("cutedsl.runtime.selection.get_backend", lambda name, arch=None: be)
    monkeypatch.setattr(libs, "pick", lambda backend, want, seed: (lib, ""))
    monkeypatch.setattr("cutedsl.bench.runner.nvidia_smi", lambda: {"clocks.sm": "1980 MHz"})
    slow = []
    monkeypatch.setattr(be, "launch", lambda *a, **k: slow.append(a))
    out = tmp_path / "r.json"
    rc = cli.main(["bench", "--set", "paper", "--schedule", "multistage", "--tile", "128x256x64",
                   "--iters", "20", "--warmup", "2", "--json", str(out), "--no-progress"])
    assert rc == 0
    res = json.loads(out.read_text())
    h = res["header"]
    assert h["device"] == "Null GPU (no driver)" and h["driver_version"] == 13000 and h["sm_count"] == 132
    assert h["timer"] == "cuda-events" and h["l2_flush_bytes"] == 100 * 1024 * 1024
    assert h["nvidia_smi"] == {"clocks.sm": "1980 MHz"} and "timings" not in h
    rows = res["sets"][0]["rows"]
    assert [r["k"] for r in rows] == [1024, 2048, 4096, 8192, 16384] and all(r["m"] == 7296 for r in rows)
    for r in rows:
        assert r["ms"] == 1.0 and r["ref_ms"] == 1.0 and r["ratio"] == 1.0
        assert r["tflops"] == pytest.approx(2 * 7296 * 256 * r["k"] / 1e-3 / 1e12)
    sets = sum(r["n_sets"] for r in rows)
    # 2 warm-up + 20 timed launches per point (rotating over n_sets input sets); each timed one
    # bracketed by two event records
    assert drv.calls["cuLaunchKernel"] == 22 * len(rows) and max(r["n_sets"] for r in rows) > 1
    assert slow == []          # every launch went through a prebuilt launcher, not CudaBackend.launch
    assert drv.calls["cuEventRecord"] == 2 * 20 * 2 * len(rows)          # cutedsl + reference
    assert drv.calls["cuTensorMapEncodeTiled"] == 3 * sets                 # A, B, D per prepared input set
    assert lib.refs == 22 * len(rows)
    assert "geomean multistage 128x256x64" in capsys.readouterr().out


def test_iters_below_20_are_refused_on_a_gpu(monkeypatch, capsys):
    monkeypatch.setattr("cutedsl.runtime.selection.get_backend", lambda name, arch=None: types.SimpleNamespace(name="cuda"))
    assert cli.main(["bench", "--iters", "10"]) == 2
    assert "argument --iters: a GPU run takes the median of at least 20 launches, got 10" in capsys.readouterr().err


def test_launch_caches_use_the_variant_kernel_not_the_config_s(monkeypatch):
    """Found on an H100 (2026-11-28): a call whose operands ask for a layout variant (here
    ``raster="auto"`` on a problem with more tile columns than rows: raster N) ran the variant,
    but ``Gemm.__call__``'s launch cache and the bench's prebuilt launcher took block / cluster /
    smem from ``gemm.compiled`` -- the config's own kernel, compiled for nothing, and on a GPU
    machine fed by a bundle a ``CacheError`` (the bundle holds only the kernels calls run)."""
    from cutedsl import Gemm, GemmConfig
    from cutedsl.bench.runner import prebuilt_launcher
    from cutedsl.errors import CacheError
    be, drv = overhead.null_cuda_backend(monkeypatch.setattr)
    cfg = GemmConfig(dtype="bf16", out_dtype="bf16", tile=(64, 64, 64), schedule="pingpong")
    g = Gemm(cfg, be)

    def not_in_bundle(**_kw):
        raise CacheError("the config's own kernel is not in the bundle")
    monkeypatch.setattr(g.kernel, "compile", not_in_bundle)
    m, n, k = 64, 648, 200                       # 1 x 11 tiles: raster N
    lib = NullDeviceLib(be)
    a, b, d = lib.randn((m, k), "bf16"), lib.randn((k, n), "bf16"), lib.empty((m, n), "bf16")
    assert g(a, b, out=d) is d                   # the launch cache's path (device arrays, CUDA)
    launch, _ = g.prepare(a, b, out=d)
    assert launch.compiled is g.variant(raster="N").compiled
    assert callable(prebuilt_launcher(be, g, launch))
    assert g._compiled is None                   # the config's own kernel was never needed
