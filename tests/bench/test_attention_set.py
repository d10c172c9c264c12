"""The ``attention`` bench set (issue 41): FlashAttention-3's forward benchmark shapes; on the
emulator the real kernel runs the tiny shapes and is checked against the float64 reference (a
harness test, no timings); the timed path (TFLOP/s as FlashAttention counts, SDPA flash and cuDNN
in the same run, rotation and medians of the sweep) against a fake timer with torch's CPU SDPA as
the reference."""
import json
import types

import numpy as np
import pytest

from cutedsl import cli
from cutedsl.bench import attention as bench_attention, report
from cutedsl.bench.runner import Sweep
from cutedsl.bench.shapes import ATTENTION_SETS, TINY_ATTENTION
from cutedsl.device.attention import Attention
from cutedsl.device.attention_reference import mask


def fa_flops(batch, seqlen, heads, d, causal):
    """4 * kept (query, key) pairs * d * heads * batch, the pairs from the reference's mask."""
    return 4 * int(mask(seqlen, seqlen, causal).sum()) * d * heads * batch


def test_fa3_paper_shapes():
    probs = ATTENTION_SETS["attention"]
    assert sorted({s for _, s, _, _ in probs}) == [512, 1024, 2048, 4096, 8192, 16384]
    assert all(b * s == 16384 and h == 2048 for b, s, h, _ in probs)        # 16k tokens, hidden 2048
    assert {c for *_, c in probs} == {False, True} and len(probs) == 12
    cfgs, notes = bench_attention.configs("bf16")
    assert [c.head_dim for c in cfgs] == [64, 128, 256] and notes == []


def test_emulator_run_checks_against_the_reference(tmp_path, capsys):
    out = tmp_path / "r.json"
    status = cli.main(["bench", "--set", "attention", "--backend", "sim", "--dtype", "f16", "--json", str(out),
                       "--csv", str(tmp_path / "r.csv"), "--no-progress"])
    text = capsys.readouterr().out
    assert status == 0, text
    res = json.loads(out.read_text())
    (s,) = res["sets"]
    assert s["kind"] == "attention" and len(s["rows"]) == 2 * len(TINY_ATTENTION)
    for r in s["rows"]:
        b, sq, heads, d, causal = r["problem"]
        assert (b, sq, heads * d) in {(x[0], x[1], x[2]) for x in TINY_ATTENTION}
        assert r["check"] == "pass" and r["max_rel_diff"] < 4e-3 and r["tolerance"] == 4e-3
        assert r["ms"] is None and r["tflops"] is None and r["wall_ms"] > 0     # no timings claimed
        assert r["flops"] == fa_flops(b, sq, heads, d, causal)
    assert not any("head_dim" in n for n in res["header"]["notes"])      # d256 has no head in hidden 128
    assert "SDPA flash ms" in text and "attention d128 f16 causal pingpong" in text
    assert (tmp_path / "r.csv").read_text().splitlines()[0].endswith("causal,flops,cudnn_ms,cudnn_tflops")


def test_bench_mistakes_name_the_option(capsys):
    assert cli.main(["bench", "--set", "attention", "--backend", "sim", "--dtype", "e4m3"]) == 2
    assert "argument --dtype: the attention set times bf16/f16 against torch SDPA, which has no e4m3 path" \
        in capsys.readouterr().err
    assert cli.main(["bench", "--set", "attention", "--backend", "sim", "--dtype", "tf32"]) == 2
    assert "argument --dtype: the attention set: AttentionConfig: dtype must be" in capsys.readouterr().err
    assert cli.main(["bench", "--set", "attention", "--backend", "sim", "--identity"]) == 2
    assert "argument --identity/--set" in capsys.readouterr().err
    assert cli.main(["compile", "--set", "attention"]) == 2
    assert "'attention' times AttentionConfigs" in capsys.readouterr().err


