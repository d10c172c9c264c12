"""cutedsl.Attention / AttentionConfig: the front end's contract -- layouts, array kinds, results
against the float64 reference on the emulator, and every mistake refused by name before anything
is compiled or launched."""
import ml_dtypes
import numpy as np
import pytest

import cutedsl
from cutedsl.device.attention import Attention
from cutedsl.device.attention_config import AttentionConfig
from cutedsl.device.attention_reference import attention_reference
from cutedsl.errors import ArgumentError, ArgumentTypeError, ConfigError, ConfigTypeError
from cutedsl.problem import AttentionProblem
from cutedsl.runtime import arrays

BF = ml_dtypes.bfloat16


def _qkv(rng, q_shape, kv_shape, dt=BF):
    return tuple(rng.standard_normal(s).astype(dt) for s in (q_shape, kv_shape, kv_shape))


def test_lazy_exports():
    assert cutedsl.Attention is Attention and cutedsl.AttentionConfig is AttentionConfig


def test_numpy_default_scale(rng, sim):
    q, k, v = _qkv(rng, (2, 50, 2, 64), (2, 90, 2, 64))
    o, lse = Attention(AttentionConfig(head_dim=64), sim)(q, k, v)
    ro, rl = attention_reference(q, k, v)                       # softmax_scale = 64 ** -0.5
    assert isinstance(o, np.ndarray) and o.dtype == BF and lse.shape == (2, 2, 50)
    assert np.abs(o.astype(np.float64) - ro).max() < 2e-2
    assert np.abs(lse - rl).max() < 1e-4


def test_device_arrays_in_device_arrays_out(rng, sim):
    q, k, v = _qkv(rng, (1, 40, 2, 128), (1, 60, 1, 128), np.float16)
    dq, dk, dv = (arrays.to_device(sim, x) for x in (q, k, v))
    o, lse = Attention("auto", sim)(dq, dk, dv, causal=True)
    assert isinstance(o, arrays.DeviceArray) and isinstance(lse, arrays.DeviceArray)
    ro, rl = attention_reference(q, k, v, causal=True)
    assert np.abs(arrays.to_host(o).astype(np.float64) - ro).max() < 4e-3
    assert np.abs(arrays.to_host(lse) - rl).max() < 1e-4


class _CpuDLPack:
    """A host array seen only through the DLPack protocol (np.from_dlpack reads it)."""

    def __init__(self, a):
        self._a = a

    def __dlpack__(self, *args, **kw):
        return self._a.__dlpack__(*args, **kw)

    def __dlpack_device__(self):
        return self._a.__dlpack_device__()


def test_dlpack_host_inputs(rng, sim):
    q, k, v = _qkv(rng, (1, 33, 1, 64), (1, 20, 1, 64), np.float16)
    o, lse = Attention(AttentionConfig(head_dim=64, dtype="f16"), sim)(*(_CpuDLPack(x) for x in (q, k, v)),
                                                                       softmax_scale=0.2)
    ro, rl = attention_reference(q, k, v, softmax_scale=0.2)
    assert np.abs(o.astype(np.float64) - ro).max() < 4e-3 and np.abs(lse - rl).max() < 1e-4


def test_no_keys_no_launch(rng, sim, monkeypatch):
    q, k, v = _qkv(rng, (1, 5, 2, 64), (1, 0, 2, 64))
    monkeypatch.setattr(AttentionConfig, "kernel", lambda *a, **k: pytest.fail("nothing to compile"))
    o, lse = Attention(AttentionConfig(head_dim=64), sim)(q, k, v)
    assert np.all(o.astype(np.float32) == 0) and np.all(np.isposinf(lse)) and lse.shape == (1, 2, 5)


def test_config_validation_and_reasons():
    with pytest.raises(ConfigError, match=r"head_dim must be 64, 96, 128 or 256 \(the attention kernel's tiles\), got 80"):
        AttentionConfig(head_dim=80)
    assert AttentionConfig(head_dim=96).kernel().block_n == 128 and AttentionConfig(head_dim=256).kernel().block_n == 64
    with pytest.raises(ConfigError, match="dtype must be"):
        AttentionConfig(dtype="e5m2")
    with pytest.raises(ConfigError, match="pingpong=True needs overlap=True"):
        AttentionConfig(overlap=False)
    with pytest.raises(ConfigTypeError, match="head_dim must be an int"):
        AttentionConfig(head_dim=64.0)
    with pytest.raises(ConfigError, match="arch"):
        AttentionConfig(arch="sm_80")
    assert AttentionConfig(arch="sm_100a").arch == "sm_100a"         # the FlashAttention-4-style kernel
    cfg = AttentionConfig.for_problem(AttentionProblem(2, 300, 300, 8, 2, 64), "f16")
    assert (cfg.head_dim, cfg.dtype, cfg.overlap, cfg.pingpong) == (64, "f16", True, True)
    assert "multiple of kv_heads 3" in cfg.can_implement(AttentionProblem(1, 10, 10, 8, 3, 64))
    assert "head_dim 128 differs" in cfg.can_implement(AttentionProblem(1, 10, 10, 8, 8, 128))
    assert "head_dim_v 128" in cfg.can_implement(AttentionProblem(1, 10, 10, 8, 8, 64, 128))
    with pytest.raises(ConfigError, match="head_dim must be 64, 96, 128 or 256"):
        AttentionConfig.for_problem(AttentionProblem(1, 10, 10, 1, 1, 80))


