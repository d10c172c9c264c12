"""Device-built tensor maps (tensormap.replace, tensormap.cp_fenceproxy, fence.proxy.tensormap)
and cp.async with a src-size operand."""
import numpy as np
import pytest

from cutedsl.sim import (Emulator, MemoryAccessError, PTXParseError, SimRuntimeError, UnsupportedInstruction,
                         load_ptx)
from cutedsl.sim.engines.tensormap import Fields, decode_blob, decode_fields
from simkit import COPY_OUT, kernel, mbarrier_wait
from test_sim_tma import reference_image

DECL = ("\t.shared .align 8 .b8 bars[16];\n\t.shared .align 128 .b8 tmap_smem[128];\n"
        "\t.extern .shared .align 1024 .b8 dyn[];\n")

# Thread 0 builds a 2-D map field by field in zeroed shared memory (what Triton's
# tl.make_tensor_descriptor emits), warp 0 publishes it to global scratch, then thread 0
# loads box (b1 x b0) at (c0, c1) through it and every thread copies the image out.
BUILD = """
\tld.param.u64 %rd1, [p_out];
\tld.param.u64 %rd2, [p_src];
\tld.param.u64 %rd3, [p_scratch];
\tld.param.u32 %r22, [p_bytes];
\tld.param.u32 %r23, [p_d0];
\tld.param.u32 %r24, [p_d1];
\tld.param.u64 %rd4, [p_stride1];
\tld.param.u32 %r25, [p_c0];
\tld.param.u32 %r26, [p_c1];
\tmov.u32 %r1, %tid.x;
\tmov.u32 %r40, bars;
\tmov.u32 %r41, dyn;
\tmov.u32 %r42, tmap_smem;
\tsetp.eq.u32 %p10, %r1, 0;
\tsetp.lt.u32 %p11, %r1, 32;
\tshl.b32 %r43, %r1, 2;
\tadd.s32 %r44, %r42, %r43;
\t@%p11 st.shared.b32 [%r44], 0;
\tbar.warp.sync -1;
\t@%p10 tensormap.replace.tile.global_address.shared::cta.b1024.b64 [%r42], %rd2;
\t@%p10 tensormap.replace.tile.rank.shared::cta.b1024.b32 [%r42], 1;
\t@%p10 tensormap.replace.tile.box_dim.shared::cta.b1024.b32 [%r42], 0, {b0};
\t@%p10 tensormap.replace.tile.box_dim.shared::cta.b1024.b32 [%r42], 1, {b1};
\t@%p10 tensormap.replace.tile.global_dim.shared::cta.b1024.b32 [%r42], 0, %r23;
\t@%p10 tensormap.replace.tile.global_dim.shared::cta.b1024.b32 [%r42], 1, %r24;
\t@%p10 tensormap.replace.tile.global_stride.shared::cta.b1024.b64 [%r42], 0, %rd4;
\t@%p10 tensormap.replace.tile.element_stride.shared::cta.b1024.b32 [%r42], 0, {es};
\t@%p10 tensormap.replace.tile.element_stride.shared::cta.b1024.b32 [%r42], 1, 1;
\t@%p10 tensormap.replace.tile.elemtype.shared::cta.b1024.b32 [%r42], {elemtype};
\t@%p10 tensormap.replace.tile.swizzle_mode.shared::cta.b1024.b32 [%r42], {swizzle};
\tbar.warp.sync -1;
\t@%p11 tensormap.cp_fenceproxy.global.shared::cta.tensormap::generic.release.gpu.sync.aligned [%rd3], [%r42], 128;
\t@%p11 fence.proxy.tensormap::generic.acquire.gpu [%rd3], 128;
\t@%p10 mbarrier.init.shared.b64 [%r40], 1;
\tbar.sync 0;
\t@%p10 mbarrier.arrive.expect_tx.shared.b64 _, [%r40], %r22;
\t@%p10 cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%r41], [%rd3, {{%r25, %r26}}], [%r40];
{wait}
{copy_out}"""
PARAMS = ("out", "src", "scratch", "bytes", "d0", "d1", "stride1", "c0", "c1")
PTYPES = {"bytes": ".u32", "d0": ".u32", "d1": ".u32", "stride1": ".u64", "c0": ".s32", "c1": ".s32"}
ELEMTYPE = {np.dtype(np.float16): 6, np.dtype(np.float32): 7, np.dtype(np.uint8): 0}


