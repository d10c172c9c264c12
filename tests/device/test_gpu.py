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
