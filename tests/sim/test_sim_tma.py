"""TMA: swizzle placement vs an independent formula, OOB fill, store clipping, multicast,
race checks."""
import numpy as np
import pytest

from cutedsl.sim import Emulator, RaceError, load_ptx
from simkit import COPY_OUT, kernel, mbarrier_wait

DECL = "\t.shared .align 8 .b8 bars[16];\n\t.extern .shared .align 16 .b8 dyn[];\n"
WAIT = mbarrier_wait("%r40", 0)


def load_kernel(rank, wait=True, multicast=False):
    cs = ", ".join(f"%r{20 + 10 + i}" for i in range(rank))
    ldc = "".join(f"\tld.param.u32 %r{30 + i}, [p_c{i}];\n" for i in range(rank))
    mc = ".multicast::cluster" if multicast else ""
    mask = ", %rs5" if multicast else ""
    body = f"""
\tld.param.u64 %rd1, [p_out];
\tld.param.u32 %r22, [p_bytes];
{ldc}\tmov.b64 %rd8, p_tmap;
\tcvta.param.u64 %rd7, %rd8;
\tmov.u32 %r1, %tid.x;
\tsetp.eq.u32 %p10, %r1, 0;
\tmov.u32 %r40, bars;
\tmov.u32 %r41, dyn;
\tmov.u32 %r60, %cluster_ctarank;
\tsetp.eq.u32 %p11, %r60, 0;
\tand.pred %p12, %p10, %p11;
\tmov.b16 %rs5, 3;
\t@%p10 mbarrier.init.shared.b64 [%r40], 1;
\tfence.mbarrier_init.release.cluster;
\tbarrier.cluster.arrive;
\tbarrier.cluster.wait;
\t@%p10 mbarrier.arrive.expect_tx.shared.b64 _, [%r40], %r22;
\t@%p{12 if multicast else 10} cp.async.bulk.tensor.{rank}d.shared::cluster.global.tile.mbarrier::complete_tx::bytes{mc} [%r41], [%rd7, {{{cs}}}], [%r40]{mask};
{WAIT if wait else ''}
\tmov.u32 %r61, %ctaid.x;
\tmul.lo.s32 %r62, %r61, %r22;
\tcvt.u64.u32 %rd22, %r62;
\tadd.s64 %rd1, %rd1, %rd22;
{COPY_OUT}
\tbarrier.cluster.arrive;
\tbarrier.cluster.wait;
"""
    params = ("tmap", "out", "bytes") + tuple(f"c{i}" for i in range(rank))
    ptypes = {"tmap": ".align 64 .b8", "bytes": ".u32", **{f"c{i}": ".s32" for i in range(rank)}}
    ptx = kernel(body, params=params, decls=DECL, ptypes=ptypes)
    return ptx.replace(".b8 p_tmap", ".b8 p_tmap[128]")


