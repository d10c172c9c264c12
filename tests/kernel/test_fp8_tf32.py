"""fp8 GEMMs (issue 20): e4m3 / e5m2 operands, mixed too, K-major both, f32 accumulation, on
every schedule -- the real compiled PTX on the emulator, shapes that are not tile multiples,
fresh random inputs drawn from the fp8 grid (small integers: every partial sum is exact, so
f32 output must equal the float64 reference bit for bit) -- plus the up-front errors and the
SASS of the main loops (QGMMA, no spills, the f16 loop budget)."""
import ml_dtypes
import numpy as np
import pytest

from cutedsl import Gemm, GemmConfig
from cutedsl.dtypes import dtype as _dtype
from cutedsl.errors import ArgumentTypeError, ConfigError

NP = {"e4m3": ml_dtypes.float8_e4m3fn, "e5m2": ml_dtypes.float8_e5m2}


def run(cfg, m, n, k, rng, backend):
    a = rng.integers(-8, 9, (m, k)).astype(NP[cfg.dtype])
    b = rng.integers(-8, 9, (k, n)).astype(NP[cfg.b_dtype or cfg.dtype])
    d = Gemm(cfg, backend)(a, b)               # B given (K, N): the host path stores it K-major
    assert d.shape == (m, n) and d.dtype == _dtype(cfg.out_dtype).numpy
    ref = a.astype(np.float64) @ b.astype(np.float64)
    what = f"{cfg} m={m} n={n} k={k} seed {rng.seed_value}"
    if cfg.out_dtype == "f32":
        assert np.array_equal(d.astype(np.float64), ref), what
    else:                                      # one rounding of an exact f32 value
        assert np.array_equal(d, ref.astype(np.float32).astype(d.dtype)), what


@pytest.mark.parametrize("schedule,tile,dtype,b_dtype,out,cluster", [
    ("multistage", (128, 128), "e4m3", None, "f32", (1, 1)),
    ("multistage", (128, 256), "e5m2", None, "bf16", (1, 1)),     # two consumer warpgroups
    ("single_tile", (64, 128), "e4m3", "e5m2", "f32", (1, 1)),
    ("warp_specialized", (64, 256), "e5m2", "e4m3", "f16", (2, 1)),
    ("cooperative", (128, 256), "e4m3", "e5m2", "f32", (1, 2)),
    ("pingpong", (128, 128), "e4m3", None, "f32", (2, 1)),
])
def test_fp8_on_every_schedule(schedule, tile, dtype, b_dtype, out, cluster, rng, sim):
    """3 k-tiles of 128 (the last partial) through 2 stages, 2 x 2 tiles (the last ones partial),
    2 SMs for the persistent schedules."""
    tm, tn = tile
    cfg = GemmConfig(dtype=dtype, b_dtype=b_dtype, out_dtype=out, tile=(tm, tn, 128), schedule=schedule,
                     stages="auto" if schedule == "single_tile" else 2, cluster=cluster, sm_count=2)
    assert cfg.b_major == "K" and cfg.kernel().traits.k_tile == 128
    m = tm + int(rng.integers(1, tm))
    n = tn + int(rng.integers(1, tn))
    k = 2 * 128 + int(rng.integers(1, 128))
    run(cfg, m, n, k, rng, sim)


def test_fp8_defaults_and_adversarial_interleavings(rng):
    """``GemmConfig(dtype="e4m3")`` needs no other field (BLOCK_K 128, B K-major); random warp
    interleavings and late async completion leave the result exact."""
    from cutedsl.sim import SimBackend
    cfg = GemmConfig(dtype="e4m3", schedule="cooperative", stages=2, sm_count=2)
    assert cfg.tile == (128, 128, 128) and cfg.b_major == "K"
    run(cfg, 150 + int(rng.integers(0, 60)), 130 + int(rng.integers(0, 60)), 300,
        rng, SimBackend(chaos=int(rng.integers(1, 2 ** 31))))


@pytest.mark.parametrize("kw,match", [
    (dict(dtype="e4m3", b_major="MN"), "e4m3 operands must be K-major .* use b_major='K'"),
    (dict(dtype="e4m3", b_dtype="f16"), "A and B must have the same type, or mix e4m3 with e5m2 .* e4m3 x f16"),
    (dict(dtype="f16", b_dtype="bf16"), "got f16 x bf16"),
    (dict(dtype="e4m3", tile=(128, 128, 64)), "BLOCK_K must be 128 .*one 128-byte swizzle row of e4m3"),
    (dict(dtype="e5m2", b_dtype="f32"), "b_dtype must be None or 'f16', 'bf16', 'e4m3', 'e5m2', 'tf32', 'mxfp8', 'mxfp8-e5m2', 'mxfp6', 'mxfp6-e3m2', 'mxfp4' or 'nvfp4'"),
    (dict(dtype="e5m2", b_dtype="tf32"), "mix e4m3 with e5m2 .* got e5m2 x tf32"),
])
def test_fp8_config_errors(kw, match):
    with pytest.raises(ConfigError, match=match):
        GemmConfig(**kw)


