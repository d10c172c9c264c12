"""GPU tests of the attention kernels a lease bundles (marked ``gpu``; skipped cleanly without an
NVIDIA driver / Hopper GPU; ``scripts/gpu_run.sh --dry-run`` runs them with the emulator standing in).

Each kernel of the plan (:data:`cutedsl.bench.plans.LEASE_ATTENTION`: the forward at head dims 128
and 64, causal and not, one varlen; the backward at head dim 128) runs on the GPU and on the
emulator on the same random bf16 inputs, at sequence lengths that are not multiples of the 128 x
128 blocks, and is checked against both and against the float64 reference.

Why "close to the emulator" and not bit-identical, as the GEMM families are on integer inputs: the
QK^T and P V products are exact on both, but the softmax's exponentials are ``ex2.approx`` --
``MUFU.EX2`` on the GPU (PTX ISA 9.7.3.21: up to 2 ulp from the correctly rounded result), a
correctly rounded exp2 on the emulator (docs/emulator.md, "tolerance-only") -- and
the tensor cores do not round their f32 sums as the emulator's exact-then-round-once model does.
So P differs in its last f32 bits; P is rounded to bf16 before P V, where such a difference can
flip one bf16 rounding; O (and dQ/dK/dV) are rounded to bf16 again. A difference of a few bf16
ulps (2^-8 relative each) of the largest output is what that allows; no integer-valued input avoids
it (exp of an integer is not one).
"""
import numpy as np
import pytest

from cutedsl import Attention, AttentionConfig
from cutedsl.bench.plans import LEASE_ATTENTION, attention_label
from cutedsl.device.attention_bwd import AttentionBackward
from cutedsl.device.attention_reference import attention_backward_reference, attention_reference
from cutedsl.dtypes import dtype as _dtype

pytestmark = pytest.mark.gpu

BF16 = _dtype("bf16").numpy
#: |GPU - emulator| <= 4 bf16 ulps (2^-8 relative each) of the largest element (module docstring)
EMU_TOL = 4 * 2.0 ** -8
#: against the float64 reference: tests/kernel/test_attention_fwd.py's and _bwd.py's bf16 bounds
O_TOL, GRAD_TOL = 2e-2, 1.5e-2
#: the LSE (f32, natural log; ``lg2.approx`` on the GPU) against the emulator and the reference
LSE_TOL = 1e-3
#: varlen: two packed sequences (queries, keys), neither a block multiple
CU_Q, CU_K = np.array([0, 77, 290], np.int32), np.array([0, 100, 300], np.int32)

FORWARD = [s for s in LEASE_ATTENTION if s[0] == "forward"]
BACKWARD = [s for s in LEASE_ATTENTION if s[0] == "backward"]


def _inputs(rng, d, varlen, dense=((2, 150, 2), (2, 200, 2))):
    """Random bf16 q, k, v: varlen packed per :data:`CU_Q` / :data:`CU_K` (2 heads), else ``dense``
    ``((batch, seqlen_q, heads), (batch, seqlen_k, heads))``."""
    if varlen:
        shapes = [(int(CU_Q[-1]), 2, d), (int(CU_K[-1]), 2, d), (int(CU_K[-1]), 2, d)]
    else:
        (b, sq, h), (_, sk, _) = dense
        shapes = [(b, sq, h, d), (b, sk, h, d), (b, sk, h, d)]
    return [rng.standard_normal(s).astype(BF16) for s in shapes]


def _close(got, emu, name, rng):
    got, emu = np.asarray(got, np.float64), np.asarray(emu, np.float64)
    scale = max(np.abs(emu).max(), 1e-30)
    err = np.abs(got - emu).max()
    same = np.mean(got == emu)
    assert err <= EMU_TOL * scale, (f"{name}: max |GPU - emulator| {err:.3e} > {EMU_TOL:.3e} x {scale:.3e} "
                                    f"({same:.1%} bit-identical; seed {rng.seed_value})")


@pytest.mark.parametrize("spec", FORWARD, ids=[attention_label(s).replace(" ", "-") for s in FORWARD])
def test_attention_forward_on_gpu(spec, rng, cuda, sim):
    _, d, causal, varlen = spec
    q, k, v = _inputs(rng, d, varlen)
    opts = dict(causal=causal) | (dict(cu_seqlens_q=CU_Q, cu_seqlens_k=CU_K) if varlen else {})
    cfg = AttentionConfig(head_dim=d, dtype="bf16")
    o_emu, lse_emu = Attention(cfg, sim)(q, k, v, **opts)
    o, lse = Attention(cfg, cuda)(q, k, v, **opts)
    assert o.dtype == BF16 and o.shape == q.shape and lse.shape == lse_emu.shape
    _close(o, o_emu, "O", rng)
    assert np.abs(lse - lse_emu).max() <= LSE_TOL, np.abs(lse - lse_emu).max()
    ro, rl = attention_reference(q, k, v, **opts)
    err = np.abs(o.astype(np.float64) - ro).max()
    assert err < O_TOL, f"O vs float64: {err:.3e} (seed {rng.seed_value})"
    assert np.abs(lse - rl).max() <= LSE_TOL, np.abs(lse - rl).max()


@pytest.mark.parametrize("spec", BACKWARD, ids=[attention_label(s).replace(" ", "-") for s in BACKWARD])
def test_attention_backward_on_gpu(spec, rng, cuda, sim):
    """dQ, dK, dV on the GPU for the emulator's forward O and LSE (the same inputs on both); one
    head of 80 queries and 100 keys (64-row blocks: partial ones of each) keeps the emulator's
    backward to seconds."""
    _, d, causal, varlen = spec
    q, k, v = _inputs(rng, d, varlen, dense=((1, 80, 1), (1, 100, 1)))
    dout = rng.standard_normal(q.shape).astype(BF16)
    cfg = AttentionConfig(head_dim=d, dtype="bf16")
    o, lse = Attention(cfg, sim)(q, k, v, causal=causal)
    emu = AttentionBackward(cfg, sim)(dout, q, k, v, o, lse, causal=causal)
    got = AttentionBackward(cfg, cuda)(dout, q, k, v, o, lse, causal=causal)
    want = attention_backward_reference(dout, q, k, v, causal=causal)
    for name, g, e, w in zip(("dq", "dk", "dv"), got, emu, want):
        assert g.dtype == BF16 and g.shape == w.shape
        _close(g, e, name, rng)
        err = np.abs(g.astype(np.float64) - w).max()
        assert err <= GRAD_TOL * max(1.0, np.abs(w).max()), f"{name} vs float64: {err:.3e} (seed {rng.seed_value})"
