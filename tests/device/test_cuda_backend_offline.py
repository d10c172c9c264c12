"""The CUDA backend's host-side logic, checked without a GPU against a recording fake of the
driver API: kernel-parameter packing (the void** array the driver copies from), 64-byte
alignment of by-value tensor maps, the >48 KiB dynamic shared-memory opt-in, cluster launch,
the per-thread current context, allocation accounting and hardware launch limits."""
import ctypes
import threading
import types

import pytest

from cutedsl.compiler.artifact import CompiledKernel, ParamSpec
from cutedsl.runtime import cuda as cuda_mod


class FakeDriver:
    class CUresult:
        CUDA_SUCCESS = 0

    class CUfunction_attribute:
        CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8

    class CUlaunchAttributeID:
        CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION = 4

    class CUlaunchConfig:
        pass

    class CUlaunchAttribute:
        def __init__(self):
            self.value = types.SimpleNamespace(clusterDim=types.SimpleNamespace(x=0, y=0, z=0))

    CUstream = int
    INVALID_CONTEXT = 201

    def __init__(self):
        self.calls = []
        self._tls = threading.local()        # like the driver: the current context is per thread
        self._next = 0x10000

    def cuGetErrorName(self, err):
        return 0, b"CUDA_ERROR_INVALID_CONTEXT" if err == self.INVALID_CONTEXT else b"?"

    def cuGetErrorString(self, err):
        return 0, b"invalid device context"

    def cuCtxSetCurrent(self, ctx):
        self.calls.append(("set_current", threading.get_ident()))
        self._tls.ctx = ctx
        return (0,)

    def _ctx_ok(self):
        return getattr(self._tls, "ctx", None) == "ctx"

    def cuMemAlloc(self, n):
        if not self._ctx_ok():
            return self.INVALID_CONTEXT, 0
        self._next += (n + 255) // 256 * 256
        return 0, self._next

    def cuMemFree(self, ptr):
        self.calls.append(("free", ptr))
        return (0,) if self._ctx_ok() else (self.INVALID_CONTEXT,)

    def cuModuleLoadData(self, image):
        self.calls.append(("load", len(image)))
        return 0, "module"

    def cuModuleGetFunction(self, mod, name):
        self.calls.append(("get", name))
        return 0, "fn"

    def cuFuncSetAttribute(self, fn, attr, value):
        self.calls.append(("attr", attr, value))
        return (0,)

    def _read(self, argv, sizes):
        ptrs = ctypes.cast(argv, ctypes.POINTER(ctypes.c_void_p))
        return [(ptrs[i], ctypes.string_at(ptrs[i], n)) for i, n in enumerate(sizes)]

    def cuLaunchKernel(self, fn, gx, gy, gz, bx, by, bz, smem, stream, argv, extra):
        if not self._ctx_ok():
            return (self.INVALID_CONTEXT,)
        self.calls.append(("launch", (gx, gy, gz), (bx, by, bz), smem, self._read(argv, self.sizes)))
        return (0,)

    def cuLaunchKernelEx(self, cfg, fn, argv, extra):
        a = cfg.attrs[0].value.clusterDim
        self.calls.append(("launch_ex", (cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ), (a.x, a.y, a.z),
                           cfg.sharedMemBytes, self._read(argv, self.sizes)))
        return (0,)


@pytest.fixture
def backend(monkeypatch):
    fake = FakeDriver()
    monkeypatch.setattr(cuda_mod, "_driver", lambda: fake)
    be = object.__new__(cuda_mod.CudaBackend)      # skip the device probe: there is no GPU
    be._init_state(fake, "ctx")
    be._current()
    return be, fake


KERNEL = CompiledKernel(entry="k", ptx="", cubin=b"\x7fELF" + bytes(60),
                        params=[ParamSpec("t", "tensormap"), ParamSpec("p", "ptr"), ParamSpec("n", "i32"),
                                ParamSpec("x", "f32")], block=(128, 1, 1), dynamic_smem=100_000)


def test_load_opts_into_large_dynamic_shared_memory(backend):
    be, fake = backend
    h = be.load(KERNEL)
    assert be.load(KERNEL) is h                            # modules are loaded once
    assert ("attr", 8, 100_000) in fake.calls and ("get", b"k") in fake.calls


def test_parameters_are_packed_by_value_and_aligned(backend):
    be, fake = backend
    tmap = bytes(range(128))
    params = KERNEL.pack_params({"t": tmap, "p": 0xDEADBEEF00, "n": -5, "x": 1.5})
    fake.sizes = [len(p) for p in params]
    be.launch(be.load(KERNEL), (3, 2, 1), params, block=(128, 1, 1), smem=100_000)
    kind, grid, block, smem, got = fake.calls[-1]
    assert (kind, grid, block, smem) == ("launch", (3, 2, 1), (128, 1, 1), 100_000)
    assert [b for _, b in got] == params and got[0][1] == tmap
    assert all(addr % 64 == 0 for addr, _ in got)          # CUtensorMap needs 64-byte alignment


def test_cluster_launch_uses_launch_ex(backend):
    be, fake = backend
    params = KERNEL.pack_params({"t": bytes(128), "p": 0, "n": 1, "x": 0.0})
    fake.sizes = [len(p) for p in params]
    be.launch(be.load(KERNEL), (4, 1, 1), params, block=(128, 1, 1), cluster=(2, 1, 1), smem=0)
    kind, grid, cluster, smem, got = fake.calls[-1]
    assert (kind, grid, cluster) == ("launch_ex", (4, 1, 1), (2, 1, 1)) and [b for _, b in got] == params


