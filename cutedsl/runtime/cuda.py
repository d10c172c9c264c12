"""CUDA backend on cuda-python's driver API (``cuda.bindings.driver``), numpy + cuda-python only.

Without an NVIDIA driver, cuda-python raises ``cuda.pathfinder.DynamicLibNotFoundError`` from
``cuInit``; :meth:`CudaBackend.available` turns that (and no device / not sm_90) into
``(False, reason)`` and the constructor into ``NoDeviceError``.

Tensor maps are encoded per call with ``cuTensorMapEncodeTiled`` (after the same validation the
emulator applies) and passed **by value** in the kernel-parameter buffer as 128-byte
``__grid_constant__`` parameters, as CUTLASS does: no device allocation, no host-to-device
copy and no descriptor fence per launch.
"""
from __future__ import annotations

import ctypes
import threading

from ..compiler.artifact import CompiledKernel, TensorMapSpec
from ..dtypes import PACKED_TMA, dtype as _dtype
from ..errors import ArgumentError, LaunchError, NoDeviceError
from .backend import Backend, DeviceBuffer, check_launch, check_memset, check_nbytes, check_tensor_map

_SWZ = {0: 0, 32: 1, 64: 2, 128: 3}
_L2 = {0: 0, 64: 1, 128: 2, 256: 3}


def _driver():
    from cuda.bindings import driver
    return driver


def _check(res, what):
    err = res[0] if isinstance(res, tuple) else res
    drv = _driver()
    if err != drv.CUresult.CUDA_SUCCESS:
        _, name = drv.cuGetErrorName(err)
        _, msg = drv.cuGetErrorString(err)
        raise LaunchError(f"{what} failed: {name.decode() if name else err} "
                          f"({msg.decode() if msg else ''})")
    if isinstance(res, tuple):
        return res[1] if len(res) == 2 else res[1:]
    return None


def _argv(params):
    """The driver's ``void**`` kernel-parameter array: one buffer per parameter, each 64-byte
    aligned (tensor maps need 64). Returns ``(buffers, argv)``; both must outlive the launch call
    (the driver copies the values during it)."""
    bufs = [ctypes.create_string_buffer(max(len(p), 64) + 64) for p in params]
    ptrs = []
    for b, p in zip(bufs, params):
        addr = ctypes.addressof(b)
        off = (-addr) % 64
        ctypes.memmove(addr + off, bytes(p), len(p))
        ptrs.append(addr + off)
    return bufs, (ctypes.c_void_p * max(len(ptrs), 1))(*ptrs)


