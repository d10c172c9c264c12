"""WGMMA with A from registers (issue 41): the inline-PTX RS form, its A fragment layout and its
B descriptors, run on the emulator against numpy float64 (fresh random inputs; K-major and
MN-major B; f16 and bf16; M = 64 and 128; N = 64, 96 and 256; K = two k-tiles)."""
import ml_dtypes
import numpy as np
import pytest

from cutedsl.atom.wgmma_rs import AFragment, WarpgroupMMARegA
from cutedsl.errors import ConfigError, LayoutError
from cutedsl.testing import (build_kernel, load_operands, normalize_ptx, operand_buffer, rounded, run_kernel,
                             store_accumulator)

NP = {"f16": np.float16, "bf16": ml_dtypes.bfloat16}
K_TILES = 2


def _kernel(m, n, dtype, b_major):
    """A (m x K, 16-bit, row-major in global) is read straight into the A fragment: register r
    of k-step j of block b is the packed pair at row 64b + 16w + l/4 + 8 (r % 2), column
    16j + 8 (r // 2) + 2 (t % 4) -- the PTX ISA's A-fragment layout written out here
    independently of the atom. B comes through TMA; D = A @ B over K_TILES k-tiles."""
    from cutedsl.atom import TmaCopy
    from cutedsl.ir import SmemPlan
    k = 64 * K_TILES
    plan = SmemPlan()
    spec = operand_buffer(plan, "b", n, dtype, b_major, K_TILES)
    plan.barriers("bar", 1)

    def body(args, smem):
        import cutedsl.ir as cir
        load_operands(smem, [(TmaCopy(spec, args.b), "b", n, b_major, K_TILES)])
        t = cir.thread_idx() % 128
        words = cir.GlobalPtr(args.a, "i32")
        row = (t // 32) * 16 + (t % 32) // 4
        col = (t % 4) * 2
        regs = [[[words.load(cir.i64(((row + 64 * b + 8 * (r % 2)) * k + col + 16 * j + 8 * (r // 2)) // 2))
                  for r in range(4)] for j in range(4 * K_TILES)] for b in range(m // 64)]
        frag = AFragment(regs, dtype)
        mma = WarpgroupMMARegA(m, n, dtype, b_major)
        acc = mma.undef()
        for kt in range(K_TILES):
            acc = mma.mma(acc, frag, smem["b"].tile(kt), accumulate=kt > 0, k_tile=kt)
        mma.wait(0)
        store_accumulator(acc, cir.GlobalPtr(args.out, "f32"), n)
    kern = build_kernel(body, params=(("a", "ptr"), ("b", "tensormap"), ("out", "ptr")), plan=plan)
    return kern, spec


CASES = [(64, 64, "f16", "K"), (64, 96, "bf16", "K"), (128, 64, "bf16", "MN"), (64, 256, "f16", "MN")]


@pytest.mark.sim_kernel
@pytest.mark.parametrize("m,n,dtype,b_major", CASES)
def test_register_a_wgmma_on_emulator(m, n, dtype, b_major, rng):
    kern, spec = _kernel(m, n, dtype, b_major)
    k = 64 * K_TILES
    lines = [line for line in kern.ptx.splitlines() if "wgmma.mma_async" in line]
    # one instruction per k16 step and m-block; A is a brace list of 4 registers, trans-b per major
    assert len(lines) == (m // 64) * 4 * K_TILES
    assert all(f"m64n{n}k16.f32.{dtype}.{dtype}" in line for line in lines)
    assert all(normalize_ptx(line).replace(" ", "").endswith(f"p,1,1,{1 if b_major == 'MN' else 0};") for line in lines)
    assert kern.resources.sass["HGMMA"] == len(lines) and kern.resources.spill_stores == 0
    assert kern.resources.ptxas_messages == ()          # no injected waits, no serialised wgmma
    a, a64 = rounded(rng, (m, k), NP[dtype])
    bmat, b64 = rounded(rng, (k, n), NP[dtype])       # B as the math sees it: (K, N)
    glob = np.ascontiguousarray(bmat.T if b_major == "K" else bmat)
    from cutedsl.sim import Emulator
    emu = Emulator()
    db = emu.to_device(glob)
    tmap = emu.tensor_map(db, glob.shape, dtype, spec.box, swizzle=spec.swizzle)
    out = np.zeros((m, n), np.float32)
    run_kernel(kern, [a.view(np.int32), tmap, out], emu=emu)
    got = out.astype(np.float64)
    want = a64 @ b64
    # the emulator sums each k16 product exactly and rounds to f32 once per instruction
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())


def test_register_a_wgmma_refusals():
    with pytest.raises(ConfigError, match="WarpgroupMMARegA dtype must be one of .* got 'tf32'"):
        WarpgroupMMARegA(64, 64, "tf32")
    with pytest.raises(ValueError, match="WGMMA N must be a multiple of 8"):
        WarpgroupMMARegA(64, 100, "f16")
    mma = WarpgroupMMARegA(64, 64, "bf16")
    with pytest.raises(ConfigError, match="operand A must be an AFragment"):
        mma.mma(None, object(), None)
    with pytest.raises(ConfigError, match="got an A fragment of f16"):
        mma.mma(None, AFragment([[[0] * 4] * 4], "f16"), None)
    with pytest.raises(ConfigError, match="k_tile 1 is outside the A fragment's K = 64"):
        mma.mma(None, AFragment([[[0] * 4] * 4], "bf16"), None, k_tile=1)
    with pytest.raises(ConfigError, match="AFragment dtype must be one of"):
        AFragment([[[0] * 4]], "f32")


def test_register_a_wgmma_checks_the_b_buffer():
    """A B buffer whose declared layout the descriptor cannot read is refused while building."""
    from cutedsl.ir import SmemPlan

    def body(args, smem):
        mma = WarpgroupMMARegA(64, 64, "f16", b_major="MN")
        frag = AFragment([[[mma.zero().get(0, 0).to("i32")] * 4] * 4], "f16")
        mma.mma(mma.zero(), frag, smem["b"].tile())
    plan = SmemPlan()
    plan.buffer("b", (64, 64), "f16", swizzle=128, major="K")
    with pytest.raises(LayoutError, match="operand B .* K-major, needs MN-major"):
        build_kernel(body, plan=plan)
