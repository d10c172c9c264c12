"""Loads/stores of every width, vectors, shared/local/param/generic windows, OOB diagnostics."""
import numpy as np
import pytest

from cutedsl.sim import Emulator, MemoryAccessError, load_ptx
from simkit import kernel


def test_widths_vectors_global():
    body = """
\tld.param.u64 %rd1, [p_out];
\tld.param.u64 %rd2, [p_a];
\tmov.u32 %r1, %tid.x;
\tmul.wide.u32 %rd3, %r1, 16;
\tadd.s64 %rd4, %rd2, %rd3;
\tadd.s64 %rd5, %rd1, %rd3;
\tld.global.v4.u32 {%r10, %r11, %r12, %r13}, [%rd4];
\tst.global.v4.u32 [%rd5], {%r13, %r12, %r11, %r10};
\tld.global.s8 %r14, [%rd4+3];
\tld.global.u16 %rs1, [%rd4+2];
\tld.global.v2.u64 {%rd10, %rd11}, [%rd4];
\tadd.s64 %rd6, %rd5, 4096;
\tst.global.u32 [%rd6], %r14;
\tst.global.u16 [%rd6+4], %rs1;
\tst.global.u8 [%rd6+6], %r14;
\tst.global.u64 [%rd6+8], %rd11;
"""
    emu = Emulator()
    prog = load_ptx(kernel(body, params=("out", "a")))
    a = np.arange(32 * 4, dtype=np.uint32) * 0x01010101 + 0x80
    out = emu.to_device(np.zeros(8192 // 4, np.uint32))
    emu.launch(prog, 1, 32, [out, emu.to_device(a)])
    r = emu.to_host(out, (2048,), np.uint32)
    v = a.reshape(32, 4)
    assert np.array_equal(r[:128].reshape(32, 4), v[:, ::-1])
    tail = r[1024:1024 + 128].reshape(32, 4)
    b = v.view(np.uint8).reshape(32, 16)
    assert tail[:, 0].tolist() == b[:, 3].astype(np.int8).astype(np.int32).view(np.uint32).tolist()
    assert (tail[:, 1] & 0xFFFF).tolist() == b[:, 2:4].copy().view(np.uint16)[:, 0].tolist()
    assert ((tail[:, 1] >> 16) & 0xFF).tolist() == b[:, 3].tolist()
    assert np.array_equal(tail[:, 2:4].copy().view(np.uint64)[:, 0], v[:, 2:4].copy().view(np.uint64)[:, 0])


def test_shared_generic_local_windows():
    decls = "\t.shared .align 16 .b8 buf[256];\n\t.local .align 8 .b8 frame[16];\n"
    body = """
\tld.param.u64 %rd1, [p_out];
\tmov.u32 %r1, %tid.x;
\tshl.b32 %r2, %r1, 2;
\tmov.u32 %r3, buf;
\tadd.s32 %r4, %r3, %r2;
\tst.shared.u32 [%r4], %r1;
\tbar.sync 0;
\txor.b32 %r5, %r2, 4;
\tadd.s32 %r6, %r3, %r5;
\tcvt.u64.u32 %rd2, %r6;
\tcvta.shared.u64 %rd3, %rd2;
\tld.u32 %r7, [%rd3];
\tmov.u64 %rd4, frame;
\tcvta.local.u64 %rd5, %rd4;
\tst.u32 [%rd5+4], %r7;
\tld.local.u32 %r8, [frame+4];
\tmul.wide.u32 %rd6, %r1, 4;
\tadd.s64 %rd7, %rd1, %rd6;
\tst.global.u32 [%rd7], %r8;
\tisspacep.shared %p1, %rd3;
\tselp.u32 %r9, 1, 0, %p1;
\tst.global.u32 [%rd7+256], %r9;
"""
    emu = Emulator()
    prog = load_ptx(kernel(body, decls=decls))
    out = emu.to_device(np.zeros(128, np.uint32))
    emu.launch(prog, 1, 64, [out])
    r = emu.to_host(out, (128,), np.uint32)
    assert r[:64].tolist() == (np.arange(64) ^ 1).tolist()
    assert r[64:].tolist() == [1] * 64


def test_oob_store_reports_address_line_thread_allocation():
    body = """
\tld.param.u64 %rd1, [p_out];
\tmov.u32 %r1, %tid.x;
\tmul.wide.u32 %rd2, %r1, 4;
\tadd.s64 %rd3, %rd1, %rd2;
\tst.global.u32 [%rd3], %r1;
"""
    emu = Emulator()
    ptx = kernel(body)
    prog = load_ptx(ptx)
    out = emu.alloc(31 * 4)                 # one element short
    with pytest.raises(MemoryAccessError) as e:
        emu.launch(prog, 1, 32, [out])
    msg = str(e.value)
    line = [i for i, l in enumerate(ptx.splitlines(), 1) if "st.global.u32" in l][0]
    assert f"0x{out.ptr + 124:x}" in msg and f"line {line}" in msg
    assert "thread (31, 0, 0)" in msg and "past the end of allocation" in msg


def test_misaligned_and_shared_oob():
    emu = Emulator()
    prog = load_ptx(kernel("\tld.param.u64 %rd1, [p_out];\n\tst.global.u32 [%rd1+2], 1;\n"))
    with pytest.raises(MemoryAccessError, match="misaligned"):
        emu.launch(prog, 1, 32, [emu.alloc(64)])
    prog = load_ptx(kernel("\tmov.u32 %r1, 4096;\n\tst.shared.u32 [%r1], 1;\n",
                           decls="\t.shared .align 4 .b8 s[64];\n"))
    with pytest.raises(MemoryAccessError, match="shared"):
        emu.launch(prog, 1, 32, [0])


def test_atomics_global_and_shared():
    decls = "\t.shared .align 4 .b8 cnt[4];\n"
    body = """
\tld.param.u64 %rd1, [p_out];
\tmov.u32 %r1, %tid.x;
\tsetp.eq.u32 %p1, %r1, 0;
\t@%p1 st.shared.u32 [cnt], 0;
\tbar.sync 0;
\tatom.shared.add.u32 %r2, [cnt], 1;
\tred.global.add.u32 [%rd1], %r1;
\tatom.global.max.s32 %r3, [%rd1+4], %r1;
\tbar.sync 0;
\tld.shared.u32 %r4, [cnt];
\t@%p1 st.global.u32 [%rd1+8], %r4;
"""
    emu = Emulator()
    prog = load_ptx(kernel(body, decls=decls))
    out = emu.to_device(np.zeros(4, np.uint32))
    emu.launch(prog, 1, 64, [out])
    r = emu.to_host(out, (4,), np.uint32)
    assert r[:3].tolist() == [sum(range(64)), 63, 64]


def test_vector_red_f32_adds_each_element():
    """red.global.add.v2/.v4.f32 (PTX ISA 9.7.13.6, sm_90): every lane adds its vector into
    the same 16 bytes; each element sums in f32; a vector address not aligned to its size and a
    vector of another operation are refused."""
    body = """
\tld.param.u64 %rd1, [p_out];
\tmov.u32 %r1, %tid.x;
\tcvt.rn.f32.u32 %f1, %r1;
\tadd.f32 %f2, %f1, 0f3F000000;
\tred.global.add.v4.f32 [%rd1], {%f1, %f2, %f1, %f2};
\tred.global.add.v2.f32 [%rd1+16], {%f2, %f1};
"""
    emu = Emulator()
    prog = load_ptx(kernel(body))
    out = emu.to_device(np.zeros(6, np.float32))
    emu.launch(prog, 1, 64, [out])
    r = emu.to_host(out, (6,), np.float32)
    s, h = float(sum(range(64))), float(sum(range(64))) + 32.0
    assert r.tolist() == [s, h, s, h, h, s]
    prog = load_ptx(kernel("\tld.param.u64 %rd1, [p_out];\n\tred.global.add.v4.f32 [%rd1+8], {%f1, %f1, %f1, %f1};\n"))
    with pytest.raises(MemoryAccessError, match="misaligned"):
        emu.launch(prog, 1, 32, [emu.alloc(64)])
    with pytest.raises(Exception, match="vector red"):
        load_ptx(kernel("\tld.param.u64 %rd1, [p_out];\n\tred.global.max.v2.f32 [%rd1], {%f1, %f1};\n"))


def test_param_scalars_and_module_globals():
    ptx = """.version 8.3
.target sm_90a
.address_size 64
.global .align 4 .b8 table[8] = {1, 0, 0, 0, 2, 0, 0, 0};
.visible .entry k(.param .u64 p_out, .param .u32 p_n, .param .f32 p_x)
{
\t.reg .b32 %r<8>;
\t.reg .f32 %f<4>;
\t.reg .b64 %rd<8>;
\tld.param.u64 %rd1, [p_out];
\tld.param.u32 %r1, [p_n];
\tld.param.f32 %f1, [p_x];
\tmov.u64 %rd2, table;
\tld.global.u32 %r2, [%rd2+4];
\tadd.s32 %r3, %r1, %r2;
\tst.global.u32 [%rd1], %r3;
\tst.global.f32 [%rd1+4], %f1;
\tret;
}
"""
    emu = Emulator()
    prog = load_ptx(ptx)
    out = emu.to_device(np.zeros(2, np.uint32))
    emu.launch(prog, 1, 1, [out, 40, 1.5])
    r = emu.to_host(out, (2,), np.uint32)
    assert r[0] == 42 and r[1:].view(np.float32)[0] == 1.5


# -- shared addresses carry the cluster rank (issue 23) ------------------------------------

RANK_BITS = """
\t.shared .align 8 .b64 bar;
\tld.param.u64 %rd1, [p_out];
\tcvta.to.global.u64 %rd1, %rd1;
\tmov.u32 %r1, %tid.x;
\tmov.u32 %r2, %cluster_ctarank;
\tmov.u32 %r3, bar;
\tmapa.shared::cluster.u32 %r4, %r3, 1;
\tand.b32 %r5, %r3, 0xFEFFFFF8;
\tgetctarank.shared::cluster.u32 %r6, %r5;
\tshl.b32 %r7, %r2, 2;
\tcvt.u64.u32 %rd2, %r7;
\tmul.lo.u64 %rd2, %rd2, 4;
\tadd.s64 %rd3, %rd1, %rd2;
\tst.global.v4.u32 [%rd3], {%r3, %r4, %r5, %r6};
"""


def test_shared_addresses_carry_the_cluster_rank():
    """As on the GPU: a CTA's own shared address has its rank at bit 24, mapa gives the peer's,
    and clearing bit 24 (CUTLASS's 2-CTA idiom) names the even CTA of the pair."""
    from simkit import kernel
    emu = Emulator()
    out = emu.to_device(np.zeros(8, np.uint32))
    emu.launch(load_ptx(kernel(RANK_BITS)), 2, 32, [out], cluster=(2, 1, 1))
    r = emu.to_host(out, (2, 4), np.uint32)
    off = int(r[0, 0])
    assert off < 1 << 24
    assert r[1, 0] == (1 << 24) | off                  # rank 1's own address
    assert (r[:, 1] == (1 << 24) | off).all()          # mapa to rank 1 from either CTA
    assert (r[:, 2] == off & 0xFEFFFFF8).all() and (r[:, 3] == 0).all()


def test_shared_cta_access_with_another_rank_is_refused():
    from simkit import kernel
    body = "\t.shared .align 4 .b32 w;\n\tmov.u32 %r1, w;\n\tmapa.shared::cluster.u32 %r2, %r1, 1;\n" \
           "\tld.shared::cta.u32 %r3, [%r2];\n"
    emu = Emulator()
    with pytest.raises(MemoryAccessError, match=r"shared::cta access with the address of cluster rank 1 "
                                                r"\(this CTA is rank 0\)"):
        emu.launch(load_ptx(kernel(body)), 2, 32, [emu.to_device(np.zeros(1, np.uint32))], cluster=(2, 1, 1))