def _bad_cases(rng):
    q, k, v = _qkv(rng, (1, 8, 4, 64), (1, 8, 2, 64))
    cq = np.array([0, 8], np.int32)
    yield "dtype mix", (q, k, v.astype(np.float16)), {}, ArgumentTypeError, "share one dtype"
    yield "f32", (q.astype(np.float32), k, v), {}, ArgumentTypeError, "q must be bf16, f16 or e4m3"
    yield "rank", (q[0], k, v), {}, ArgumentError, r"q must be \(batch, seqlen, heads, head_dim\)"
    yield "heads", (q[:, :, :3], k, v), {}, ArgumentError, "heads 3 .* multiple of kv_heads 2"
    yield "head_dim", (q[..., :32].copy(), k, v), {}, ArgumentError, "head_dim differ"
    yield "head_dim 32", tuple(x[..., :32].copy() for x in (q, k, v)), {}, ArgumentError, "head_dim must be 64, 96, 128 or 256"
    yield "contiguous", (q[..., ::2], k, v), {}, ArgumentError, "last dimension .* must be contiguous"
    yield "k/v", (q, k, v[:, :4]), {}, ArgumentError, "k and v must agree"
    yield "causal window", (q, k, v), {"causal": True, "window": (4, 2)}, ArgumentError, r"window=\(4, 0\)"
    yield "window type", (q, k, v), {"window": 3}, ArgumentTypeError, "window must be a pair"
    yield "window range", (q, k, v), {"window": (-2, 0)}, ArgumentError, "-1 for unbounded"
    yield "scale", (q, k, v), {"softmax_scale": float("nan")}, ArgumentError, "softmax_scale must be a finite"
    yield "softcap", (q, k, v), {"softcap": -1.0}, ArgumentError, "softcap must be a finite positive"
    qv, kv_ = q[0], k[0]
    vv = v[0]
    yield "cu alone", (qv, kv_, vv), {"cu_seqlens_q": cq}, ArgumentError, "go together"
    yield "cu int64", (qv, kv_, vv), {"cu_seqlens_q": cq.astype(np.int64), "cu_seqlens_k": cq}, ArgumentTypeError, \
        "cu_seqlens_q must be int32"
    yield "cu monotone", (qv, kv_, vv), {"cu_seqlens_q": np.array([0, 6, 3], np.int32),
                                         "cu_seqlens_k": np.array([0, 4, 8], np.int32)}, ArgumentError, "monotone"
    yield "cu past rows", (qv, kv_, vv), {"cu_seqlens_q": np.array([0, 9], np.int32), "cu_seqlens_k": cq}, \
        ArgumentError, "at most 8"
    yield "cu batch", (qv, kv_, vv), {"cu_seqlens_q": cq, "cu_seqlens_k": np.array([0, 4, 8], np.int32)}, \
        ArgumentError, "3 offsets"
    yield "max_seqlen", (qv, kv_, vv), {"cu_seqlens_q": cq, "cu_seqlens_k": cq, "max_seqlen_q": 4}, ArgumentError, \
        r"max_seqlen_q must be an int >= the longest sequence \(8\)"
    yield "config dtype", (q.astype(np.float16), k.astype(np.float16), v.astype(np.float16)), {}, \
        ArgumentTypeError, "dtype='f16'"


@pytest.mark.parametrize("case", range(20))
def test_bad_input_refused_before_any_compile(case, rng, sim, monkeypatch):
    name, args, kw, err, match = list(_bad_cases(rng))[case]
    monkeypatch.setattr(AttentionConfig, "kernel", lambda *a, **k: pytest.fail(f"{name}: reached the kernel"))
    cfg = AttentionConfig(head_dim=64)
    with pytest.raises(err, match=match):
        Attention(cfg, sim)(*args, **kw)


def test_constructor_arguments():
    with pytest.raises(ArgumentTypeError, match="config must be an AttentionConfig"):
        Attention({"head_dim": 64})
    with pytest.raises(ArgumentError, match="backend must be one of"):
        Attention(None, backend="tpu")


def test_prepare_launches_again_and_dumps(rng, sim, tmp_path):
    """``prepare`` (what the bench times): the launch repeats with the same result, carries its
    compiled kernel, and ``dump_dir`` receives the compile's PTX."""
    q, k, v = _qkv(rng, (1, 70, 2, 64), (1, 45, 1, 64))
    attn = Attention(AttentionConfig(head_dim=64), sim, dump_dir=str(tmp_path))
    launch, result = attn.prepare(q, k, v, causal=True, softcap=5.0)
    try:
        launch()
        o1, l1 = result()
        launch()
        o2, l2 = result()
        assert launch.compiled.resources.registers > 0 and launch.compile_seconds > 0
    finally:
        launch.release()
    ro, rl = attention_reference(q, k, v, causal=True, softcap=5.0)
    assert np.array_equal(o1.view(np.uint16), o2.view(np.uint16)) and np.array_equal(l1, l2)
    live = np.isfinite(rl)                 # the first 25 queries see no key: LSE = +inf
    assert np.array_equal(np.isposinf(l1), ~live) and (~live).sum() == 2 * 25
    assert np.abs(o1.astype(np.float64) - ro).max() < 2e-2 and np.abs(l1[live] - rl[live]).max() < 1e-4
    assert any(p.suffix == ".ptx" for p in tmp_path.rglob("*")), sorted(tmp_path.rglob("*"))
    nothing, _ = attn.prepare(q, k[:, :0], v[:, :0])
    assert nothing.compiled is None
