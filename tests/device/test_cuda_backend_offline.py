"""The CUDA backend's host-side logic, checked without a GPU against a recording fake of the
driver API: kernel-parameter packing (the void** array the driver copies from), 64-byte
alignment of by-value tensor maps, the >48 KiB dynamic shared-memory opt-in, cluster launch."""
import ctypes
import types

import pytest

from cutedsl.compiler.artifact import CompiledKernel, ParamSpec
from cutedsl.device import cuda as cuda_mod


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

    def __init__(self):
        self.calls = []

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
    be.drv, be._modules = fake, {}
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
