"""wgmma: descriptor decode for every swizzle and both majors, D-fragment layout, scale-d and
imm-scale, with integer-valued inputs (bit-exact). Operands reach shared memory through TMA
boxes described by a table, so the test exercises TMA placement + descriptor decode together
against independent formulas for the fragment layout."""
import ml_dtypes
import numpy as np
import pytest

from cutedsl.sim import Emulator, load_ptx
from simkit import kernel, mbarrier_wait

N = 64
DREGS = ", ".join(f"%r{100 + i}" for i in range(N // 2))
DECL = "\t.shared .align 8 .b8 bars[16];\n\t.extern .shared .align 16 .b8 dyn[];\n"
BODY = """
\tld.param.u64 %rd1, [p_out];
\tld.param.u64 %rd2, [p_table];
\tld.param.u32 %r22, [p_nbox];
\tld.param.u32 %r23, [p_tx];
\tld.param.u32 %r24, [p_ksteps];
\tld.param.u64 %rd40, [p_da];
\tld.param.u64 %rd41, [p_db];
\tld.param.u64 %rd42, [p_sa];
\tld.param.u64 %rd43, [p_sb];
\tld.param.u32 %r25, [p_offb];
\tmov.b64 %rd8, p_ta;
\tcvta.param.u64 %rd9, %rd8;
\tmov.b64 %rd10, p_tb;
\tcvta.param.u64 %rd11, %rd10;
\tmov.u32 %r1, %tid.x;
\tsetp.eq.u32 %p10, %r1, 0;
\tmov.u32 %r40, bars;
\tmov.u32 %r41, dyn;
\t@%p10 mbarrier.init.shared.b64 [%r40], 1;
\tfence.mbarrier_init.release.cluster;
\tbar.sync 0;
\t@%p10 mbarrier.arrive.expect_tx.shared.b64 _, [%r40], %r23;
\tsetp.lt.u32 %p11, %r1, %r22;
\t@!%p11 bra $L_issued;
\tmul.wide.u32 %rd12, %r1, 16;
\tadd.s64 %rd13, %rd2, %rd12;
\tld.global.v4.u32 {%r30, %r31, %r32, %r33}, [%rd13];
\tadd.s32 %r34, %r41, %r30;
\tsetp.ne.u32 %p12, %r33, 0;
\tselp.b64 %rd14, %rd11, %rd9, %p12;
\tcp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%r34], [%rd14, {%r31, %r32}], [%r40];
$L_issued:
""" + mbarrier_wait("%r40", 0) + """\tcvt.u64.u32 %rd20, %r41;
\tshr.u64 %rd21, %rd20, 4;
\tadd.s64 %rd22, %rd40, %rd21;
\tadd.s32 %r42, %r41, %r25;
\tcvt.u64.u32 %rd23, %r42;
\tshr.u64 %rd24, %rd23, 4;
\tadd.s64 %rd25, %rd41, %rd24;
\tmov.u32 %r26, 0;
\twgmma.fence.sync.aligned;
$L_k:
\tsetp.ne.u32 %p13, %r26, 0;
\t{
\t.reg .pred p;
\tmov.pred p, %p13;
\twgmma.mma_async.sync.aligned.m64n64k16.f32.{ty}.{ty} {{DREGS}}, %rd22, %rd25, p, {sa}, {sb}, {ta}, {tb};
\t}
\tadd.s64 %rd22, %rd22, %rd42;
\tadd.s64 %rd25, %rd25, %rd43;
\tadd.s32 %r26, %r26, 1;
\tsetp.lt.u32 %p14, %r26, %r24;
\t@%p14 bra $L_k;
\twgmma.commit_group.sync.aligned;
\twgmma.wait_group.sync.aligned 0;
\tmul.wide.u32 %rd30, %r1, {dbytes};
\tadd.s64 %rd31, %rd1, %rd30;
{stores}
"""
PARAMS = ("ta", "tb", "out", "table", "nbox", "tx", "ksteps", "da", "db", "sa", "sb", "offb")
PTYPES = {"ta": ".align 64 .b8", "tb": ".align 64 .b8", "nbox": ".u32", "tx": ".u32", "ksteps": ".u32",
          "offb": ".u32"}
CODE = {0: 0, 128: 1, 64: 2, 32: 3}


def make_kernel(ty="f16", sa=1, sb=1, ta=0, tb=1):
    stores = "\n".join(f"\tst.global.u32 [%rd31+{4 * i}], %r{100 + i};" for i in range(N // 2))
    body = BODY.replace("{DREGS}", DREGS)
    for k, v in dict(ty=ty, sa=sa, sb=sb, ta=ta, tb=tb, dbytes=2 * N, stores=stores).items():
        body = body.replace("{" + k + "}", str(v))
    ptx = kernel(body, params=PARAMS, decls=DECL, ptypes=PTYPES)
    for p in ("ta", "tb"):
        ptx = ptx.replace(f".b8 p_{p}", f".b8 p_{p}[128]")
    return ptx


def desc(swz, lbo, sbo):
    return (CODE[swz] << 62) | ((sbo >> 4) << 32) | ((lbo >> 4) << 16)


def kmajor_plan(swz, rows, offset, which):
    """TMA boxes, K extent, descriptor template and per-k16 step for a K-major operand."""
    if swz:
        kt = swz // 2
        return ([(offset, 0, 0, which)], (rows, kt), kt, desc(swz, 16, 8 * swz), 2)
    boxes = [(offset + kc * 1024, 8 * kc, 0, which) for kc in range(2)]
    return boxes, (rows, 8), 16, desc(0, 1024, 128), 0


def mnmajor_plan(swz, offset, which, n=N):
    if swz:
        span = swz // 2
        kt = 32
        boxes = [(offset + p * kt * swz, p * span, 0, which) for p in range(n // span)]
        return boxes, (kt, span), kt, desc(swz, kt * swz, 8 * swz), (16 * swz) >> 4
    boxes = [(offset + j * 128 + kg * 1024, 8 * j, 8 * kg, which) for j in range(n // 8) for kg in range(2)]
    return boxes, (8, 8), 16, desc(0, 1024, 128), 0


def fragment_to_matrix(frag):
    """Independent D-fragment map: (128 threads, 32 regs) f32 -> 64 x N."""
    C = np.zeros((64, N), np.float32)
    for t in range(128):
        for i in range(N // 2):
            r = 16 * (t // 32) + (t % 32) // 4 + 8 * ((i // 2) % 2)
            c = 8 * (i // 4) + 2 * (t % 4) + (i % 2)
            C[r, c] = frag[t, i]
    return C


def run_case(a_swz, b_swz, b_major, ty="f16", sa=1, sb=1, rng=None):
    rng = rng or np.random.default_rng(a_swz * 7 + b_swz)
    emu = Emulator()
    npdt = np.float16 if ty == "f16" else ml_dtypes.bfloat16
    a_boxes, a_box, ka, da, stepa = kmajor_plan(a_swz, 64, 0, 0)
    offb = 16384
    if b_major == "K":
        b_boxes, b_box, kb, db, stepb = kmajor_plan(b_swz, N, offb, 1)
    else:
        b_boxes, b_box, kb, db, stepb = mnmajor_plan(b_swz, offb, 1)
    K = min(ka, kb)
    ksteps = K // 16
    A = rng.integers(-4, 5, (64, max(ka, 64))).astype(npdt)
    Bkn = rng.integers(-4, 5, (max(kb, 64), N)).astype(npdt)
    dA = emu.to_device(A)
    tmA = emu.tensor_map(dA, A.shape, ty, a_box, swizzle=a_swz)
    if b_major == "K":
        Bt = np.ascontiguousarray(Bkn.T)            # (N, K) row-major
        dB = emu.to_device(Bt)
        tmB = emu.tensor_map(dB, Bt.shape, ty, b_box, swizzle=b_swz)
    else:
        dB = emu.to_device(Bkn)
        tmB = emu.tensor_map(dB, Bkn.shape, ty, b_box, swizzle=b_swz)
    table = np.array(a_boxes + b_boxes, np.int32)
    tx = sum(int(np.prod(a_box if w == 0 else b_box)) * 2 for *_x, w in table.tolist())
    out = emu.to_device(np.zeros((128, N // 2), np.float32))
    prog = load_ptx(make_kernel(ty, sa, sb, 0, 0 if b_major == "K" else 1))
    emu.launch(prog, 1, 128, [tmA, tmB, out, emu.to_device(table), len(table), tx, ksteps, da, db,
                              stepa, stepb, offb], smem=32768 + 2048)
    frag = emu.to_host(out, (128, N // 2), np.float32)
    ref = sa * sb * (A[:, :K].astype(np.float64) @ Bkn[:K].astype(np.float64))
    return fragment_to_matrix(frag), ref


@pytest.mark.parametrize("a_swz", [0, 32, 64, 128])
@pytest.mark.parametrize("b_swz,b_major", [(0, "MN"), (32, "MN"), (64, "MN"), (128, "MN"), (128, "K"), (0, "K")])
def test_descriptors_all_swizzles_both_majors(a_swz, b_swz, b_major):
    C, ref = run_case(a_swz, b_swz, b_major)
    assert np.array_equal(C, ref.astype(np.float32))


def test_bf16_and_negative_imm_scale():
    C, ref = run_case(128, 128, "MN", ty="bf16", sa=-1, sb=1)
    assert np.array_equal(C, ref.astype(np.float32))


def test_descriptor_decode_fields():
    from cutedsl.sim.instructions.wgmma import decode_desc, operand_addrs
    d = 4611686293305360384 | (2048 >> 4)    # the sample GEMM's A descriptor at 2048
    assert decode_desc(d) == (2048, 16, 1024, 0, 128)
    addrs = operand_addrs(d, 64, 16, 2, False)[0]
    # row r, element k of a 128B-swizzled K-major tile: chunk (k//8) ^ (r%8) of row r
    r, k = 9, 13
    assert addrs[r, k] == 2048 + (r % 8) * 128 + (r // 8) * 1024 + (((k // 8) ^ (r % 8)) * 16) + (k % 8) * 2
