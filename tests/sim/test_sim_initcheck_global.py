"""Initcheck of global memory (issue #40 item 7): a device read of bytes of a device allocation
that no host copy and no device write defined is an ``UninitializedReadError`` naming the read
(PTX and Python line) and the allocation (who allocated it). Reads the ISA does not make --
the zero fill of a TMA load's out-of-bounds elements, ``atom.exch``'s discarded old value --
and reads of what an earlier store, TMA store, host copy or launch wrote are not reported.
These tests run in eager mode and under the adversarial mode (``sim_kernel``)."""
import os
import re

import numpy as np
import pytest

from cutedsl.runtime import arrays
from cutedsl.sim import Emulator, UninitializedReadError, load_ptx

from simkit import kernel
from test_sim_tma import DECL, STORE, load_kernel

pytestmark = pytest.mark.sim_kernel
HERE = os.path.relpath(__file__)

# out[t] = src[t] + 1 -- with .loc lines naming a Python file, as the compiler writes them
ADD_ONE = """
\t.file 1 "kern.py"
\tld.param.u64 %rd1, [p_out];
\tld.param.u64 %rd4, [p_src];
\tmov.u32 %r1, %tid.x;
\tmul.wide.u32 %rd2, %r1, 4;
\tadd.s64 %rd3, %rd4, %rd2;
\t.loc 1 42 0
\tld.global.u32 %r5, [%rd3];
\tadd.u32 %r5, %r5, 1;
\tadd.s64 %rd5, %rd1, %rd2;
\t.loc 1 43 0
\tst.global.u32 [%rd5], %r5;
"""


def _add_one(emu):
    return emu.load(kernel(ADD_ONE, params=("out", "src")))


def _line_of(text):
    """The line of this file holding ``text``."""
    with open(__file__) as f:
        return 1 + next(i for i, ln in enumerate(f) if text in ln)


def test_read_of_an_unwritten_output_names_the_read_and_the_allocation():
    emu = Emulator()
    prog = _add_one(emu)
    out = emu.alloc(128)                        # planted: out[t] += 1 on an output nobody cleared
    with pytest.raises(UninitializedReadError, match=(
            r"(?s)uninitialized read of global memory 0x[0-9a-f]+ \(byte offset 0 of the 128-byte allocation at "
            + hex(out.ptr) + r"\):\n    read by CTA \(0, 0, 0\) thread \(0, 0, 0\) warp 0 lane 0 \(generic proxy\) "
            r"at PTX line \d+ \(kern\.py:42\): ld\.global\.u32 %r5, \[%rd3\]\n"
            r"    no write defined it since it was allocated: allocated at "
            + re.escape(f"{HERE}:{_line_of('out = emu.alloc(128)  ')}") + r" .*cuMemAlloc.*"
            r"CUTEDSL_SIM_INITCHECK=0")):
        emu.launch(prog, 1, 32, [out, out])
    emu.backend.copy_to_device(out, np.full(32, 5, np.uint32))       # cleared by the host: fine
    emu.launch(prog, 1, 32, [out, out])
    assert emu.to_host(out, (32,), np.uint32).tolist() == [6] * 32


def test_the_first_undefined_byte_and_its_lane_are_named():
    emu = Emulator()
    prog = _add_one(emu)
    src = emu.alloc(128)
    emu.backend.copy_to_device(src, np.arange(13, dtype=np.uint32))     # words 0..12 (bytes 0..51)
    with pytest.raises(UninitializedReadError, match=r"(?s)byte offset 52 of .*thread \(13, 0, 0\) warp 0 lane 13"):
        emu.launch(prog, 1, 32, [emu.alloc(128), src])
    emu.launch(prog, 1, 13, [out := emu.alloc(52), src])                # the 13 defined words: fine
    assert emu.to_host(out, (13,), np.uint32).tolist() == list(range(1, 14))


def test_a_library_label_names_the_allocation():
    emu = Emulator()
    src = arrays.empty(emu.backend, (32,), "u32", label="the planted operand")
    with pytest.raises(UninitializedReadError, match=(
            r"no write defined it since it was allocated: the planted operand, allocated at "
            + re.escape(f"{HERE}:{_line_of('label=' + chr(34) + 'the planted operand')}"))):
        emu.launch(_add_one(emu), 1, 32, [emu.alloc(128), src.ptr])