def test_backend_used_from_another_thread_makes_its_context_current(backend):
    """The driver's current context is per thread: a thread that never set it gets
    CUDA_ERROR_INVALID_CONTEXT unless the backend sets it first."""
    be, fake = backend
    params = KERNEL.pack_params({"t": bytes(128), "p": 0, "n": 1, "x": 0.0})
    fake.sizes = [len(p) for p in params]
    errors = []

    def work():
        try:
            buf = be.alloc(1000)
            be.launch(be.load(KERNEL), (1, 1, 1), params, block=(128, 1, 1), smem=0)
            be.free(buf)
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    t = threading.Thread(target=work)
    t.start()
    t.join()
    assert errors == []
    assert ("set_current", t.ident) in fake.calls and fake.calls[-1][0] == "free"


def test_allocations_are_counted_and_double_free_refused(backend):
    from cutedsl.errors import ArgumentError
    be, fake = backend
    bufs = [be.alloc(n) for n in (1, 100, 4096)]
    assert be.live_allocations() == 3
    for b in bufs:
        be.free(b)
    assert be.live_allocations() == 0 and [c[1] for c in fake.calls if c[0] == "free"] == [b.ptr for b in bufs]
    with pytest.raises(ArgumentError, match="already freed"):
        be.free(bufs[0])


@pytest.mark.parametrize("grid,block,match", [
    ((1, 65536, 1), (128, 1, 1), r"gridDim.y = 65536 is outside the hardware range 1..65535"),
    ((1, 1, 70000), (128, 1, 1), r"gridDim.z = 70000"),
    ((2 ** 31, 1, 1), (128, 1, 1), r"gridDim.x = 2147483648 is outside the hardware range 1..2147483647"),
    ((0, 1, 1), (128, 1, 1), r"gridDim.x = 0"),
    ((1, 1, 1), (1, 1, 65), r"blockDim.z = 65 is outside the hardware range 1..64"),
    ((1, 1, 1), (512, 4, 1), r"2048 threads, the limit is 1024"),
])
def test_launch_past_hardware_limits_is_refused_before_the_driver(backend, grid, block, match):
    from cutedsl.errors import LaunchError
    be, fake = backend
    params = KERNEL.pack_params({"t": bytes(128), "p": 0, "n": 1, "x": 0.0})
    fake.sizes = [len(p) for p in params]
    h = be.load(KERNEL)
    n = len(fake.calls)
    with pytest.raises(LaunchError, match=match):
        be.launch(h, grid, params, block=block, smem=0)
    assert not [c for c in fake.calls[n:] if c[0].startswith("launch")]


def test_timing_events_are_destroyed_when_the_timed_call_raises(backend):
    be, fake = backend
    events = []
    fake.cuEventCreate = lambda flags: (events.append(len(events)) or 0, f"ev{len(events)}")
    fake.cuEventRecord = lambda ev, stream: (0,)
    fake.cuEventDestroy = lambda ev: fake.calls.append(("destroy", ev)) or (0,)

    def boom():
        raise RuntimeError("launch failed")

    with pytest.raises(RuntimeError, match="launch failed"):
        be.time_launches(boom, 3)
    assert [c for c in fake.calls if c[0] == "destroy"] == [("destroy", "ev1"), ("destroy", "ev2")]


def test_rank1_tensor_map_passes_a_non_null_stride_array(backend, monkeypatch):
    """Seen on an H100 and an H200 (driver 580, 2026-11-28): cuTensorMapEncodeTiled of a rank-1
    map with an empty globalStrides list (a null pointer after cuda-python's conversion) returns
    CUDA_ERROR_INVALID_VALUE, the same map with one (unread) entry encodes. The fake driver
    applies that rule; ranks 2+ pass their own strides unchanged."""
    import ctypes
    from cutedsl.compiler.artifact import TensorMapSpec
    be, fake = backend
    seen = []
    blob = ctypes.create_string_buffer(128)

    def encode(dt, rank, address, dims, strides, box, elem, *flags):
        seen.append((rank, list(dims), list(strides)))
        if not strides:
            return 1, None                               # CUDA_ERROR_INVALID_VALUE, as the GPU did
        return 0, types.SimpleNamespace(getPtr=lambda: ctypes.addressof(blob))
    for name in ("CUtensorMapDataType", "cuuint64_t", "cuuint32_t", "CUtensorMapInterleave",
                 "CUtensorMapSwizzle", "CUtensorMapL2promotion", "CUtensorMapFloatOOBfill"):
        monkeypatch.setattr(fake, name, int, raising=False)
    monkeypatch.setattr(fake, "cuTensorMapEncodeTiled", encode, raising=False)
    be.encode_tensor_map(TensorMapSpec("x", "f32", (256,)), 1 << 20, (100_003,), (4,))
    rank, dims, strides = seen[-1]
    assert (rank, dims, len(strides)) == (1, [100_003], 1) and strides[0] % 16 == 0 and strides[0] >= 400_012
    be.encode_tensor_map(TensorMapSpec("y", "f16", (64, 64)), 1 << 20, (300, 328), (656, 2))
    assert seen[-1] == (2, [328, 300], [656])