def build_kernel(b0, b1, elemtype, swizzle, es=1):
    body = BUILD.format(b0=b0, b1=b1, elemtype=elemtype, swizzle=swizzle, es=es, wait=mbarrier_wait("%r40", 0),
                        copy_out=COPY_OUT)
    return kernel(body, params=PARAMS, decls=DECL, ptypes=PTYPES)


def run_device_map(t, box_np, coords, swizzle, es=1, emu=None):
    emu = emu or Emulator()
    b1, b0 = box_np
    e = t.itemsize
    img = b1 * (swizzle or b0 * e)
    code = {0: 0, 32: 1, 64: 2, 128: 3}[swizzle]
    prog = load_ptx(build_kernel(b0, b1, ELEMTYPE[t.dtype], code, es))
    src = emu.to_device(t)
    scratch = emu.alloc(128)
    out = emu.to_device(np.zeros(img // 4 + 16, np.uint32))
    emu.launch(prog, 1, 128, [out, src, scratch, img, t.shape[1], t.shape[0], t.shape[1] * e, *coords],
               smem=img + 1024)
    return emu.to_host(out, (img // 4 + 16,), np.uint32).view(np.uint8)[:img], emu.to_host(scratch, (128,), np.uint8)


@pytest.mark.sim_kernel
@pytest.mark.parametrize("swizzle,inner", [(0, 24), (64, 32), (128, 64)])
def test_device_built_map_loads_like_a_host_map(swizzle, inner, rng):
    t = rng.integers(0, 60000, (40, 104)).astype(np.uint16).view(np.float16)
    coords = (96, 30)                         # ragged in both dimensions: zero fill
    got, blob = run_device_map(t, (16, inner), coords, swizzle)
    assert np.array_equal(got, reference_image(t, coords, (inner, 16), swizzle)), f"seed {rng.seed_value}"
    f = Fields.unpack(blob.tobytes())         # the published object holds the replaced fields
    assert (f.rank, f.global_dim[:2], f.global_stride[0], f.box_dim[:2]) == (1, [104, 40], 208, [inner, 16])


@pytest.mark.sim_kernel
def test_replace_on_a_host_map_keeps_the_other_fields():
    # Copy a host-encoded map to global memory, retarget it with .global replace, load through it.
    emu = Emulator()
    a = np.arange(32 * 64, dtype=np.float32).reshape(32, 64)
    b = -a
    da, db = emu.to_device(a), emu.to_device(b)
    host = emu.tensor_map(da, a.shape, "f32", (8, 16), swizzle=64)
    gmap = emu.to_device(np.frombuffer(host, np.uint8))
    body = """
\tld.param.u64 %rd1, [p_out];
\tld.param.u64 %rd2, [p_map];
\tld.param.u64 %rd3, [p_other];
\tmov.u32 %r1, %tid.x;
\tsetp.eq.u32 %p10, %r1, 0;
\tmov.u32 %r40, bars;
\tmov.u32 %r41, dyn;
\t@%p10 tensormap.replace.tile.global_address.global.b1024.b64 [%rd2], %rd3;
\tfence.proxy.tensormap::generic.release.gpu;
\tfence.proxy.tensormap::generic.acquire.gpu [%rd2], 128;
\t@%p10 mbarrier.init.shared.b64 [%r40], 1;
\tbar.sync 0;
\t@%p10 mbarrier.arrive.expect_tx.shared.b64 _, [%r40], 512;
\tmov.u32 %r25, 16;
\tmov.u32 %r26, 8;
\t@%p10 cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%r41], [%rd2, {%r25, %r26}], [%r40];
""" + mbarrier_wait("%r40", 0) + """
\tshl.b32 %r50, %r1, 2;
\tadd.s32 %r51, %r41, %r50;
\tld.shared.u32 %r52, [%r51];
\tcvt.u64.u32 %rd20, %r50;
\tadd.s64 %rd21, %rd1, %rd20;
\tst.global.u32 [%rd21], %r52;
"""
    out = emu.alloc(512)
    emu.launch(load_ptx(kernel(body, params=("out", "map", "other"), decls=DECL)), 1, 128, [out, gmap, db],
               smem=2048)
    got = emu.to_host(out, (512,), np.uint8)
    assert np.array_equal(got, reference_image(b, (16, 8), (16, 8), 64))


def test_zeroed_object_is_not_a_tensor_map():
    # 128 zero bytes in global memory used as a tensor map: reported at the TMA with the rule broken
    body = ("\tld.param.u64 %rd2, [p_out];\n\tmov.u32 %r40, bars;\n\tmov.u32 %r41, dyn;\n\tmov.u32 %r25, 0;\n"
            "\tmbarrier.init.shared.b64 [%r40], 1;\n"
            "\tcp.async.bulk.tensor.1d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%r41], "
            "[%rd2, {%r25}], [%r40];")
    emu = Emulator()
    with pytest.raises(SimRuntimeError, match=r"nor a valid device-built one \(.*dimension 0 has size 0"):
        emu.launch(load_ptx(kernel(body, decls=DECL)), 1, 1, [emu.to_device(np.zeros(128, np.uint8))], smem=1024)


def test_empty_global_dim_is_reported_at_the_tma():
    t = np.zeros((8, 64), np.float16)
    with pytest.raises(SimRuntimeError, match=r"dimension 0 has size 0"):
        run_device_map(t[:0], (8, 64), (0, 0), 128)       # global_dim[1] replaced with 0


def test_non_unit_element_stride_is_rejected():
    t = np.zeros((8, 64), np.float16)
    with pytest.raises(SimRuntimeError, match=r"element_stride\[0\] is 2: element strides other than 1"):
        run_device_map(t, (8, 64), (0, 0), 128, es=2)


def test_replace_errors_at_load():
    bad_ord = "\ttensormap.replace.tile.box_dim.shared::cta.b1024.b32 [%r1], 5, %r2;"
    with pytest.raises(PTXParseError, match="ordinal"):
        load_ptx(kernel(bad_ord))
    bad_type = "\ttensormap.replace.tile.global_address.shared::cta.b1024.b32 [%r1], %r2;"
    with pytest.raises(PTXParseError, match=r"\.b1024\.b64"):
        load_ptx(kernel(bad_type))
    with pytest.raises(UnsupportedInstruction, match="field"):
        load_ptx(kernel("\ttensormap.replace.tile.im2col_corner.shared::cta.b1024.b32 [%r1], %r2;"))


def test_misaligned_object_is_reported():
    body = ("\tmov.u32 %r1, tmap_smem;\n\tadd.s32 %r1, %r1, 16;\n"
            "\ttensormap.replace.tile.rank.shared::cta.b1024.b32 [%r1], 1;")
    with pytest.raises(SimRuntimeError, match="64-byte aligned"):
        Emulator().launch(load_ptx(kernel(body, decls=DECL)), 1, 1, [0], smem=1024)


def test_replace_value_out_of_field_range_is_reported():
    body = "\tmov.u32 %r1, tmap_smem;\n\tmov.u32 %r2, 300;\n\ttensormap.replace.tile.elemtype.shared::cta.b1024.b32 [%r1], %r2;"
    with pytest.raises(SimRuntimeError, match=r"\.elemtype value 300 does not fit"):
        Emulator().launch(load_ptx(kernel(body, decls=DECL)), 1, 1, [0], smem=1024)


def test_fields_roundtrip_of_a_host_map():
    emu = Emulator()
    d = emu.alloc(64 * 96 * 2)
    host = emu.tensor_map(d, (5, 64, 96), "bf16", (2, 8, 64), swizzle=128, oob="nan")
    tm = decode_blob(host)
    dev = decode_fields(Fields.of_tensor_map(tm).pack())
    assert (dev.address, dev.dims, dev.strides, dev.box, dev.esize, dev.swizzle, dev.oob) == \
           (tm.address, tm.dims, tm.strides, tm.box, tm.esize, tm.swizzle, tm.oob)


# -- cp.async src-size (PTX: only src-size bytes are read; the rest of cp-size is zero-filled) --

CP_ASYNC = """
\tld.param.u64 %rd1, [p_out];
\tld.param.u64 %rd2, [p_a];
\tld.param.u64 %rd3, [p_b];
\tmov.u32 %r1, %tid.x;
\tmul.wide.u32 %rd4, %r1, 16;
\tadd.s64 %rd5, %rd2, %rd4;
\tcvt.u32.u64 %r3, %rd3;
\tmov.u32 %r41, dyn;
\tshl.b32 %r4, %r1, 4;
\tadd.s32 %r5, %r41, %r4;
\tld.global.u32 %r6, [%rd3];
\tadd.s32 %r7, %r1, -{skip};
\tsetp.lt.s32 %p1, %r7, 0;
\tmin.s32 %r8, %r7, {size};
\tselp.b32 %r9, 0, %r8, %p1;
\tselp.b64 %rd6, 0, %rd5, %p1;
\tcp.async.cg.shared.global [%r5], [%rd6], 16, %r9;
\tcp.async.commit_group;
\tcp.async.wait_group 0;
\tbar.sync 0;
\tld.shared.v4.u32 {{%r10, %r11, %r12, %r13}}, [%r5];
\tmul.wide.u32 %rd7, %r1, 16;
\tadd.s64 %rd8, %rd1, %rd7;
\tst.global.v4.u32 [%rd8], {{%r10, %r11, %r12, %r13}};
"""


def run_cp_async(skip, size=16):
    # lane i copies 16 B from a[i] with src-size min(i - skip, size); lanes below skip use a
    # null source address and src-size 0
    emu = Emulator()
    a = np.arange(1, 32 * 16 + 1, dtype=np.uint8).reshape(32, 16)
    out = emu.alloc(32 * 16)
    prog = load_ptx(kernel(CP_ASYNC.format(skip=skip, size=size), params=("out", "a", "b"), decls=DECL))
    emu.launch(prog, 1, 32, [out, emu.to_device(a), emu.to_device(np.zeros(4, np.uint32))], smem=1024)
    return a, emu.to_host(out, (32, 16), np.uint8)


@pytest.mark.parametrize("skip", [20, 10])
def test_cp_async_src_size_zero_reads_nothing(skip):
    # null address and src-size 0 on lanes below skip: no access, zeros; then 1, 2, ... 16 bytes read
    a, got = run_cp_async(skip=skip)
    ss = np.clip(np.arange(32) - skip, 0, 16)
    exp = np.where(np.arange(16)[None, :] < ss[:, None], a, 0)
    assert np.array_equal(got, exp)
    assert got[:skip].sum() == 0 and got[skip + 1, 0] == a[skip + 1, 0] and got[skip + 1, 1] == 0


def test_cp_async_src_size_above_cp_size_is_rejected():
    with pytest.raises(SimRuntimeError, match="src-size 17 exceeds cp-size 16"):
        run_cp_async(skip=0, size=17)


def test_cp_async_with_bytes_to_read_is_still_bounds_checked():
    body = ("\tld.param.u64 %rd2, [p_out];\n\tadd.s64 %rd2, %rd2, 4096;\n\tmov.u32 %r5, dyn;\n"
            "\tcp.async.cg.shared.global [%r5], [%rd2], 16, 4;")
    emu = Emulator()
    with pytest.raises(MemoryAccessError, match="past the end"):
        emu.launch(load_ptx(kernel(body, decls=DECL)), 1, 1, [emu.alloc(64)], smem=1024)
