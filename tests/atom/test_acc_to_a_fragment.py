"""Accumulator -> A fragment (issue 41): S = Q K^T by the SS WGMMA, S's f32 fragment re-packed
as the A operand (cvt.rn.{f16x2,bf16x2}.f32), O = P V by the register-A WGMMA -- the two GEMMs
of an attention tile, run on the emulator with fresh random inputs against numpy float64."""
import ml_dtypes
import numpy as np
import pytest

from cutedsl.atom import TmaCopy, WarpgroupMMA
from cutedsl.atom.wgmma_rs import AFragment, WarpgroupMMARegA
from cutedsl.errors import ConfigError
from cutedsl.testing import (build_kernel, load_operands, normalize_ptx, operand_buffer, rounded, run_kernel,
                             store_accumulator)

NP = {"f16": np.float16, "bf16": ml_dtypes.bfloat16}


def _kernel(m, kv, d, dtype, v_major):
    """Q (m x d) and K (kv x d) are K-major operands of S = Q K^T (d / 64 k-tiles); V (kv x d)
    is B of O = P V (kv / 64 k-tiles), MN-major (V row-major) or K-major (V^T row-major)."""
    from cutedsl.ir import SmemPlan
    plan = SmemPlan()
    specs = {"q": operand_buffer(plan, "q", m, dtype, "K", d // 64),
             "k": operand_buffer(plan, "k", kv, dtype, "K", d // 64),
             "v": operand_buffer(plan, "v", d, dtype, v_major, kv // 64)}
    plan.barriers("bar", 1)

    def body(args, smem):
        import cutedsl.ir as cir
        load_operands(smem, [(TmaCopy(specs["q"], args.q), "q", m, "K", d // 64),
                             (TmaCopy(specs["k"], args.k), "k", kv, "K", d // 64),
                             (TmaCopy(specs["v"], args.v), "v", d, v_major, kv // 64)])
        qk = WarpgroupMMA(m, kv, dtype, b_major="K")
        s = qk.undef()
        for kt in range(d // 64):
            s = qk.mma(s, smem["q"].tile(kt), smem["k"].tile(kt), accumulate=kt > 0)
        qk.wait(0)
        store_accumulator(s, cir.GlobalPtr(args.s, "f32"), kv)
        p = AFragment.from_accumulator(s, dtype)
        pv = WarpgroupMMARegA(m, d, dtype, b_major=v_major)
        o = pv.undef()
        for kt in range(kv // 64):
            o = pv.mma(o, p, smem["v"].tile(kt), accumulate=kt > 0, k_tile=kt)
        pv.wait(0)
        store_accumulator(o, cir.GlobalPtr(args.o, "f32"), d)
    params = (("q", "tensormap"), ("k", "tensormap"), ("v", "tensormap"), ("s", "ptr"), ("o", "ptr"))
    return build_kernel(body, params=params, plan=plan), specs


@pytest.mark.sim_kernel
@pytest.mark.parametrize("m,kv,d,dtype,v_major", [(64, 128, 64, "bf16", "MN"), (128, 64, 128, "f16", "K"),
                                                  (64, 192, 128, "bf16", "K")])
def test_qk_then_pv_with_register_a(m, kv, d, dtype, v_major, rng):
    kern, specs = _kernel(m, kv, d, dtype, v_major)
    cvt = {"f16": "cvt.rn.f16x2.f32", "bf16": "cvt.rn.bf16x2.f32"}[dtype]
    assert normalize_ptx(kern.ptx).count(cvt) == m * kv // 128 // 2      # one per pair of the thread's S values
    assert kern.resources.spill_stores == 0 and kern.resources.ptxas_messages == ()
    q, q64 = rounded(rng, (m, d), NP[dtype])
    k, k64 = rounded(rng, (kv, d), NP[dtype])
    v, v64 = rounded(rng, (kv, d), NP[dtype])
    from cutedsl.sim import Emulator
    emu = Emulator()
    maps = []
    for name, arr in (("q", q), ("k", k), ("v", v.T.copy() if v_major == "K" else v)):
        maps.append(emu.tensor_map(emu.to_device(arr), arr.shape, dtype, specs[name].box, swizzle=128))
    s, o32 = np.zeros((m, kv), np.float32), np.zeros((m, d), np.float32)
    run_kernel(kern, maps + [s, o32], emu=emu)
    o = o32.astype(np.float64)
    want_s = q64 @ k64.T
    np.testing.assert_allclose(s, want_s, rtol=1e-5, atol=1e-5 * np.abs(want_s).max())
    # P is S rounded to nearest even in the 16-bit type (cvt.rn), exactly what numpy's cast does
    p64 = s.astype(NP[dtype]).astype(np.float64)
    want_o = p64 @ v64
    np.testing.assert_allclose(o, want_o, rtol=1e-5, atol=1e-5 * np.abs(want_o).max())
    # and the rounding is real: with unrounded P the error is of the 16-bit type's size
    assert np.abs(want_s @ v64 - o).max() > 1e-4 * np.abs(want_o).max()


def test_conversion_refusals():
    class Acc:
        n, regs, m_blocks = 40, 20, 1
    with pytest.raises(ConfigError, match="N = 40 must be a multiple of 16"):
        AFragment.from_accumulator(Acc(), "bf16")
    with pytest.raises(ConfigError, match="dtype must be one of .* got 'tf32'"):
        AFragment.from_accumulator(Acc(), "tf32")
