"""The float64 backward reference (attention_backward_reference) against torch autograd in float64
on the CPU, through a forward written from the definitions (masked_fill, softmax, P V): causal
aligned bottom-right with seqlen_q != seqlen_k (rows with no key: zero gradients), sliding
windows, softcap, GQA (dK/dV summed over the group), varlen with 0-length sequences."""
import numpy as np
import pytest
import torch

from cutedsl.device.attention_reference import attention_backward_reference, attention_reference, mask
from cutedsl.errors import ArgumentError


def _torch_grads(do, q, k, v, scale, causal=False, window=None, softcap=None):
    """One dense batch element through torch autograd: (seqlen, heads, d) arrays in."""
    qt, kt, vt = (torch.tensor(x, dtype=torch.float64, requires_grad=True) for x in (q, k, v))
    sq, h, _ = q.shape
    sk, hk, _ = k.shape
    keep = torch.tensor(mask(sq, sk, causal, window))
    kk = kt.repeat_interleave(h // hk, dim=1)
    vv = vt.repeat_interleave(h // hk, dim=1)
    s = torch.einsum("qhd,khd->hqk", qt, kk) * scale
    if softcap:
        s = softcap * torch.tanh(s / softcap)
    s = s.masked_fill(~keep, float("-inf"))
    m = s.detach().amax(-1, keepdim=True)
    m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
    p = torch.exp(s - m)
    tot = p.sum(-1, keepdim=True)
    p = p / torch.where(tot > 0, tot, torch.ones_like(tot))
    o = torch.einsum("hqk,khd->qhd", p, vv)
    o.backward(torch.tensor(do, dtype=torch.float64))
    return o.detach().numpy(), qt.grad.numpy(), kt.grad.numpy(), vt.grad.numpy()


@pytest.mark.parametrize("sq,sk,h,hk,causal,window,softcap", [
    (5, 9, 2, 2, False, None, None),
    (9, 5, 4, 2, True, None, None),         # rows 0..3 see no key: zero dq, no dk/dv from them
    (12, 12, 3, 1, False, (3, 2), None),
    (7, 11, 2, 1, True, (4, -1), 1.5),
])
def test_dense_against_torch_autograd(sq, sk, h, hk, causal, window, softcap, rng):
    q = rng.standard_normal((2, sq, h, 8))
    k = rng.standard_normal((2, sk, hk, 8))
    v = rng.standard_normal((2, sk, hk, 8))
    do = rng.standard_normal((2, sq, h, 8))
    opts = dict(softmax_scale=0.7, causal=causal, window=window, softcap=softcap)
    dq, dk, dv = attention_backward_reference(do, q, k, v, **opts)
    o_ref, _ = attention_reference(q, k, v, **opts)
    for b in range(2):
        o, tq, tk, tv = _torch_grads(do[b], q[b], k[b], v[b], 0.7, causal, window, softcap)
        assert np.allclose(o, o_ref[b], atol=1e-12)
        for got, want in ((dq[b], tq), (dk[b], tk), (dv[b], tv)):
            assert got.shape == want.shape
            assert np.allclose(got, want, rtol=1e-10, atol=1e-12), np.abs(got - want).max()
    if causal and sq > sk:
        assert np.all(dq[:, :sq - sk] == 0)                      # no key left: no gradient


def test_varlen_is_the_dense_per_sequence(rng):
    lens_q, lens_k = [3, 0, 6], [4, 2, 0]                          # 0-length queries, then 0-length keys
    cq = np.concatenate([[0], np.cumsum(lens_q)]).astype(np.int32)
    ck = np.concatenate([[0], np.cumsum(lens_k)]).astype(np.int32)
    q, do = rng.standard_normal((cq[-1], 2, 8)), rng.standard_normal((cq[-1], 2, 8))
    k, v = rng.standard_normal((ck[-1], 1, 8)), rng.standard_normal((ck[-1], 1, 8))
    dq, dk, dv = attention_backward_reference(do, q, k, v, causal=True, cu_seqlens_q=cq, cu_seqlens_k=ck)
    assert np.all(dq[cq[2]:] == 0)                                 # the last sequence has no key
    for b in range(3):
        qs, ks = slice(cq[b], cq[b + 1]), slice(ck[b], ck[b + 1])
        if lens_q[b] and lens_k[b]:
            _, tq, tk, tv = _torch_grads(do[qs], q[qs], k[ks], v[ks], 8 ** -0.5, causal=True)
            assert np.allclose(dq[qs], tq) and np.allclose(dk[ks], tk) and np.allclose(dv[ks], tv)
    assert np.all(dk[ck[1]:ck[2]] == 0) and np.all(dv[ck[1]:ck[2]] == 0)   # its queries are empty


def test_dout_shape_is_checked(rng):
    q = rng.standard_normal((1, 4, 2, 8))
    with pytest.raises(ArgumentError, match="dout must have o's shape"):
        attention_backward_reference(q[:, :3], q, q, q)
