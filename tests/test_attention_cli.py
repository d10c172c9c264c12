"""``python -m cutedsl attention`` (issue 41): the main job for attention runs the compiled kernel on
the emulator and checks O and LSE against the float64 reference (with --backward also dQ, dK, dV); its report has the gemm job's
keys plus the problem's; FLOPs are counted as FlashAttention counts them; every argument mistake
is one line naming the option (one JSON object under --json) with exit status 2."""
import json
import pathlib
import re
import subprocess
import sys

import pytest

from cutedsl import cli, cli_attention
from cutedsl.device.attention_reference import mask

ROOT = pathlib.Path(__file__).resolve().parent.parent
COMMON = ["--backend", "sim", "--check", "--json"]
GEMM_KEYS = ("backend", "arch", "dtype", "registers", "spills", "smem_bytes", "sass", "compile_s", "executed",
             "max_rel_err", "passed", "time_ms", "tflops")
PROBLEM_KEYS = ("batch", "heads", "kv_heads", "seqlen_q", "seqlen_k", "head_dim", "causal", "window", "softcap",
                "varlen")


def fa_flops(lens, heads, d, causal=False, window=None):
    """2 * (kept (query, key) pairs) * (d + d) * heads, the pairs counted from the reference's own mask."""
    return sum(2 * int(mask(sq, sk, causal, window).sum()) * 2 * d * heads for sq, sk in lens)


def run(capsys, *argv):
    status = cli.main(["attention", *argv])
    out, err = capsys.readouterr()
    return status, out, err