def test_fp8_operand_dtype_checked_before_launch(sim):
    g = Gemm(GemmConfig(dtype="e4m3", b_dtype="e5m2"), sim)
    a = np.ones((8, 16), NP["e4m3"])
    with pytest.raises(ArgumentTypeError, match=r"b has dtype float8_e4m3fn, the config expects e5m2 "
                                                r"\(GemmConfig.b_dtype"):
        g(a, np.ones((16, 8), NP["e4m3"]))


def test_fp8_cli(capsys):
    from cutedsl.cli import main
    rc = main(["gemm", "--m", "70", "--n", "90", "--k", "200", "--dtype", "e5m2", "--b-dtype", "e4m3",
               "--schedule", "multistage", "--backend", "sim", "--check", "--json"])
    import json
    rep = json.loads(capsys.readouterr().out)
    assert rc == 0 and rep["passed"] and rep["b_dtype"] == "e4m3" and rep["tile"] == [128, 128, 128]
    assert rep["sass"]["QGMMA"] % 4 == 0 and rep["sass"].get("HGMMA", 0) == 0   # 4 x k32 per 128-wide k-tile


@pytest.mark.parametrize("schedule,tile", [("cooperative", (128, 256)), ("pingpong", (128, 128))])
def test_fp8_main_loop_sass(schedule, tile):
    """QGMMA with the operand kinds, no spills, and a consumer main loop within 10% of the same
    schedule's f16 loop per k-tile (a k-tile holds twice the K: the loop is not longer)."""
    from cutedsl.compiler import toolchain
    from cutedsl.compiler.sass_loops import hot_loop
    tm, tn = tile
    f8 = GemmConfig(dtype="e4m3", b_dtype="e5m2", schedule=schedule, tile=(tm, tn, 128)).kernel().compile()
    f16 = GemmConfig(dtype="f16", schedule=schedule, tile=(tm, tn, 64)).kernel().compile()
    text = toolchain.sass(f8.cubin)
    assert f"QGMMA.64x{tn}x32.F32.E4M3.E5M2" in text and "HGMMA" not in text
    assert f8.resources.spill_stores == f8.resources.spill_loads == 0
    ours, ref = hot_loop(text, "QGMMA")["instructions"], hot_loop(toolchain.sass(f16.cubin))["instructions"]
    assert ours <= 1.1 * ref, (ours, ref)


# -- tf32 ---------------------------------------------------------------------------------
@pytest.mark.parametrize("schedule,tile,cluster", [("multistage", (128, 256), (1, 1)), ("single_tile", (64, 64), (1, 1)),
                                                   ("cooperative", (128, 128), (2, 1)), ("pingpong", (64, 128), (1, 2))])
def test_tf32_on_every_schedule(schedule, tile, cluster, rng, sim):
    """f32 arrays in, K-major both (the default), BLOCK_K 32 (one 128-byte row of f32 words);
    the tensor cores read the 19 high bits of each word (tensor_core_value models it), so the
    result equals the float64 product of the truncated inputs up to f32 accumulation."""
    from cutedsl.dtypes import tensor_core_value
    tm, tn = tile
    cfg = GemmConfig(dtype="tf32", tile=(tm, tn, 32), schedule=schedule, cluster=cluster, sm_count=2,
                     stages="auto" if schedule == "single_tile" else 3)
    assert cfg.b_major == "K" and cfg.kernel().traits.k_step == 8
    m, n, k = tm + int(rng.integers(1, tm)), tn + int(rng.integers(1, tn)), 3 * 32 + int(rng.integers(1, 32))
    a = rng.standard_normal((m, k), dtype=np.float32)
    b = rng.standard_normal((k, n), dtype=np.float32)
    d = Gemm(cfg, sim)(a, b)
    ref = tensor_core_value(a, "tf32") @ tensor_core_value(b, "tf32")
    assert np.max(np.abs(d - ref)) / np.max(np.abs(ref)) < 1e-6, rng.seed_value
    plain = a.astype(np.float64) @ b.astype(np.float64)      # the truncation is visible
    assert np.max(np.abs(d - plain)) / np.max(np.abs(plain)) > 1e-5


def test_tf32_errors_and_sass():
    from cutedsl.compiler import toolchain
    with pytest.raises(ConfigError, match="tf32 operands must be K-major"):
        GemmConfig(dtype="tf32", b_major="MN")
    with pytest.raises(ConfigError, match="BLOCK_K must be 32"):
        GemmConfig(dtype="tf32", tile=(128, 128, 64))
    k = GemmConfig(dtype="tf32", schedule="cooperative").kernel().compile()
    assert "HGMMA.64x128x8.F32.TF32" in toolchain.sass(k.cubin) and k.resources.spill_stores == 0
