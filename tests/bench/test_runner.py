"""The sweep's logic against fakes (no GPU): same inputs for cutedsl and the reference, input
rotation, warm-up, L2 flush, medians, TFLOP/s, ratio, geometric means, checks, errors; and the
output formats built from a sweep."""
import csv
import io
import json
import sys
import types

import numpy as np
import pytest

from cutedsl import GemmConfig
from cutedsl.bench import report, runner
from cutedsl.errors import ArgumentError

SHAPES = [(64, 48, 32), (96, 40, 16)]


class FakeLib:
    name = "fake"
    ref_name = "fake reference"
    device_resident = True
    times_reference = True
    check_max_macs = None

    def __init__(self):
        self.rng = np.random.default_rng(1)
        self.flushes = 0
        self.allocs = 0

    def randn(self, shape, dt):
        self.allocs += 1
        return self.rng.standard_normal(shape).astype(np.float32)

    def empty(self, shape, dt):
        return np.full(shape, np.nan, np.float32)

    def matmul(self, a, b, out):
        out[...] = a @ b
        return out

    def transpose(self, x):
        return x.T

    def max_rel_diff(self, d, ref):
        if not np.all(np.isfinite(d)):
            return float("inf")
        return float(np.max(np.abs(d - ref)) / np.max(np.abs(ref)))

    def flusher(self, nbytes):
        self.flush_bytes = nbytes

        def flush():
            self.flushes += 1
        return flush

    def synchronize(self):
        pass

    def release(self):
        pass

    def info(self):
        return {"array_library": "fake"}


class FakeGemm:
    """``prepare`` returns a launch that records which input set it used, writes a @ b (or a
    wrong value), and carries the time the fake timer reports for it."""

    def __init__(self, times, wrong=False, fail=False):
        self.times, self.wrong, self.fail = iter(times), wrong, fail
        self.used = []

    def prepare(self, a, b, out=None):
        if self.fail:
            raise ArgumentError("a: bad operand (fake)")

        def launch():
            self.used.append(id(a))
            out[...] = a @ b + (1.0 if self.wrong else 0.0)
        launch.ms = self.times
        return launch, lambda: out


class FakeTimer:
    kind = "fake"

    def __init__(self):
        self.calls = 0

    def time(self, fns, between=None):
        out = []
        for fn in fns:
            between()
            fn()
            out.append(next(fn.ms) if hasattr(fn, "ms") else 2.0)    # the reference: 2 ms
        self.calls += 1
        return out

    def close(self):
        pass


@pytest.fixture
def sweep(monkeypatch):
    monkeypatch.setattr(runner, "shapes_for", lambda name, backend: list(SHAPES))
    gemms = {}

    def make(cfg):
        return gemms[cfg]
    lib = FakeLib()
    s = runner.Sweep(types.SimpleNamespace(name="cuda"), lib, FakeTimer(), make, iters=21, warmup=4,
                     l2_bytes=20_000, max_sets=8)
    return s, gemms, lib


