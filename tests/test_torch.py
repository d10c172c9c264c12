"""torch integration (issue 22): the custom ops are registered, their fake implementations give
shapes/dtypes/strides, torch.compile traces a call without a graph break, and mistakes
(CPU tensors, dtypes, shapes) are clear errors. The real launch runs under the gpu marker."""
import pytest

torch = pytest.importorskip("torch")

import cutedsl.torch as ct                     # noqa: E402
from cutedsl import GemmConfig                 # noqa: E402
from cutedsl.errors import ArgumentError, ArgumentTypeError   # noqa: E402


def meta(*shape, dtype=torch.float16):
    return torch.empty(shape, dtype=dtype, device="meta")


def test_ops_are_registered():
    assert hasattr(torch.ops.cutedsl, "gemm") and hasattr(torch.ops.cutedsl, "gemm_out")
    schema = str(torch.ops.cutedsl.gemm.default._schema)
    assert schema.startswith("cutedsl::gemm(Tensor a, Tensor b, str config) -> Tensor")


@pytest.mark.parametrize("dtype,config,out_dtype,pitch", [
    (torch.float16, None, torch.float32, 132),                       # 130 f32 columns: rows padded to 16 B
    (torch.bfloat16, GemmConfig(dtype="bf16", out_dtype="bf16"), torch.bfloat16, 136),
])
def test_fake_implementation_gives_shape_dtype_strides(dtype, config, out_dtype, pitch):
    d = ct.gemm(meta(300, 70, dtype=dtype), meta(70, 130, dtype=dtype), config=config)
    assert d.device.type == "meta" and tuple(d.shape) == (300, 130) and d.dtype == out_dtype
    assert d.stride() == (pitch, 1)


def test_torch_compile_traces_without_a_graph_break():
    def f(a, b):
        return ct.gemm(a, b) * 2.0

    a, b = meta(256, 64), meta(64, 96)
    explanation = torch._dynamo.explain(f)(a, b)
    assert explanation.graph_break_count == 0 and explanation.graph_count == 1
    ops = [str(n.target) for g in explanation.graphs for n in g.graph.nodes if n.op == "call_function"]
    assert any("cutedsl.gemm" in o for o in ops), ops
    out = torch.compile(f, fullgraph=True, backend="eager")(a, b)
    assert tuple(out.shape) == (256, 96) and out.dtype == torch.float32


def test_mistakes_are_clear_errors():
    with pytest.raises(ArgumentError, match=r"a is a CPU tensor; the kernels run on CUDA tensors \(use torch.matmul"):
        ct.gemm(torch.ones(4, 4, dtype=torch.float16), torch.ones(4, 4, dtype=torch.float16))
    with pytest.raises(ArgumentTypeError, match="b has dtype torch.float32; the kernels take"):
        ct.gemm(meta(4, 4), meta(4, 4, dtype=torch.float32))
    with pytest.raises(ArgumentError, match=r"a.shape\[1\] \(4\) != b.shape\[0\] \(5\)"):
        ct.gemm(meta(4, 4), meta(5, 4))
    with pytest.raises(ArgumentTypeError, match="config must be a GemmConfig or None"):
        ct.gemm(meta(4, 4), meta(4, 4), config="fast")
    with pytest.raises(ArgumentTypeError, match="the config's dtype is bf16"):
        ct.gemm(meta(4, 4), meta(4, 4), config=GemmConfig(dtype="bf16"))


@pytest.mark.gpu
def test_real_launch_matches_torch_matmul(cuda):
    a = torch.randn(333, 520, device="cuda", dtype=torch.float16)
    b = torch.randn(520, 777, device="cuda", dtype=torch.float16)
    ref = a.double() @ b.double()
    for config in (None, GemmConfig(schedule="pingpong")):
        d = ct.gemm(a, b, config=config)
        assert d.is_cuda and d.dtype == torch.float32
        assert ((d.double() - ref).abs().max() / ref.abs().max()).item() < 2e-3
    out = torch.empty_strided((333, 777), (780, 1), dtype=torch.float32, device="cuda")
    assert ct.gemm(a, b, out=out) is out
    d2 = torch.compile(lambda x, y: ct.gemm(x, y), fullgraph=True)(a, b)
    assert ((d2.double() - ref).abs().max() / ref.abs().max()).item() < 2e-3


@pytest.mark.parametrize("fullgraph", [True, False])
def test_errors_under_torch_compile_are_the_librarys(fullgraph):
    """Issue 40: under torch.compile(fullgraph=True) a mistake arrived as Dynamo's
    'Unsupported: Observed exception'. The checks now run when the compiled graph runs (the op's
    own implementation), so the library's error reaches the caller as is."""
    f = torch.compile(lambda x, y: torch.relu(ct.gemm(x, y)), fullgraph=fullgraph, backend="eager")
    cpu = torch.ones(4, 4, dtype=torch.float16)
    with pytest.raises(ArgumentError, match=r"a is a CPU tensor; the kernels run on CUDA tensors"):
        f(cpu, cpu)
    with pytest.raises(ArgumentError, match=r"a.shape\[1\] \(4\) != b.shape\[0\] \(5\)"):
        f(meta(4, 4), meta(5, 4))
    with pytest.raises(ArgumentTypeError, match="b has dtype torch.float32; the kernels take"):
        f(meta(4, 4), meta(4, 4, dtype=torch.float32))
    g = torch.compile(lambda x, y, o: ct.gemm(x, y, out=o), fullgraph=fullgraph, backend="eager")
    with pytest.raises(ArgumentError, match=r"out must be a \(4, 4\) tensor"):
        g(meta(4, 4), meta(4, 4), meta(4, 5, dtype=torch.float32))
    torch._dynamo.reset()


def test_config_dtypes_torch_cannot_hold_are_named():
    with pytest.raises(ArgumentTypeError, match="a is torch.float16 but the config's dtype is e4m3"):
        ct.gemm(meta(4, 4), meta(4, 4), config=GemmConfig(dtype="e4m3", b_major="K"))
    with pytest.raises(ArgumentTypeError, match=r"the config's out_dtype 'e4m3' has no torch dtype here"):
        ct.gemm(meta(4, 4), meta(4, 4), config=GemmConfig(out_dtype="e4m3"))
