"""``cutedsl.torch.attention(..., arch=)`` (issue 42): the FlashAttention-4-style sm_100a forward
through the torch op. With ``backend="sim"`` CPU tensors run the real compiled sm_100a kernel on
the emulator (race checks on; eager and adversarial through the ``sim_kernel`` marker) against the
float64 reference on ragged lengths, the CTA-pair variant included where ``for_problem`` picks it;
``torch.library.opcheck`` of the schema with ``arch``; ``torch.compile(fullgraph=True)``; the
architecture a call takes when it names none (the CUDA device's own, sm_90a for CPU tensors); the
refusals: an unknown arch, a head dim sm_100a does not build, sm_100a on CUDA tensors (the CUDA
backend drives Hopper only), and the backward of an sm_100a forward, which does not exist."""
import pytest

torch = pytest.importorskip("torch")

import cutedsl.torch as ct                                                  # noqa: E402
from cutedsl.errors import ArgumentError, ArgumentTypeError, ConfigError    # noqa: E402
from tests.test_torch_attention import check, meta, qkv                     # noqa: E402

SM100 = "sm_100a"


@pytest.mark.sim_kernel
@pytest.mark.parametrize("dtype,opts,shape,pair", [
    (torch.bfloat16, {"causal": True}, (2, 77, 45, 4, 2, 64), False),            # GQA; rows with no key
    (torch.float16, {"window": (30, 4), "softmax_scale": 0.2}, (1, 45, 130, 2, 1, 64), False),
    (torch.bfloat16, {}, (1, 300, 90, 1, 1, 128), True),                          # > 256 rows: the CTA pair
])
def test_sm100a_forward_on_the_emulator(dtype, opts, shape, pair):
    q, k, v = qkv(*shape, dtype=dtype, seed=5)
    o, lse = ct.attention(q, k, v, backend="sim", arch=SM100, **opts)
    check(o, lse, q, k, v, **opts)
    name, cfg = ct._check_attention(q, k, v, opts.get("softmax_scale"), opts.get("causal", False),
                                    opts.get("window"), None, "sim", SM100)
    assert (cfg.arch, cfg.cta_pair) == (SM100, pair)
    assert (name, cfg) in ct._ATTENTIONS            # the config that ran


@pytest.mark.sim_kernel
def test_opcheck_and_compile_on_the_emulator():
    """The op's schema with ``arch`` (fake implementation, autograd registration, dispatch) and a
    fullgraph compile of an sm_100a call: one graph, the compiled result equal to eager."""
    q, k, v = qkv(1, 40, 50, 2, 1, 64, dtype=torch.float16, seed=1)
    torch.library.opcheck(torch.ops.cutedsl.attention.default, (q, k, v, None, True, None, None, "sim", SM100))

    def f(q, k, v):
        o, lse = ct.attention(q, k, v, causal=True, backend="sim", arch=SM100)
        return o.float() * 2.0, lse

    explanation = torch._dynamo.explain(f)(q, k, v)
    assert explanation.graph_break_count == 0 and explanation.graph_count == 1
    o2, lse2 = torch.compile(f, fullgraph=True, backend="aot_eager")(q, k, v)
    o, lse = ct.attention(q, k, v, causal=True, backend="sim", arch=SM100)
    assert torch.equal(o2, o.float() * 2.0) and torch.equal(lse2, lse)
    torch._dynamo.reset()


def _fake_cuda(*shape):
    from torch._subclasses.fake_tensor import FakeTensorMode
    with FakeTensorMode():
        return torch.empty(shape, dtype=torch.bfloat16, device="cuda")


@pytest.mark.parametrize("cc,want", [((9, 0), "sm_90a"), ((10, 0), SM100), ((8, 0), "sm_90a")])
def test_default_arch_is_the_devices(monkeypatch, cc, want):
    """arch=None: the CUDA device's compute capability picks the target (sm_90a for one with no
    attention kernel: the CUDA backend then refuses that GPU by name); CPU and meta: sm_90a."""
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: cc)
    assert ct._attention_arch("", _fake_cuda(1, 8, 2, 64)) == want
    assert ct._attention_arch("", torch.ones(1)) == ct._attention_arch("", meta(1)) == "sm_90a"
    if want == SM100:           # a Blackwell GPU: refused by name before anything is compiled
        x = _fake_cuda(1, 8, 2, 64)
        with pytest.raises(ArgumentError, match=r"arch 'sm_100a' on a cuda:0 tensor: the CUDA backend drives sm_90a "
                                                r"\(Hopper\) GPUs only; run sm_100a on the PTX emulator"):
            ct._check_attention(x, x, x, None, False, None, None, "cuda", "")
    else:
        x = _fake_cuda(1, 8, 2, 64)
        name, cfg = ct._check_attention(x, x, x, None, False, None, None, "cuda", "")
        assert (name, cfg.arch) == ("cuda", "sm_90a")


CPU = torch.ones(1, 8, 2, 64, dtype=torch.bfloat16)
MISTAKES = [   # (q, k, v, options, error, message)
    (CPU, CPU, CPU, {"backend": "sim", "arch": "sm_80"}, ArgumentError,
     r"arch must be one of 'sm_90a', 'sm_100a' or None \(the CUDA device's own; sm_90a for CPU tensors\), "
     r"got 'sm_80'"),
    (CPU, CPU, CPU, {"backend": "sim", "arch": 100}, ArgumentTypeError,
     r"arch must be 'sm_90a', 'sm_100a' or None, got int"),
    (meta(1, 8, 2, 96), meta(1, 8, 2, 96), meta(1, 8, 2, 96), {"arch": SM100}, ConfigError,
     r"head_dim must be 64 or 128 on sm_100a, got 96"),
]


@pytest.mark.parametrize("q,k,v,opts,error,message", MISTAKES)
def test_mistakes_are_the_librarys_errors(q, k, v, opts, error, message):
    with pytest.raises(error, match=message):
        ct.attention(q, k, v, **opts)


def test_unknown_arch_under_torch_compile_is_the_librarys():
    f = torch.compile(lambda q, k, v: ct.attention(q, k, v, backend="sim", arch="sm_89")[0] + 1, fullgraph=True,
                      backend="eager")
    with pytest.raises(ArgumentError, match=r"arch must be one of 'sm_90a', 'sm_100a'.*got 'sm_89'"):
        f(CPU, CPU, CPU)
    torch._dynamo.reset()


@pytest.mark.sim_kernel
def test_sm100a_forward_has_no_backward():
    """Differentiating an sm_100a forward is refused by name, not answered by the sm_90a backward."""
    g = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(1, 20, 1, 64, generator=g).to(torch.bfloat16).requires_grad_() for _ in range(3))
    out, _ = ct.attention(q, k, v, backend="sim", arch=SM100)
    with pytest.raises(ArgumentError, match=r"the backward of the sm_100a forward is not implemented \(cutedsl's "
                                            r"attention backward is the FlashAttention-3-style sm_90a kernel\): call "
                                            r"the forward with arch='sm_90a'"):
        out.float().sum().backward()
    assert q.grad is None and k.grad is None and v.grad is None
