"""Every kernel, tile and stage configuration, run for real (the compiled PTX on the emulator)
through the public Device API on shapes that are not tile multiples, with fresh random inputs,
against a float64 numpy reference."""
import numpy as np
import pytest
from gemm_cases import CASE_IDS, CASES, TILES

from cutedsl import Gemm, GemmConfig
from cutedsl.device.saxpy import saxpy
from cutedsl.dtypes import dtype as _dtype

TOL = {"f32": 2e-5, "f16": 2e-3, "bf16": 1e-2}


def run(cfg, m, n, k, rng, sim, integer=False):
    npd = _dtype(cfg.dtype).numpy
    if integer:      # small integers: every partial sum is exact, so the result must be exact
        a = rng.integers(-4, 5, (m, k)).astype(npd)
        b = rng.integers(-4, 5, (k, n)).astype(npd)
    else:
        a = rng.standard_normal((m, k), dtype=np.float32).astype(npd)
        b = rng.standard_normal((k, n), dtype=np.float32).astype(npd)
    d = Gemm(cfg, sim)(a, b)
    assert d.shape == (m, n) and d.dtype == _dtype(cfg.out_dtype).numpy
    ref = a.astype(np.float64) @ b.astype(np.float64)
    if integer:
        assert np.array_equal(d.astype(np.float64), ref), f"seed {rng.seed_value}"
        return
    err = np.max(np.abs(d.astype(np.float64) - ref)) / np.max(np.abs(ref))
    assert err < TOL[cfg.out_dtype], f"max rel err {err:.3e} (seed {rng.seed_value})"


@pytest.mark.parametrize("tile,stages", CASES, ids=CASE_IDS)
def test_multistage_every_tile_and_stage(tile, stages, rng, sim):
    tm, tn = tile
    # 2 x 2 tiles, both partial; k-tiles = stages + 2 so the ring wraps, last k-tile partial
    m, n, k = tm + int(rng.integers(1, tm)), tn + int(rng.integers(1, tn)), 64 * (stages + 2) - 24
    run(GemmConfig(tile=(tm, tn, 64), stages=stages), m, n, k, rng, sim)


@pytest.mark.parametrize("tile", [t for t in TILES if t[0] * t[1] <= 128 * 128], ids=str)
@pytest.mark.parametrize("epilogue", ["global", "tma"])
def test_single_tile_every_tile(tile, epilogue, rng, sim):
    run(GemmConfig(tile=(*tile, 64), schedule="single_tile", epilogue=epilogue),
        tile[0] + 17, tile[1] - 9, 136, rng, sim)


@pytest.mark.parametrize("dtype,out", [("f16", "f16"), ("bf16", "bf16"), ("bf16", "f32"), ("f16", "bf16")])
@pytest.mark.parametrize("b_major", ["N", "K"])
@pytest.mark.parametrize("epilogue", ["tma", "global"])
def test_dtypes_layouts_epilogues(dtype, out, b_major, epilogue, rng, sim):
    cfg = GemmConfig(dtype=dtype, out_dtype=out, tile=(128, 64, 64), stages=2, b_major=b_major, epilogue=epilogue)
    run(cfg, 150, 77, 200, rng, sim)


@pytest.mark.parametrize("tile", [(128, 128), (64, 256), (128, 256)], ids=str)
def test_integer_inputs_are_bit_exact(tile, rng, sim):
    run(GemmConfig(tile=(*tile, 64), stages=3), 190, 300, 333, rng, sim, integer=True)


def test_k_major_b_from_a_transposed_array(rng, sim):
    bt = rng.standard_normal((96, 200), dtype=np.float32).astype(np.float16)   # (N, K) row-major
    a = rng.standard_normal((70, 200), dtype=np.float32).astype(np.float16)
    d = Gemm(GemmConfig(b_major="K", stages=2), sim)(a, bt.T)
    ref = a.astype(np.float64) @ bt.T.astype(np.float64)
    assert np.max(np.abs(d - ref)) / np.max(np.abs(ref)) < 2e-5


@pytest.mark.parametrize("tma", [False, True])
def test_saxpy_kernels(tma, rng, sim):
    n = int(rng.integers(300, 1000))
    x, y = rng.standard_normal(n, dtype=np.float32), rng.standard_normal(n, dtype=np.float32)
    assert np.array_equal(saxpy(1.75, x, y, tma=tma, backend=sim), np.float32(1.75) * x + y)
