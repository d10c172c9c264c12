"""Device operands are checked against their allocation before anything is launched: a freed
array, a view that starts before or runs past its allocation, and a released launch are clear
errors naming the operand (issue 29 item 2). Runs on the emulator's memory."""
import numpy as np
import pytest

from cutedsl import Gemm, GemmConfig
from cutedsl.runtime import arrays
from cutedsl.errors import ArgumentError, ArgumentTypeError, LaunchError
from cutedsl.sim import SimBackend

CFG = GemmConfig(tile=(64, 64, 64), stages=2)


@pytest.fixture
def be():
    return SimBackend()


@pytest.fixture
def ops(be, rng):
    a = rng.integers(-3, 4, (70, 64)).astype(np.float16)
    b = rng.integers(-3, 4, (64, 72)).astype(np.float16)
    return a, b, arrays.to_device(be, a), arrays.to_device(be, b)


def _launches(be, monkeypatch):
    n = []
    real = be.launch
    monkeypatch.setattr(be, "launch", lambda *a, **k: (n.append(1), real(*a, **k))[1])
    return n


def test_freed_operand_is_refused_before_launch(be, ops, monkeypatch):
    _, _, da, db = ops
    g = Gemm(CFG, be)
    g(da, db)                                  # compiled and run once
    n = _launches(be, monkeypatch)
    db.free()
    with pytest.raises(ArgumentError, match=r"^b: its device memory \(9216 bytes at 0x[0-9a-f]+\) was freed"):
        g(da, db)
    view = da.view(shape=(10, 64))
    da.free()                                  # a view of a freed array is no better
    with pytest.raises(ArgumentError, match=r"^a: its device memory .* was freed"):
        g(view, arrays.to_device(be, np.ones((64, 72), np.float16)))
    assert n == []


def test_freed_out_is_refused(be, ops):
    _, _, da, db = ops
    out = arrays.empty(be, (70, 72), "f32", pitch_align=16)
    out.free()
    with pytest.raises(ArgumentError, match=r"^out: its device memory .* was freed"):
        Gemm(CFG, be)(da, db, out=out)


def test_view_is_validated_when_made(ops):
    _, _, da, _ = ops
    size = 70 * 64 * 2
    with pytest.raises(ArgumentError, match=rf"^view\(\): shape \(70, 64\) with strides \(128, 2\) \(bytes\) at offset "
                                            rf"128 covers bytes \[128, {size + 128}\) and runs past the end of its "
                                            rf"allocation of {size} bytes at 0x"):
        da.view(offset=128)
    with pytest.raises(ArgumentError, match=r"starts before its allocation"):
        da.view(offset=-16, shape=(2, 64))
    with pytest.raises(ArgumentError, match=r"runs past the end"):
        da.view(shape=(70, 64), strides=(130, 2))
    with pytest.raises(ArgumentError, match=r"starts before"):
        da.view(offset=128, shape=(2, 64), strides=(-256, 2))   # negative strides reach backwards
    with pytest.raises(ArgumentError, match=r"differ in rank"):
        da.view(shape=(70, 64, 1))
    with pytest.raises(ArgumentError, match=r"negative size"):
        da.view(shape=(-1, 64))
    with pytest.raises(ArgumentTypeError, match=r"offset must be an int"):
        da.view(offset=1.5)
    with pytest.raises(ArgumentTypeError, match=r"shape must be a tuple of ints"):
        da.view(shape=(70.0, 64))
    assert da.view(offset=size - 128, shape=(1, 64)).byte_span() == (0, 128)   # the last row: fine
    assert da.view(shape=(0, 64)).byte_span() is None                           # empty: nothing to reach


def test_view_past_allocation_made_by_evolve_is_refused_at_call(be, ops):
    """A view made without view() (attrs.evolve) is still checked at the call."""
    import attrs
    _, _, da, db = ops
    bad = attrs.evolve(da, ptr=da.ptr + 256)
    with pytest.raises(ArgumentError, match=r"^a: shape \(70, 64\) .* runs past the end of its allocation"):
        Gemm(CFG, be)(bad, db)


def test_released_launch_raises(be, ops, rng):
    a, b, da, db = ops
    launch, result = Gemm(CFG, be).prepare(da, db)
    launch()
    np.testing.assert_array_equal(arrays.to_host(result()), a.astype(np.float64) @ b.astype(np.float64))
    launch.release()
    with pytest.raises(LaunchError, match=r"this launch was released \(launch.release\(\)\)"):
        launch()
