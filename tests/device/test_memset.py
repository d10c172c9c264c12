"""``Backend.memset`` / ``Backend.zero``: a device fill (the driver's ``cuMemsetD8`` / ``cuMemsetD32``)
on the emulator (a numpy fill of the allocation's bytes) and on the CUDA backend (checked here against
a recording fake of the driver; tests/device/test_gpu.py runs it on a GPU), the same argument checks
on both, and the runtime's ``zero_fill`` (what a launch clears before it runs) going through it."""
import numpy as np
import pytest

from cutedsl.errors import ArgumentError, ArgumentTypeError
from cutedsl.runtime import arrays
from cutedsl.runtime import cuda as cuda_mod
from cutedsl.sim import SimBackend


def _bytes(be, buf):
    out = np.empty(buf.nbytes, np.uint8)
    be.copy_to_host(out, buf)
    return out


def test_sim_memset_fills_bytes_and_words():
    be = SimBackend()
    buf = be.alloc(20)
    try:
        be.copy_to_device(buf, np.full(20, 0xAA, np.uint8))
        be.memset(buf, 0x5C, 3, offset=1)
        be.memset(buf, 0x3F800000, 8, offset=8, width=4)          # two f32 1.0
        got = _bytes(be, buf)
        assert got[:5].tolist() == [0xAA, 0x5C, 0x5C, 0x5C, 0xAA]
        assert got[8:16].view(np.float32).tolist() == [1.0, 1.0] and (got[16:] == 0xAA).all()
        be.zero(buf, offset=4)                                     # the rest of the buffer
        assert got[:4].tolist() == _bytes(be, buf)[:4].tolist() and not _bytes(be, buf)[4:].any()
        be.memset(buf, 7, 0)                                       # nothing to fill: no change
        assert _bytes(be, buf)[0] == 0xAA
    finally:
        be.free(buf)


def test_sim_memset_defines_the_bytes_for_initcheck():
    """Bytes a fill wrote are defined, as a host copy's are (a kernel may read them); the rest of
    a fresh allocation stays undefined."""
    be = SimBackend()
    buf = be.alloc(64)
    try:
        al = be.gmem.allocs[int(buf.ptr)]
        assert al.undefined(0, 4) == 0
        be.memset(buf, 0, 16, offset=16, width=4)
        assert al.undefined(16, 4) is None and al.undefined(28, 4) is None and al.undefined(32, 4) == 32
        assert al.undefined(12, 4) == 12
    finally:
        be.free(buf)


def test_sim_memset_refuses_spans_past_the_allocation():
    be = SimBackend()
    buf = be.alloc(8)
    try:
        with pytest.raises(ArgumentError, match="exceeds the 8-byte buffer"):
            be.memset(buf, 0, 8, offset=4)
    finally:
        be.free(buf)


class FakeDriver:
    """Records the fills; ``cuMemsetD8Async(ptr, byte, count, stream)`` / ``cuMemsetD32Async``."""

    class CUresult:
        CUDA_SUCCESS = 0
    CUstream = int

    def __init__(self):
        self.calls = []

    def cuCtxSetCurrent(self, ctx):
        return (0,)

    def cuMemsetD8Async(self, ptr, value, count, stream):
        self.calls.append(("D8", ptr, value, count, stream))
        return (0,)

    def cuMemsetD32Async(self, ptr, value, count, stream):
        self.calls.append(("D32", ptr, value, count, stream))
        return (0,)


@pytest.fixture
def fake_cuda(monkeypatch):
    fake = FakeDriver()
    monkeypatch.setattr(cuda_mod, "_driver", lambda: fake)
    be = object.__new__(cuda_mod.CudaBackend)       # no device probe: there is no GPU
    be._init_state(fake, "ctx")
    return be, fake


def test_cuda_memset_is_a_driver_fill_on_the_launch_stream(fake_cuda):
    be, fake = fake_cuda
    from cutedsl.runtime.backend import DeviceBuffer
    buf = DeviceBuffer(0x10000, 4096)
    be.memset(buf, 0xFF, 10, offset=3)
    be.memset(buf, 0x3F800000, 64, offset=16, width=4)
    be.zero(buf)                              # aligned: 32-bit words
    be.zero(buf, 6, offset=1)                 # unaligned: bytes
    be.memset(buf, 0, 0)                      # nothing to fill: no driver call
    assert fake.calls == [("D8", 0x10003, 0xFF, 10, 0), ("D32", 0x10010, 0x3F800000, 16, 0),
                          ("D32", 0x10000, 0, 1024, 0), ("D8", 0x10001, 0, 6, 0)]


def test_zero_fill_of_a_launch_uses_the_backend_fill(fake_cuda):
    """What ``Binding.launcher(zero_fill=...)`` clears before each launch (a split-K output, the
    attention backward's dQ accumulator) is a device fill, not a host copy of zeros."""
    be, fake = fake_cuda
    arr = arrays.DeviceArray(0x20000, (3, 5), (32, 4), "f32", be, None)     # rows padded to 32 B
    arrays.zero_fill(arr)
    assert fake.calls == [("D32", 0x20000, 0, 24, 0)]


@pytest.mark.parametrize("kw, err, msg", [
    (dict(value=256), ArgumentError, r"value 256 does not fit 1 byte\(s\) \(0..255\)"),
    (dict(value=-1), ArgumentError, "value -1 does not fit"),
    (dict(value=1 << 32, width=4), ArgumentError, "does not fit 4 byte"),
    (dict(width=2), ArgumentError, r"width must be 1 \(bytes\) or 4 \(32-bit words\), got 2"),
    (dict(nbytes=6, width=4), ArgumentError, "nbytes 6 and address 0x10000 must be multiples of 4"),
    (dict(offset=2, width=4), ArgumentError, "address 0x10002 must be multiples of 4; use width=1"),
    (dict(nbytes=-1), ArgumentError, "nbytes and offset must be >= 0"),
    (dict(value=1.0), ArgumentTypeError, "value must be an int, got float"),
    (dict(nbytes=True), ArgumentTypeError, "nbytes must be an int, got bool"),
])
def test_bad_fills_are_refused_before_the_driver(fake_cuda, kw, err, msg):
    be, fake = fake_cuda
    from cutedsl.runtime.backend import DeviceBuffer
    args = dict(value=0, nbytes=8, offset=0, width=1) | kw
    with pytest.raises(err, match=msg):
        be.memset(DeviceBuffer(0x10000, 64), args.pop("value"), args.pop("nbytes"), **args)
    assert fake.calls == []


def test_sim_memset_applies_the_same_checks():
    be = SimBackend()
    buf = be.alloc(64)
    try:
        with pytest.raises(ArgumentError, match="value 300 does not fit 1 byte"):
            be.memset(buf, 300, 8)
        with pytest.raises(ArgumentError, match="must be multiples of 4; use width=1"):
            be.memset(buf, 0, 8, offset=2, width=4)
    finally:
        be.free(buf)
