"""DLPack arrays (issue 22): any producer of __dlpack__/__dlpack_device__ is taken zero-copy on
the device path (read through the DLPack C ABI, no framework needed) and checked by the same
TMA rules; CPU producers are the host path. CUDA producers are modelled here by a DLPack
capsule over emulator memory, so the whole path runs without a GPU."""
import ctypes

import ml_dtypes
import numpy as np
import pytest

from cutedsl import Gemm, GemmConfig
from cutedsl.runtime import arrays, dlpack
from cutedsl.errors import ArgumentError, ArgumentTypeError

_new_capsule = ctypes.pythonapi.PyCapsule_New
_new_capsule.restype, _new_capsule.argtypes = ctypes.py_object, [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]


class FakeDeviceTensor:
    """A DLPack producer describing ``shape``/``strides`` (elements) at address ``ptr``."""

    def __init__(self, ptr, shape, strides=None, code=2, bits=16, device=dlpack.KDL_CUDA):
        self._shape = (ctypes.c_int64 * len(shape))(*shape)
        self._strides = (ctypes.c_int64 * len(shape))(*strides) if strides else None
        t = dlpack.DLManagedTensor()
        t.dl_tensor.data, t.dl_tensor.ndim = ptr, len(shape)
        t.dl_tensor.device = dlpack.DLDevice(device, 0)
        t.dl_tensor.dtype = dlpack.DLDataType(code, bits, 1)
        t.dl_tensor.shape = self._shape
        t.dl_tensor.strides = self._strides if strides else None
        self._t = t
        self._device = device

    def __dlpack_device__(self):
        return (self._device, 0)

    def __dlpack__(self, stream=None):
        return _new_capsule(ctypes.addressof(self._t), b"dltensor", None)


