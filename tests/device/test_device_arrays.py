"""Device arrays are used in place (no copies) and must obey TMA's rules; violations raise
before launch, naming the argument and the rule. Runs on the emulator's memory."""
import numpy as np
import pytest

from cutedsl import Gemm, GemmConfig
from cutedsl.runtime import arrays
from cutedsl.errors import ArgumentError


@pytest.fixture
def ops(sim, rng):
    a = rng.standard_normal((100, 72), dtype=np.float32).astype(np.float16)
    b = rng.standard_normal((72, 40), dtype=np.float32).astype(np.float16)
    return a, b, arrays.to_device(sim, a), arrays.to_device(sim, b)


def test_device_arrays_in_place(ops, sim):
    a, b, da, db = ops
    g = Gemm(GemmConfig(stages=2), sim)
    d = g(da, db)
    assert isinstance(d, arrays.DeviceArray) and d.shape == (100, 40)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    assert np.max(np.abs(arrays.to_host(d) - ref)) / np.max(np.abs(ref)) < 2e-5
    out = arrays.empty(sim, (100, 40), "f32", 16)
    assert g(da, db, out=out) is out
    assert np.array_equal(arrays.to_host(out), arrays.to_host(d))


def test_misaligned_address(ops, sim):
    _, _, da, db = ops
    bad = da.view(offset=2, shape=(99, 72))
    with pytest.raises(ArgumentError, match="a: global address 0x[0-9a-f]+ is not 16-byte aligned"):
        Gemm(GemmConfig(stages=2), sim)(bad, db)


def test_row_stride_not_multiple_of_16(sim, rng):
    x = rng.standard_normal((64, 36), dtype=np.float32).astype(np.float16)   # 72-byte rows
    dx = arrays.to_device(sim, x)                                              # unpadded copy
    db = arrays.to_device(sim, np.ones((36, 64), np.float16))
    with pytest.raises(ArgumentError, match=r"a: row stride is 72 B; TMA needs a multiple of 16 B"):
        Gemm(GemmConfig(stages=2), sim)(dx, db)


def test_non_contiguous_inner_dimension(ops, sim):
    _, _, da, db = ops
    strided = da.view(shape=(100, 36), strides=(144, 4))                      # every other column
    with pytest.raises(ArgumentError, match="a: innermost stride is 4 B"):
        Gemm(GemmConfig(stages=2), sim)(strided, db.view(shape=(36, 40)))


def test_sizes_past_the_kernel_limits(sim):
    from cutedsl.dtypes import dtype
    huge = arrays.DeviceArray(1 << 20, (2 ** 31, 64), (128, 2), dtype("f16"), sim)
    b = arrays.DeviceArray(1 << 20, (64, 64), (128, 2), dtype("f16"), sim)
    with pytest.raises(ArgumentError, match="M = 2147483648 exceeds the kernel's 32-bit size limit"):
        Gemm(GemmConfig(), sim)(huge, b)


def test_wrong_out_array(ops, sim):
    _, _, da, db = ops
    with pytest.raises(ArgumentError, match=r"out must have shape \(100, 40\) and dtype f32"):
        Gemm(GemmConfig(stages=2), sim)(da, db, out=arrays.empty(sim, (100, 41), "f32", 16))


def test_one_shot_gemm_takes_the_dtype_from_a(sim, rng):
    from cutedsl.device import gemm
    a = rng.standard_normal((70, 64), dtype=np.float32).astype(np.float16)
    b = rng.standard_normal((64, 30), dtype=np.float32).astype(np.float16)
    d = gemm(a, b, backend=sim)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    assert d.dtype == np.float32 and np.max(np.abs(d - ref)) / np.max(np.abs(ref)) < 2e-5
    with pytest.raises(Exception, match="dtype must be 'f16', 'bf16', 'e4m3', 'e5m2', 'tf32', 'mxfp8', 'mxfp8-e5m2', 'mxfp6', 'mxfp6-e3m2', 'mxfp4' or 'nvfp4'"):
        gemm(a.astype(np.float32), b, backend=sim)


def test_to_device_gives_true_c_strides_for_size_one_dimensions():
    """x.T of an (8, 1) array is (1, 8) with numpy strides (2, 2): numpy calls it contiguous,
    but a device copy must carry C strides (16, 2) or TMA's row-stride rule rejects it
    (found by the property test: K-major B with N = 1)."""
    from cutedsl.runtime import arrays
    from cutedsl.sim import SimBackend
    be = SimBackend()
    x = np.arange(8, dtype=np.float16).reshape(8, 1).T
    assert x.strides == (2, 2)
    d = arrays.to_device(be, x, pitch_align=16)
    assert d.strides == (16, 2)
    np.testing.assert_array_equal(arrays.to_host(d), x)
    d1 = arrays.to_device(be, x)
    assert d1.strides == (16, 2)
    np.testing.assert_array_equal(arrays.to_host(d1), x)


def test_swapped_arguments_are_named(sim):
    from cutedsl.errors import ArgumentTypeError
    x = np.ones((4, 8), np.float16)
    with pytest.raises(ArgumentTypeError, match=r"^to_device\(backend, host\): backend expected first, "
                                                r"got ndarray \(arguments swapped\?\)$"):
        arrays.to_device(x, sim)
    with pytest.raises(ArgumentTypeError, match=r"^empty\(backend, shape, dtype\): backend expected first"):
        arrays.empty((4, 8), sim, "f16")


def test_device_array_of_another_backend_object_is_refused(sim, rng):
    from cutedsl.sim import SimBackend
    other = SimBackend()
    a, b = rng.standard_normal((70, 64)).astype(np.float16), rng.standard_normal((64, 50)).astype(np.float16)
    g = Gemm(GemmConfig(tile=(64, 64, 64), stages=2), sim)
    for kw, name in ((dict(a=arrays.to_device(other, a, 16), b=b), "a"),
                     (dict(a=a, b=b, out=arrays.empty(other, (70, 50), "f32", 16)), "out")):
        with pytest.raises(ArgumentError, match=rf"^{name} is a DeviceArray of another backend object \(sim\) than "
                                                r"this call's \(sim\)"):
            g(**kw)
    assert sim.live_allocations() == 0


def test_each_operand_is_described_once_per_call(ops, sim, monkeypatch):
    """Issue 20: one TensorView per operand per call (the describe tuple was re-made three times)."""
    _, _, da, db = ops
    g = Gemm(GemmConfig(stages=2), sim)
    g(da, db)
    calls = []
    real = arrays.describe
    monkeypatch.setattr(arrays, "describe", lambda x, name="array": (calls.append(name), real(x, name))[1])
    g(da, db)
    assert sorted(calls) == ["a", "b"]
    v = arrays.TensorView.of(da, "a")
    assert (v.ptr, v.shape, v.strides, v.dtype.name, v.framework, v.on_host) == \
        (da.ptr, (100, 72), da.strides, "f16", "cutedsl", False)
    h = arrays.TensorView.of(np.array([[1.0, 2.0]]), "b")
    assert h.on_host and h.dtype.name == "f64" and h.shape == (1, 2)