def test_host_filled_and_device_written_memory_is_defined():
    emu = Emulator()
    prog = _add_one(emu)
    src = emu.to_device(np.arange(32, dtype=np.uint32))
    mid, out = emu.alloc(128), emu.alloc(128)
    emu.launch(prog, 1, 32, [mid, src])       # mid: written by this launch's stores
    emu.launch(prog, 1, 32, [out, mid])       # read by the next launch
    assert emu.to_host(out, (32,), np.uint32).tolist() == list(range(2, 34))
    z = arrays.empty(emu.backend, (32,), "u32")
    arrays.zero_fill(z)                       # a host copy of zeros (what a workspace gets)
    emu.launch(prog, 1, 32, [out, z.ptr])
    assert emu.to_host(out, (32,), np.uint32).tolist() == [1] * 32
    # fully defined allocations drop their bitmap: their later reads cost nothing
    assert all(emu.backend.gmem.allocs[b.ptr].defined is None for b in (src, mid, out))


# thread t < n writes word t of buf; after a barrier thread t reads word 31 - t (another thread's)
ORDERED = """
\tld.param.u64 %rd1, [p_out];
\tld.param.u64 %rd4, [p_buf];
\tld.param.u32 %r9, [p_n];
\tmov.u32 %r1, %tid.x;
\tsetp.lt.u32 %p1, %r1, %r9;
\tmul.wide.u32 %rd2, %r1, 4;
\tadd.s64 %rd3, %rd4, %rd2;
\tadd.u32 %r2, %r1, 100;
\t@%p1 st.global.u32 [%rd3], %r2;
\tbar.sync 0;
\tsub.u32 %r3, 31, %r1;
\tmul.wide.u32 %rd6, %r3, 4;
\tadd.s64 %rd7, %rd4, %rd6;
\tld.global.u32 %r5, [%rd7];
\tadd.s64 %rd5, %rd1, %rd2;
\tst.global.u32 [%rd5], %r5;
"""


def test_a_kernel_reading_what_it_wrote_is_clean_and_a_gap_is_reported():
    emu = Emulator()
    prog = emu.load(kernel(ORDERED, params=("out", "buf", "n"), ptypes={"n": ".u32"}))
    out, buf = emu.alloc(128), emu.alloc(128)
    emu.launch(prog, 1, 32, [out, buf, 32])
    assert emu.to_host(out, (32,), np.uint32).tolist() == [131 - t for t in range(32)]
    with pytest.raises(UninitializedReadError, match=r"(?s)byte offset 124 of .*lane 0 .*ld\.global\.u32 %r5, \[%rd7\]"):
        emu.launch(prog, 1, 32, [out, emu.alloc(128), 30])     # words 30, 31 never written


# atomics: red.add reads the old value (reported when undefined); atom.exch does not need it
ATOMS = """
\tld.param.u64 %rd1, [p_out];
\tmov.u32 %r1, %tid.x;
\tmul.wide.u32 %rd2, %r1, 4;
\tadd.s64 %rd3, %rd1, %rd2;
\t{op}
"""


@pytest.mark.parametrize("op,reported", [("atom.global.exch.b32 %r5, [%rd3], %r1;", False),
                                         ("red.global.add.u32 [%rd3], %r1;", True),
                                         ("atom.global.cas.b32 %r5, [%rd3], 0, %r1;", True)])
def test_atomics(op, reported):
    emu = Emulator()
    prog = emu.load(kernel(ATOMS.format(op=op)))
    out = emu.alloc(128)
    if reported:
        with pytest.raises(UninitializedReadError, match=re.escape(op.rstrip(";"))):
            emu.launch(prog, 1, 32, [out])
        emu.backend.copy_to_device(out, np.zeros(32, np.uint32))
    emu.launch(prog, 1, 32, [out])
    assert emu.to_host(out, (32,), np.uint32).tolist() == list(range(32))