def _on_device(be, host):
    d = arrays.to_device(be, host, pitch_align=16)
    code = 4 if host.dtype == ml_dtypes.bfloat16 else 2
    return d, FakeDeviceTensor(d.ptr, host.shape, [s // host.itemsize for s in d.strides], code=code)


def test_dlpack_device_operands_are_used_in_place(sim, rng):
    a = rng.integers(-3, 4, (100, 72)).astype(ml_dtypes.bfloat16)
    b = rng.integers(-3, 4, (72, 40)).astype(ml_dtypes.bfloat16)
    (da, ta), (_, tb) = _on_device(sim, a), _on_device(sim, b)
    assert arrays.describe(ta)[:4] == (da.ptr, (100, 72), da.strides, da.dtype)
    live = sim.live_allocations()
    d = Gemm(GemmConfig(dtype="bf16", tile=(64, 64, 64), stages=2), sim)(ta, tb)
    np.testing.assert_array_equal(arrays.to_host(d), a.astype(np.float64) @ b.astype(np.float64))
    assert sim.live_allocations() == live + 1            # no copies of a or b: only the result


def test_dlpack_fp8_device_operands(sim, rng):
    """DLPack 1.1's float8 codes (10: e4m3fn, 12: e5m2, what torch exports) are fp8 operands;
    B given as the transpose view of an (N, K) array is K-major, as fp8 needs."""
    a = rng.integers(-8, 9, (70, 128)).astype(ml_dtypes.float8_e4m3fn)
    bt = rng.integers(-8, 9, (50, 128)).astype(ml_dtypes.float8_e5m2)
    da, db = arrays.to_device(sim, a), arrays.to_device(sim, bt)
    ta = FakeDeviceTensor(da.ptr, (70, 128), [128, 1], code=10, bits=8)
    tb = FakeDeviceTensor(db.ptr, (128, 50), [1, 128], code=12, bits=8)
    assert arrays.describe(ta)[3].name == "e4m3" and arrays.describe(tb)[3].name == "e5m2"
    d = Gemm(GemmConfig(dtype="e4m3", b_dtype="e5m2", stages=2), sim)(ta, tb)
    np.testing.assert_array_equal(arrays.to_host(d), a.astype(np.float64) @ bt.T.astype(np.float64))


def test_dlpack_errors_name_the_argument(sim, rng):
    a = rng.integers(-3, 4, (64, 72)).astype(np.float16)
    da, ta = _on_device(sim, a)
    bad = FakeDeviceTensor(da.ptr + 2, (64, 64), [72, 1])          # misaligned: TMA's 16-byte rule
    _, tb = _on_device(sim, rng.integers(-3, 4, (64, 64)).astype(np.float16))
    with pytest.raises(ArgumentError, match=r"a: global address 0x[0-9a-f]+ is not 16-byte aligned"):
        Gemm(GemmConfig(tile=(64, 64, 64), stages=2), sim)(bad, tb)
    with pytest.raises(ArgumentTypeError, match=r"a: DLPack dtype \(code 3, 64 bits, 1 lanes\) has no cutedsl type"):
        arrays.describe(FakeDeviceTensor(da.ptr, (4, 4), code=3, bits=64), "a")
    with pytest.raises(ArgumentError, match=r"b: a DLPack array on ROCm memory"):
        arrays.describe(FakeDeviceTensor(da.ptr, (4, 4), device=10), "b")


def test_cpu_dlpack_producers_take_the_host_path(sim, rng):
    class CpuOnly:                                   # a DLPack-only host array (no __array__)
        def __init__(self, x):
            self.x = x

        def __dlpack__(self, stream=None):
            return self.x.__dlpack__()

        def __dlpack_device__(self):
            return self.x.__dlpack_device__()
    a = rng.integers(-3, 4, (70, 64)).astype(np.float16)
    b = rng.integers(-3, 4, (64, 50)).astype(np.float16)
    assert arrays.describe(CpuOnly(a)) is None
    d = Gemm(GemmConfig(tile=(64, 64, 64), stages=2), sim)(CpuOnly(a), CpuOnly(b))
    assert isinstance(d, np.ndarray)
    np.testing.assert_array_equal(d, a.astype(np.float64) @ b.astype(np.float64))


def test_cuda_device_arrays_are_dlpack_producers():
    """Issue 22: results go back to the caller's framework through DLPack: a CUDA DeviceArray
    exports a capsule (zero-copy) that any consumer -- here our own reader -- sees exactly, and
    whose deleter releases it; the emulator's memory is refused (no DLPack device has it)."""
    import gc

    class FakeCuda:
        name = "cuda"
    d = arrays.DeviceArray(0x7F0000001000, (3, 5), (32, 2), arrays._dtype("bf16"), FakeCuda())
    assert d.__dlpack_device__() == (dlpack.KDL_CUDA, 0)
    before = dlpack.live_exports()
    assert dlpack.describe_dlpack(d, "d") == (0x7F0000001000, (3, 5), (32, 2), d.dtype, dlpack.KDL_CUDA)
    gc.collect()
    assert dlpack.live_exports() == before         # the unconsumed capsule released it
    with pytest.raises(ArgumentError, match="not a multiple of 2 B"):
        dlpack.to_capsule(0, (2,), (3,), "f16", dlpack.KDL_CUDA, 0, None)


def test_emulator_arrays_are_not_dlpack_producers(sim):
    d = arrays.to_device(sim, np.ones((2, 2), np.float16))
    with pytest.raises(BufferError, match="only DeviceArrays of the CUDA backend"):
        d.__dlpack__()


def test_torch_results_travel_by_dlpack_so_bf16_survives(monkeypatch):
    """Found on an H100 (2026-11-28): torch.as_tensor reads ``__cuda_array_interface__``, whose
    bf16 typestr is numpy's '<V2', and refuses it (TypeError), so the attention forward's bf16 O
    could not come back as a torch tensor. The result must go through DLPack (kDLBfloat)."""
    import sys
    import types
    seen = []

    def as_tensor(x, device=None):          # what torch does with a '<V2' interface
        raise TypeError("can't convert np.ndarray of type numpy.void")

    fake = types.SimpleNamespace(as_tensor=as_tensor, from_dlpack=lambda x: seen.append(x) or "tensor")
    monkeypatch.setitem(sys.modules, "torch", fake)
    marker = object()
    assert dlpack.wrap_like(marker, "torch") == "tensor"
    assert seen == [marker]