def test_subprocess_dense_causal_gqa_passes():
    r = subprocess.run([sys.executable, "-m", "cutedsl", "attention", "--batch", "2", "--heads", "4", "--kv-heads", "2",
                        "--seqlen-q", "90", "--seqlen-k", "70", "--head-dim", "64", "--causal", *COMMON],
                       capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    rep = json.loads(r.stdout)
    for key in GEMM_KEYS + PROBLEM_KEYS:
        assert key in rep, key
    assert rep["backend"] == "sim" and rep["executed"] is True and rep["passed"] is True
    assert rep["max_rel_err"] < 1.6e-2 and rep["lse_max_abs_err"] < 1e-3
    assert (rep["batch"], rep["heads"], rep["kv_heads"], rep["seqlen_q"], rep["seqlen_k"]) == (2, 4, 2, 90, 70)
    assert rep["masked_rows"] == 2 * 4 * 20       # bottom-right causal: the first 20 queries see no key
    assert rep["flops"] == fa_flops([(90, 70)] * 2, 4, 64, causal=True)
    assert rep["tflops"] == pytest.approx(rep["flops"] / (rep["time_ms"] * 1e-3) / 1e12, rel=1e-3, abs=1e-6)
    assert rep["grid"] == [1, 4, 2] and rep["registers"] > 0 and rep["sass"]["HGMMA"] > 0


def test_varlen_window_softcap_f16(capsys):
    status, out, _ = run(capsys, "--heads", "2", "--kv-heads", "1", "--head-dim", "128", "--dtype", "f16",
                         "--varlen", "50:70,0:10,130,17:0", "--window", "30,-1", "--softcap", "20", *COMMON)
    rep = json.loads(out)
    assert status == 0 and rep["passed"] is True and rep["max_rel_err"] < 4e-3, rep
    assert rep["varlen"] == [[50, 70], [0, 10], [130, 130], [17, 0]] and rep["batch"] == 4
    assert (rep["seqlen_q"], rep["seqlen_k"]) == (130, 130) and rep["window"] == [30, -1] and rep["softcap"] == 20.0
    assert rep["masked_rows"] == 2 * 17          # the sequence with no keys
    assert rep["flops"] == fa_flops([(50, 70), (0, 10), (130, 130), (17, 0)], 2, 128, window=(30, -1))


def test_fp8_check(capsys):
    """--dtype e4m3 runs the fp8 kernel (bf16 O) and --check compares with e4m3's tolerance."""
    status, out, _ = run(capsys, "--batch", "1", "--heads", "2", "--seqlen-q", "77", "--seqlen-k", "140",
                         "--head-dim", "64", "--dtype", "e4m3", "--causal", *COMMON)
    rep = json.loads(out)
    assert status == 0 and rep["passed"] is True and rep["dtype"] == "e4m3" and rep["tolerance"] == 6.3e-2, rep
    assert 0 < rep["max_rel_err"] < 6.3e-2 and rep["sass"]["QGMMA"] > 0 and rep["spills"] == 0


def test_text_report(capsys):
    status, out, _ = run(capsys, "--batch", "1", "--heads", "1", "--seqlen-q", "33", "--head-dim", "64",
                         "--backend", "sim", "--check")
    assert status == 0
    assert out.startswith("cutedsl attention  batch=1 heads=1 seqlen_q=33 seqlen_k=33 head_dim=64  bf16  ping-pong")
    assert "backend sim: emulator wall time" in out and "HGMMA" in out and out.rstrip().endswith("-> PASS")


def test_check_failure_sets_exit_status_1(capsys, monkeypatch):
    monkeypatch.setitem(cli_attention.TOLERANCE, "bf16", -1.0)     # nothing passes a negative tolerance
    status, out, _ = run(capsys, "--batch", "1", "--heads", "1", "--seqlen-q", "40", "--head-dim", "64", *COMMON)
    assert status == 1 and json.loads(out)["passed"] is False


def test_backend_none_compiles_and_reports(capsys, tmp_path):
    status, out, _ = run(capsys, "--batch", "1", "--heads", "2", "--seqlen-q", "40", "--head-dim", "64", "--causal",
                         "--backend", "none", "--dump", str(tmp_path), "--json")
    rep = json.loads(out)
    assert status == 0 and rep["executed"] is False and rep["registers"] > 0 and "time_ms" not in rep
    assert "nothing is executed" in rep["note"]
    assert any(p.suffix == ".ptx" for p in tmp_path.rglob("*"))


BASE = ["--batch", "1", "--heads", "2", "--seqlen-q", "16", "--head-dim", "64", "--backend", "sim"]
MISTAKES = [   # (options changed from BASE: None removes one, True is a flag; option named; message)
    ({'--dtype': 'e5m2'}, "--dtype", r"dtype must be 'bf16' or 'f16' .*got 'e5m2'"),
    ({'--dtype': 'e4m3', '--head-dim': '96'}, "--head-dim", r"head_dim must be 64, 128 or 256 for fp8 .*got 96"),
    ({'--head-dim': '80'}, "--head-dim", r"head_dim must be 64, 96, 128 or 256 .*got 80"),
    ({'--kv-heads': '3'}, "--kv-heads", r"--heads 2 must be a multiple of --kv-heads 3"),
    ({'--batch': '0'}, "--batch", r"expected an integer in 1\.\.65535, got '0'"),
    ({'--heads': '70000'}, "--heads", r"1\.\.65535, got '70000'"),
    ({'--window': '3'}, "--window", r"expected LEFT,RIGHT .*got '3'"),
    ({'--window': '-2,0'}, "--window", r"ints >= -1.*got '-2,0'"),
    ({'--causal': True, '--window': '8,4'}, "--causal/--window", r"right = 0\) but window has right = 4"),
    ({'--softcap': '0'}, "--softcap", r"expected a finite number > 0 .*got '0'"),
    ({'--softcap': 'inf'}, "--softcap", r"got 'inf'"),
    ({'--varlen': '3,x'}, "--varlen", r"expected SQ1,SQ2,\.\.\. or SQ:SK,\.\.\. .*got 'x'"),
    ({'--varlen': '0:4,5:0', '--batch': None}, "--varlen", r"no sequence has both queries and keys"),
    ({'--varlen': '8,9'}, "--batch/--varlen", r"--batch 1 but --varlen gives 2 sequences"),
    ({'--batch': '2', '--varlen': '8,20'}, "--seqlen-q/--varlen", r"--seqlen-q 16 is shorter than the longest"),
    ({'--seqlen-q': '1073741823'}, "--seqlen-q/--seqlen-k", r"must stay below 2\^30"),
    ({'--seqlen-q': None}, "--seqlen-q", r"required \(or --varlen"),
    ({'--backend': 'none', '--check': True}, "--check/--backend", r"--backend none runs nothing"),
    ({'--arch': 'sm_80'}, "--arch", r"invalid choice: 'sm_80'"),
    # --backward: what the backward does not build is refused by name before anything compiles
    ({'--backward': True, '--softcap': '20'}, "--softcap/--backward", r"does not implement the softcap"),
    ({'--backward': True, '--arch': 'sm_100a'}, "--arch/--backward", r"needs wgmma, which sm_100a does not have"),
    ({'--backward': True, '--head-dim': '256'}, "--head-dim/--backward",
     r"for the attention backward, got 256: dK and dV accumulators"),
    ({'--backward': True, '--dtype': 'e4m3'}, "--dtype/--backward", r"dtype must be 'bf16' or 'f16' .*got 'e4m3'"),
    ({'--deterministic': True}, "--deterministic", r"orders the backward's dQ sums: add --backward"),
]


def _argv(change: dict) -> list:
    opts = dict(zip(BASE[::2], BASE[1::2]))
    opts.update(change)
    # a value starting with '-' goes as --opt=VALUE (argparse takes '-2,0' for an option otherwise)
    return [x for o, v in opts.items() if v is not None
            for x in ([o] if v is True else [f"{o}={v}"] if v.startswith("-") else [o, v])]


@pytest.mark.parametrize("change,option,message", MISTAKES,
                         ids=[" ".join(f"{o} {v}" for o, v in m[0].items()) for m in MISTAKES])
@pytest.mark.parametrize("as_json", [False, True])
def test_mistakes_are_one_line_naming_the_option(capsys, change, option, message, as_json):
    argv = ["attention", *_argv(change)] + (["--json"] if as_json else [])
    try:
        status = cli.main(argv)
    except SystemExit as e:          # argparse's own errors (type=, choices=) exit
        status = e.code
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert status == 2 and len(lines) == 1, err
    assert lines[0].startswith(f"python -m cutedsl attention: error: argument {option}:"), lines[0]
    assert re.search(message, lines[0]), lines[0]
    if as_json:
        assert re.search(message, json.loads(out)["error"])
    else:
        assert out == ""


# -- --backward (issue 42) ------------------------------------------------------------------------
BWD_KEYS = ("deterministic", "executed", "threads", "grid", "registers", "spills", "smem_bytes", "sass", "compile_s",
            "cached", "time_ms", "flops", "tflops", "max_rel_err", "tolerance", "passed")


def test_backward_varlen_gqa_window_checks_the_gradients(capsys):
    lens = [(50, 70), (0, 10), (130, 130), (17, 0)]
    status, out, _ = run(capsys, "--heads", "2", "--kv-heads", "1", "--head-dim", "64", "--dtype", "f16",
                         "--varlen", "50:70,0:10,130,17:0", "--window", "30,5", "--backward", *COMMON)
    rep = json.loads(out)
    b = rep["backward"]
    assert status == 0 and rep["passed"] is True and rep["forward_passed"] is True, rep
    for key in BWD_KEYS:
        assert key in b, key
    assert b["executed"] is True and b["deterministic"] is False and b["passed"] is True and b["tolerance"] == 4e-3
    # every gradient compared: rounded to f16, none exact, all within the dtype's tolerance
    assert sorted(b["max_rel_err"]) == ["dk", "dq", "dv"] and all(0 < e < 4e-3 for e in b["max_rel_err"].values())
    fwd = fa_flops(lens, 2, 64, window=(30, 5))
    assert rep["flops"] == fwd and b["flops"] == fwd * 5 // 2 and fwd % 2 == 0       # 2.5x the forward
    assert b["tflops"] == pytest.approx(b["flops"] / (b["time_ms"] * 1e-3) / 1e12, rel=1e-3, abs=1e-6)
    # one CTA per 64 keys of the longest sequence, per K/V head, per sequence; 256 threads (producer + MMA)
    assert b["grid"] == [3, 1, 4] and b["threads"] == 256 and b["registers"] > 0 and b["sass"]["HGMMA"] > 0


def test_backward_deterministic_causal_text_report(capsys):
    status, out, _ = run(capsys, "--batch", "2", "--heads", "2", "--seqlen-q", "90", "--seqlen-k", "40",
                         "--head-dim", "64", "--causal", "--backward", "--deterministic", "--backend", "sim", "--check")
    assert status == 0, out
    lines = out.rstrip().splitlines()
    assert "rows with no key -> PASS" in lines[-4]             # the forward's check, then the backward's lines
    assert lines[-3].startswith("  backward (deterministic): dK/dV kernel 256 threads x grid (1, 2, 2)")
    assert lines[-2].startswith("  backward on sim: emulator wall time") and "2.5x the forward's" in lines[-2]
    assert re.fullmatch(r"  check backward vs float64 numpy: max rel err dQ \S+, dK \S+, dV \S+ "
                        r"\(tolerance 1\.6e-02\) -> PASS", lines[-1]), lines[-1]


def test_backward_check_failure_alone_sets_exit_status_1(capsys, monkeypatch):
    from cutedsl import cli_attention_bwd
    monkeypatch.setattr(cli_attention_bwd, "TOLERANCE", {"bf16": -1.0})      # the forward keeps its tolerance
    status, out, _ = run(capsys, "--batch", "1", "--heads", "1", "--seqlen-q", "40", "--head-dim", "64", "--backward",
                         *COMMON)
    rep = json.loads(out)
    assert status == 1 and rep["forward_passed"] is True and rep["passed"] is False
    assert rep["backward"]["passed"] is False and rep["backward"]["tolerance"] == -1.0


def test_backward_backend_none_compiles_and_reports(capsys, tmp_path):
    status, out, _ = run(capsys, "--batch", "1", "--heads", "2", "--seqlen-q", "100", "--head-dim", "128",
                         "--backward", "--backend", "none", "--dump", str(tmp_path), "--json")
    rep = json.loads(out)
    b = rep["backward"]
    # head dim 128: one CTA per 128 keys (two MMA warpgroups), 384 threads
    assert status == 0 and b["executed"] is False and b["registers"] > 0 and b["grid"] == [1, 2, 1]
    assert b["threads"] == 384
    assert "time_ms" not in b and "passed" not in b and "passed" not in rep
    assert {p.name for p in tmp_path.rglob("*.ptx")} == {"attention_fwd.ptx", "attention_bwd_preprocess.ptx",
                                                         "attention_bwd.ptx", "attention_bwd_postprocess.ptx"}
