"""Host overhead of one ``Gemm.__call__`` on device arrays, measured without a GPU.

The CUDA backend runs against :class:`NullDriver`, a stand-in for ``cuda.bindings.driver``
whose every function returns success at once (``cuTensorMapEncodeTiled`` hands back a
128-byte map holding only the global address), so what is timed is cutedsl's own Python on the launch path:
operand checks, tensor-map encoding glue, parameter packing, the launch call's argument
buffer and the result. Each driver call costs the stand-in well under a microsecond; they
are counted and reported, and their cost is measured and subtracted.

``python -m cutedsl.bench.overhead`` prints the result.
"""
from __future__ import annotations

import ctypes
import time


class _Map:
    def __init__(self):
        self._b = ctypes.create_string_buffer(128)

    def getPtr(self):
        return ctypes.addressof(self._b)


class NullDriver:
    """Every driver function the CUDA backend's launch path uses, succeeding immediately.
    ``calls`` counts them by name."""

    class CUresult:
        CUDA_SUCCESS = 0

    class CUfunction_attribute:
        CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8

    class CUdevice_attribute:
        CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16
        CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE = 38

    CUstream = int
    #: what the device-attribute queries answer (an H100 SXM's SM count and L2 size)
    ATTRIBUTES = {16: 132, 38: 50 * 1024 * 1024}
    #: what ``cuEventElapsedTime`` answers, in milliseconds
    ELAPSED_MS = 1.0

    def __init__(self):
        self.calls = {}
        self._map = _Map()
        ok = (0,)
        for name in ("cuFuncSetAttribute", "cuLaunchKernel", "cuLaunchKernelEx", "cuCtxSynchronize",
                     "cuEventRecord", "cuEventSynchronize", "cuEventDestroy", "cuCtxSetCurrent"):
            setattr(self, name, self._counted(name, lambda *a, _r=ok: _r))
        self.cuEventCreate = self._counted("cuEventCreate", lambda flags: (0, object()))
        self.cuEventElapsedTime = self._counted("cuEventElapsedTime", lambda a, b: (0, self.ELAPSED_MS))
        self.cuDeviceGetAttribute = self._counted("cuDeviceGetAttribute",
                                                  lambda attr, dev: (0, self.ATTRIBUTES[attr]))
        self.cuDeviceGetName = self._counted("cuDeviceGetName", lambda n, dev: (0, b"Null GPU (no driver)\0"))
        self.cuDriverGetVersion = self._counted("cuDriverGetVersion", lambda: (0, 13000))
        self.cuModuleLoadData = self._counted("cuModuleLoadData", lambda img: (0, "module"))
        self.cuModuleGetFunction = self._counted("cuModuleGetFunction", lambda m, n: (0, "function"))
        self.cuTensorMapEncodeTiled = self._counted("cuTensorMapEncodeTiled", self._encode)
        for t in ("CUtensorMapDataType", "cuuint64_t", "cuuint32_t", "CUtensorMapInterleave", "CUtensorMapSwizzle",
                  "CUtensorMapL2promotion", "CUtensorMapFloatOOBfill"):
            setattr(self, t, int)

    def _encode(self, dtype, rank, address, *rest):
        """A stand-in map holding what a real one encodes first: the global address."""
        ctypes.memmove(self._map.getPtr(), int(address).to_bytes(8, "little"), 8)
        return 0, self._map

    def _counted(self, name, fn):
        def call(*a):
            self.calls[name] = self.calls.get(name, 0) + 1
            return fn(*a)
        return call


def null_cuda_backend(monkeypatch_setattr=None):
    """A ``CudaBackend`` on :class:`NullDriver` (``monkeypatch_setattr(obj, name, value)``
    installs the driver module hook; default: plain ``setattr``, left in place)."""
    from ..runtime import cuda as cuda_mod
    drv = NullDriver()
    (monkeypatch_setattr or setattr)(cuda_mod, "_driver", lambda: drv)
    be = object.__new__(cuda_mod.CudaBackend)       # skips the device probe: there is no GPU
    be.device = 0
    be._init_state(drv, "context")
    return be, drv


def _device_array(be, ptr, shape, dt):
    from ..runtime.arrays import DeviceArray
    from ..dtypes import dtype as _dtype
    d = _dtype(dt)
    return DeviceArray(ptr, shape, (shape[1] * d.nbytes, d.nbytes), d, be)


def measure(config=None, shape=(4096, 4096, 4096), calls: int = 2000, repeats: int = 5,
            monkeypatch_setattr=None, cached: bool = True) -> dict:
    """Per-call host microseconds of ``Gemm.__call__(a, b, out=d)`` on device arrays (best of
    ``repeats`` runs of ``calls`` calls), the driver calls per call, and the stand-in's own
    cost per call (subtracted in ``python_us``). ``cached=False`` empties the Gemm's launch
    cache before every call: the cost of a call with new arguments (checks, tensor-map
    encoding, parameter packing)."""
    from ..device import Gemm, GemmConfig
    be, drv = null_cuda_backend(monkeypatch_setattr)
    cfg = config or GemmConfig(out_dtype="f16")
    g = Gemm(cfg, be)
    g.compiled                                    # compile (or load) outside the timing
    m, n, k = shape
    a = _device_array(be, 1 << 32, (m, k), cfg.dtype)
    b = _device_array(be, 2 << 32, (k, n), cfg.dtype)
    d = _device_array(be, 3 << 32, (m, n), cfg.out_dtype)
    g(a, b, out=d)                                # first call: module load, caches fill
    drv.calls.clear()
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        if cached:
            for _ in range(calls):
                g(a, b, out=d)
        else:
            for _ in range(calls):
                g._launches.clear()
                g(a, b, out=d)
        best = min(best, (time.perf_counter() - t) / calls)
    per_call = {k: v / (calls * repeats) for k, v in drv.calls.items()}
    # what the stand-in itself costs per call: the same driver calls with as many arguments
    plan = []
    for name, cnt in per_call.items():
        nargs = {"cuLaunchKernel": 11, "cuTensorMapEncodeTiled": 11, "cuCtxSynchronize": 0}.get(name, 2)
        plan += [(getattr(drv, name), (0,) * nargs)] * int(round(cnt))
    stub = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        for _ in range(calls):
            for fn, args in plan:
                fn(*args)
        stub = min(stub, (time.perf_counter() - t) / calls)
    return {"total_us": best * 1e6, "driver_stub_us": stub * 1e6, "python_us": (best - stub) * 1e6,
            "driver_calls_per_call": per_call, "config": str(cfg), "shape": list(shape), "cached": cached}


if __name__ == "__main__":      # pragma: no cover - a measurement, printed
    import json
    print(json.dumps([measure(repeats=15), measure(calls=300, repeats=5, cached=False)], indent=1))
