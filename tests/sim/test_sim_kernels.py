"""End-to-end runs of compiler-generated PTX (committed fixtures) through SimBackend."""
import time

import ml_dtypes
import numpy as np
import pytest

from cutedsl.compiler.artifact import CompiledKernel, ParamSpec, TensorMapSpec
from cutedsl.errors import ArgumentError, TensorMapError
from cutedsl.sim import SimBackend, SimLaunchError
from simkit import PTX_DIR, fixture

NP = {"f16": np.float16, "bf16": ml_dtypes.bfloat16, "f32": np.float32}


def compiled(name, ptx=None):
    fptx, meta = fixture(name)
    ptx = fptx if ptx is None else ptx
    ck = CompiledKernel(entry=meta["entry"], ptx=ptx, cubin=b"", params=[ParamSpec(n, k) for n, k in meta["params"]],
                        block=meta["block"], cluster=meta["cluster"], dynamic_smem=meta["dynamic_smem"],
                        tensor_maps=[TensorMapSpec(**t) for t in meta["tensor_maps"]])
    return ck, meta


def upload(be, arr):
    buf = be.alloc(arr.nbytes)
    be.copy_to_device(buf, np.ascontiguousarray(arr))
    return buf


def run_gemm(name, a, b, be=None, ptx=None):
    """Run fixture ``name`` (or ``ptx``, an edited copy of its PTX) on ``a @ b``."""
    be = be or SimBackend()
    ck, meta = compiled(name, ptx)
    m, k = a.shape
    n = b.shape[1]
    out_dt = NP[meta["shape"]["out_dtype"]]
    bmaj = meta["shape"]["b_major"]
    da = upload(be, a)
    bb = np.ascontiguousarray(b.T) if bmaj == "K" else b
    db = upload(be, bb)
    dd = be.alloc(m * n * np.dtype(out_dt).itemsize)
    specs = {t.param: t for t in ck.tensor_maps}
    e = a.itemsize
    vals = {"m": m, "n": n, "k": k,
            "a": be.encode_tensor_map(specs["a"], da.ptr, a.shape, (k * e, e)),
            "b": be.encode_tensor_map(specs["b"], db.ptr, bb.shape, (bb.shape[1] * e, e))}
    oe = np.dtype(out_dt).itemsize
    vals["d"] = be.encode_tensor_map(specs["d"], dd.ptr, (m, n), (n * oe, oe)) if "d" in specs else dd.ptr
    h = be.load(ck)
    t = time.perf_counter()
    be.launch(h, tuple(meta["grid"]), ck.pack_params(vals), block=ck.block, cluster=ck.cluster,
              smem=ck.dynamic_smem)
    el = time.perf_counter() - t
    out = np.empty((m, n), out_dt)
    be.copy_to_host(out, dd)
    return out, el, be


@pytest.mark.sim_kernel
def test_single_tile_sample_integer_inputs_bit_exact():
    from cutedsl.sim import Emulator, load_ptx
    ptx = (PTX_DIR / "gemm_128x128x64_f16.ptx").read_text()
    emu = Emulator()
    rng = np.random.default_rng(0)
    A = rng.integers(-8, 9, (128, 64)).astype(np.float16)
    B = rng.integers(-8, 9, (64, 128)).astype(np.float16)
    dA, dB, dC = emu.to_device(A), emu.to_device(B), emu.alloc(128 * 128 * 4)
    ta = emu.tensor_map(dA, A.shape, "f16", (128, 64), swizzle=128)
    tb = emu.tensor_map(dB, B.shape, "f16", (64, 64), swizzle=128)
    prog = load_ptx(ptx)
    t = time.perf_counter()
    emu.launch(prog, 1, 128, [ta, tb, dC, 128, 128], smem=32768)
    assert time.perf_counter() - t < 1.0
    C = emu.to_host(dC, (128, 128), np.float32)
    assert np.array_equal(C, A.astype(np.float64) @ B.astype(np.float64))


def test_single_tile_sample_random_within_tolerance():
    from cutedsl.sim import Emulator, load_ptx
    ptx = (PTX_DIR / "gemm_128x128x64_f16.ptx").read_text()
    emu = Emulator()
    rng = np.random.default_rng(1)
    A = rng.standard_normal((128, 64)).astype(np.float16)
    B = rng.standard_normal((64, 128)).astype(np.float16)
    dA, dB, dC = emu.to_device(A), emu.to_device(B), emu.alloc(128 * 128 * 4)
    ta = emu.tensor_map(dA, A.shape, "f16", (128, 64), swizzle=128)
    tb = emu.tensor_map(dB, B.shape, "f16", (64, 64), swizzle=128)
    # smaller M/N bound: the predicated epilogue must skip rows >= 100 and cols >= 120
    emu.launch(load_ptx(ptx), 1, 128, [ta, tb, dC, 100, 120], smem=32768)
    C = emu.to_host(dC, (128, 128), np.float32)
    ref = A.astype(np.float64) @ B.astype(np.float64)
    got = C.reshape(-1)[:100 * 120].reshape(100, 120)
    bound = (np.abs(A.astype(np.float64)) @ np.abs(B.astype(np.float64)))[:100, :120] * 2 ** -22
    assert np.all(np.abs(got - ref[:100, :120]) <= bound)
    assert np.all(C.reshape(-1)[100 * 120:] == 0)


