"""Batched block-scaled GEMMs on sm_100a (issue 24): ``D[l] = A[l] @ B[l]`` with each operand's
packed factors per batch (``mx.pack_scales`` of ``(L, rows, blocks)`` codes: ``(L, atoms * 4,
128)``), rank-3 factor tensor maps loaded at the operand's batch; an operand shared by every
batch (batch extent 1) passes its 2-D factors. Real compiled PTX on the emulator, ragged
shapes, values and factors on their exact grids, different factors per batch."""
import numpy as np
import pytest

from cutedsl import Gemm, GemmConfig
from cutedsl.device import mx
from cutedsl.errors import ArgumentError


def batch(rng, L, rows, k, dtype):
    npt = mx.ELEMENTS[mx.MX_DTYPES[dtype]][0]
    q = rng.integers(-4, 5, (L, rows, k)).astype(npt)
    return q, np.stack([mx.random_scales(rng, rows, k, dtype) for _ in range(L)])


@pytest.mark.parametrize("dtype,pair,shared_b", [("mxfp8", False, False), ("nvfp4", False, True),
                                                 ("mxfp4", True, False), ("mxfp6", True, True)])
def test_mx_batched_exact(dtype, pair, shared_b, rng, sim):
    """3 batches on 4 SMs (one CTA or one CTA pair per MMA), K odd, B per batch or shared."""
    L, m, n, k = 3, 128 + int(rng.integers(1, 100)), 128 + int(rng.integers(1, 12)) * 8, 257 + 2 * int(rng.integers(0, 40))
    qa, sa = batch(rng, L, m, k, dtype)
    qb, sb = batch(rng, 1 if shared_b else L, n, k, dtype)
    kw = dict(mma_sm=2, cluster=(2, 1)) if pair else {}
    cfg = GemmConfig(arch="sm_100a", dtype=dtype, stages=2, sm_count=4, batched=True, **kw)
    b = np.swapaxes(qb, -1, -2)
    b_scales = mx.pack_scales(sb, dtype)
    if shared_b:                                # 2-D B and 2-D factors: one matrix for every batch
        b, b_scales = b[0], b_scales[0]
    d = Gemm(cfg, sim)(qa, b, a_scales=mx.pack_scales(sa, dtype), b_scales=b_scales)
    ref = mx.dequantize(qa, sa, dtype) @ np.swapaxes(mx.dequantize(qb, sb, dtype), -1, -2)
    assert d.shape == (L, m, n) and np.array_equal(np.asarray(d, np.float64), ref), rng.seed_value


def test_mx_batched_factor_shapes_are_checked(rng, sim):
    """A's factors must carry A's batch extent; the packed layout of a batch is per matrix."""
    L, m, n, k = 2, 64, 64, 128
    qa, sa = batch(rng, L, m, k, "mxfp8")
    qb, sb = batch(rng, L, n, k, "mxfp8")
    g = Gemm(GemmConfig(arch="sm_100a", dtype="mxfp8", stages=2, batched=True), sim)
    with pytest.raises(ArgumentError, match=r"a_scales must have shape \(la, sfa_rows, 128\) = \(2, 4, 128\) for this "
                                            r"problem, got \(4, 128\)"):
        g(qa, np.swapaxes(qb, -1, -2), a_scales=mx.pack_scales(sa[0]), b_scales=mx.pack_scales(sb))
    packed = mx.pack_scales(sa)
    assert packed.shape == (2, 4, 128) and np.array_equal(packed[1], mx.pack_scales(sa[1]))