def test_sweep_times_medians_ratios_and_rotates_inputs(sweep):
    s, gemms, lib = sweep
    fast, slow = GemmConfig(stages=2), GemmConfig(tile=(128, 256, 64), stages=2)
    # 21 timed values per problem: median 1.0 ms (fast) and 4.0 ms (slow) despite outliers
    gemms[fast] = FakeGemm(([100.0] * 5 + [1.0] * 11 + [0.5] * 5) * 2)
    gemms[slow] = FakeGemm(([4.0] * 15 + [50.0] * 6) * 2)
    res = s.run_set("square", [fast, slow])
    rows = res["rows"]
    assert [(r["m"], r["n"], r["k"]) for r in rows] == [SHAPES[0]] * 2 + [SHAPES[1]] * 2
    for r in rows:
        flop = 2 * r["m"] * r["n"] * r["k"]
        assert r["ref_ms"] == 2.0 and r["ref_tflops"] == pytest.approx(flop / 2e-3 / 1e12)
        want = 1.0 if r["config"] == "multistage 128x128x64 s2 f16->f32" else 4.0
        assert r["ms"] == want and r["tflops"] == pytest.approx(flop / (want * 1e-3) / 1e12)
        assert r["ratio"] == pytest.approx(2.0 / want)
        assert r["check"] == "pass" and r["max_rel_diff"] < 1e-6
        assert r["iters"] == 21
    # 3x L2 = 60 kB; one input set of the first problem: f16 A and B, f32 D, f16 reference D
    per_set = (64 * 32 + 32 * 48) * 2 + 64 * 48 * (4 + 2)
    assert rows[0]["n_sets"] == -(-60_000 // per_set)
    # rotation: warm-up 4 then 21 timed launches round-robin over the sets
    n = rows[0]["n_sets"]
    seq = gemms[fast].used[:25]
    order = list(dict.fromkeys(seq))
    assert len(order) == n and seq == [order[i % n] for i in range(25)]
    # an L2 flush of 2x L2 before every timed launch (reference + 2 configs, 2 problems)
    assert lib.flush_bytes == 40_000 and lib.flushes == 3 * 21 * 2
    summ = res["summary"]["configs"]
    assert summ["multistage 128x128x64 s2 f16->f32"]["geomean_ratio"] == pytest.approx(2.0)
    assert summ["multistage 128x256x64 s2 f16->f32"]["geomean_ratio"] == pytest.approx(0.5)
    ref_g = res["summary"]["reference_geomean_tflops"]
    assert ref_g == pytest.approx(np.sqrt(np.prod([2 * m * n * k / 2e-3 / 1e12 for m, n, k in SHAPES])))


def test_wrong_results_and_errors_are_reported_not_timed_away(sweep):
    s, gemms, lib = sweep
    bad, broken = GemmConfig(stages=2), GemmConfig(stages=3)
    gemms[bad] = FakeGemm([1.0] * 100, wrong=True)
    gemms[broken] = FakeGemm([1.0] * 100, fail=True)
    res = s.run_set("paper", [bad, broken])
    by = {r["config"]: r for r in res["rows"][:2]}
    assert by["multistage 128x128x64 s2 f16->f32"]["check"] == "FAIL"
    err = by["multistage 128x128x64 s3 f16->f32"]
    assert err["check"] == "error" and err["error"] == "ArgumentError: a: bad operand (fake)"
    assert err["ms"] is None and err["ratio"] is None
    assert res["summary"]["configs"]["multistage 128x128x64 s3 f16->f32"]["failed_checks"] == 2
    assert res["summary"]["configs"]["multistage 128x128x64 s3 f16->f32"]["geomean_tflops"] is None


def test_emulator_sweep_claims_no_timings(monkeypatch):
    monkeypatch.setattr(runner, "shapes_for", lambda name, backend: [(40, 24, 16)])
    from cutedsl.bench.libs import HostLib
    from cutedsl.bench.timing import WallTimer
    cfg = GemmConfig(stages=2)
    g = FakeGemm([0.0] * 10)
    lib = HostLib()
    lib.empty = lambda shape, dt: np.full(shape, np.nan, np.float32)
    s = runner.Sweep(types.SimpleNamespace(name="sim"), lib, WallTimer(), lambda c: g, iters=2, warmup=1)
    row = s.run_set("square", [cfg])["rows"][0]
    assert row["ms"] is None and row["tflops"] is None and row["ratio"] is None
    assert row["wall_ms"] >= 0 and row["check"] == "pass" and row["n_sets"] == 1
    hdr = runner.header(types.SimpleNamespace(name="sim"), lib, WallTimer(), s)
    assert "none claimed" in hdr["timings"] and hdr["reference"].startswith("numpy")


def _result(sweep):
    s, gemms, lib = sweep
    cfg = GemmConfig(stages=2)
    gemms[cfg] = FakeGemm([1.0] * 200)
    hdr = {"date_utc": "2026-11-23T00:00:00+00:00", "backend": "cuda", "device": "Fake H100",
           "reference": "fake", "timer": "fake"}
    return {"header": hdr, "sets": [s.run_set("square", [cfg]), s.run_set("stages", [cfg])]}


def test_csv_json_and_text_outputs(sweep):
    res = _result(sweep)
    rows = list(csv.DictReader(io.StringIO(report.to_csv(res))))
    assert len(rows) == 4 and rows[0]["set"] == "square" and rows[2]["set"] == "stages"
    assert float(rows[0]["ms"]) == 1.0 and float(rows[0]["ratio"]) == pytest.approx(2.0)
    assert rows[0]["error"] == "" and rows[0]["check"] == "pass"
    back = json.loads(report.to_json(res))
    assert back["sets"][0]["rows"][0]["tflops"] == pytest.approx(res["sets"][0]["rows"][0]["tflops"])
    txt = report.text(res)
    assert "Fake H100" in txt and "== square" in txt and "== stages" in txt
    assert "geomean multistage 128x128x64 s2 f16->f32" in txt and "ratio 2.000" in txt


def test_plot_writes_png_and_degrades_without_matplotlib(sweep, tmp_path, monkeypatch):
    pytest.importorskip("matplotlib")
    res = _result(sweep)
    p = tmp_path / "b.png"
    assert report.plot(res, str(p)) is None
    assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    why = report.plot(res, str(tmp_path / "c.png"))
    assert why.startswith("no plot: matplotlib is not installed") and not (tmp_path / "c.png").exists()


def test_progress_falls_back_to_plain_lines(monkeypatch, capsys):
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    monkeypatch.setitem(sys.modules, "rich.progress", None)
    monkeypatch.setitem(sys.modules, "tqdm", None)
    with report.Progress(2) as bar:
        bar("one")
        bar("two")
    assert bar.kind == "plain" and bar.why == "neither rich nor tqdm is installed"
    err = capsys.readouterr().err
    assert "neither rich nor tqdm" in err and "[1/2] one" in err and "[2/2] two" in err


def test_progress_prefers_rich(monkeypatch, capsys):
    pytest.importorskip("rich")
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    with report.Progress(1) as bar:
        bar("x")
    assert bar.kind == "rich"


def test_progress_into_a_log_is_one_line_per_step(capsys):
    with report.Progress(2) as bar:            # stderr captured: not a terminal
        bar("square 2048x2048x2048 multistage")
    assert bar.kind == "plain" and bar.why == "stderr is not a terminal"
    assert capsys.readouterr().err == "[1/2] square 2048x2048x2048 multistage\n"


def test_run_problem_skips_configs_past_the_deadline(sweep, monkeypatch):
    """A config whose predicted end (now + the previous config's time) is past the deadline is
    not run: its row says skipped and why; past the deadline no inputs are even drawn."""
    s, gemms, lib = sweep
    clock = [1000.0]
    monkeypatch.setattr(runner.time, "time", lambda: clock[0])
    timer_time = s.timer.time

    def slow_timer(fns, between=None):          # every timed batch takes 5 s of the fake clock
        clock[0] += 5
        return timer_time(fns, between)
    monkeypatch.setattr(s.timer, "time", slow_timer)
    a, b, c = GemmConfig(stages=2), GemmConfig(stages=3), GemmConfig(stages=4)
    for cfg in (a, b, c):
        gemms[cfg] = FakeGemm([1.0] * 21)
    rows = s.run_problem("square", 64, 48, 32, [a, b, c], deadline=1015.0)
    # reference at 1000 -> 1005; a runs 1005 -> 1010; b predicted 1010 + 5 >= 1015: skipped, c too
    assert [r["check"] for r in rows] == ["pass", "skipped", "skipped"]
    assert rows[1]["error"] == "not run: the deadline was 5 s away" and rows[1]["ms"] is None
    assert rows[1]["config"] == "multistage 128x128x64 s3 f16->f32" and rows[1]["ratio"] is None
    allocs = lib.allocs
    late = s.run_problem("square", 64, 48, 32, [a], deadline=clock[0])
    assert [r["check"] for r in late] == ["skipped"] and lib.allocs == allocs
    assert runner.summarize(rows + late)["configs"]["multistage 128x128x64 s3 f16->f32"]["failed_checks"] == 0
