"""The lease's cuBLAS step (cutedsl.bench.lease_bench): pass order, the per-problem summary
(model pick, best passing config, reference median) and its table; and the end-of-run report's
junit reading."""
from cutedsl.bench import lease_bench, lease_report


def _row(config, tflops, check="pass", role="candidate", ref=100.0):
    return {"config": config, "tflops": tflops, "ms": None if tflops is None else 1.0, "check": check,
            "role": role, "ratio": None if tflops is None else tflops / ref, "ref_tflops": ref}


def test_every_problem_gets_its_model_pick_before_any_candidate():
    problems = [{"configs": [1, 2, 3]}, {"configs": [1]}, {"configs": [1, 2]}]
    assert lease_bench._passes(problems) == [(0, [0]), (1, [0]), (2, [0]), (0, [1, 2]), (2, [1])]


def test_problem_summary_best_is_the_fastest_that_passed():
    p = {"set": "square", "shape": [8, 8, 8], "dtype": "bf16", "out_dtype": "bf16", "configs": [{}] * 5}
    rows = [_row("model", 50.0, role="model", ref=100.0), _row("fast-but-wrong", 500.0, check="FAIL", ref=110.0),
            _row("good", 90.0, ref=120.0), _row("late", None, check="skipped"), _row("broken", None, check="error")]
    s = lease_bench.problem_summary(p, rows)
    assert s["model"] == {"config": "model", "ms": 1.0, "tflops": 50.0, "ratio": 0.5, "check": "pass"}
    assert s["best"]["config"] == "good" and s["best"]["ratio"] == 90.0 / 120.0
    assert s["ref_tflops"] == 110.0 and s["ref_tflops_samples"] == [100.0, 110.0, 120.0]
    assert (s["timed"], s["skipped"], s["failed"], s["configs"]) == (3, 1, 2, 5)
    text = lease_bench.table({"problems": [s], "geomean": {"model_ratio": 0.5, "best_ratio": 0.75}})
    assert text.splitlines()[1].split()[:8] == ["square", "8x8x8", "bf16", "110.0", "50.0", "0.500", "90.0", "0.750"]
    assert text.splitlines()[-1] == "geomean ratio to the reference: model 0.500, best 0.750"


def test_junit_counts_and_failing_ids(tmp_path):
    x = tmp_path / "j.xml"
    x.write_text('<testsuites><testsuite tests="4" failures="1" errors="1" skipped="1">'
                 '<testcase classname="t.a" name="ok"/><testcase classname="t.a" name="bad"><failure/></testcase>'
                 '<testcase classname="t.b" name="err"><error/></testcase>'
                 '<testcase classname="t.b" name="skip"><skipped/></testcase></testsuite></testsuites>')
    assert lease_report.junit(x) == {"tests": 4, "passed": 1, "failed": 1, "errors": 1, "skipped": 1,
                                     "failing": ["t.a::bad", "t.b::err"]}
    assert lease_report.junit(tmp_path / "missing.xml") is None
