"""Measured tuning (issue 22): cutedsl.tune times candidates on the backend, keeps the fastest per
device in the kernel cache, and Gemm("auto") uses it. The emulator stands in for the GPU here;
its timings are replaced by fixed ones so the winner is known."""
import json

import numpy as np
import pytest

import cutedsl
from cutedsl import Gemm, GemmConfig
from cutedsl.compiler.cache import KernelCache
from cutedsl.device.tune import candidates, tuned_config
from cutedsl.errors import ArgumentError
from cutedsl.sim import SimBackend


class TimedSim(SimBackend):
    """The emulator, with each candidate's launches "taking" the next of ``times`` ms."""

    def __init__(self, times, name="sim"):
        super().__init__()
        self.times, self.name = list(times), name

    def time_launches(self, fn, iters):
        fn()                                   # really runs (the result is computed)
        t = self.times.pop(0)
        return [t] * iters


def test_tune_keeps_the_fastest_per_device(tmp_path):
    cache = KernelCache(tmp_path / "cache")
    cfgs = [GemmConfig(tile=(64, 64, 64), stages=2), GemmConfig(tile=(64, 128, 64), schedule="pingpong"),
            GemmConfig(tile=(128, 64, 64), schedule="cooperative", sm_count=2)]
    be = TimedSim([5.0, 2.0, 3.0])
    r = cutedsl.tune(150, 100, 70, backend=be, configs=cfgs, iters=2, warmup=1, cache=cache)
    assert r.config == cfgs[1] and r.ms == 2.0 and [ms for _, ms in r.table] == [2.0, 3.0, 5.0] and r.emulated
    assert "pingpong 64x128x64" in r.report().splitlines()[1]
    rec = json.loads((cache.root / "tuning.json").read_text())
    assert rec["format"] == 1 and list(rec["devices"]) == [r.device]
    # the same device finds it; another device does not
    assert tuned_config(150, 100, 70, backend=be, cache=cache) == cfgs[1]
    assert tuned_config(150, 100, 70, backend=TimedSim([], name="other"), cache=cache) is None
    assert tuned_config(150, 100, 71, backend=be, cache=cache) is None
    # Gemm("auto") runs the winner for that shape
    auto = Gemm("auto", be, cache=cache)
    a = np.random.default_rng(0).integers(-3, 4, (150, 70)).astype(np.float16)
    b = np.random.default_rng(1).integers(-3, 4, (70, 100)).astype(np.float16)
    d = auto(a, b)
    assert auto.last_config == cfgs[1] and np.array_equal(d, a.astype(np.float64) @ b.astype(np.float64))
    # the record is the cache's own: not a foreign path, removed by clear
    assert cache.info()["not_entries"] == []
    cache.clear()
    assert not (cache.root / "tuning.json").exists()


def test_candidates_follow_the_model_and_the_fixed_fields():
    cands = candidates(4096, 4096, 4096, "e4m3", sm_count=132, limit=6, out_dtype="bf16")
    assert 1 <= len(cands) <= 6 and all(c.tile[2] == 128 and c.out_dtype == "bf16" for c in cands)
    assert len({c for c in cands}) == len(cands)
    only = candidates(512, 512, 512, schedule="pingpong", tile=(64, 128, 64))
    assert only and all(c.schedule == "pingpong" and c.tile[:2] == (64, 128) for c in only)


def test_tune_errors(tmp_path):
    with pytest.raises(ArgumentError, match="tune: m must be a positive int, got 0"):
        cutedsl.tune(0, 8, 8, backend=SimBackend(), cache=KernelCache(tmp_path))
    with pytest.raises(ArgumentError, match="tune: iters must be a positive int"):
        cutedsl.tune(8, 8, 8, backend=SimBackend(), iters=0, cache=KernelCache(tmp_path))


def test_cli_tune(tmp_path, monkeypatch, capsys):
    from cutedsl.cli import main
    monkeypatch.setenv("CUTEDSL_CACHE_DIR", str(tmp_path))
    assert main(["tune", "--m", "70", "--n", "60", "--k", "64", "--backend", "sim", "--limit", "2", "--iters", "1",
                 "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["emulated"] and len(rep["table"]) == 2 and rep["best"] == rep["table"][0][0]
    assert (tmp_path / "tuning.json").is_file()


def test_candidates_add_stream_k_where_waves_leave_sms_idle():
    """1536 x 1536 x 16384 on 132 SMs: 72 tiles of 128 x 256 (55% of one wave) -- each
    persistent candidate is followed by its stream-K variant; 4096^3 fills its waves: none."""
    cands = candidates(1536, 1536, 16384, sm_count=132, limit=4)
    assert [(c.schedule, c.cluster, c.decomposition) for c in cands] == [
        ("cooperative", (1, 1), "data-parallel"), ("cooperative", (1, 1), "stream-k"),
        ("cooperative", (2, 1), "data-parallel"), ("cooperative", (2, 1), "stream-k")]
    assert all(c.decomposition == "data-parallel" for c in candidates(4096, 4096, 4096, sm_count=132, limit=8))
