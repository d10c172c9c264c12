"""stmatrix and ldmatrix atoms: PTX/SASS of every form, and on the emulator: a warp stores a 16 x 16 block in
the WGMMA accumulator fragment layout (plain and transposed), values rounded to f16/bf16, and
loads one back (plain and transposed) against the ISA's fragment."""
import ml_dtypes
import numpy as np
import pytest

from cutedsl.atom.stmatrix import accumulator_x4_rows, ldmatrix, pack_b16x2, stmatrix
from cutedsl.atom.wgmma import fragment_coords
from cutedsl.testing import build_kernel, normalize_ptx, run_kernel

NP = {"f16": np.float16, "bf16": ml_dtypes.bfloat16}


def _block_kernel(dtype, trans):
    """Lane l holds, as accumulator registers 0..7, the values src[fragment_coords(l, i)] of a
    16 x 16 block (f32 input); one x4 stmatrix writes the block row-major (pitch 32 B) into
    shared memory (transposed with .trans); lanes copy it to global as i32 words."""
    def body(args, smem):
        from mlir.dialects import memref
        import cutedsl.ir as cir
        lane = cir.thread_idx()
        src = cir.GlobalPtr(args.src, "f32")
        vals = []
        for i in range(8):
            r = (lane % 32) // 4 + 8 * ((i // 2) % 2)
            c = 8 * (i // 4) + 2 * (lane % 4) + (i % 2)
            vals.append(src.load(cir.i64(r * 16 + c)))
        regs = [pack_b16x2(vals[2 * k], vals[2 * k + 1], dtype) for k in range(4)]
        row, col = accumulator_x4_rows(lane, trans)
        addr = smem["blk"].address() + cir.i64(row * 32 + col * 2)
        stmatrix(addr, regs, trans=trans)
        gpu_sync()
        out = cir.GlobalPtr(args.out, "i32")
        words = smem["blk"].view(shape=(128,), dtype="i32")
        for j in range(4):
            e = lane * 4 + j
            out.store(cir.i64(e), cir.Scalar(memref.load(words, [cir.index(e)])))

    def gpu_sync():
        from mlir.dialects import gpu
        gpu.barrier()
    return body


@pytest.mark.sim_kernel
@pytest.mark.parametrize("dtype", ["f16", "bf16"])
@pytest.mark.parametrize("trans", [False, True])
def test_stmatrix_block_on_emulator(dtype, trans, rng):
    from cutedsl.ir import SmemPlan
    plan = SmemPlan()
    plan.buffer("blk", (16, 16), dtype)
    k = build_kernel(_block_kernel(dtype, trans), params=(("src", "ptr"), ("out", "ptr")), block=(32, 1, 1), plan=plan)
    form = "stmatrix.sync.aligned.m8n8.x4" + (".trans" if trans else "") + ".shared.b16"
    assert form in normalize_ptx(k.ptx) and k.resources.sass.get("STSM") == 1
    cvt = {"f16": "cvt.rn.f16x2.f32", "bf16": "cvt.rn.bf16x2.f32"}[dtype]
    assert normalize_ptx(k.ptx).count(cvt) == 4
    # fractional values exercise the rounding to 16 bits
    src = (rng.standard_normal((16, 16)) * 100).astype(np.float32)
    out = np.zeros(128, np.int32)
    run_kernel(k, [src, out])
    got = out.view(NP[dtype]).reshape(16, 16)
    want = src.astype(NP[dtype])
    assert np.array_equal(got.view(np.uint16), (want.T if trans else want).view(np.uint16))


def test_fragment_pairs_are_stmatrix_registers():
    # register k of the x4 store of column group j = accumulator pair (8j + 2k, 8j + 2k + 1):
    # lane l's pair lies in matrix k at row l // 4, columns 2 (l % 4) + {0, 1}
    for lane in range(32):
        for j in range(2):
            for k in range(4):
                r0, c0 = fragment_coords(lane, 8 * j + 2 * k)
                r1, c1 = fragment_coords(lane, 8 * j + 2 * k + 1)
                assert (r0, c0 - 16 * j) == (8 * (k % 2) + lane // 4, 8 * (k // 2) + 2 * (lane % 4))
                assert (r1, c1) == (r0, c0 + 1)


def test_stmatrix_forms_and_errors():
    def body(args, smem):
        import cutedsl.ir as cir
        a = smem["blk"].address()
        r = cir.i32(cir.thread_idx())
        stmatrix(a, [r])
        stmatrix(a, [r, r], trans=True)
    from cutedsl.ir import SmemPlan
    plan = SmemPlan()
    plan.buffer("blk", (16, 16), "f16")
    ptx = normalize_ptx(build_kernel(body, block=(32, 1, 1), plan=plan).ptx)
    assert "stmatrix.sync.aligned.m8n8.x1.shared.b16" in ptx
    assert "stmatrix.sync.aligned.m8n8.x2.trans.shared.b16" in ptx
    with pytest.raises(ValueError, match="1, 2 or 4 matrices, got 3"):
        stmatrix(None, [1, 2, 3])
    with pytest.raises(ValueError, match="dtype must be f16 or bf16, got 'f32'"):
        pack_b16x2(None, None, "f32")


def _ldmatrix_kernel(trans):
    """A 16 x 16 block of u16 (row pitch 32 B) to shared memory by plain stores, then one x4
    ldmatrix: lane l addresses row l % 8 of matrix l // 8 (rows 8 (k % 2) .., columns 8 (k // 2)
    ..); every lane writes its 4 registers to out[l, k]."""
    def body(args, smem):
        from mlir.dialects import gpu, memref
        import cutedsl.ir as cir
        lane = cir.thread_idx()
        src, out = cir.GlobalPtr(args.src, "i32"), cir.GlobalPtr(args.out, "i32")
        words = smem["blk"].view(shape=(128,), dtype="i32")
        for j in range(4):
            e = lane * 4 + j
            memref.store(src.load(cir.i64(e)), words, [cir.index(e)])
        gpu.barrier()
        k, r = lane // 8, lane % 8
        addr = smem["blk"].address() + cir.i64((8 * (k % 2) + r) * 32 + 16 * (k // 2))
        for j, v in enumerate(ldmatrix(addr, 4, trans=trans)):
            out.store(cir.i64(lane * 4 + j), cir.i32(v))
    return body


@pytest.mark.sim_kernel
@pytest.mark.parametrize("trans", [False, True])
def test_ldmatrix_block_on_emulator(trans, rng):
    from cutedsl.ir import SmemPlan
    plan = SmemPlan()
    plan.buffer("blk", (16, 16), "f16")
    k = build_kernel(_ldmatrix_kernel(trans), params=(("src", "ptr"), ("out", "ptr")), block=(32, 1, 1), plan=plan)
    assert ("ldmatrix.sync.aligned.m8n8.x4" + (".trans" if trans else "") + ".shared.b16") in normalize_ptx(k.ptx)
    assert k.resources.sass.get("LDSM") == 1
    blk = rng.integers(0, 2 ** 16, (16, 16), dtype=np.uint16)
    out = np.zeros(128, np.int32)
    run_kernel(k, [blk.view(np.int32).reshape(-1), out])
    got = out.view(np.uint32).reshape(32, 4)
    for lane in range(32):
        for m in range(4):
            mat = blk[8 * (m % 2):8 * (m % 2) + 8, 8 * (m // 2):8 * (m // 2) + 8]
            c, q = lane // 4, lane % 4
            lo, hi = (mat[2 * q, c], mat[2 * q + 1, c]) if trans else (mat[c, 2 * q], mat[c, 2 * q + 1])
            assert got[lane, m] == int(lo) | int(hi) << 16, (lane, m)


def test_ldmatrix_forms_and_errors():
    def body(args, smem):
        import cutedsl.ir as cir
        a = smem["blk"].address()
        ldmatrix(a, 1)
        ldmatrix(a, 2, trans=True)
    from cutedsl.ir import SmemPlan
    plan = SmemPlan()
    plan.buffer("blk", (16, 16), "f16")
    ptx = normalize_ptx(build_kernel(body, block=(32, 1, 1), plan=plan).ptx)
    assert "ldmatrix.sync.aligned.m8n8.x1.shared.b16" in ptx
    assert "ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16" in ptx
    with pytest.raises(ValueError, match="1, 2 or 4 matrices, got 3"):
        ldmatrix(None, 3)
