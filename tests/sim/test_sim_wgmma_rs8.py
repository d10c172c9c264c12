"""wgmma with an 8-bit A from registers (m64nNk32, ``.e4m3``/``.e5m2``/``.s8``/``.u8``): the
register fragment of PTX ISA 9.7.15.5.1.1 (matrix fragments for .m64nNk32) -- value ``a_i`` of
a thread (register i//4, byte i%4, lowest byte first) at row ``groupID + 8`` for i in 4..7 and
12..15 (``groupID`` otherwise), column ``4*threadID_in_group + i%4`` (+16 for i >= 8). The host
packs the registers from that rule written out per element (independent of the emulator's table),
B is a K-major no-swizzle operand stored by the threads, two k32 steps accumulate; eager and
adversarial runs against numpy."""
import ml_dtypes
import numpy as np
import pytest

from cutedsl.sim import Emulator, load_ptx
from simkit import kernel

N = 64
K_STEPS = 2
LBO, SBO = 128, 256                 # no-swizzle K-major: 8x16-byte core matrices, K pairs then N groups
B_BYTES = N * 32                    # one k32 step of B (N rows x 32 bytes)
NP = {"e4m3": ml_dtypes.float8_e4m3fn, "e5m2": ml_dtypes.float8_e5m2, "s8": np.int8, "u8": np.uint8}
DREGS = ", ".join(f"%r{100 + i}" for i in range(N // 2))


def make_ptx(ta, tb):
    dtype_d = "s32" if ta in ("s8", "u8") else "f32"
    imm = "" if dtype_d == "s32" else ", 1, 1"       # imm-scale-a/b exist for float types only
    body = ["\tld.param.u64 %rd1, [p_out];", "\tld.param.u64 %rd2, [p_a];", "\tld.param.u64 %rd3, [p_b];",
            "\tmov.u32 %r1, %tid.x;", "\tmov.u32 %r41, dyn;",
            # A: 4 registers per k-step per thread (host-packed), %r10.. %r17
            "\tmul.wide.u32 %rd4, %r1, 32;", "\tadd.s64 %rd5, %rd2, %rd4;",
            "\tld.global.v4.u32 {%r10, %r11, %r12, %r13}, [%rd5];",
            "\tld.global.v4.u32 {%r14, %r15, %r16, %r17}, [%rd5+16];",
            # B: each thread copies 16 bytes of each k-step's shared-memory image
            "\tmul.wide.u32 %rd6, %r1, 16;", "\tadd.s64 %rd7, %rd3, %rd6;", "\tshl.b32 %r2, %r1, 4;",
            "\tadd.s32 %r3, %r41, %r2;"]
    for s in range(K_STEPS):
        body += [f"\tld.global.v4.u32 {{%r20, %r21, %r22, %r23}}, [%rd7+{s * B_BYTES}];",
                 f"\tst.shared.v4.u32 [%r3+{s * B_BYTES}], {{%r20, %r21, %r22, %r23}};"]
    # generic-proxy stores read by wgmma (async proxy): fence.proxy.async (PTX ISA 9.7.15.5.2 notes)
    body += ["\tfence.proxy.async.shared::cta;", "\tbar.sync 0;",
             "\tcvt.u64.u32 %rd8, %r41;", "\tshr.u64 %rd9, %rd8, 4;",
             f"\tor.b64 %rd10, %rd9, {((SBO >> 4) << 32) | ((LBO >> 4) << 16)};", "\twgmma.fence.sync.aligned;"]
    for s in range(K_STEPS):
        a = ", ".join(f"%r{10 + 4 * s + r}" for r in range(4))
        body += [f"\tadd.s64 %rd11, %rd10, {s * B_BYTES >> 4};", "\t{", "\t.reg .pred p;",
                 f"\tsetp.ne.u32 p, {s}, 0;",
                 f"\twgmma.mma_async.sync.aligned.m64n{N}k32.{dtype_d}.{ta}.{tb} {{{DREGS}}}, {{{a}}}, %rd11, p{imm};",
                 "\t}"]
    body += ["\twgmma.commit_group.sync.aligned;", "\twgmma.wait_group.sync.aligned 0;",
             f"\tmul.wide.u32 %rd12, %r1, {2 * N};", "\tadd.s64 %rd13, %rd1, %rd12;"]
    body += [f"\tst.global.u32 [%rd13+{4 * i}], %r{100 + i};" for i in range(N // 2)]
    return kernel("\n".join(body), params=("out", "a", "b"), decls="\t.extern .shared .align 128 .b8 dyn[];\n")


def pack_a(A):
    """(128, 4 * K_STEPS) u32 registers of the 64 x 32*K_STEPS 8-bit matrix A, element by element
    from the ISA's rule (groupID = lane >> 2, threadID_in_group = lane % 4, warp w owns rows 16w..)."""
    raw = A.view(np.uint8)
    regs = np.zeros((128, 4 * K_STEPS), np.uint32)
    for t in range(128):
        warp, group, tig = t // 32, (t % 32) >> 2, t % 4
        for s in range(K_STEPS):
            for i in range(16):
                row = 16 * warp + group + (8 if 4 <= i < 8 or 12 <= i < 16 else 0)
                col = 32 * s + tig * 4 + (i & 3) + (16 if i >= 8 else 0)
                regs[t, 4 * s + i // 4] |= np.uint32(raw[row, col]) << np.uint32(8 * (i % 4))
    return regs


def b_image(Bt):
    """Shared-memory bytes of B^T (N x 32*K_STEPS, K contiguous), one no-swizzle K-major image
    of N x 32 bytes per k-step: byte (n, k) at (n%8)*16 + (k//16)*LBO + (n//8)*SBO."""
    raw = Bt.view(np.uint8)
    img = np.zeros((K_STEPS, B_BYTES), np.uint8)
    for n in range(N):
        for k in range(32 * K_STEPS):
            s, kk = divmod(k, 32)
            img[s, (n % 8) * 16 + (kk // 16) * LBO + (n // 8) * SBO + kk % 16] = raw[n, k]
    return img.reshape(-1)


def d_matrix(frag):
    """The 64 x N accumulator from (128 threads, N/2 registers) (PTX ISA 9.7.15.5.1.1, D)."""
    out = np.zeros((64, N), frag.dtype)
    for t in range(128):
        for i in range(N // 2):
            out[16 * (t // 32) + (t % 32) // 4 + 8 * ((i // 2) % 2), 8 * (i // 4) + 2 * (t % 4) + i % 2] = frag[t, i]
    return out


def operands(rng, ta, tb):
    def draw(shape, t):
        if t in ("s8", "u8"):
            info = np.iinfo(NP[t])
            return rng.integers(info.min, info.max + 1, shape).astype(NP[t])
        # spread over the type's range (normals, subnormals, zeros, both signs), no NaN
        x = rng.standard_normal(shape) * np.exp2(rng.integers(-8, 6, shape))
        return x.astype(NP[t])
    return draw((64, 32 * K_STEPS), ta), draw((N, 32 * K_STEPS), tb)


@pytest.mark.parametrize("ta,tb,chaos", [("e4m3", "e4m3", None), ("e4m3", "e5m2", None), ("e5m2", "e4m3", 7),
                                         ("e4m3", "e4m3", 3), ("s8", "u8", None), ("u8", "s8", 5)])
def test_register_a_8bit(ta, tb, chaos, rng):
    A, Bt = operands(rng, ta, tb)
    emu = Emulator(chaos=chaos)
    out = emu.to_device(np.zeros((128, N // 2), np.uint32))
    emu.launch(load_ptx(make_ptx(ta, tb)), 1, 128,
               [out, emu.to_device(pack_a(A)), emu.to_device(b_image(Bt))], smem=K_STEPS * B_BYTES)
    frag = emu.to_host(out, (128, N // 2), np.uint32)
    if ta in ("s8", "u8"):
        got = d_matrix(frag.view(np.int32)).astype(np.int64)
        want = A.astype(np.int64) @ Bt.astype(np.int64).T         # |sum| < 2^31: no wrap
        np.testing.assert_array_equal(got, want)
        return
    got = d_matrix(frag.view(np.float32)).astype(np.float64)
    a64, b64 = A.astype(np.float64), Bt.astype(np.float64)
    # each instruction: exact products and sum, one rounding to f32 (the emulator's exact mode)
    d1 = (a64[:, :32] @ b64[:, :32].T).astype(np.float32).astype(np.float64)
    want = (d1 + a64[:, 32:] @ b64[:, 32:].T).astype(np.float32)
    np.testing.assert_array_equal(got, want.astype(np.float64))
    full = a64 @ b64.T
    np.testing.assert_allclose(got, full, rtol=1e-6, atol=1e-6 * np.abs(full).max())


def test_register_a_byte_order_matters(rng):
    """The fragment is not symmetric in its bytes: reversing each register's bytes changes D."""
    A, Bt = operands(rng, "e4m3", "e4m3")
    regs = pack_a(A)
    swapped = regs.byteswap()
    emu = Emulator()
    res = []
    for r in (regs, swapped):
        out = emu.to_device(np.zeros((128, N // 2), np.uint32))
        emu.launch(load_ptx(make_ptx("e4m3", "e4m3")), 1, 128,
                   [out, emu.to_device(r), emu.to_device(b_image(Bt))], smem=K_STEPS * B_BYTES)
        res.append(d_matrix(emu.to_host(out, (128, N // 2), np.uint32).view(np.float32)))
    assert not np.allclose(res[0], res[1])


def test_tf32_register_a_refused():
    from cutedsl.sim.frontend.errors import UnsupportedInstruction
    ptx = make_ptx("e4m3", "e4m3").replace("k32.f32.e4m3.e4m3", "k8.f32.tf32.tf32")
    with pytest.raises(UnsupportedInstruction, match="register A is supported for 16- and 8-bit types only"):
        Emulator().launch(load_ptx(ptx), 1, 128, [0, 0, 0], smem=K_STEPS * B_BYTES)
