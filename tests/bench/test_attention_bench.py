"""The lease's attention step (cutedsl.bench.attention_bench, issue 43 step 3): its problems, FLOPs
counted as FlashAttention's benchmarks count them, the ratios to both SDPA backends, the deadline,
the summary and the table. The emulator run of the real kernel is tests/bench/test_bundle.py's
dry run; the SDPA timing machinery is tests/bench/test_attention_set.py's."""
import time

import pytest

from cutedsl.bench import attention_bench as ab
from cutedsl.bench.libs import HostLib
from cutedsl.sim import SimBackend


def test_lease_problems_are_fa3_shapes_at_4k_and_16k():
    assert ab.LEASE_SHAPES == ((4, 4096, 2048, False), (1, 16384, 2048, False), (4, 4096, 2048, True),
                               (1, 16384, 2048, True))
    assert ab.HEAD_DIM == 128


def test_flash_flops_halve_for_causal():
    assert ab.flash_flops(4, 16, 4096, 4096, 128, False) == 4 * 4 * 16 * 4096 * 4096 * 128
    assert ab.flash_flops(4, 16, 4096, 4096, 128, True) == 2 * 4 * 16 * 4096 * 4096 * 128


def _row(causal, ms=2.0, ref_ms=1.0, cudnn_ms=4.0):
    return {"batch": 1, "heads": 16, "seqlen": 16384, "head_dim": 128, "causal": causal, "flops": 123, "ms": ms,
            "tflops": 1.0, "ref_ms": ref_ms, "ref_tflops": 1.0, "cudnn_ms": cudnn_ms,
            "cudnn_tflops": None if cudnn_ms is None else 1.0, "check": "pass"}


@pytest.mark.parametrize("causal", [False, True])
def test_recount_uses_flash_flops_and_both_references(causal):
    r = _row(causal)
    ab._recount(r)
    f = ab.flash_flops(1, 16, 16384, 16384, 128, causal)
    assert r["flops"] == f and r["flops_exact"] == 123
    assert r["tflops"] == pytest.approx(f / 2e-3 / 1e12) and r["ref_tflops"] == pytest.approx(f / 1e-3 / 1e12)
    assert r["ratio_flash"] == pytest.approx(0.5) == r["ratio"] and r["ratio_cudnn"] == pytest.approx(2.0)


def test_recount_without_cudnn_or_times():
    r = _row(False, cudnn_ms=None)
    ab._recount(r)
    assert r["ratio_cudnn"] is None and r["ratio_flash"] == pytest.approx(0.5)
    r = _row(True, ms=None) | {"tflops": None}          # the emulator: no times at all
    ab._recount(r)
    assert r["tflops"] is None and r["ratio_flash"] is None and r["ratio_cudnn"] is None


def test_summary_geomeans_over_passing_rows():
    rows = [dict(_row(False), ratio_flash=0.5, ratio_cudnn=2.0), dict(_row(True), ratio_flash=2.0, ratio_cudnn=8.0),
            dict(_row(True), ratio_flash=100.0, ratio_cudnn=100.0, check="FAIL"),
            {"check": "skipped", "ms": None}]
    s = ab.summary(rows)
    assert s["geomean_ratio_flash"] == pytest.approx(1.0) and s["geomean_ratio_cudnn"] == pytest.approx(4.0)
    assert (s["timed"], s["skipped"], s["failed"], s["problems"]) == (3, 1, 1, 4)


def test_past_the_deadline_every_problem_is_recorded_skipped():
    """Nothing runs after the deadline; each problem still has its row, saying why."""
    written = []
    res = ab.run(SimBackend(), HostLib(0), deadline=time.time() - 1, write=written.append, log=lambda s: None)
    rows = res["rows"]
    assert [(r["batch"], r["seqlen"], r["heads"], r["causal"], r["check"]) for r in rows] == [
        (1, 130, 1, False, "skipped"), (2, 70, 1, True, "skipped")]
    assert all(r["error"] == "not run: the deadline was 0 s away" for r in rows)
    assert res["summary"]["skipped"] == 2 and len(written) == 2       # written after every problem
    text = ab.table(res)
    assert text.splitlines()[1].split()[:3] == ["b1", "s130", "full"] and "skipped (not run" in text
    assert text.splitlines()[-1] == "geomean ratio to SDPA: flash -, cuDNN - (0 timed, 2 skipped, 0 failed)"


def test_cli_refuses_a_bundle_without_the_forward(tmp_path, capsys):
    (tmp_path / "manifest.json").write_text('{"plan": "x", "attention": [["backward", 128, false, false]]}')
    with pytest.raises(SystemExit):
        ab.main(["--bundle", str(tmp_path), "--backend", "sim", "--json", str(tmp_path / "a.json")])
    assert "holds no dense head-dim-128 attention forward (plan 'x')" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        ab.main(["--bundle", str(tmp_path), "--iters", "10", "--json", str(tmp_path / "a.json")])
    assert "--iters: the median of at least 20 launches" in capsys.readouterr().err
