"""Property-based tests of the public GEMM API (hypothesis): random shapes (1, non-multiples
of the tile), dtypes, configs and memory layouts (C/Fortran order, transposes, strided and
reversed views, device arrays used in place) with small-integer inputs, so every result is
compared bit-exactly with float64 numpy. Every call runs the compiled kernel on the emulator
and must leave no device memory behind. Example counts are kept small for CI."""
import ml_dtypes
import numpy as np
from hypothesis import HealthCheck, given, settings, strategies as st

from cutedsl import Gemm, GemmConfig
from cutedsl.runtime import arrays
from cutedsl.sim import SimBackend

BE = SimBackend()
_GEMMS = {}
NP = {"f16": np.float16, "bf16": ml_dtypes.bfloat16}
#: largest |input| for which every dot product of length <= 150 is an integer the output
#: dtype holds exactly (f16: 2048, bf16: 256)
VMAX = {"f32": 4, "f16": 3, "bf16": 1}
LAYOUTS = ("C", "F", "T", "rows::2", "reversed", "slice", "device")
SETTINGS = dict(deadline=None, database=None, print_blob=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def _gemm(cfg):
    if cfg not in _GEMMS:
        _GEMMS[cfg] = Gemm(cfg, BE)
    return _GEMMS[cfg]


def _layout(x: np.ndarray, how: str):
    """The same values as ``x`` in another memory layout (a view where the layout is one)."""
    if how == "C":
        return np.ascontiguousarray(x)
    if how == "F":
        return np.asfortranarray(x)
    if how == "T":
        return np.ascontiguousarray(x.T).T                 # a transposed view
    if how == "rows::2":
        big = np.zeros((2 * x.shape[0], x.shape[1]), x.dtype)
        big[::2] = x
        return big[::2]                                     # every other row of a bigger array
    if how == "reversed":
        return np.ascontiguousarray(x[::-1, ::-1])[::-1, ::-1]  # negative strides
    if how == "slice":
        big = np.full((x.shape[0] + 3, x.shape[1] + 5), 7, x.dtype)
        big[2:-1, 3:-2] = x
        return big[2:-1, 3:-2]                              # an interior window
    raise AssertionError(how)


def _device(x: np.ndarray, k_major_b: bool):
    """A device array holding ``x`` that obeys TMA's rules (rows padded to 16 bytes); for a
    K-major B, a (K, N) view of a row-major (N, K) device array."""
    if not k_major_b:
        return arrays.to_device(BE, x, pitch_align=16)
    bt = arrays.to_device(BE, np.ascontiguousarray(x.T), pitch_align=16)
    return bt.view(shape=x.shape, strides=bt.strides[::-1])


def _check(cfg, m, n, k, la, lb, seed):
    rng = np.random.default_rng(seed)
    v = VMAX[cfg.out_dtype]
    a = rng.integers(-v, v + 1, (m, k)).astype(NP[cfg.dtype])
    b = rng.integers(-v, v + 1, (k, n)).astype(NP[cfg.dtype])
    ref = a.astype(np.float64) @ b.astype(np.float64)
    xa = _device(a, False) if la == "device" else _layout(a, la)
    xb = _device(b, cfg.b_major == "K") if lb == "device" else _layout(b, lb)
    d = _gemm(cfg)(xa, xb)
    host = arrays.to_host(d) if isinstance(d, arrays.DeviceArray) else d
    assert host.shape == (m, n) and host.dtype == np.dtype(NP.get(cfg.out_dtype, np.float32))
    np.testing.assert_array_equal(host.astype(np.float64), ref,
                                  err_msg=f"{cfg} M={m} N={n} K={k} a:{la} b:{lb} seed={seed}")
    del xa, xb, d
    assert BE.live_allocations() == 0, "device memory left behind"


dims = st.one_of(st.just(1), st.integers(1, 150))
seeds = st.integers(0, 2 ** 32 - 1)


@settings(max_examples=20, **SETTINGS)
@given(m=dims, n=dims, k=dims, la=st.sampled_from(LAYOUTS), lb=st.sampled_from(LAYOUTS),
       b_major=st.sampled_from("NK"), seed=seeds)
def test_any_shape_and_layout_is_exact(m, n, k, la, lb, b_major, seed):
    """Shapes and memory layouts vary; two kernels (B N-major and K-major)."""
    _check(GemmConfig(tile=(64, 64, 64), stages=2, b_major=b_major), m, n, k, la, lb, seed)


@st.composite
def valid_configs(draw):
    kw = dict(dtype=draw(st.sampled_from(["f16", "bf16"])),
              out_dtype=draw(st.sampled_from(["f32", "f16", "bf16"])),
              tile=draw(st.sampled_from([(64, 64, 64), (64, 128, 64), (128, 64, 64), (128, 128, 64)])),
              b_major=draw(st.sampled_from("NK")), epilogue=draw(st.sampled_from(["tma", "global"])),
              schedule=draw(st.sampled_from(["multistage", "multistage", "single_tile"])))
    kw["stages"] = "auto" if kw["schedule"] == "single_tile" else draw(st.sampled_from(["auto", 1, 2, 3]))
    return GemmConfig(**kw)


@settings(max_examples=12, **SETTINGS)
@given(cfg=valid_configs(), m=dims, n=dims, k=dims, la=st.sampled_from(LAYOUTS), seed=seeds)
def test_any_config_is_exact(cfg, m, n, k, la, seed):
    """Configurations vary (dtype, output dtype, tile, stages, B major, epilogue, schedule)."""
    _check(cfg, m, n, k, la, "C", seed)


#: examples per run of the every-schedule test: a few in CI, many with CUTEDSL_PROPERTY_EXAMPLES=N
#: (e.g. ``CUTEDSL_PROPERTY_EXAMPLES=200 pytest tests/test_properties.py``)
import os  # noqa: E402
SCHEDULE_EXAMPLES = int(os.environ.get("CUTEDSL_PROPERTY_EXAMPLES", "8"))
SCHEDULE_TILES = {"multistage": [(64, 64, 64), (128, 128, 64), (128, 256, 64)], "single_tile": [(64, 64, 64), (128, 128, 64)],
                  "warp_specialized": [(128, 128, 64), (64, 128, 64)], "cooperative": [(128, 128, 64), (128, 256, 64)],
                  "pingpong": [(64, 128, 64), (128, 128, 64)]}


@st.composite
def every_schedule_configs(draw):
    """Any config the library accepts, over every schedule: tiles, dtypes, B major, epilogue,
    clusters (warp-specialized schedules), raster and swizzle of the persistent scheduler. A
    combination GemmConfig refuses is drawn again."""
    from hypothesis import assume
    from cutedsl.device.config import SCHEDULES, WARP_SPECIALIZED
    from cutedsl.errors import ConfigError
    sched = draw(st.sampled_from(SCHEDULES))
    kw = dict(schedule=sched, tile=draw(st.sampled_from(SCHEDULE_TILES[sched])),
              dtype=draw(st.sampled_from(["f16", "bf16"])), out_dtype=draw(st.sampled_from(["f32", "f16", "bf16"])),
              b_major=draw(st.sampled_from("NK")), epilogue=draw(st.sampled_from(["tma", "global"])))
    if sched in WARP_SPECIALIZED:
        kw.update(cluster=draw(st.sampled_from([(1, 1), (2, 1), (1, 2)])), raster=draw(st.sampled_from("MN")),
                  swizzle=draw(st.sampled_from([1, 2])), sm_count=draw(st.sampled_from([None, 3])))
    try:
        return GemmConfig(**kw)
    except ConfigError:
        assume(False)


@settings(max_examples=SCHEDULE_EXAMPLES, **SETTINGS)
@given(cfg=every_schedule_configs(), m=dims, n=dims, k=dims, seed=seeds)
def test_every_schedule_is_exact(cfg, m, n, k, seed):
    """Issue 29: every schedule x dtype x cluster x epilogue the config accepts, shapes including 1
    and non-multiples of the tile, bit-exact against float64 numpy."""
    _check(cfg, m, n, k, "C", "C", seed)