def reference_image(tensor, coords, box, swizzle):
    """Independent model: gather the box (zero outside), lay rows at pitch, permute 16-B chunks."""
    e = tensor.itemsize
    rank = tensor.ndim
    # box and coords innermost first; tensor numpy order
    idx = np.indices(box[::-1]).reshape(rank, -1)[::-1]
    rows = int(np.prod(box[1:]))
    pitch = swizzle if swizzle else box[0] * e
    img = np.zeros(rows * pitch, np.uint8)
    for j in range(idx.shape[1]):
        g = [coords[i] + idx[i, j] for i in range(rank)]
        ok = all(0 <= g[i] < tensor.shape[rank - 1 - i] for i in range(rank))
        val = tensor[tuple(g[::-1])] if ok else tensor.dtype.type(0)
        row = 0
        mul = 1
        for i in range(1, rank):
            row += idx[i, j] * mul
            mul *= box[i]
        a = row * pitch + idx[0, j] * e
        img[a:a + e] = np.frombuffer(np.array(val).tobytes(), np.uint8)
    if not swizzle:
        return img
    nb = {32: 1, 64: 2, 128: 3}[swizzle]
    out = np.zeros_like(img)
    for c in range(len(img) // 16):
        line, chunk = c // 8, c % 8
        nc = chunk ^ (line % (1 << nb))
        out[16 * (line * 8 + nc):16 * (line * 8 + nc) + 16] = img[16 * c:16 * c + 16]
    return out


def run_load(tensor, box_np, coords, swizzle=0, wait=True, emu=None, grid=1, cluster=(1, 1, 1),
             multicast=False):
    emu = emu or Emulator()
    rank = tensor.ndim
    box = tuple(box_np)[::-1]
    nbytes = int(np.prod(box)) * tensor.itemsize
    img_bytes = nbytes if not swizzle else int(np.prod(box[1:])) * swizzle
    dt = {np.dtype(np.float16): "f16", np.dtype(np.float32): "f32", np.dtype(np.uint8): "u8"}[tensor.dtype]
    d = emu.to_device(tensor)
    tm = emu.tensor_map(d, tensor.shape, dt, box_np, swizzle=swizzle)
    prog = load_ptx(load_kernel(rank, wait, multicast))
    out = emu.to_device(np.zeros(img_bytes * grid // 4 + 64, np.uint32))
    args = [tm, out, img_bytes] + list(coords)
    emu.launch(prog, grid, 128, args, smem=img_bytes + 64, cluster=cluster)
    return emu.to_host(out, (img_bytes * grid // 4 + 64,), np.uint32).view(np.uint8), img_bytes


@pytest.mark.parametrize("swizzle,inner", [(0, 24), (32, 16), (64, 32), (128, 64)])
def test_swizzle_placement_matches_independent_formula(swizzle, inner):
    rng = np.random.default_rng(swizzle)
    t = rng.integers(0, 60000, (40, 104)).astype(np.uint16).view(np.float16)
    coords = (8, 3)
    got, n = run_load(t, (16, inner), coords, swizzle)
    ref = reference_image(t, coords, (inner, 16), swizzle)
    assert np.array_equal(got[:n], ref)


def test_oob_zero_fill_rank3_full_tx():
    rng = np.random.default_rng(7)
    t = rng.standard_normal((3, 5, 12)).astype(np.float32)
    coords = (-4, 3, 1)                       # innermost first: x from -4, y past the end at 5
    got, n = run_load(t, (2, 4, 8), coords)
    ref = reference_image(t, coords, (8, 4, 2), 0)
    assert np.array_equal(got[:n], ref)
    assert np.count_nonzero(ref) < ref.size   # some fill happened, barrier still completed


def test_read_before_wait_is_a_race():
    t = np.ones((16, 64), np.float16)
    # the readers never wait for the mbarrier: whichever order the run takes, the load and the
    # ld.shared are unordered and the report names both
    with pytest.raises(RaceError, match=r"(?s)data race on shared memory dyn.*(ld\.shared.*TMA unit|"
                                        r"TMA unit.*ld\.shared).*missing"):
        run_load(t, (16, 64), (0, 0), 128, wait=False)


def test_multicast_two_ctas():
    rng = np.random.default_rng(3)
    t = rng.integers(0, 255, (8, 64)).astype(np.uint8)
    got, n = run_load(t, (8, 64), (0, 0), 0, grid=2, cluster=(2, 1, 1), multicast=True)
    ref = reference_image(t, (0, 0), (64, 8), 0)
    assert np.array_equal(got[:n], ref) and np.array_equal(got[n:2 * n], ref)


STORE = """
\tld.param.u32 %r20, [p_c0];
\tld.param.u32 %r21, [p_c1];
\tmov.b64 %rd8, p_tmap;
\tcvta.param.u64 %rd7, %rd8;
\tmov.u32 %r1, %tid.x;
\tsetp.eq.u32 %p10, %r1, 0;
\tmov.u32 %r41, dyn;
\tshl.b32 %r2, %r1, 2;
\tadd.s32 %r3, %r41, %r2;
\tadd.s32 %r4, %r1, 1000;
\tst.shared.u32 [%r3], %r4;
{fence}
\tbar.sync 0;
\t@%p10 cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group [%rd7, {{%r20, %r21}}], [%r41];
\t@%p10 cp.async.bulk.commit_group;
\t@%p10 cp.async.bulk.wait_group.read 0;
"""


def run_store(coords, fence=True):
    emu = Emulator()
    g = np.full((6, 12), 7, np.uint32).view(np.float32)
    d = emu.to_device(g)
    tm = emu.tensor_map(d, g.shape, "f32", (4, 8))
    ptx = kernel(STORE.format(fence="\tfence.proxy.async.shared::cta;" if fence else ""),
                 params=("tmap", "c0", "c1"), decls=DECL,
                 ptypes={"tmap": ".align 64 .b8", "c0": ".s32", "c1": ".s32"}).replace(".b8 p_tmap", ".b8 p_tmap[128]")
    emu.launch(load_ptx(ptx), 1, 32, [tm] + list(coords), smem=256)
    return emu.to_host(d, (6, 12), np.uint32)


def test_store_clips_out_of_bounds():
    r = run_store((5, 4))                      # box 4 rows x 8 cols at col 5, row 4
    exp = np.full((6, 12), 7, np.uint32)
    for y in range(4):
        for x in range(8):
            gy, gx = 4 + y, 5 + x
            if gy < 6 and gx < 12:
                exp[gy, gx] = 1000 + y * 8 + x
    assert np.array_equal(r, exp)


def test_store_without_proxy_fence_is_a_race():
    with pytest.raises(RaceError, match="fence.proxy.async"):
        run_store((0, 0), fence=False)


def test_tma_load_signalling_another_ctas_barrier_needs_cta_group_2():
    """A TMA load may complete on the pair peer's mbarrier only with .cta_group::2 (CUTLASS's 2SM
    loads); without it the emulator names both CTAs (found LLVM 22 dropping the modifier from a
    predicated NVVM op, issue 24)."""
    from cutedsl.sim import SimRuntimeError
    ptx = load_kernel(2, True, False)
    line = next(ln for ln in ptx.splitlines() if "cp.async.bulk.tensor" in ln)
    bad = ptx.replace(line, "\tmapa.shared::cluster.u32 %r45, %r40, 1;\n" + line.replace("[%r40]", "[%r45]"))
    t = np.arange(8 * 64, dtype=np.uint8).reshape(8, 64)
    emu = Emulator()
    d = emu.to_device(t)
    tm = emu.tensor_map(d, t.shape, "u8", (8, 64))
    out = emu.to_device(np.zeros(1024, np.uint32))
    with pytest.raises(SimRuntimeError, match=r"TMA load signals the mbarrier of cluster rank 1, not the destination "
                                              r"CTA's \(only \.cta_group::2 may signal the pair peer's\)"):
        emu.launch(load_ptx(bad), 2, 128, [tm, out, 512, 0, 0], smem=1024, cluster=(2, 1, 1))


def _swizzled(img, swizzle):
    """``img`` (rows of 16-byte chunks) with the TMA swizzle applied (as in reference_image)."""
    if not swizzle:
        return img
    nb = {32: 1, 64: 2, 128: 3}[swizzle]
    out = np.zeros_like(img)
    for c in range(len(img) // 16):
        line, chunk = c // 8, c % 8
        nc = chunk ^ (line % (1 << nb))
        out[16 * (line * 8 + nc):16 * (line * 8 + nc) + 16] = img[16 * c:16 * c + 16]
    return out


@pytest.mark.parametrize("dtype,bits,swizzle", [("16u6_align16b", 6, 128), ("16u4_align16b", 4, 0),
                                                ("16u4_align8b", 4, 128)])
def test_packed_sub_byte_loads(dtype, bits, swizzle):
    """TMA of packed 4-/6-bit tensors (cuda.h's 16U4_ALIGN8B, 16U4_ALIGN16B, 16U6_ALIGN16B): dims
    and coordinates in elements; ALIGN8B lands the packed bytes as they are, the ALIGN16B types
    each group of 16 elements' 8 / 12 bytes in a 16-byte slot (zeros after); the expect-tx is
    the bytes written into shared memory."""
    rng = np.random.default_rng(bits + swizzle)
    rows, k = 9, 512                           # elements per row; 384 / 256 packed bytes
    rb = k * bits // 8
    packed = rng.integers(0, 256, (rows, rb)).astype(np.uint8)
    box = (4, 256 if dtype == "16u4_align8b" else 128)
    coords = (128, 3)                          # innermost first: element 128, row 3
    emu = Emulator()
    d = emu.to_device(packed)
    tm = emu.tensor_map(d, (rows, k), dtype, box, swizzle=swizzle, strides=(rb, 0))
    group = 16 * bits // 8
    padded = dtype != "16u4_align8b"
    row_smem = box[1] // 16 * (16 if padded else group)
    img_bytes = box[0] * row_smem
    prog = load_ptx(load_kernel(2))
    out = emu.to_device(np.zeros(img_bytes // 4 + 64, np.uint32))
    emu.launch(prog, 1, 128, [tm, out, img_bytes, *coords], smem=img_bytes + 64)
    got = emu.to_host(out, (img_bytes // 4 + 64,), np.uint32).view(np.uint8)[:img_bytes]
    first = coords[0] * bits // 8
    src = packed[coords[1]:coords[1] + box[0], first:first + box[1] * bits // 8]
    if padded:
        slots = np.zeros((box[0], box[1] // 16, 16), np.uint8)
        slots[:, :, :group] = src.reshape(box[0], -1, group)
        src = slots
    assert np.array_equal(got, _swizzled(src.reshape(-1), swizzle))
    from cutedsl.sim import SimRuntimeError
    with pytest.raises(SimRuntimeError, match=r"not a multiple of (16|2) elements"):
        emu.launch(prog, 1, 128, [tm, out, img_bytes, 1, 3], smem=img_bytes + 64)


@pytest.mark.parametrize("swizzle,inner,coords,chunked", [
    (0, 24, (8, 3), True), (128, 64, (16, 1), True), (64, 32, (0, 5), True),
    (0, 24, (3, 3), False),     # the box starts 6 bytes into a 16-byte chunk of global memory
    (128, 64, (48, 1), False),  # out of bounds on the right: filled element by element
])
def test_in_bounds_boxes_of_whole_chunks_copy_as_chunks(monkeypatch, swizzle, inner, coords, chunked):
    """A box inside its tensor that starts on a 16-byte boundary is copied as 16-byte chunks (a
    tensor map's box rows and strides are multiples of 16 bytes, and the swizzle moves chunks
    whole); every other box element by element -- both give the independent model's image."""
    from cutedsl.sim.instructions import tma
    calls = []
    real = tma.box_values
    monkeypatch.setattr(tma, "box_values", lambda *a: calls.append(1) or real(*a))
    rng = np.random.default_rng(inner + coords[0])
    t = rng.integers(0, 60000, (40, 104)).astype(np.uint16).view(np.float16)
    got, n = run_load(t, (16, inner), coords, swizzle)
    assert np.array_equal(got[:n], reference_image(t, coords, (inner, 16), swizzle))
    assert len(calls) == (0 if chunked else 1)


@pytest.mark.parametrize("coords,chunked", [((4, 1), True), ((1, 1), False), ((4, 0), True)])
def test_in_bounds_stores_of_whole_chunks_copy_as_chunks(monkeypatch, coords, chunked):
    """A store box inside the tensor at a 16-byte boundary moves as 16-byte chunks (one 4 B
    off it: element by element); both write exactly the box and define it for initcheck (the
    host reads the result back without an uninitialised-read error)."""
    from cutedsl.sim.instructions import tma
    calls = []
    real = tma.elements
    monkeypatch.setattr(tma, "elements", lambda *a: calls.append(1) or real(*a))
    r = run_store(coords)
    exp = np.full((6, 12), 7, np.uint32)
    x0, y0 = coords
    exp[y0:y0 + 4, x0:x0 + 8] = 1000 + np.arange(32).reshape(4, 8)
    assert np.array_equal(r, exp)
    assert len(calls) == (0 if chunked else 1)


def test_coordinates_are_the_low_32_bits_signed():
    # PTX ISA cp.async.bulk.tensor: tensor coordinates are .s32 (a register's low 32 bits)
    from cutedsl.sim.instructions.tma import _s32
    cases = [0, 5, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF, (1 << 40) | 7, (1 << 63) | 0xFFFFFFFE]
    expect = [int(np.uint32(x & 0xFFFFFFFF).view(np.int32)) for x in cases]
    assert [_s32(x) for x in cases] == expect == [0, 5, 2**31 - 1, -2**31, -1, 7, -2]


def test_mbarrier_history_is_formatted_when_read():
    # the deadlock report's "barrier history" (checks/deadlock.py)
    from cutedsl.sim.engines.mbarrier_object import MBarrier
    from cutedsl.sim.frontend.ptxtypes import Instr
    ins = Instr(3, 17, "mbarrier.arrive.b64 _, [bar];", "mbarrier.arrive", None)
    b = MBarrier(None, 0, 1, 17)
    b.note("complete_tx {} B (TMA load at {}, coords {})", 256, ins, (4, -2))
    b.note("arrive x{} at {}", 1, ins)
    b.phase = 1                 # (arrive needs a CTA: the phase is set directly)
    b.note("{} {} B at {}", "expect_tx", 64, ins)
    assert b.history() == ["phase 0: complete_tx 256 B (TMA load at PTX line 17, coords (4, -2))",
                           "phase 0: arrive x1 at PTX line 17", "phase 1: expect_tx 64 B at PTX line 17"]
    for i in range(60):
        b.note("arrive x{} at {}", i, ins)
    h = b.history()
    assert 20 <= len(h) <= 41 and h[-1] == "phase 1: arrive x59 at PTX line 17"
