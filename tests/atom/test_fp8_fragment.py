"""f32 accumulator -> e4m3/e5m2 register A fragment (issue 41, fp8 attention): a known S is
loaded into an accumulator, converted by ``AFragment.from_accumulator(S, fp8, k_order)`` and
multiplied by V through the register-A WGMMA (m64nNk32, V^T K-major through TMA). The exact
order must give ``fp8(S) @ V``; the permuted order the same product when V's rows are
permuted by ``K_PERMUTATION`` on the host (FlashAttention-3's V^T), and a wrong product
without. Emulator against numpy float64, fresh random inputs."""
import ml_dtypes
import numpy as np
import pytest

from cutedsl.atom import TmaCopy, WarpgroupMMA
from cutedsl.atom.fp8_fragment import K_PERMUTATION
from cutedsl.atom.wgmma_rs import AFragment, WarpgroupMMARegA
from cutedsl.errors import ConfigError
from cutedsl.testing import (accumulator_from, build_kernel, load_operands, normalize_ptx, operand_buffer, rounded,
                             run_kernel, store_accumulator)

NP = {"e4m3": ml_dtypes.float8_e4m3fn, "e5m2": ml_dtypes.float8_e5m2}


def _kernel(m, kv, d, dtype, order):
    from cutedsl.ir import SmemPlan
    plan = SmemPlan()
    kt = kv // 128                                  # 8-bit K tile: 128 elements (128-byte swizzle)
    spec = operand_buffer(plan, "vt", d, dtype, "K", kt)
    plan.barriers("bar", 1)

    def body(args, smem):
        import cutedsl.ir as cir
        load_operands(smem, [(TmaCopy(spec, args.vt), "vt", d, "K", kt)])
        s = accumulator_from(cir.GlobalPtr(args.s, "f32"), WarpgroupMMA(m, kv, dtype, b_major="K"), kv)
        p = AFragment.from_accumulator(s, dtype, order)
        pv = WarpgroupMMARegA(m, d, dtype, b_major="K")
        o = pv.undef()
        for t in range(kt):
            o = pv.mma(o, p, smem["vt"].tile(t), accumulate=t > 0, k_tile=t)
        pv.wait(0)
        store_accumulator(o, cir.GlobalPtr(args.o, "f32"), d)
    return build_kernel(body, params=(("s", "ptr"), ("vt", "tensormap"), ("o", "ptr")), plan=plan), spec


def _permute_rows(v):
    """V with rows permuted in each 32-row step as the permuted A fragment's columns are."""
    idx = np.concatenate([32 * c + np.array(K_PERMUTATION) for c in range(v.shape[0] // 32)])
    return v[idx]


def _run(kern, spec, s, vt, dtype, m, d):
    from cutedsl.sim import Emulator
    emu = Emulator()
    tmap = emu.tensor_map(emu.to_device(vt), vt.shape, dtype, spec.box, swizzle=spec.swizzle)
    o = np.zeros((m, d), np.float32)
    run_kernel(kern, [s, tmap, o], emu=emu)
    return o.astype(np.float64)


@pytest.mark.sim_kernel
@pytest.mark.parametrize("m,kv,d,dtype,order", [(64, 128, 64, "e4m3", "exact"), (128, 256, 64, "e4m3", "permuted"),
                                                (64, 128, 128, "e5m2", "exact"), (64, 128, 64, "e4m3", "permuted")])
def test_accumulator_to_fp8_a_fragment(m, kv, d, dtype, order, rng):
    kern, spec = _kernel(m, kv, d, dtype, order)
    ptx = normalize_ptx(kern.ptx)
    pairs = m * kv // 128 // 2                      # S values per thread, rounded two at a time
    assert ptx.count(f"cvt.rn.satfinite.{dtype}x2.f32") == pairs
    # the exact order exchanges within the quad: 2 shfl per row half and 32 columns; permuted none
    shfl = 2 * 2 * (m // 64) * (kv // 32) if order == "exact" else 0
    assert ptx.count("shfl.sync.idx") == shfl
    assert ptx.count(f"m64n{d}k32.f32.{dtype}.{dtype}") == (m // 64) * kv // 32
    assert kern.resources.spill_stores == 0 and kern.resources.ptxas_messages == ()
    s = (rng.standard_normal((m, kv)) * 4).astype(np.float32)
    v, v64 = rounded(rng, (kv, d), NP[dtype])
    vt = np.ascontiguousarray((_permute_rows(v) if order == "permuted" else v).T)
    got = _run(kern, spec, s, vt, dtype, m, d)
    p64 = s.astype(NP[dtype]).astype(np.float64)    # cvt.rn: nearest even (|S| far below the saturation)
    want = p64 @ v64
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6 * np.abs(want).max())
    # the rounding is real: with S unrounded the error is of fp8's size
    assert np.abs(s.astype(np.float64) @ v64 - got).max() > 1e-3 * np.abs(want).max()


@pytest.mark.sim_kernel
def test_permuted_order_needs_permuted_v(rng):
    """Without V's rows permuted the permuted fragment multiplies the wrong columns."""
    m, kv, d = 64, 128, 64
    kern, spec = _kernel(m, kv, d, "e4m3", "permuted")
    s = (rng.standard_normal((m, kv)) * 4).astype(np.float32)
    v, v64 = rounded(rng, (kv, d), NP["e4m3"])
    got = _run(kern, spec, s, np.ascontiguousarray(v.T), "e4m3", m, d)
    p64 = s.astype(NP["e4m3"]).astype(np.float64)
    assert np.abs(got - p64 @ v64).max() > 0.1 * np.abs(p64 @ v64).max()
    np.testing.assert_allclose(got, _permute_rows(p64.T).T @ v64, rtol=1e-6, atol=1e-6 * np.abs(got).max())


def test_k_permutation_is_a_permutation_of_each_step():
    assert sorted(K_PERMUTATION) == list(range(32))
    # A's columns 4q..4q+3 of thread q are its own accumulator columns 2q, 2q+1, 2q+8, 2q+9
    for q in range(4):
        assert K_PERMUTATION[4 * q:4 * q + 4] == (2 * q, 2 * q + 1, 2 * q + 8, 2 * q + 9)
        assert K_PERMUTATION[16 + 4 * q:20 + 4 * q] == (16 + 2 * q, 17 + 2 * q, 24 + 2 * q, 25 + 2 * q)


def test_fp8_conversion_refusals():
    class Acc:
        n, regs, m_blocks = 48, 24, 1
    with pytest.raises(ConfigError, match="N = 48 must be a multiple of 32 \\(one k32 step of e4m3 A\\)"):
        AFragment.from_accumulator(Acc(), "e4m3")
    with pytest.raises(ConfigError, match="k_order must be one of \\('exact', 'permuted'\\), got 'sorted'"):
        AFragment.from_accumulator(Acc(), "e4m3", "sorted")
    with pytest.raises(ValueError, match="reads e4m3 operands K-major only"):
        WarpgroupMMARegA(64, 64, "e4m3", b_major="MN")
