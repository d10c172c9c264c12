"""Register -> swizzled shared-memory operand store (issue 41): an f32 accumulator stored by
``store_operand`` into a buffer that declares a WGMMA operand layout, then read by an SS WGMMA;
the product is checked against numpy float64 on the emulator (A and B, K- and MN-major, plain
and transposed stmatrix, fresh random inputs). Mismatching buffers are refused while building."""
import ml_dtypes
import numpy as np
import pytest

from cutedsl.atom import TmaCopy, WarpgroupMMA
from cutedsl.atom.operand_store import store_operand
from cutedsl.atom.sync import fence_proxy_async
from cutedsl.errors import LayoutError
from cutedsl.testing import (accumulator_from, build_kernel, load_operands, normalize_ptx, operand_buffer, rounded,
                             run_kernel, store_accumulator)

NP = {"f16": np.float16, "bf16": ml_dtypes.bfloat16}


def _kernel(role, major, x_shape, col0, rows, other_rows, other_major, dtype):
    """X (f32, ``x_shape``) -> accumulator -> store_operand into buffer "x" (operand ``role``,
    ``major``, ``rows`` M/N rows; role A: one stage per 64 columns of X) -> fence + barrier ->
    WGMMA with the other operand (``other_rows`` rows, ``other_major``) from TMA."""
    from cutedsl.ir import SmemPlan
    xm, xn = x_shape
    k_tiles = xn // 64 if role == "A" else 1
    plan = SmemPlan()
    operand_buffer(plan, "x", rows, dtype, major, k_tiles)
    spec = operand_buffer(plan, "o", other_rows, dtype, other_major, k_tiles)
    plan.barriers("bar", 1)
    m, n = (rows, other_rows) if role == "A" else (other_rows, rows)

    def body(args, smem):
        from mlir.dialects import gpu
        import cutedsl.ir as cir
        load_operands(smem, [(TmaCopy(spec, args.o), "o", other_rows, other_major, k_tiles)])
        x = accumulator_from(cir.GlobalPtr(args.x, "f32"), WarpgroupMMA(xm, xn, "f16"), xn)
        for kt in range(k_tiles):
            store_operand(x, smem["x"].tile(kt), role, col0=64 * kt if role == "A" else col0)
        fence_proxy_async()                 # generic-proxy stores -> the WGMMA's async-proxy reads
        gpu.barrier()
        if role == "A":
            mma = WarpgroupMMA(m, n, dtype, b_major=other_major, a_major=major)
            operands = [(smem["x"].tile(kt), smem["o"].tile(kt)) for kt in range(k_tiles)]
        else:
            mma = WarpgroupMMA(m, n, dtype, b_major=major, a_major=other_major)
            operands = [(smem["o"].tile(0), smem["x"].tile(0))]
        acc = mma.undef()
        for kt, (a, b) in enumerate(operands):
            acc = mma.mma(acc, a, b, accumulate=kt > 0)
        mma.wait(0)
        store_accumulator(acc, cir.GlobalPtr(args.out, "f32"), n)
    return build_kernel(body, params=(("x", "ptr"), ("o", "tensormap"), ("out", "ptr")), plan=plan), spec, (m, n)


#      role major x_shape   col0 rows other_rows other_major dtype
CASES = [("A", "K", (128, 128), 0, 128, 64, "K", "bf16"),      # two k-tiles, two m-blocks
         ("A", "MN", (64, 64), 0, 64, 128, "MN", "f16"),       # M-major A: .trans stores
         ("B", "MN", (64, 128), 0, 128, 64, "K", "bf16"),      # N-major B in two 64-column boxes
         ("B", "K", (64, 192), 64, 64, 128, "K", "f16")]       # K-major B (.trans), columns 64..127