class CudaBackend(Backend):
    """The first sm_90 GPU through the driver API's primary context."""

    name = "cuda"

    @classmethod
    def available(cls) -> tuple:
        try:
            drv = _driver()
        except ImportError as e:
            return False, f"cuda-python is not installed ({e})"
        try:
            err, = drv.cuInit(0)
        except Exception as e:   # noqa: BLE001 - DynamicLibNotFoundError when there is no driver
            return False, f"no NVIDIA driver ({type(e).__name__}: {e})"
        if err != drv.CUresult.CUDA_SUCCESS:
            return False, f"cuInit failed ({err})"
        err, n = drv.cuDeviceGetCount()
        if err != drv.CUresult.CUDA_SUCCESS or n == 0:
            return False, "no CUDA device"
        err, dev = drv.cuDeviceGet(0)
        a = drv.CUdevice_attribute
        _, major = drv.cuDeviceGetAttribute(a.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev)
        _, minor = drv.cuDeviceGetAttribute(a.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev)
        if (major, minor) != (9, 0):
            return False, f"device 0 is sm_{major}{minor}; cutedsl kernels need sm_90a (Hopper)"
        return True, ""

    def __init__(self):
        ok, why = self.available()
        if not ok:
            raise NoDeviceError(f"CUDA backend unavailable: {why}")
        drv = _driver()
        self.device = _check(drv.cuDeviceGet(0), "cuDeviceGet")
        self._init_state(drv, _check(drv.cuDevicePrimaryCtxRetain(self.device), "cuDevicePrimaryCtxRetain"))
        self._current()

    def _init_state(self, drv, context):
        self.drv, self.context = drv, context
        self._modules = {}
        self._live = {}                     # device address -> bytes, for live_allocations()
        self._lock = threading.Lock()       # guards _modules and _live across threads
        self._tls = threading.local()

    def _current(self):
        """Make the primary context current in the calling thread: the driver's current context
        is per thread, so a backend used from a new thread must set it before any call."""
        if getattr(self._tls, "ctx", None) is not self.context:
            _check(self.drv.cuCtxSetCurrent(self.context), "cuCtxSetCurrent")
            self._tls.ctx = self.context

    def device_name(self) -> str:
        name = _check(self.drv.cuDeviceGetName(256, self.device), "cuDeviceGetName")
        return name.split(b"\0")[0].decode()

    @property
    def sm_count(self) -> int:
        """Streaming multiprocessors of the device (what persistent tile schedulers fill)."""
        a = self.drv.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT
        return int(_check(self.drv.cuDeviceGetAttribute(a, self.device), "cuDeviceGetAttribute"))

    def driver_version(self) -> int:
        return _check(self.drv.cuDriverGetVersion(), "cuDriverGetVersion")

    # -- memory ------------------------------------------------------------------------
    def alloc(self, nbytes: int) -> DeviceBuffer:
        check_nbytes(nbytes)
        self._current()
        ptr = int(_check(self.drv.cuMemAlloc(max(int(nbytes), 1)), f"cuMemAlloc({nbytes} B)"))
        with self._lock:
            self._live[ptr] = int(nbytes)
        return DeviceBuffer(ptr, int(nbytes), self)

    def free(self, buf: DeviceBuffer) -> None:
        with self._lock:
            if self._live.pop(int(buf.ptr), None) is None:
                raise ArgumentError(f"free of device address 0x{int(buf.ptr):x}: not allocated by this "
                                    f"backend, or already freed")
        self._current()
        _check(self.drv.cuMemFree(buf.ptr), "cuMemFree")

    def live_allocations(self) -> int:
        with self._lock:
            return len(self._live)

    def copy_to_device(self, dst, src, offset: int = 0) -> None:
        self._current()
        _check(self.drv.cuMemcpyHtoD(dst.ptr + offset, src.ctypes.data, src.nbytes), "cuMemcpyHtoD")

    def copy_to_host(self, dst, src, offset: int = 0) -> None:
        self._current()
        _check(self.drv.cuMemcpyDtoH(dst.ctypes.data, src.ptr + offset, dst.nbytes), "cuMemcpyDtoH")

    def memset(self, dst, value: int, nbytes: int, offset: int = 0, *, width: int = 1) -> None:
        """:meth:`Backend.memset` on the device: ``cuMemsetD8Async`` / ``cuMemsetD32Async`` on the
        legacy default stream, where launches go, so it is ordered before the next launch without
        a host synchronisation (nor a host copy of ``nbytes`` bytes)."""
        check_memset(dst, value, nbytes, offset, width)
        if not nbytes:
            return
        self._current()
        drv, ptr = self.drv, int(dst.ptr) + offset
        if width == 4:
            _check(drv.cuMemsetD32Async(ptr, value, nbytes // 4, drv.CUstream(0)), "cuMemsetD32Async")
        else:
            _check(drv.cuMemsetD8Async(ptr, value, nbytes, drv.CUstream(0)), "cuMemsetD8Async")

    # -- tensor maps -------------------------------------------------------------------
    def encode_tensor_map(self, spec: TensorMapSpec, address: int, shape, strides) -> bytes:
        enc = check_tensor_map(spec, address, shape, strides)
        drv = self.drv
        code = PACKED_TMA[spec.dtype].tma_code if spec.dtype in PACKED_TMA else _dtype(spec.dtype).tma_code
        dt = drv.CUtensorMapDataType(code)
        # rank 1 has no stride to pass, but an empty list reaches the driver as a null
        # globalStrides, which driver 580 refuses (CUDA_ERROR_INVALID_VALUE, seen on an H100 and
        # an H200, 2026-11-28: the same map with one entry encodes); that unread entry is a
        # 16-byte multiple past the row's bytes (8 B per element bounds every TMA type)
        strides = enc.strides or (-(-enc.dims[0] * 8 // 16) * 16,)
        tmap = _check(drv.cuTensorMapEncodeTiled(
            dt, enc.spec.rank, address,
            [drv.cuuint64_t(d) for d in enc.dims], [drv.cuuint64_t(s) for s in strides],
            [drv.cuuint32_t(b) for b in enc.box], [drv.cuuint32_t(e) for e in enc.elem_strides],
            drv.CUtensorMapInterleave(0), drv.CUtensorMapSwizzle(_SWZ[spec.swizzle]),
            drv.CUtensorMapL2promotion(_L2[spec.l2promo]),
            drv.CUtensorMapFloatOOBfill(1 if spec.oob == "nan" else 0)), f"cuTensorMapEncodeTiled({spec.param})")
        return ctypes.string_at(tmap.getPtr(), 128)

    # -- modules and launch --------------------------------------------------------------
    def load(self, kernel: CompiledKernel):
        arch = (kernel.meta.get("config") or {}).get("arch", "sm_90a")
        if arch != "sm_90a":
            raise LaunchError(f"kernel {kernel.entry} is compiled for {arch}; this backend drives sm_90a "
                              f"(Hopper) GPUs: run it with backend='sim' (the PTX emulator)")
        key = (kernel.key or kernel.entry, hash(kernel.cubin))
        with self._lock:                    # load each module once, whichever thread asks first
            if key in self._modules:
                return self._modules[key]
            self._current()
            drv = self.drv
            mod = _check(drv.cuModuleLoadData(kernel.cubin), f"cuModuleLoadData({kernel.entry})")
            fn = _check(drv.cuModuleGetFunction(mod, kernel.entry.encode()),
                        f"cuModuleGetFunction({kernel.entry})")
            if kernel.dynamic_smem > 48 * 1024:
                _check(drv.cuFuncSetAttribute(
                    fn, drv.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                    kernel.dynamic_smem), "cuFuncSetAttribute(max dynamic smem)")
            self._modules[key] = (mod, fn)
            return self._modules[key]

    def launch(self, handle, grid, params, *, block, cluster=(1, 1, 1), smem=0, stream=None) -> None:
        check_launch(grid, block, cluster, smem)
        self._current()
        drv = self.drv
        _, fn = handle
        bufs, argv = _argv(params)
        stream = drv.CUstream(stream or 0) if isinstance(stream or 0, int) else stream
        if tuple(cluster) == (1, 1, 1):
            _check(drv.cuLaunchKernel(fn, *grid, *block, smem, stream, ctypes.addressof(argv), 0),
                   "cuLaunchKernel")
        else:
            cfg = drv.CUlaunchConfig()
            cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ = grid
            cfg.blockDimX, cfg.blockDimY, cfg.blockDimZ = block
            cfg.sharedMemBytes = smem
            cfg.hStream = stream
            attr = drv.CUlaunchAttribute()
            attr.id = drv.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
            attr.value.clusterDim.x, attr.value.clusterDim.y, attr.value.clusterDim.z = cluster
            cfg.attrs = [attr]
            cfg.numAttrs = 1
            _check(drv.cuLaunchKernelEx(cfg, fn, ctypes.addressof(argv), 0), "cuLaunchKernelEx")
        # bufs/argv may die now: the driver copies the parameter values during the launch call

    def launcher(self, handle, grid, params, *, block, cluster=(1, 1, 1), smem=0):
        """A zero-argument callable that launches like :meth:`launch` with the kernel-parameter
        buffer built once (for repeated launches of the same arguments: ``Gemm``'s launch cache).
        Checks the launch configuration now; the callable raises ``LaunchError`` on a driver
        error. Clusters go through :meth:`launch` (``cuLaunchKernelEx``)."""
        check_launch(grid, block, cluster, smem)
        if tuple(cluster) != (1, 1, 1):
            return lambda: self.launch(handle, grid, params, block=block, cluster=cluster, smem=smem)
        bufs, argv = _argv(params)
        drv, current, ok = self.drv, self._current, self.drv.CUresult.CUDA_SUCCESS
        args = (handle[1], *grid, *block, smem, drv.CUstream(0), ctypes.addressof(argv), 0)
        launch_kernel = drv.cuLaunchKernel

        def run():
            current()
            res = launch_kernel(*args)
            if res[0] != ok:
                _check(res, "cuLaunchKernel")
        run.keep = (bufs, argv)           # the parameter buffer lives as long as the callable
        return run

    def synchronize(self) -> None:
        self._current()
        _check(self.drv.cuCtxSynchronize(), "cuCtxSynchronize (kernel execution)")

    def time_launches(self, fn, iters: int) -> list:
        """Per-launch milliseconds from CUDA events around each ``fn()``."""
        self._current()
        drv = self.drv
        start = _check(drv.cuEventCreate(0), "cuEventCreate")
        stop = _check(drv.cuEventCreate(0), "cuEventCreate")
        out = []
        try:
            for _ in range(iters):
                _check(drv.cuEventRecord(start, 0), "cuEventRecord")
                fn()
                _check(drv.cuEventRecord(stop, 0), "cuEventRecord")
                _check(drv.cuEventSynchronize(stop), "cuEventSynchronize")
                out.append(float(_check(drv.cuEventElapsedTime(start, stop), "cuEventElapsedTime")))
        finally:                      # events are driver resources too: never leak them
            drv.cuEventDestroy(start)
            drv.cuEventDestroy(stop)
        return out
