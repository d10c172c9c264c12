"""Autograd of ``torch.ops.cutedsl.attention`` (issue 42): its backward is the custom op
``torch.ops.cutedsl.attention_backward`` on the FlashAttention-3-style backward. On the emulator
(CPU tensors, backend "sim" named explicitly) ``loss.backward()`` through ``cutedsl.torch.attention``
gives q.grad, k.grad, v.grad within the 16-bit rounding of the float64 reference (the same
gradient torch autograd gives in float64: tests/device/test_attention_bwd_reference.py); a
softcapped forward refuses its backward by name."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")

import cutedsl.torch as ct                                                   # noqa: E402
from cutedsl.device.attention_reference import attention_backward_reference  # noqa: E402
from cutedsl.errors import ArgumentError                                     # noqa: E402

TOL = {torch.bfloat16: 1.5e-2, torch.float16: 4e-3}     # relative to the largest reference gradient


def _leaves(shape_q, shape_kv, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(s, generator=g).to(dtype).requires_grad_() for s in (shape_q, shape_kv, shape_kv)]


def test_backward_op_is_registered():
    schema = str(torch.ops.cutedsl.attention_backward.default._schema)
    assert schema.startswith("cutedsl::attention_backward(Tensor dout, Tensor q, Tensor k, Tensor v, Tensor out, "
                             "Tensor lse, float? softmax_scale, bool causal, SymInt[]? window, str backend)"), schema


@pytest.mark.parametrize("dtype,opts", [
    (torch.bfloat16, {"causal": True}),
    (torch.float16, {"window": (20, 3), "softmax_scale": 0.25}),
])
def test_autograd_matches_the_float64_reference(dtype, opts):
    q, k, v = _leaves((1, 70, 2, 64), (1, 90, 1, 64), dtype, seed=1)        # GQA, ragged
    out, lse = ct.attention(q, k, v, backend="sim", **opts)
    g = torch.Generator().manual_seed(2)
    dout = torch.randn(out.shape, generator=g).to(dtype)
    (out.float() * dout.float()).sum().backward()
    ref = attention_backward_reference(*(x.detach().float().numpy() for x in (dout, q, k, v)), **opts)
    for x, want in zip((q, k, v), ref):
        assert x.grad is not None and x.grad.dtype == dtype and x.grad.shape == x.shape
        err = np.abs(x.grad.float().numpy() - want).max()
        assert err <= TOL[dtype] * max(1.0, np.abs(want).max()), err


def test_softcap_has_no_backward():
    q, k, v = _leaves((1, 8, 1, 64), (1, 8, 1, 64), torch.bfloat16, seed=3)
    out, _ = ct.attention(q, k, v, softcap=3.0, backend="sim")
    with pytest.raises(ArgumentError, match="backward of a softcapped attention is not implemented"):
        out.float().sum().backward()