@pytest.mark.sim_kernel
@pytest.mark.parametrize("name", ["gemm_ms_128x128_f16_tma", "gemm_ms_128x256_f16_tma",
                                  "gemm_ms_128x128_bf16_kmajor_bf16out", "gemm_ms_64x64_f16_global_s2"])
def test_multistage_fixtures_bit_exact(name):
    _ptx, meta = fixture(name)
    s = meta["shape"]
    rng = np.random.default_rng(2)
    dt = NP[s["dtype"]]
    a = rng.integers(-3, 4, (s["m"], s["k"])).astype(dt)
    b = rng.integers(-3, 4, (s["k"], s["n"])).astype(dt)
    out, el, be = run_gemm(name, a, b)
    ref = (a.astype(np.float64) @ b.astype(np.float64)).astype(np.float32).astype(NP[s["out_dtype"]])
    assert np.array_equal(out.astype(np.float64), ref.astype(np.float64))
    assert el < 10.0, f"{name}: {el:.2f} s"


@pytest.mark.sim_kernel
def test_saxpy_fixtures():
    be = SimBackend()
    n = 1000
    x = np.arange(n, dtype=np.float32)
    y = np.ones(n, np.float32)
    for name in ("saxpy", "tma_saxpy"):
        ck, meta = compiled(name)
        dx, dy = upload(be, x), upload(be, y.copy())
        if ck.tensor_maps:
            specs = {t.param: t for t in ck.tensor_maps}
            vals = {"x": be.encode_tensor_map(specs["x"], dx.ptr, (n,), (4,)),
                    "y": be.encode_tensor_map(specs["y"], dy.ptr, (n,), (4,)), "alpha": 2.0}
        else:
            vals = {"x": dx.ptr, "y": dy.ptr, "n": n, "alpha": 2.0}
        be.launch(be.load(ck), tuple(meta["grid"]), ck.pack_params(vals), block=ck.block, smem=ck.dynamic_smem)
        r = np.empty(n, np.float32)
        be.copy_to_host(r, dy)
        assert np.array_equal(r, 2 * x + y), name


def test_launch_validation():
    be = SimBackend()
    ck, meta = compiled("gemm_ms_128x128_f16_tma")
    h = be.load(ck)
    good = [bytes(128)] * 3 + [bytes(4)] * 3
    with pytest.raises(SimLaunchError, match="takes 6 parameters"):
        be.launch(h, (1, 1, 1), good[:5], block=ck.block, smem=1024)
    with pytest.raises(SimLaunchError, match="is 128 bytes"):
        be.launch(h, (1, 1, 1), [bytes(64)] + good[1:], block=ck.block, smem=1024)
    with pytest.raises(SimLaunchError, match="reqntid"):
        be.launch(h, (1, 1, 1), good, block=(256, 1, 1), smem=1024)
    with pytest.raises(SimLaunchError, match="232448"):
        be.launch(h, (1, 1, 1), good, block=ck.block, smem=232448)


def test_tensor_map_validation_matches_driver_rules():
    be = SimBackend()
    buf = be.alloc(1 << 16)
    spec = TensorMapSpec("a", "f16", (64, 64), swizzle=128)
    blob = be.encode_tensor_map(spec, buf.ptr, (128, 128), (256, 2))
    assert len(blob) == 128
    with pytest.raises(TensorMapError, match="16-byte aligned"):
        be.encode_tensor_map(spec, buf.ptr + 8, (128, 128), (256, 2))
    with pytest.raises(TensorMapError, match="multiple of 16"):
        be.encode_tensor_map(spec, buf.ptr, (128, 100), (200, 2))
    with pytest.raises(TensorMapError, match="swizzle span"):
        be.encode_tensor_map(TensorMapSpec("a", "f16", (64, 128), swizzle=128), buf.ptr, (128, 128), (256, 2))
    with pytest.raises(TensorMapError, match="1..256"):
        be.encode_tensor_map(TensorMapSpec("a", "f16", (512, 8)), buf.ptr, (1024, 128), (256, 2))
    with pytest.raises(ArgumentError):
        be.encode_tensor_map(TensorMapSpec("a", "f16", (8, 8)), buf.ptr, (8, 8), (16, 4))


@pytest.mark.parametrize("seed", [None, 1, 2, 3])
def test_refill_after_one_warps_covering_wait_is_accepted(seed):
    """wgmma-group rule (docs/emulator.md): an earlier multistage mainloop let thread 0 refill a
    slot right after *its own* warp's ``wgmma.wait_group 1``, before warps 1-3 waited. The group
    is one warpgroup-wide operation, so that covering wait orders its operand reads before the
    refill: no report, bit-exact, in eager mode and under every interleaving."""
    _ptx, meta = fixture("race_refill_before_all_warps_wait")
    s = meta["shape"]
    rng = np.random.default_rng(5)
    a = rng.integers(-3, 4, (s["m"], s["k"])).astype(NP[s["dtype"]])
    b = rng.integers(-3, 4, (s["k"], s["n"])).astype(NP[s["dtype"]])
    out, _el, be = run_gemm("race_refill_before_all_warps_wait", a, b, SimBackend(chaos=seed))
    assert seed is None or be.last_launch["chaos"] == seed
    assert np.array_equal(out.astype(np.float64), a.astype(np.float64) @ b.astype(np.float64))
