"""``cutedsl.runtime.launch``: a compiled kernel run from arrays and scalars given by parameter
name (tensor maps encoded and parameters packed by the runtime), on the emulator."""
import numpy as np
import pytest

from cutedsl.errors import ArgumentError, ArgumentTypeError
from cutedsl.kernel import SaxpyKernel, TmaSaxpyKernel
from cutedsl.runtime import arrays, launch

N = 300                      # not a multiple of the 256-element TMA box nor of the 128-thread block


@pytest.fixture
def xy():
    rng = np.random.default_rng(7)
    return rng.standard_normal(N).astype(np.float32), rng.standard_normal(N).astype(np.float32)


def _check(got, alpha, x, y):
    """``got`` is ``alpha * x + y`` in f32: within one f32 rounding of each term of the float64 value."""
    x64, y64 = x.astype(np.float64), y.astype(np.float64)
    err = np.abs(got.astype(np.float64) - (alpha * x64 + y64))
    assert np.all(err <= 2 * np.finfo(np.float32).eps * (np.abs(alpha * x64) + np.abs(y64))), err.max()


def test_tensor_maps_from_numpy_are_encoded_and_written_back(sim, xy):
    x, y = xy
    y0 = y.copy()
    x.flags.writeable = False            # an input the caller cannot let anyone write: left alone
    k = TmaSaxpyKernel()
    launch(k, k.grid(N), x=x, y=y, alpha=1.5, backend=sim)
    _check(y, 1.5, x, y0)
    assert sim.live_tensor_maps() == 0 and sim.live_allocations() == 0     # the call's own went with it


def test_pointer_parameters_take_device_arrays_in_place(sim, xy):
    x, y = xy
    dx, dy = arrays.to_device(sim, x), arrays.to_device(sim, y)
    k = SaxpyKernel()
    launch(k.compile(), k.grid(N), x=dx, y=dy, n=N, alpha=-2.0, backend=sim)
    _check(arrays.to_host(dy), -2.0, x, y)


def _strided(sim, x):
    """A device array of ``x``'s length whose elements are 12 bytes apart (not contiguous)."""
    wide = arrays.to_device(sim, np.repeat(x[:, None], 3, axis=1))
    return arrays.DeviceArray(wide.ptr, (N,), (12,), wide.dtype, sim, wide)


@pytest.mark.parametrize("args, error, match", [
    (lambda x, y, sim: dict(alpha=1.0), ArgumentError,
     r"kernel 'saxpy_tma' takes x, y, alpha: unknown \[\], missing \['x', 'y'\]"),
    (lambda x, y, sim: dict(x=x, y=y, alpha=1.0, z=0), ArgumentError, r"unknown \['z'\], missing \[\]"),
    (lambda x, y, sim: dict(x=x, y=y, alpha="2"), ArgumentTypeError,
     r"alpha must be a real number \(f32 kernel parameter\), got '2'"),
    (lambda x, y, sim: dict(x=x.astype(np.float64), y=y, alpha=1.0), ArgumentTypeError,
     r"x has dtype float64, its tensor map reads f32 \(numpy: float32\)"),
    (lambda x, y, sim: dict(x=_strided(sim, x), y=y, alpha=1.0), ArgumentError,
     r"x: innermost stride is 12 B; TMA needs contiguous rows"),
], ids=["missing", "unknown", "scalar", "dtype", "strided"])
def test_bad_arguments_raise_before_any_launch(sim, xy, args, error, match, monkeypatch):
    call = args(*xy, sim)
    live = sim.live_allocations()

    def refused(*a, **kw):
        raise AssertionError("launched")
    monkeypatch.setattr(sim, "launch", refused)     # the (session-wide) instance's launch: nothing may reach it
    with pytest.raises(error, match=match):
        launch(TmaSaxpyKernel().compile(), (2, 1, 1), backend=sim, **call)
    assert sim.live_tensor_maps() == 0 and sim.live_allocations() == live


@pytest.mark.parametrize("grid", [(2, 1), (0, 1, 1), (2.0, 1, 1)])
def test_grid_must_be_three_positive_ints(sim, xy, grid):
    x, y = xy
    with pytest.raises(ArgumentError, match=r"grid must be three positive ints \(x, y, z\)"):
        launch(TmaSaxpyKernel(), grid, x=x, y=y, alpha=1.0, backend=sim)