def _tma_load(emu, d, shape, dims_box, coords):
    """TMA-load box ``dims_box`` (numpy order) of the f32 tensor ``shape`` at ``d`` (row pitch
    ``d``'s: 16 floats) at ``coords`` (innermost first); the image read back."""
    box = tuple(dims_box)[::-1]
    nbytes = int(np.prod(box)) * 4
    tm = emu.tensor_map(d, shape, "f32", dims_box, strides=(64, 4))
    out = emu.to_device(np.zeros(nbytes // 4 + 64, np.uint32))
    emu.launch(load_ptx(load_kernel(2)), 1, 128, [tm, out, nbytes] + list(coords), smem=nbytes + 64)
    return emu.to_host(out, (nbytes // 4,), np.uint32).reshape(dims_box)


def test_tma_out_of_bounds_fill_reads_nothing():
    emu = Emulator()
    # a 10 x 12 f32 tensor with a 16-float row pitch: only its 12 columns of 10 rows are written
    d = emu.alloc(10 * 64)
    t = np.arange(120, dtype=np.uint32).reshape(10, 12) + 1
    for r in range(10):
        emu.backend.copy_to_device(d, t[r], offset=64 * r)
    # the box runs past the tensor in both dimensions (and over the unwritten pitch bytes, which
    # lie outside the tensor): the zero fill reads nothing
    img = _tma_load(emu, d, (10, 12), (8, 16), (0, 4))
    ref = np.zeros((8, 16), np.uint32)
    ref[:6, :12] = t[4:, :]
    assert np.array_equal(img, ref)
    # a map whose tensor covers the pitch bytes reads them: reported as a TMA load
    with pytest.raises(UninitializedReadError, match=r"(?s)byte offset 48 of the 640-byte .*warp 0 \(TMA load, "
                                                     r"async proxy\) at PTX line \d+: @%p10 cp\.async\.bulk\.tensor\.2d"):
        _tma_load(emu, d, (10, 16), (8, 16), (0, 0))


def test_tma_store_defines_the_in_bounds_elements():
    emu = Emulator()
    d = emu.alloc(6 * 12 * 4)
    tm = emu.tensor_map(d, (6, 12), "f32", (4, 8))
    ptx = kernel(STORE.format(fence="\tfence.proxy.async.shared::cta;"), params=("tmap", "c0", "c1"), decls=DECL,
                 ptypes={"tmap": ".align 64 .b8", "c0": ".s32", "c1": ".s32"}).replace(".b8 p_tmap", ".b8 p_tmap[128]")
    emu.launch(load_ptx(ptx), 1, 32, [tm, 5, 4], smem=256)     # rows 4, 5 x columns 5..11 (clipped)
    prog = _add_one(emu)
    out = emu.alloc(128)
    row4 = d.ptr + (4 * 12 + 5) * 4
    emu.launch(prog, 1, 7, [out, row4])                        # the 7 stored words of row 4
    assert emu.to_host(out, (7,), np.uint32).tolist() == [1001 + x for x in range(7)]
    with pytest.raises(UninitializedReadError, match=r"(?s)byte offset 208 of the 288-byte .*lane 0 "):
        emu.launch(prog, 1, 8, [out, row4 - 4])                # column 4 of row 4: clipped out of the box
    emu.launch(load_ptx(ptx), 1, 32, [tm, 0, 0], smem=256)     # a box inside the tensor: rows 0..3 x cols 0..7
    for r in range(4):
        emu.launch(prog, 1, 8, [out, d.ptr + 48 * r])
        assert emu.to_host(out, (8,), np.uint32).tolist() == [1001 + 8 * r + x for x in range(8)]
    with pytest.raises(UninitializedReadError, match=r"(?s)byte offset 36 of the 288-byte .*lane 0 "):
        emu.launch(prog, 1, 1, [out, d.ptr + 36])              # column 9 of row 0: past the box


def test_switched_off_with_initcheck_false():
    emu = Emulator(initcheck=False)
    out = emu.alloc(128)
    emu.launch(_add_one(emu), 1, 32, [out, emu.alloc(128)])
    assert emu.to_host(out, (32,), np.uint32).tolist() == [1] * 32     # the emulator's zeros, plus one
