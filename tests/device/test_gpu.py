"""GPU tests (marked ``gpu``; skipped cleanly without an NVIDIA driver / Hopper GPU).

Every kernel on hardware against float64 numpy on non-tile-multiple shapes; integer-valued
inputs must be bit-identical between the GPU and the emulator.
"""
import numpy as np
import pytest
from gemm_cases import CASE_IDS, CASES

from cutedsl import Gemm, GemmConfig
from cutedsl.device.saxpy import saxpy

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("tile,stages", CASES, ids=CASE_IDS)
@pytest.mark.parametrize("shape", [(128, 128, 64), (1000, 1000, 1000), (333, 777, 520)], ids=str)
def test_multistage_on_gpu(tile, stages, shape, rng, cuda):
    m, n, k = shape
    a = rng.standard_normal((m, k), dtype=np.float32).astype(np.float16)
    b = rng.standard_normal((k, n), dtype=np.float32).astype(np.float16)
    d = Gemm(GemmConfig(tile=(*tile, 64), stages=stages), cuda)(a, b)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    err = np.max(np.abs(d - ref)) / np.max(np.abs(ref))
    assert err < 2e-3, f"max rel err {err:.3e} (seed {rng.seed_value})"


@pytest.mark.parametrize("schedule,epilogue", [("single_tile", "global"), ("single_tile", "tma"),
                                               ("multistage", "global")])
@pytest.mark.parametrize("dtype,out,b_major", [("f16", "f32", "N"), ("bf16", "bf16", "K"), ("f16", "f16", "K")])
def test_variants_on_gpu(schedule, epilogue, dtype, out, b_major, rng, cuda):
    from cutedsl.dtypes import dtype as _dt
    cfg = GemmConfig(dtype=dtype, out_dtype=out, schedule=schedule, epilogue=epilogue, b_major=b_major)
    a = rng.standard_normal((333, 520), dtype=np.float32).astype(_dt(dtype).numpy)
    b = rng.standard_normal((520, 257), dtype=np.float32).astype(_dt(dtype).numpy)
    d = Gemm(cfg, cuda)(a, b)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    err = np.max(np.abs(d.astype(np.float64) - ref)) / np.max(np.abs(ref))
    assert err < {"f32": 2e-3, "f16": 4e-3, "bf16": 1.6e-2}[out], err


@pytest.mark.parametrize("tile", [(128, 128), (64, 256), (128, 256)], ids=str)
def test_integer_inputs_bit_identical_with_emulator(tile, rng, cuda, sim):
    a = rng.integers(-4, 5, (190, 333)).astype(np.float16)
    b = rng.integers(-4, 5, (333, 300)).astype(np.float16)
    cfg = GemmConfig(tile=(*tile, 64), stages=3)
    d_gpu, d_sim = Gemm(cfg, cuda)(a, b), Gemm(cfg, sim)(a, b)
    assert np.array_equal(d_gpu, d_sim)
    assert np.array_equal(d_gpu.astype(np.float64), a.astype(np.float64) @ b.astype(np.float64))


@pytest.mark.parametrize("tma", [False, True])
def test_saxpy_on_gpu(tma, rng, cuda):
    x, y = rng.standard_normal(100_003, dtype=np.float32), rng.standard_normal(100_003, dtype=np.float32)
    assert np.array_equal(saxpy(3.0, x, y, tma=tma, backend=cuda), np.float32(3.0) * x + y)


@pytest.mark.parametrize("schedule,tile", [("cooperative", (128, 128, 64)), ("pingpong", (128, 128, 64))])
@pytest.mark.parametrize("decomposition,splits", [("stream-k", None), ("split-k", 3)])
def test_stream_k_split_k_on_gpu(schedule, tile, decomposition, splits, rng, cuda):
    """Stream-K / split-K on every SM of the GPU (CTAs wait on each other through global
    memory): exact on integers, the same bits on a second run and as on the emulator."""
    m, n, k = 1000, 1200, 64 * 40 + 7          # 8 x 10 tiles on 132 SMs: a partial wave
    a = rng.integers(-4, 5, (m, k)).astype(np.float16)
    b = rng.integers(-4, 5, (k, n)).astype(np.float16)
    g = Gemm(GemmConfig(schedule=schedule, tile=tile, decomposition=decomposition, splits=splits), cuda)
    d = g(a, b)
    assert np.array_equal(d.astype(np.float64), a.astype(np.float64) @ b.astype(np.float64))
    x = rng.standard_normal((m, k), dtype=np.float32).astype(np.float16)
    assert np.array_equal(g(x, b), g(x, b))


@pytest.mark.parametrize("schedule", ["cooperative", "pingpong"])
def test_grouped_on_gpu(schedule, rng, cuda):
    from cutedsl import GroupedGemm
    shapes = [(700, 300, 520), (0, 64, 64), (1, 90, 33), (333, 1000, 64), (64, 64, 0)]
    a = [rng.integers(-3, 4, (m, k)).astype(np.float16) for m, n, k in shapes]
    b = [rng.integers(-3, 4, (k, n)).astype(np.float16) for m, n, k in shapes]
    d = GroupedGemm(GemmConfig(schedule=schedule, tile=(128, 128, 64)), cuda)(a, b)
    for x, y, z in zip(a, b, d):
        assert np.array_equal(z, x.astype(np.float64) @ y)


def test_memset_on_gpu(cuda):
    """``cuMemsetD8Async`` / ``cuMemsetD32Async`` through the backend, read back by a host copy."""
    buf = cuda.alloc(64)
    try:
        cuda.copy_to_device(buf, np.full(64, 0xAA, np.uint8))
        cuda.memset(buf, 0x5C, 3, offset=1)
        cuda.memset(buf, 0x3F800000, 8, offset=8, width=4)
        cuda.zero(buf, 16, offset=32)
        cuda.synchronize()
        out = np.empty(64, np.uint8)
        cuda.copy_to_host(out, buf)
        assert out[:5].tolist() == [0xAA, 0x5C, 0x5C, 0x5C, 0xAA]
        assert out[8:16].view(np.float32).tolist() == [1.0, 1.0]
        assert not out[32:48].any() and (out[48:] == 0xAA).all() and (out[16:32] == 0xAA).all()
    finally:
        cuda.free(buf)
