"""Row reductions of the WGMMA accumulator fragment (issue 41): per-row max and sum over the quad
of lanes that share a row (shfl.sync.bfly 1, 2), and a softmax in registers from the fast-math
helpers (ex2.approx.ftz, rcp.approx.ftz, max.f32, fma.rn) -- on the emulator against numpy
float64, fresh random inputs, two 64-row blocks and N = 96 (not a power of two)."""
import numpy as np
import pytest

from cutedsl.atom import WarpgroupMMA
from cutedsl.atom.fragment_rows import ROW_HALVES, map_rows, row_half, row_max, row_sum
from cutedsl.testing import accumulator_from, build_kernel, normalize_ptx, run_kernel, store_accumulator

M, N = 128, 96


def _body(args, smem):
    import cutedsl.ir as cir
    from cutedsl.ir import fmath
    mma = WarpgroupMMA(M, N, "f16")
    x = accumulator_from(cir.GlobalPtr(args.x, "f32"), mma, N)
    mx, sm = row_max(x), row_sum(x)
    # softmax(x) = 2^(x log2e - max log2e) / sum, the exponent by one fma as FlashAttention does
    e = map_rows(x, lambda v, m: fmath.exp2(fmath.fma(v, fmath.LOG2E, -(m * fmath.LOG2E))), mx)
    inv = [[fmath.rcp_approx(s) for s in blk] for blk in row_sum(e)]
    store_accumulator(map_rows(e, lambda v, r: v * r, inv), cir.GlobalPtr(args.p, "f32"), N)
    # one lane of each quad writes its two rows' statistics (the other three hold the same values)
    t = cir.thread_idx()
    row0 = (t // 32) * 16 + (t % 32) // 4
    stats = cir.GlobalPtr(args.stats, "f32")
    with cir.If((t % 4).eq(0)):
        for b in range(M // 64):
            for h in range(ROW_HALVES):
                r = row0 + 64 * b + 8 * h
                stats.store(cir.i64(r * 3), mx[b][h])
                stats.store(cir.i64(r * 3 + 1), sm[b][h])
                stats.store(cir.i64(r * 3 + 2), fmath.fmin(mx[b][h], sm[b][h]))


@pytest.mark.sim_kernel
def test_row_reductions_and_softmax_on_emulator(rng):
    k = build_kernel(_body, params=(("x", "ptr"), ("p", "ptr"), ("stats", "ptr")))
    ptx = normalize_ptx(k.ptx)
    # 3 reductions (max, sum, sum of exp) x 2 blocks x 2 rows x 2 butterfly steps
    assert ptx.count("shfl.sync.bfly.b32") == 3 * 2 * 2 * 2
    assert "ex2.approx.ftz.f32" in ptx and "rcp.approx.ftz.f32" in ptx and "max.f32" in ptx
    assert "fma.rn.f32" in ptx and "min.f32" in ptx
    x = (rng.standard_normal((M, N)) * 4).astype(np.float32)
    x[5, 7] = -np.inf                                   # a masked score: exp2 gives 0
    x[70, :50] = -np.inf
    p32, stats32 = np.zeros((M, N), np.float32), np.zeros((M, 3), np.float32)
    run_kernel(k, [x, p32, stats32])
    p, stats = p32.astype(np.float64), stats32.astype(np.float64)
    x64 = x.astype(np.float64)
    mx = x64.max(axis=1)
    assert np.array_equal(stats[:, 0], mx)
    np.testing.assert_allclose(stats[:, 1], x64.sum(axis=1), rtol=1e-5, atol=1e-4)    # -inf rows stay -inf
    assert stats[5, 1] == -np.inf and stats[70, 1] == -np.inf
    assert np.array_equal(stats[:, 2], np.minimum(mx, stats[:, 1]))
    e = np.exp(x64 - mx[:, None])
    want = e / e.sum(axis=1, keepdims=True)
    np.testing.assert_allclose(p, want, rtol=1e-5, atol=1e-7)
    assert p[5, 7] == 0 and np.all(p[70, :50] == 0)


def test_row_half_matches_the_fragment_rows():
    from cutedsl.atom.wgmma import fragment_coords
    for t in (0, 5, 37, 127):
        row0 = fragment_coords(t, 0)[0]
        for i in range(N // 2):
            assert fragment_coords(t, i)[0] == row0 + 8 * row_half(i)


def test_shfl_xor_arguments():
    from cutedsl.ir import shfl_xor
    with pytest.raises(ValueError, match="lane_mask must be an int in 1..3, got 4"):
        shfl_xor(None, 4, width=4)
    with pytest.raises(ValueError, match="width must be a power of two in 2..32, got 6"):
        shfl_xor(None, 1, width=6)
