"""torch integration of attention (issue 41): ``cutedsl.torch.attention`` is the custom op
``torch.ops.cutedsl.attention``; on the emulator (``backend="sim"`` or ``CUTEDSL_BACKEND=sim``)
CPU tensors run the real compiled kernel, checked against the float64 reference, through
``torch.library.opcheck`` and ``torch.compile(fullgraph=True)``; mistakes are the library's errors,
eagerly and under torch.compile. The CUDA launch runs under the gpu marker."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")

import cutedsl.torch as ct                                          # noqa: E402
from cutedsl.device.attention_reference import attention_reference  # noqa: E402
from cutedsl.envvars import EnvVarError                              # noqa: E402
from cutedsl.errors import ArgumentError, ArgumentTypeError, ConfigError   # noqa: E402

TOL = {torch.bfloat16: 2e-2, torch.float16: 4e-3}       # max |O - ref| for unit-variance V


def qkv(b, sq, sk, h, hk, d, dtype=torch.bfloat16, device="cpu", seed=0):
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(s, generator=g).to(dtype) for s in ((b, sq, h, d), (b, sk, hk, d), (b, sk, hk, d)))
    return q.to(device), k.to(device), v.to(device)


def check(o, lse, q, k, v, **opts):
    """O and LSE against the float64 reference of the very inputs (rows with no key: +inf LSE, O = 0)."""
    ro, rl = attention_reference(*(x.float().numpy() for x in (q, k, v)), **opts)
    assert o.dtype == q.dtype and o.shape == q.shape and o.is_contiguous()
    assert lse.dtype == torch.float32 and tuple(lse.shape) == (q.shape[0], q.shape[2], q.shape[1])
    assert np.abs(o.float().numpy() - ro).max() < TOL[q.dtype]
    live = np.isfinite(rl)
    assert np.array_equal(np.isposinf(lse.numpy()), ~live)
    assert np.abs(lse.numpy()[live] - rl[live]).max() < 1e-4


def test_op_is_registered():
    schema = str(torch.ops.cutedsl.attention.default._schema)
    assert schema.startswith("cutedsl::attention(Tensor q, Tensor k, Tensor v, float? softmax_scale, bool causal, "
                             "SymInt[]? window, float? softcap, str backend, str arch=\"\") -> (Tensor, Tensor)"), schema


@pytest.mark.parametrize("dtype,causal,shape", [
    (torch.bfloat16, False, (2, 70, 45, 2, 1, 64)),            # GQA, fewer keys than queries
    (torch.bfloat16, True, (1, 45, 130, 2, 2, 128)),           # causal, bottom-right aligned
    (torch.float16, True, (1, 90, 33, 2, 2, 64)),              # causal: 57 queries see no key
    (torch.float16, False, (1, 33, 200, 1, 1, 128)),
])
def test_emulator_matches_the_reference(dtype, causal, shape):
    q, k, v = qkv(*shape, dtype=dtype)
    o, lse = ct.attention(q, k, v, causal=causal, backend="sim")
    check(o, lse, q, k, v, causal=causal)


def test_options_and_env_backend(monkeypatch):
    """softmax_scale, window, softcap reach the kernel; CUTEDSL_BACKEND=sim is read when no
    backend is named."""
    monkeypatch.setenv("CUTEDSL_BACKEND", "sim")
    q, k, v = qkv(1, 60, 75, 2, 1, 64, seed=3)
    o, lse = ct.attention(q, k, v, softmax_scale=0.3, window=(20, 5), softcap=4.0)
    check(o, lse, q, k, v, softmax_scale=0.3, window=(20, 5), softcap=4.0)


def test_opcheck_on_the_emulator():
    q, k, v = qkv(1, 40, 50, 2, 1, 64, dtype=torch.float16, seed=1)
    torch.library.opcheck(torch.ops.cutedsl.attention.default, (q, k, v, None, True, None, None, "sim"))
    torch.library.opcheck(torch.ops.cutedsl.attention.default, (q, k, v, 0.2, False, [10, -1], 3.0, "sim"))


def test_torch_compile_fullgraph_on_the_emulator():
    """No graph break: the op is one node of the one graph, and the compiled function (AOT
    autograd: the fake implementation gives the shapes) runs the kernel with the eager result."""
    def f(q, k, v):
        o, lse = ct.attention(q, k, v, causal=True, backend="sim")
        return o.float() * 2.0, lse

    q, k, v = qkv(1, 50, 64, 2, 2, 64, seed=2)
    explanation = torch._dynamo.explain(f)(q, k, v)
    assert explanation.graph_break_count == 0 and explanation.graph_count == 1
    ops = [str(n.target) for g in explanation.graphs for n in g.graph.nodes if n.op == "call_function"]
    assert any("cutedsl.attention" in o for o in ops), ops
    o2, lse = torch.compile(f, fullgraph=True, backend="aot_eager")(q, k, v)
    o, lse_eager = ct.attention(q, k, v, causal=True, backend="sim")
    assert torch.equal(o2, o.float() * 2.0) and torch.equal(lse, lse_eager)
    torch._dynamo.reset()


def meta(*shape, dtype=torch.bfloat16):
    return torch.empty(shape, dtype=dtype, device="meta")


def test_fake_implementation_gives_shapes():
    o, lse = ct.attention(meta(3, 100, 8, 128), meta(3, 70, 2, 128), meta(3, 70, 2, 128))
    assert o.device.type == "meta" and tuple(o.shape) == (3, 100, 8, 128) and o.dtype == torch.bfloat16
    assert tuple(lse.shape) == (3, 8, 100) and lse.dtype == torch.float32 and o.is_contiguous()


CPU = torch.ones(1, 8, 2, 64, dtype=torch.bfloat16)
MISTAKES = [   # (q, k, v, options, error, message)
    (CPU, CPU, CPU, {}, ArgumentError, r"q is a CPU tensor; the kernel runs on CUDA tensors \(use torch.nn.functional"
                                       r".scaled_dot_product_attention on the CPU, pass backend='sim'"),
    (CPU, CPU, CPU, {"backend": "cuda"}, ArgumentError, r"q is a CPU tensor"),
    (CPU, CPU, CPU, {"backend": "gpu"}, ArgumentError, r"backend must be one of 'auto', 'cuda', 'sim'.*got 'gpu'"),
    (CPU, CPU, CPU, {"backend": 1}, ArgumentTypeError, r"backend must be 'auto', 'cuda', 'sim' or None, got int"),
    (meta(1, 8, 2, 64, dtype=torch.float32), CPU, CPU, {}, ArgumentTypeError, r"q has dtype torch.float32"),
    (meta(1, 8, 2, 64, dtype=torch.float8_e4m3fn), CPU, CPU, {}, ArgumentTypeError,
     r"q has dtype torch.float8_e4m3fn; .* \(fp8 attention with descales is cutedsl.Attention\(AttentionConfig\("
     r"dtype='e4m3'\)\)"),
    (meta(8, 2, 64), CPU, CPU, {}, ArgumentError, r"q must be 4-D \(batch, seqlen, heads, head_dim\), got shape "
                                                  r"\(8, 2, 64\)"),
    (CPU, meta(1, 8, 2, 64), meta(1, 8, 2, 64), {}, ArgumentError, r"q, k, v must be on one device"),
    (meta(1, 8, 3, 64), meta(1, 8, 2, 64), meta(1, 8, 2, 64), {}, ArgumentError,
     r"heads 3 \(q\) must be a multiple of kv_heads 2"),
    (meta(1, 8, 2, 80), meta(1, 8, 2, 80), meta(1, 8, 2, 80), {}, ConfigError, r"head_dim must be 64, 96, 128 or 256"),
    (meta(1, 8, 2, 64), meta(1, 8, 2, 64), meta(1, 8, 2, 64, dtype=torch.float16), {}, ArgumentTypeError,
     r"q, k, v must share one dtype"),
    (CPU, CPU, CPU, {"backend": "sim", "window": (3, 2), "causal": True}, ArgumentError,
     r"causal=True keeps keys up to the diagonal \(right = 0\) but window has right = 2"),
    (CPU, CPU, CPU, {"backend": "sim", "window": (-2, 0)}, ArgumentError, r"each must be >= 0, or -1 for unbounded"),
    (CPU, CPU, CPU, {"backend": "sim", "window": (1, 2, 3)}, ArgumentTypeError, r"window must be a pair of ints"),
    (CPU, CPU, CPU, {"backend": "sim", "softcap": -1.0}, ArgumentError, r"softcap must be a finite positive number"),
    (CPU, CPU, CPU, {"backend": "sim", "softmax_scale": float("nan")}, ArgumentError,
     r"softmax_scale must be a finite number, got nan"),
    (CPU, CPU, CPU, {"backend": "sim", "softmax_scale": "0.1"}, ArgumentTypeError,
     r"softmax_scale must be a real number or None, got str"),
    (CPU, CPU, CPU, {"backend": "sim", "causal": 1}, ArgumentTypeError, r"causal must be a bool, got int"),
]


@pytest.mark.parametrize("q,k,v,opts,error,message", MISTAKES)
def test_mistakes_are_the_librarys_errors(q, k, v, opts, error, message):
    with pytest.raises(error, match=message):
        ct.attention(q, k, v, **opts)


def test_bad_env_backend_is_named(monkeypatch):
    monkeypatch.setenv("CUTEDSL_BACKEND", "tpu")
    with pytest.raises(EnvVarError, match=r"CUTEDSL_BACKEND='tpu' is not a backend \(accepted: auto, cuda, sim\)"):
        ct.attention(CPU, CPU, CPU)


def test_errors_under_torch_compile_are_the_librarys():
    """Checks of values the op can carry run when the compiled graph runs: the library's own
    error reaches the caller (not Dynamo's)."""
    f = torch.compile(lambda q, k, v: ct.attention(q, k, v, causal=True)[0] + 1, fullgraph=True, backend="eager")
    with pytest.raises(ArgumentError, match=r"q is a CPU tensor; the kernel runs on CUDA tensors"):
        f(CPU, CPU, CPU)
    with pytest.raises(ConfigError, match=r"head_dim must be 64, 96, 128 or 256"):
        f(meta(1, 8, 2, 80), meta(1, 8, 2, 80), meta(1, 8, 2, 80))
    torch._dynamo.reset()


@pytest.mark.gpu
def test_cuda_launch_matches_sdpa(cuda):
    q, k, v = qkv(2, 300, 300, 4, 2, 128, device="cuda")
    for causal in (False, True):
        o, lse = ct.attention(q, k, v, causal=causal)
        assert o.is_cuda and lse.is_cuda
        ref = torch.nn.functional.scaled_dot_product_attention(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=causal, enable_gqa=True)
        assert (o.float() - ref.transpose(1, 2).float()).abs().max().item() < 2e-2
        o2, _ = torch.compile(lambda a, b, c: ct.attention(a, b, c, causal=causal), fullgraph=True)(q, k, v)
        assert torch.equal(o2, o)
