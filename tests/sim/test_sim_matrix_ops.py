"""stmatrix/ldmatrix m8n8.b16 (cutedsl/sim/instructions/matrix.py) against a model written from the
PTX ISA (9.7.14.5.15 ldmatrix, 9.7.14.5.16 stmatrix): thread ``8 j + r`` gives the address of row
``r`` of matrix ``j``; without .trans thread ``t`` holds row ``t // 4``, columns ``2 (t % 4)`` and
``+1`` of each matrix in the low and high half of its register ``j``; with .trans column ``t // 4``
of rows ``2 (t % 4)`` and ``+1``. Repeated row addresses (a store's later element, in the order
matrix, half, thread, keeps the address), every count and layout, and the address errors."""
import numpy as np
import pytest

from cutedsl.sim import Emulator, load_ptx
from cutedsl.sim.frontend.errors import SimRuntimeError
from simkit import kernel

SMEM = 512


def body(nmat, trans):
    regs = ", ".join(f"%r{10 + j}" for j in range(nmat))
    dst = ", ".join(f"%r{20 + j}" for j in range(nmat))
    t = ".trans" if trans else ""
    return f"""
\tld.param.u64 %rd1, [p_out];
\tld.param.u64 %rd4, [p_inp];
\tld.param.u64 %rd5, [p_rows];
\tmov.u32 %r1, %tid.x;
\tmov.u32 %r40, buf;
\tmul.wide.u32 %rd2, %r1, 16;
\tadd.s64 %rd6, %rd4, %rd2;
\tld.global.v4.u32 {{%r10, %r11, %r12, %r13}}, [%rd6];
\tmul.wide.u32 %rd7, %r1, 4;
\tadd.s64 %rd8, %rd5, %rd7;
\tld.global.u32 %r5, [%rd8];
\tadd.s32 %r7, %r40, %r5;
\tshl.b32 %r6, %r1, 4;
\tadd.s32 %r8, %r40, %r6;
\tmov.u32 %r30, 0;
\tst.shared.v4.u32 [%r8], {{%r30, %r30, %r30, %r30}};
\tbar.sync 0;
\tstmatrix.sync.aligned.m8n8.x{nmat}{t}.shared.b16 [%r7], {{{regs}}};
\tbar.sync 0;
\tld.shared.v4.u32 {{%r30, %r31, %r32, %r33}}, [%r8];
\tadd.s64 %rd3, %rd1, %rd2;
\tst.global.v4.u32 [%rd3], {{%r30, %r31, %r32, %r33}};
\tmov.u32 %r20, 0;
\tmov.u32 %r21, 0;
\tmov.u32 %r22, 0;
\tmov.u32 %r23, 0;
\tldmatrix.sync.aligned.m8n8.x{nmat}{t}.shared.b16 {{{dst}}}, [%r7];
\tst.global.v4.u32 [%rd3+512], {{%r20, %r21, %r22, %r23}};
"""


def model_addresses(rows, nmat, trans):
    """Byte address per (thread, matrix, half), straight from the ISA's fragment layout."""
    ad = np.zeros((32, nmat, 2), np.int64)
    for t in range(32):
        for j in range(nmat):
            for h in range(2):
                if trans:       # thread t: column t // 4 of rows 2 (t % 4) + h
                    ad[t, j, h] = rows[8 * j + 2 * (t % 4) + h] + 2 * (t // 4)
                else:           # thread t: row t // 4, column 2 (t % 4) + h
                    ad[t, j, h] = rows[8 * j + t // 4] + 2 * (2 * (t % 4) + h)
    return ad


def run(nmat, trans, rows, vals):
    emu = Emulator()
    prog = load_ptx(kernel(body(nmat, trans), params=("out", "inp", "rows"),
                           decls=f"\t.shared .align 16 .b8 buf[{SMEM}];\n"))
    out = emu.to_device(np.zeros(256, np.uint32))
    emu.launch(prog, 1, 32, [out, emu.to_device(vals), emu.to_device(rows.astype(np.uint32))])
    return emu.to_host(out, (256,), np.uint32)


@pytest.mark.parametrize("nmat", [1, 2, 4])
@pytest.mark.parametrize("trans", [False, True])
@pytest.mark.parametrize("pattern", ["distinct", "repeated"])
def test_matches_isa_layout(nmat, trans, pattern):
    rng = np.random.default_rng(nmat * 10 + trans + (pattern == "repeated") * 100)
    if pattern == "distinct":
        rows = rng.permutation(32) * 16
    else:                           # a few row addresses shared by many threads
        rows = rng.integers(0, 3, 32) * 16 + 64
    vals = rng.integers(0, 1 << 32, (32, 4), dtype=np.uint64).astype(np.uint32)
    r = run(nmat, trans, rows, vals)
    ad = model_addresses(rows, nmat, trans)
    mem = np.zeros(SMEM // 2, np.uint16)
    for j in range(nmat):           # the store's order: matrix, half, thread
        for h in range(2):
            for t in range(32):
                mem[ad[t, j, h] // 2] = (int(vals[t, j]) >> (16 * h)) & 0xFFFF
    assert np.array_equal(r[:128].view(np.uint16), mem)
    got = r[128:].reshape(32, 4)
    for j in range(4):
        want = (mem[ad[:, j, 0] // 2].astype(np.uint32) | (mem[ad[:, j, 1] // 2].astype(np.uint32) << 16)
                if j < nmat else np.zeros(32, np.uint32))
        assert got[:, j].tolist() == want.tolist(), j


ALIGN = "row address out of shared memory or not 16-byte aligned"
RANK = "address is not a shared::cta address of this CTA"


@pytest.mark.parametrize("lane, bad, msg", [
    (3, 8, ALIGN), (3, 1 << 20, ALIGN), (3, 1 << 24, RANK),
    # lane 31 names no row of an .x1 matrix: its address is checked for the CTA and the
    # alignment (every lane's), not against the shared memory's size
    (31, 8, ALIGN), (31, 1 << 24, RANK), (31, 1 << 20, None),
])
def test_address_errors(lane, bad, msg):
    rows = np.arange(32) * 16 % 256
    rows[lane] += bad
    if msg is None:
        run(1, False, rows, np.zeros((32, 4), np.uint32))
        return
    with pytest.raises(SimRuntimeError, match="stmatrix.sync.aligned.m8n8.x1.shared.b16 " + msg):
        run(1, False, rows, np.zeros((32, 4), np.uint32))