class TorchCpuLib:
    """torch CPU tensors standing in for CUDA ones: the set's SDPA branch (flash runs on the CPU,
    cuDNN has no CPU kernel and is reported)."""
    name = "torch"
    device_resident = True
    ref_name = "torch SDPA (CPU, test)"

    def __init__(self):
        import torch
        self.torch, self.gen = torch, torch.Generator().manual_seed(0)

    def randn(self, shape, dt):
        return self.torch.randn(shape, generator=self.gen).to(self.torch.float16)

    def max_rel_diff(self, d, ref):
        d, ref = self.torch.as_tensor(np.asarray(d, np.float64)), ref.double()   # the emulator gives numpy
        return float((d - ref).abs().max() / ref.abs().max())

    def flusher(self, nbytes):
        return lambda: None

    def synchronize(self):
        pass

    def release(self):
        pass


class FixedTimer:
    kind = "fake"

    def __init__(self, ms):
        self.ms, self.batches = ms, []

    def time(self, fns, between=None):
        self.batches.append(len(fns))
        for fn in fns:
            fn()
        return [self.ms] * len(fns)


def test_timed_path_counts_tflops_as_flashattention(monkeypatch, sim):
    pytest.importorskip("torch")
    probs = [(2, 70, 128, True), (1, 130, 128, False)]
    monkeypatch.setattr(bench_attention, "shapes_for", lambda name, backend: probs)
    timer = FixedTimer(0.5)
    sweep = Sweep(types.SimpleNamespace(name="cuda"), TorchCpuLib(), timer, None, iters=3, warmup=1,
                  l2_bytes=1 << 20, make_attention=lambda c: Attention(c, sim))
    cfg = bench_attention.configs("f16")[0][0]                     # head_dim 64: 2 heads
    s = sweep.run_set("attention", [cfg])
    assert len(s["rows"]) == 2
    for r, (b, sq, hidden, causal) in zip(s["rows"], probs):
        flops = fa_flops(b, sq, hidden // 64, 64, causal)
        assert r["flops"] == flops and r["tflops"] == pytest.approx(flops / 0.5e-3 / 1e12)
        assert r["ref_ms"] == 0.5 and r["ref_tflops"] == pytest.approx(r["tflops"]) and r["ratio"] == pytest.approx(1)
        assert r["cudnn_ms"] is None and "RuntimeError" in r["cudnn_error"]     # no cuDNN kernel on the CPU
        assert r["check"] == "pass" and r["max_rel_diff"] < 4e-3            # against SDPA flash's output
        # the sweep's rotation: as many input sets as exceed 3x L2 (here 1 MiB), every launch timed once
        per_set = 4 * b * sq * hidden * 2
        assert r["n_sets"] == min(8, -(-3 * (1 << 20) // per_set))
    assert timer.batches == [3] * 4            # per problem: SDPA flash and cutedsl, --iters launches each
    text = report.text({"header": {"date_utc": "-", "backend": "cuda", "reference": "-"}, "sets": [s]})
    assert "SDPA cuDNN: RuntimeError" in text and "ratio to SDPA flash 1.000" in text
    assert np.isfinite(s["summary"]["configs"][r["config"]]["geomean_tflops"])


# -- the attention-bwd set and --arch sm_100a (issue 42) -------------------------------------------
def test_emulator_backward_run_checks_every_gradient(tmp_path, capsys):
    out = tmp_path / "r.json"
    status = cli.main(["bench", "--set", "attention-bwd", "--backend", "sim", "--dtype", "bf16", "--json", str(out),
                       "--no-progress"])
    text = capsys.readouterr().out
    assert status == 0, text
    (s,) = json.loads(out.read_text())["sets"]
    assert s["kind"] == "attention" and len(s["rows"]) == 2 * len(TINY_ATTENTION)
    assert s["references"] == {"ref": "SDPA flash bwd", "cudnn": "SDPA cuDNN bwd"}
    for r in s["rows"]:
        b, sq, heads, d, causal = r["problem"]
        assert r["config"] == f"attention-bwd d{d} bf16 {'causal' if causal else 'full'}"
        diffs = [r[f"{g}_max_rel_diff"] for g in ("dq", "dk", "dv")]
        assert all(0 < x < 1.6e-2 for x in diffs) and r["max_rel_diff"] == max(diffs), r    # rounded, within bf16's
        assert r["check"] == "pass" and r["tolerance"] == 1.6e-2
        assert r["flops"] == fa_flops(b, sq, heads, d, causal) * 5 // 2        # FlashAttention: 2.5x the forward
        assert r["ms"] is None and r["tflops"] is None and r["wall_ms"] > 0
    assert "SDPA flash bwd ms" in text and "attention-bwd d128 bf16 causal" in text


def test_timed_backward_against_sdpa_backward(monkeypatch, sim):
    pytest.importorskip("torch")
    from cutedsl.device.attention_bwd import AttentionBackward
    probs = [(1, 70, 128, True), (2, 33, 128, False)]
    monkeypatch.setattr(bench_attention, "shapes_for", lambda name, backend: probs)
    timer = FixedTimer(0.25)
    sweep = Sweep(types.SimpleNamespace(name="cuda"), TorchCpuLib(), timer, None, iters=3, warmup=1,
                  l2_bytes=1 << 20, make_attention=lambda c: Attention(c, sim),
                  make_attention_bwd=lambda c: AttentionBackward(c, sim))
    from cutedsl.bench import attention_bwd
    cfg = attention_bwd.configs("f16")[0][0]                         # head_dim 64: 2 heads
    s = sweep.run_set("attention-bwd", [cfg])
    for r, (b, sq, hidden, causal) in zip(s["rows"], probs):
        flops = fa_flops(b, sq, hidden // 64, 64, causal) * 5 // 2
        assert r["flops"] == flops and r["tflops"] == pytest.approx(flops / 0.25e-3 / 1e12)
        assert r["ref_ms"] == 0.25 and r["ratio"] == pytest.approx(1)
        assert r["cudnn_ms"] is None and "RuntimeError" in r["cudnn_error"]
        # dQ, dK, dV against SDPA flash's autograd gradients of the same inputs and dO
        assert r["check"] == "pass" and 0 < r["max_rel_diff"] < 4e-3, r
        per_set = 10 * b * sq * hidden * 2                 # q, k, v, dO, O, dQ, dK, dV, f32 dQ workspace
        assert r["n_sets"] == min(8, -(-3 * (1 << 20) // per_set))
    assert timer.batches == [3] * 4          # per problem: SDPA flash's backward and cutedsl's, --iters each


def test_sm100a_attention_set_on_the_emulator(monkeypatch, tmp_path, capsys):
    cfgs, _ = bench_attention.configs("bf16", "sm_100a")
    assert [(c.head_dim, c.arch) for c in cfgs] == [(64, "sm_100a"), (128, "sm_100a")]
    monkeypatch.setattr(bench_attention, "shapes_for", lambda name, backend: [(1, 70, 128, True)])
    out = tmp_path / "r.json"
    assert cli.main(["bench", "--set", "attention", "--arch", "sm_100a", "--backend", "sim", "--dtype", "bf16",
                     "--json", str(out), "--no-progress"]) == 0
    rows = json.loads(out.read_text())["sets"][0]["rows"]
    assert [r["config"] for r in rows] == ["attention d64 bf16 causal sm_100a", "attention d128 bf16 causal sm_100a"]
    assert all(r["check"] == "pass" and r["max_rel_diff"] < 1.6e-2 for r in rows)
    capsys.readouterr()
    assert cli.main(["bench", "--set", "attention-bwd", "--arch", "sm_100a", "--backend", "sim"]) == 2
    assert ("argument --arch: the attention-bwd set: the attention backward needs wgmma, which sm_100a does not "
            "have") in capsys.readouterr().err