def _check(case, rng, expect_right=True):
    role, major, x_shape, col0, rows, other_rows, other_major, dtype = case
    kern, spec, (m, n) = _kernel(*case)
    x = (rng.standard_normal(x_shape) * 2).astype(np.float32)
    k = 64 * (x_shape[1] // 64) if role == "A" else 64
    o, o64 = rounded(rng, (n, k) if role == "A" else (m, k), NP[dtype])    # B^T (N, K) or A (M, K)
    glob = np.ascontiguousarray(o.T if other_major == "MN" else o)
    from cutedsl.sim import Emulator
    emu = Emulator()
    tmap = emu.tensor_map(emu.to_device(glob), glob.shape, dtype, spec.box, swizzle=spec.swizzle)
    out = np.zeros((m, n), np.float32)
    run_kernel(kern, [x, tmap, out], emu=emu)
    got = out.astype(np.float64)
    xr = x.astype(NP[dtype]).astype(np.float64)                  # cvt.rn to the operand type
    want = xr @ o64.T if role == "A" else o64 @ xr[:, col0:col0 + rows]
    close = np.allclose(got, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())
    assert close == expect_right, np.abs(got - want).max() / np.abs(want).max()
    return kern


@pytest.mark.sim_kernel
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}-{c[1]}-{c[7]}")
def test_stored_operand_feeds_wgmma(case, rng):
    kern = _check(case, rng)
    role, major = case[:2]
    trans = (role == "A") == (major == "MN")
    form = "stmatrix.sync.aligned.m8n8.x4" + (".trans" if trans else "") + ".shared.b16"
    # one x4 per 64-row block and 16 stored columns (each warp: its 16 rows), per stored k-tile
    cols, k_tiles = (64, case[2][1] // 64) if role == "A" else (case[4], 1)
    assert normalize_ptx(kern.ptx).count(form) == (case[2][0] // 64) * (cols // 16) * k_tiles
    assert kern.resources.spill_stores == 0


@pytest.mark.sim_kernel
def test_an_unswizzled_store_is_caught(rng, monkeypatch):
    """The check has teeth: the same store without the swizzle XOR gives a wrong product."""
    import cutedsl.ir.smem_tile as st
    monkeypatch.setattr(st, "swizzle_offset", lambda off, swizzle: off)
    _check(CASES[0], rng, expect_right=False)


def _refused(buffer_kw, role="A", col0=0, x=(64, 64)):
    from cutedsl.ir import SmemPlan
    plan = SmemPlan()
    plan.buffer("x", **buffer_kw)

    def body(args, smem):
        acc = WarpgroupMMA(x[0], x[1], "f16").zero()
        store_operand(acc, smem["x"].tile(), role, col0=col0)
    build_kernel(body, plan=plan)


@pytest.mark.parametrize("kw,role,col0,x,msg", [
    (dict(shape=(64, 64), dtype="f16", swizzle=0, major="K"), "A", 0, (64, 64),
     r"buffer 'x' \(f16 \[64, 64\], swizzle 0 B, K-major\) is no WGMMA operand layout: the descriptors read "
     "128-byte swizzled operands; declare the buffer with swizzle=128"),
    (dict(shape=(64, 32), dtype="f16", swizzle=64, major="K"), "A", 0, (64, 64), "swizzle 64 B.* declare the buffer with swizzle=128"),
    (dict(shape=(64, 64), dtype="f16", swizzle=128), "A", 0, (64, 64), "declares no major"),
    (dict(shape=(64, 32), dtype="f32", swizzle=128, major="K"), "A", 0, (64, 64), "must hold f16 or bf16"),
    (dict(shape=(64, 64), dtype="bf16", swizzle=128, major="K"), "A", 0, (128, 64),
     "takes 64 accumulator rows .* got 128 rows"),
    (dict(shape=(64, 64), dtype="bf16", swizzle=128, major="K"), "A", 64, (64, 64), "col0 64"),
    (dict(shape=(128, 64), dtype="bf16", swizzle=128, major="MN"), "B", 0, (64, 64),
     r"takes 64 accumulator rows and columns col0 .. col0 \+ 128"),
    (dict(shape=(32, 64), dtype="f16", swizzle=128, major="K"), "A", 0, (64, 64),
     "takes 32 accumulator rows"),
])
def test_mismatching_buffers_are_refused(kw, role, col0, x, msg):
    with pytest.raises(LayoutError, match=msg):
        _refused(kw, role, col0, x)
    with pytest.raises(ValueError, match="role must be 'A' or 'B', got 'C'"):
        _refused(dict(shape=(64, 64), dtype="f16", swizzle=128, major="K"), "C")
