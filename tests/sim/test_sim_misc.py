"""stmatrix/ldmatrix, vprintf, the wgmma-vs-TMA WAR race check, dynamic-smem placement."""
import numpy as np
import pytest

import test_sim_wgmma as W
from cutedsl.sim import Emulator, RaceError, load_ptx
from simkit import PTX_DIR, kernel

MAT = """
\tld.param.u64 %rd1, [p_out];
\tmov.u32 %r1, %tid.x;
\tmov.u32 %r40, buf;
\tshr.u32 %r2, %r1, 3;
\tand.b32 %r3, %r1, 7;
\tshl.b32 %r4, %r2, 7;
\tshl.b32 %r5, %r3, 4;
\tadd.s32 %r6, %r4, %r5;
\tadd.s32 %r7, %r40, %r6;
\tshl.b32 %r8, %r1, 1;
\tor.b32 %r9, %r8, 1;
\tshl.b32 %r9, %r9, 16;
\tor.b32 %r10, %r8, %r9;
\tadd.s32 %r11, %r10, 4194368;
\tadd.s32 %r12, %r10, 8388736;
\tadd.s32 %r13, %r10, 12583104;
\tstmatrix.sync.aligned.m8n8.x4.shared.b16 [%r7], {%r10, %r11, %r12, %r13};
\tbar.sync 0;
\tldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%r20, %r21, %r22, %r23}, [%r7];
\tldmatrix.sync.aligned.m8n8.x4.shared.b16 {%r24, %r25, %r26, %r27}, [%r7];
\tmul.wide.u32 %rd2, %r1, 32;
\tadd.s64 %rd3, %rd1, %rd2;
\tst.global.v4.u32 [%rd3], {%r20, %r21, %r22, %r23};
\tst.global.v4.u32 [%rd3+16], {%r24, %r25, %r26, %r27};
\tld.shared.v4.u32 {%r30, %r31, %r32, %r33}, [%r7];
\tst.global.v4.u32 [%rd3+1024], {%r30, %r31, %r32, %r33};
"""


def test_stmatrix_ldmatrix_layouts():
    emu = Emulator()
    prog = load_ptx(kernel(MAT, decls="\t.shared .align 16 .b8 buf[512];\n"))
    out = emu.to_device(np.zeros(32 * 8 * 2, np.uint32))
    emu.launch(prog, 1, 32, [out])
    r = emu.to_host(out, (512,), np.uint32)
    halves = r[:256].reshape(32, 8).view(np.uint16).reshape(32, 8, 2)   # thread, reg, half
    t = np.arange(32)
    for j in range(4):
        for h in range(2):
            # memory after stmatrix: M_j[row][col] = 64 j + 8 row + col
            assert halves[:, j, h].tolist() == (64 * j + 8 * (2 * (t % 4) + h) + t // 4).tolist()
            assert halves[:, 4 + j, h].tolist() == (64 * j + 2 * t + h).tolist()
    mem = r[256:].reshape(32, 8)[:, :4].copy().view(np.uint16).reshape(32, 8)   # row-address order
    for i in range(32):
        j, row = i // 8, i % 8
        assert mem[i].tolist() == [64 * j + 8 * row + c for c in range(8)]


def test_vprintf(capsys):
    emu = Emulator()
    prog = load_ptx((PTX_DIR / "hello_printf.ptx").read_text())
    st = emu.launch(prog, 2, 4, [])
    assert st["printf"] == [f"hello from thread {t} of block {b}\n" for b in range(2) for t in range(4)]
    assert "hello from thread 3 of block 1" in capsys.readouterr().out


def test_tma_overwriting_stage_read_by_pending_wgmma_is_a_race(monkeypatch):
    # thread 0 refills the A stage right after committing, before any warp's wait_group
    late = ("\twgmma.commit_group.sync.aligned;\n\tmov.u32 %r60, 0;\n"
            "\t@%p10 cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes "
            "[%r41], [%rd9, {%r60, %r60}], [%r40];\n\tbar.sync 0;\n")
    monkeypatch.setattr(W, "BODY", W.BODY.replace("\twgmma.commit_group.sync.aligned;\n", late))
    with pytest.raises(RaceError, match=r"(?s)data race on shared memory.*read by .*wgmma of warpgroup 0.*"
                                        r"wgmma.mma_async.*write by .*TMA unit.*wgmma.wait_group covering"):
        W.run_case(128, 128, "MN")


@pytest.mark.parametrize("offset", [0, 1024])
def test_dynamic_smem_offset_option(offset):
    emu = Emulator(dyn_smem_offset=offset)
    body = ("\tld.param.u64 %rd1, [p_out];\n\tmov.u32 %r1, dyn;\n\tmov.u32 %r2, %dynamic_smem_size;\n"
            "\tst.global.v2.u32 [%rd1], {%r1, %r2};\n")
    prog = load_ptx(kernel(body, decls="\t.shared .align 8 .b8 bars[24];\n\t.extern .shared .align 16 .b8 dyn[];\n"))
    out = emu.to_device(np.zeros(2, np.uint32))
    emu.launch(prog, 1, 32, [out], smem=4096)
    assert emu.to_host(out, (2,), np.uint32).tolist() == [1024 + offset, 4096]


def test_ptr_parameter_align_is_the_pointees_not_the_parameters():
    """Issue 21 (fidelity): `.param .u64 .ptr .global .align 1 p` after one 32-bit parameter sits
    at offset 8 (natural alignment); its .align is the pointee's. It used to be placed at offset
    4 and then refused by the emulator's own ld.param alignment check."""
    import numpy as np
    from cutedsl.sim import Emulator, load_ptx
    from simkit import kernel
    body = ("\tld.param.u32 %r1, [p_n];\n\tld.param.u64 %rd1, [p_out];\n"
            "\tmov.u32 %r2, %tid.x;\n\tmul.wide.u32 %rd2, %r2, 4;\n\tadd.s64 %rd3, %rd1, %rd2;\n"
            "\tadd.u32 %r3, %r2, %r1;\n\tst.global.u32 [%rd3], %r3;\n")
    ptx = kernel(body, params=("n", "out"), ptypes={"n": ".u32", "out": ".u64 .ptr .global .align 1"})
    prog = load_ptx(ptx)
    assert [(p.name, p.offset) for p in prog.params] == [("p_n", 0), ("p_out", 8)]
    emu = Emulator()
    out = emu.to_device(np.zeros(32, np.uint32))
    emu.launch(prog, 1, 32, [100, out])
    assert emu.to_host(out, (32,), np.uint32).tolist() == list(range(100, 132))
