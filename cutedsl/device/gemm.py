"""``GemmConfig`` and ``Gemm``: the user-facing GEMM (CUTLASS ``GemmUniversalAdapter``).

::

    from cutedsl import Gemm, GemmConfig
    gemm = Gemm(GemmConfig(dtype="f16", tile=(128, 128, 64), stages="auto"))
    d = gemm(a, b)            # a: (M, K), b: (K, N) -> d: (M, N) in config.out_dtype

``a`` and ``b`` may be numpy arrays (copied to the device and back; rows are padded to the
16-byte pitch TMA needs, so any M, N, K works) or device arrays — a ``DeviceArray``, torch or
cupy CUDA arrays — used in place (no copies), which must then obey TMA's rules themselves.
With ``b_major="K"`` the kernel reads B K-major: pass ``b`` of shape (K, N) whose transpose is
row-major (``b = bt.T`` for a row-major ``bt`` of shape (N, K)).
"""
from __future__ import annotations

import inspect
import numbers
import os
import threading
import time

import attrs
import numpy as np

from ..dtypes import dtype as _dtype
from ..errors import (ArgumentError, ArgumentTypeError, ConfigError, CuteDSLError, NoDeviceError,
                      SharedMemoryError)
from . import arrays, extras
from .selection import check_backend_arg

_MAX_I32 = 2 ** 31 - 1
#: the schedules a ``GemmConfig`` can name; the last three are warp-specialized
SCHEDULES = ("multistage", "single_tile", "warp_specialized", "cooperative", "pingpong")
WARP_SPECIALIZED = SCHEDULES[2:]
CLUSTERS = ((1, 1), (2, 1), (1, 2))


def _is_int(v) -> bool:
    """An integer that is not a bool (numpy integers included); floats such as 128.0 are not."""
    return isinstance(v, numbers.Integral) and not isinstance(v, (bool, np.bool_))


def _tile(v) -> tuple:
    """Converter of ``GemmConfig.tile``: a sequence of three ints, as plain ints."""
    if isinstance(v, (str, bytes)) or not hasattr(v, "__iter__"):
        raise ConfigError(f"tile must be a tuple (BLOCK_M, BLOCK_N, BLOCK_K) of ints, got {v!r}")
    v = tuple(v)
    bad = [x for x in v if not _is_int(x)]
    if bad:
        raise ConfigError(f"tile must be a tuple (BLOCK_M, BLOCK_N, BLOCK_K) of ints, got {v!r} "
                          f"({bad[0]!r} is a {type(bad[0]).__name__})")
    return tuple(int(x) for x in v)


def _stages(v):
    """Converter of ``GemmConfig.stages``: ``"auto"`` or a plain int (bools and floats refused)."""
    if isinstance(v, str) and v == "auto":
        return v
    if not _is_int(v) or not 1 <= v <= 7:
        raise ConfigError(f"stages must be 'auto' or an int in 1..7, got {v!r}"
                          + ("" if _is_int(v) or isinstance(v, str) else f" ({type(v).__name__})"))
    return int(v)


@attrs.frozen
class GemmConfig:
    """A GEMM configuration, validated on construction (``ConfigError``).

    * ``dtype``: input element type, ``"f16"`` or ``"bf16"``; accumulation is f32.
    * ``out_dtype``: ``"f32"`` (default), ``"f16"`` or ``"bf16"``.
    * ``tile``: ``(BLOCK_M, BLOCK_N, BLOCK_K)`` with BLOCK_M in {64, 128}, BLOCK_N in
      {64, 128, 256}, BLOCK_K = 64. A 128 x 256 tile uses two consumer warpgroups.
    * ``stages``: shared-memory pipeline stages 1..7 (2..7 for the warp-specialized
      schedules), or ``"auto"`` (as many as fit beside the epilogue in 227 KiB).
    * ``schedule``: ``"multistage"`` (pipelined, one warpgroup issues TMA and WGMMA),
      ``"single_tile"`` (unpipelined, atoms only), ``"warp_specialized"`` (a producer and
      consumer warpgroups, NVDSL chapter 5), ``"cooperative"`` (persistent, two consumer
      warpgroups split each tile along M; BLOCK_M 128) or ``"pingpong"`` (persistent, two
      consumer warpgroups on alternate tiles; chapter 6). See the README's schedule table.
    * ``cluster``: ``(cluster_m, cluster_n)`` CTAs per cluster, ``(1, 1)``, ``(2, 1)`` or
      ``(1, 2)`` (warp-specialized schedules); A is multicast along the cluster's N, B along M.
    * ``raster``: ``"M"`` or ``"N"``, the direction the tile scheduler walks first;
      ``swizzle``: 1, 2, 4 or 8 tiles per strip across it (warp-specialized schedules).
    * ``sm_count``: SMs a persistent schedule fills (None: the device's, else 132).
    * ``b_major``: ``"N"`` (B is (K, N) row-major) or ``"K"`` (B stored transposed).
    * ``epilogue``: ``"tma"`` (registers -> smem -> TMA store) or ``"global"`` (bounds-checked
      stores from registers).
    """
    dtype: str = attrs.field(default="f16")
    out_dtype: str = attrs.field(default="f32")
    tile: tuple = attrs.field(default=(128, 128, 64), converter=_tile)
    stages: object = attrs.field(default="auto", converter=_stages)
    schedule: str = attrs.field(default="multistage")
    b_major: str = attrs.field(default="N")
    epilogue: str = attrs.field(default="tma")
    cluster: tuple = attrs.field(default=(1, 1), converter=tuple)
    raster: str = attrs.field(default="M")
    swizzle: int = attrs.field(default=1)
    sm_count: object = attrs.field(default=None)

    def __attrs_post_init__(self):
        for f in attrs.fields(type(self)):      # every field annotated ``str`` must be one
            v = getattr(self, f.name)
            if f.type in ("str", str) and not isinstance(v, str):
                raise ConfigError(f"{f.name} must be a string, got {v!r} ({type(v).__name__})")
        if self.dtype not in ("f16", "bf16"):
            raise ConfigError(f"dtype must be 'f16' or 'bf16', got {self.dtype!r}")
        if self.out_dtype not in ("f32", "f16", "bf16"):
            raise ConfigError(f"out_dtype must be 'f32', 'f16' or 'bf16', got {self.out_dtype!r}")
        if len(self.tile) != 3:
            raise ConfigError(f"tile must be (BLOCK_M, BLOCK_N, BLOCK_K), got {self.tile!r}")
        bm, bn, bk = self.tile
        if bm not in (64, 128):
            raise ConfigError(f"tile BLOCK_M must be 64 or 128, got {bm}")
        if bn not in (64, 128, 256):
            raise ConfigError(f"tile BLOCK_N must be 64, 128 or 256, got {bn}")
        if bk != 64:
            raise ConfigError(f"tile BLOCK_K must be 64 (one 128-byte swizzle row of f16/bf16), got {bk}")
        if self.schedule not in SCHEDULES:
            raise ConfigError(f"schedule must be one of {', '.join(map(repr, SCHEDULES))}, got {self.schedule!r}")
        self._check_schedule_fields()
        if self.b_major not in ("N", "K"):
            raise ConfigError(f"b_major must be 'N' or 'K', got {self.b_major!r}")
        if self.epilogue not in ("tma", "global"):
            raise ConfigError(f"epilogue must be 'tma' or 'global', got {self.epilogue!r}")
        if self.schedule == "single_tile" and bm * bn > 128 * 128:
            raise ConfigError(f"single_tile uses one warpgroup: a {bm}x{bn} f32 accumulator needs "
                              f"{bm * bn // 128} registers per thread, past the 255-register limit; "
                              f"use schedule='multistage' (two consumer warpgroups)")
        if self.schedule == "single_tile" and self.stages not in ("auto", 1):
            raise ConfigError(f"single_tile has exactly one stage, got stages={self.stages!r}")
        self.kernel()   # fails now (SharedMemoryError) when explicit stages cannot fit

    def _check_schedule_fields(self):
        if self.cluster not in CLUSTERS or not all(_is_int(c) for c in self.cluster):
            raise ConfigError(f"cluster must be one of {', '.join(map(str, CLUSTERS))} (cluster_m, cluster_n), "
                              f"got {self.cluster!r}")
        if self.cluster != (1, 1) and self.schedule not in WARP_SPECIALIZED:
            raise ConfigError(f"cluster {self.cluster} needs a warp-specialized schedule "
                              f"({', '.join(WARP_SPECIALIZED)}), not {self.schedule!r}")
        if self.raster not in ("M", "N"):
            raise ConfigError(f"raster must be 'M' or 'N', got {self.raster!r}")
        if not _is_int(self.swizzle) or self.swizzle not in (1, 2, 4, 8):      # 2.0 is refused
            raise ConfigError(f"swizzle must be 1, 2, 4 or 8, got {self.swizzle!r}")
        # numpy integers become plain ints (the kernels mix them with IR values)
        object.__setattr__(self, "cluster", tuple(int(c) for c in self.cluster))
        object.__setattr__(self, "swizzle", int(self.swizzle))
        if self.sm_count is not None and (not _is_int(self.sm_count) or not 1 <= self.sm_count <= 4096):
            raise ConfigError(f"sm_count must be None or an int in 1..4096, got {self.sm_count!r}")
        if self.sm_count is not None:
            object.__setattr__(self, "sm_count", int(self.sm_count))

    @classmethod
    def parse_tile(cls, text: str) -> tuple:
        """``"128x128x64"`` -> ``(128, 128, 64)``."""
        try:
            t = tuple(int(x) for x in text.lower().split("x"))
        except ValueError:
            raise ConfigError(f"tile must look like 128x128x64, got {text!r}") from None
        return t

    def resolved_stages(self, kernel_cls=None, epilogue_cls=None) -> int:
        """The stage count used: explicit, or the most (<= 7) that fit in shared memory
        (with ``kernel_cls``'s shared-memory plan, default the schedule's kernel)."""
        if self.schedule == "single_tile" and kernel_cls is None:
            return 1
        if self.stages != "auto":
            return self.stages
        for s in range(7, 0, -1):
            try:
                self._make(kernel_cls or self._kernel_cls(), s, epilogue_cls).smem_plan()
                return s
            except SharedMemoryError:
                continue
        raise ConfigError(f"tile {self.tile} does not fit shared memory even with one stage")

    def _epilogue_cls(self, epilogue_cls=None, kernel_cls=None):
        """The epilogue class: ``epilogue_cls``, else a user ``kernel_cls.epilogue_cls``, else
        the config's. A class of the other kind than ``self.epilogue`` is a ``ConfigError``
        (the config decides the output's layout and pointer-vs-tensor-map argument)."""
        from ..collective.epilogue import GlobalEpilogue, TmaStoreEpilogue
        default = TmaStoreEpilogue if self.epilogue == "tma" else GlobalEpilogue
        where = "epilogue"
        if epilogue_cls is None:
            epilogue_cls = getattr(kernel_cls, "epilogue_cls", None)
            where = f"{getattr(kernel_cls, '__name__', '?')}.epilogue_cls"
            if epilogue_cls in (None, GlobalEpilogue, TmaStoreEpilogue):
                return default
        kind = getattr(epilogue_cls, "kind", None)
        if kind is not None and kind != self.epilogue:
            raise ConfigError(f"{where} {epilogue_cls.__name__} is a {kind!r} epilogue but "
                              f"GemmConfig.epilogue is {self.epilogue!r}: use GemmConfig(epilogue={kind!r})")
        return epilogue_cls

    def _make(self, cls, stages=None, epilogue_cls=None):
        bm, bn, _ = self.tile
        kw = dict(tile_m=bm, tile_n=bn, dtype=self.dtype, out_dtype=self.out_dtype,
                  b_major="MN" if self.b_major == "N" else "K", epilogue=epilogue_cls or self._epilogue_cls())
        if stages is not None:
            kw["stages"] = stages
        if "cluster" in inspect.signature(cls).parameters:     # warp-specialized kernels
            kw.update(cluster=self.cluster, raster=self.raster, swizzle=self.swizzle, sm_count=self.sm_count)
        try:
            return cls(**kw)
        except ValueError as e:         # a kernel or collective refusing this config (ConfigError for users)
            if isinstance(e, CuteDSLError):
                raise
            raise ConfigError(f"{cls.__name__}: {e}") from None

    def _kernel_cls(self):
        """The kernel class of ``schedule``."""
        from ..kernel import gemm, warp_specialized as ws
        return {"multistage": gemm.MultistageGemmKernel, "single_tile": gemm.SingleTileGemmKernel,
                "warp_specialized": ws.WarpSpecializedGemmKernel, "cooperative": ws.CooperativeGemmKernel,
                "pingpong": ws.PingpongGemmKernel}[self.schedule]

    def kernel(self, epilogue_cls=None, kernel_cls=None):
        """The ``Kernel`` object this config builds (``SharedMemoryError`` if it cannot fit).

        ``kernel_cls``: any ``GemmKernel`` subclass (it then decides the schedule; it gets
        ``stages`` when its constructor takes them); ``epilogue_cls``: an ``Epilogue`` subclass
        of the config's kind (``ConfigError`` otherwise)."""
        from ..kernel.gemm import GemmKernel
        if kernel_cls is not None and not (isinstance(kernel_cls, type) and issubclass(kernel_cls, GemmKernel)):
            raise ArgumentTypeError(f"kernel must be a GemmKernel subclass, got {kernel_cls!r}")
        if epilogue_cls is not None:
            from ..collective.epilogue import Epilogue
            if not (isinstance(epilogue_cls, type) and issubclass(epilogue_cls, Epilogue)):
                raise ArgumentTypeError(f"epilogue must be an Epilogue subclass, got {epilogue_cls!r}")
        epi = self._epilogue_cls(epilogue_cls, kernel_cls)
        if kernel_cls is None:
            kernel_cls = self._kernel_cls()
        if "stages" not in inspect.signature(kernel_cls).parameters:
            if self.stages not in ("auto", 1):
                raise ConfigError(f"{kernel_cls.__name__} has no pipeline stages (its constructor takes no "
                                  f"'stages'), got GemmConfig(stages={self.stages!r}): use 'auto' or 1")
            return self._make(kernel_cls, epilogue_cls=epi)
        k = self._make(kernel_cls, self.resolved_stages(kernel_cls, epi), epi)
        if hasattr(k, "smem_plan"):
            k.smem_plan()
        return k


class Gemm:
    """A compiled GEMM for one config, callable on any (M, N, K); see module docstring.

    ``backend``: ``"auto"`` (GPU, else emulator), ``"cuda"``, ``"sim"`` or a backend object.
    ``epilogue``: an ``Epilogue`` subclass replacing the config's (e.g. bias + ReLU), of the
    config's kind (``GemmConfig.epilogue``: a ``TmaStoreEpilogue`` subclass for ``"tma"``, a
    ``GlobalEpilogue`` subclass for ``"global"``; ``ConfigError`` otherwise); its extra kernel
    parameters are passed as keyword arguments of the call.
    ``kernel``: a ``GemmKernel`` subclass to run instead of the config's schedule (e.g. a
    split-K kernel); it gets the config's tile, dtypes, B major, stages and epilogue, and the
    call validates, allocates and launches ``kernel.grid(m, n, k)`` CTAs as for any GEMM.
    ``cache``: a ``KernelCache``, ``None`` (``$CUTEDSL_CACHE_DIR``) or ``False`` (compile
    without caching; as env ``CUTEDSL_CACHE=off``). Wrong names or types raise at construction.

    Thread-safe: one ``Gemm`` may be called from many threads; the kernel is compiled (or
    loaded) and its module loaded once. Each call frees the device memory it allocated (see
    :meth:`prepare` and :mod:`cutedsl.device.arrays` for who owns what).
    """

    def __init__(self, config: GemmConfig, backend="auto", *, epilogue=None, kernel=None, cache=None,
                 dump_dir=None):
        if not isinstance(config, GemmConfig):
            raise ArgumentTypeError(f"config must be a GemmConfig, got {type(config).__name__}")
        self.config = config
        self.kernel = config.kernel(epilogue, kernel)
        self._backend_name = check_backend_arg(backend)
        if not (cache is None or cache is False or hasattr(cache, "get_or_build")):
            raise ArgumentTypeError(f"cache must be a KernelCache, None or False, got {cache!r}")
        if dump_dir is not None and not isinstance(dump_dir, (str, os.PathLike)):
            raise ArgumentTypeError(f"dump_dir must be a directory path (str or os.PathLike) or None, "
                                    f"got {dump_dir!r}")
        self._backend = backend if not isinstance(backend, str) else None
        self._cache, self._dump = cache, dump_dir
        self._compiled = None
        self._handle = None
        self._launches = {}      # launch cache of __call__, see _cached_call
        # One Gemm may be called from many threads: the lazy compile, backend and module load
        # below happen once, under this lock (double-checked so warm calls never wait on it).
        self._lock = threading.RLock()

    @property
    def compiled(self):
        """The ``CompiledKernel`` (compiled or loaded from the cache on first use; thread-safe)."""
        k = self._compiled
        if k is None:
            with self._lock:
                if self._compiled is None:
                    self._compiled = self.kernel.compile(cache=self._cache, dump_dir=self._dump)
                k = self._compiled
        return k

    @property
    def backend(self):
        """The backend object (resolved on first use; thread-safe). ``NoDeviceError`` if none."""
        b = self._backend
        if b is None:
            with self._lock:
                if self._backend is None:
                    from .selection import get_backend
                    self._backend = get_backend(self._backend_name)
                b = self._backend
        return b

    def _module(self, be, kern):
        """The loaded module handle of ``kern`` on ``be`` (loaded once; thread-safe)."""
        h = self._handle
        if h is None:
            with self._lock:
                if self._handle is None:
                    self._handle = be.load(kern)
                h = self._handle
        return h

    # -- validation -----------------------------------------------------------------------
    def _check_operands(self, a, b):
        cfg = self.config
        want = _dtype(cfg.dtype)
        shapes = {}
        for name, x in (("a", a), ("b", b)):
            dev = arrays.describe(x, name)
            if dev is None:
                x = np.asarray(x)
                shape, dt = x.shape, x.dtype
                try:
                    d = _dtype(dt)
                except ArgumentTypeError:
                    d = None
            else:
                _, shape, _, d, _ = dev
                dt = d.name
            if len(shape) != 2:
                raise ArgumentError(f"{name} must be 2-D, got shape {tuple(shape)}")
            if d is None or d.name != want.name:
                raise ArgumentTypeError(f"{name} has dtype {dt}, the config expects {cfg.dtype} "
                                        f"(numpy: {want.numpy})")
            if 0 in shape:
                raise ArgumentError(f"{name} has a zero-size dimension: shape {tuple(shape)}")
            shapes[name] = tuple(shape)
        (m, k), (k2, n) = shapes["a"], shapes["b"]
        if k != k2:
            raise ArgumentError(f"a.shape[1] ({k}) != b.shape[0] ({k2}): inner dimensions must match")
        for nm, v in (("M", m), ("N", n), ("K", k)):
            if v > _MAX_I32:
                raise ArgumentError(f"{nm} = {v} exceeds the kernel's 32-bit size limit {_MAX_I32}")
        return m, n, k

    @staticmethod
    def _operand(be, x, major_inner: bool):
        """Device view of an operand in the layout the tensor map reads; numpy is copied."""
        dev = arrays.describe(x)
        if dev is None:
            x = np.asarray(x)
            host = x if major_inner else x.T          # K-major B: device holds B^T row-major
            return arrays.to_device(be, host, pitch_align=16), True
        ptr, shape, strides, dt, fw = dev
        if not major_inner:
            shape, strides = shape[::-1], strides[::-1]
        return arrays.DeviceArray(ptr, shape, strides, dt, be, x), False

    @staticmethod
    def _check_tma_layout(name, arr: "arrays.DeviceArray"):
        e = arr.dtype.nbytes
        if arr.strides[1] != e:
            raise ArgumentError(f"{name}: innermost stride is {arr.strides[1]} B; TMA needs contiguous rows "
                                f"(stride {e} B) — pass a contiguous array")
        if arr.strides[0] % 16:
            raise ArgumentError(f"{name}: row stride is {arr.strides[0]} B; TMA needs a multiple of 16 B "
                                f"(16-byte rule) — pad the leading dimension")
        if arr.strides[0] < arr.shape[1] * e:
            raise ArgumentError(f"{name}: row stride {arr.strides[0]} B overlaps rows of {arr.shape[1] * e} B")
        if arr.ptr % 16:
            raise ArgumentError(f"{name}: global address 0x{arr.ptr:x} is not 16-byte aligned (TMA)")

    def _device_sm_count(self):
        """The backend's SM count (persistent schedules fill it), None without one."""
        try:
            return getattr(self.backend, "sm_count", None)
        except CuteDSLError:
            return None

    def grid(self, m: int, n: int, k: int = 0) -> tuple:
        """CTAs ``(x, y, z)`` launched for an (M, N, K) problem: ``kernel.grid(m, n, k)``,
        checked against the hardware's grid limits (gridDim.x 1..2^31-1, y and z 1..65535).
        Raises ``ArgumentError`` naming the problem, the grid dimension and the limit, before
        anything is compiled, allocated or launched."""
        from .backend import MAX_GRID
        sched = getattr(self.kernel, "scheduler", None)
        if self.config.sm_count is None and getattr(sched, "persistent", False) and sched.sm_count is None:
            sched.sm_count = self._device_sm_count()
        raw = self.kernel.grid(m=m, n=n, k=k)
        g = tuple(int(x) for x in raw)
        who = f"{type(self.kernel).__name__}.grid()"
        if len(g) != 3:
            raise ArgumentError(f"{who} must return (x, y, z), got {raw!r}")
        user = "" if type(self.kernel).__module__.startswith("cutedsl.") else f" ({who})"
        for axis, v, hi in zip("xyz", g, MAX_GRID):
            if not 1 <= v <= hi:
                bm, bn, _ = self.config.tile
                hint = ": split the problem into smaller GEMMs" if v > hi else ""   # else a grid() bug
                raise ArgumentError(f"M={m}, N={n}, K={k} with {bm}x{bn} tiles needs gridDim.{axis} = {v} "
                                    f"CTAs{user}; the hardware allows 1..{hi} on {axis}{hint}")
        return g

    # -- call ---------------------------------------------------------------------------
    def __call__(self, a, b, out=None, **extra):
        """Compute ``a @ b``; returns a new array (numpy for numpy inputs) or fills ``out``."""
        if out is not None and not extra:
            d = self._cached_call(a, b, out)
            if d is not None:
                return d
        d, _ = self.run(a, b, out=out, **extra)
        return d

    #: most argument combinations whose launches ``__call__`` keeps ready
    LAUNCH_CACHE_SIZE = 64

    def _cached_call(self, a, b, out):
        """The launch path for device arrays on a backend with ``launcher`` (CUDA): the first
        call with given (address, shape, strides, dtype) of ``a``, ``b``, ``out`` validates and
        encodes the tensor maps as usual, and keeps a launcher with the packed parameter buffer;
        later calls with the same values launch it directly (nothing to re-check: the values
        that were checked are the key). None when this path does not apply."""
        be = self._backend
        if be is None or not hasattr(be, "launcher"):
            return None
        describe = arrays.describe
        da, db, dd = describe(a, "a"), describe(b, "b"), describe(out, "out")
        if da is None or db is None or dd is None:
            return None
        key = (*da[:3], da[3].name, *db[:3], db[3].name, *dd[:3], dd[3].name)
        run = self._launches.get(key)
        if run is None:
            launch, _ = self.prepare(a, b, out)
            try:
                handle, grid, params, zero_d = launch.packed
                if zero_d:                   # the launch does more than one kernel call
                    return None
                kern = self.compiled
                run = be.launcher(handle, grid, params, block=kern.block, cluster=kern.cluster,
                                  smem=kern.dynamic_smem)
            finally:
                launch.release()             # the tensor maps are in the packed parameters
            if len(self._launches) >= self.LAUNCH_CACHE_SIZE:
                self._launches.pop(next(iter(self._launches), None), None)
            self._launches[key] = run
        run()
        be.synchronize()
        return out

    def prepare(self, a, b, out=None, **extra):
        """Validate, move operands, encode tensor maps; returns a ``launch()`` callable and the
        result getter. Used by :meth:`run` and for timing repeated launches.

        The device memory and tensor maps this call made (numpy operands' copies, a host
        result's device buffer) live as long as either callable, and are released when both
        are garbage collected or at once by ``launch.release()``. A device result returned to
        the caller owns its memory (see :mod:`cutedsl.device.arrays`)."""
        m, n, k = self._check_operands(a, b)
        declared = extras.check_names(self.kernel.params(), extra)
        grid = self.grid(m, n, k)
        kern = self.compiled
        be = self.backend
        scratch = arrays.CallScratch(be)
        try:
            launch, result = self._prepare(scratch, kern, be, a, b, out, m, n, k, grid, extra, declared)
        except BaseException:
            scratch.release()          # nothing leaks from a call that fails before launch
            raise
        launch.keep = result.keep = scratch    # both callables keep the device memory alive
        launch.release = result.release = scratch.release
        return launch, result

    def _prepare(self, scratch, kern, be, a, b, out, m, n, k, grid, extra, declared):
        cfg = self.config
        da, a_host = self._operand(be, a, True)
        if a_host:
            scratch.arrays.append(da)
        db, b_host = self._operand(be, b, cfg.b_major == "N")
        if b_host:
            scratch.arrays.append(db)
        self._check_tma_layout("a", da)
        self._check_tma_layout("b", db)
        out_dt = _dtype(cfg.out_dtype)
        d_is_map = self.kernel.epilogue.d_param().kind == "tensormap"   # else a C-contiguous pointer
        host_out = a_host or b_host
        if out is None:
            dd = arrays.empty(be, (m, n), out_dt, pitch_align=16 if d_is_map else 1)
            if host_out:               # copied back to a numpy result: the call's own buffer
                scratch.arrays.append(dd)
        else:
            od = arrays.describe(out, "out")
            if od is None:
                raise ArgumentTypeError("out must be a device array (numpy results are returned, not filled)")
            ptr, shape, strides, dt, _ = od
            if tuple(shape) != (m, n) or dt.name != out_dt.name:
                raise ArgumentError(f"out must have shape {(m, n)} and dtype {out_dt.name}, got {shape} {dt.name}")
            dd = arrays.DeviceArray(ptr, shape, strides, dt, be, out)
            if not d_is_map and tuple(strides) != (n * out_dt.nbytes, out_dt.nbytes):
                raise ArgumentError("out must be C-contiguous for the 'global' epilogue")
        if d_is_map:
            self._check_tma_layout("out", dd)
        values = {"m": m, "n": n, "k": k}
        specs = {t.param: t for t in kern.tensor_maps}
        for name, arr in (("a", da), ("b", db), ("d", dd)):
            if name in specs:
                values[name] = be.encode_tensor_map(specs[name], arr.ptr, arr.shape, arr.strides)
                scratch.tmaps.append(values[name])
            else:
                if arr.strides != (arr.shape[1] * arr.dtype.nbytes, arr.dtype.nbytes):
                    raise ArgumentError(f"{name} must be C-contiguous for a pointer parameter")
                values[name] = arr.ptr
        keep = [da, db, dd]            # device memory (ours or the caller's) must outlive the launch
        dims = {"m": m, "n": n, "k": k}
        for p in declared:
            if p.name not in values:
                values[p.name] = extras.value(be, p, extra[p.name], dims, keep, scratch.arrays)
        params = kern.pack_params(values)
        handle = self._module(be, kern)
        zero_d = getattr(self.kernel.epilogue, "accumulates", False)

        def launch():
            if zero_d:                 # the epilogue adds into D: start from zeros every launch
                arrays.zero_fill(dd)
            be.launch(handle, grid, params, block=kern.block, cluster=kern.cluster, smem=kern.dynamic_smem)

        def result():
            be.synchronize()
            if out is not None:
                return out
            if host_out:
                return arrays.to_host(dd)
            return self._wrap_like(dd, a)
        scratch.keep = keep
        launch.packed = (handle, grid, params, zero_d)     # for the launch cache of __call__
        return launch, result

    def run(self, a, b, out=None, **extra):
        """Launch once; returns ``(result, seconds)`` (wall time of launch + synchronize).
        The call's own device memory and tensor maps are released before it returns."""
        launch, result = self.prepare(a, b, out, **extra)
        try:
            t0 = time.perf_counter()
            launch()
            r = result()
            return r, time.perf_counter() - t0
        finally:
            launch.release()

    @staticmethod
    def _wrap_like(dd, like):
        fw = type(like).__module__.split(".")[0]
        if fw == "torch":
            import torch
            return torch.as_tensor(dd, device="cuda")
        if fw == "cupy":
            import cupy
            return cupy.asarray(dd)
        return dd


def gemm(a, b, config: GemmConfig | None = None, backend="auto"):
    """One-shot ``a @ b`` with ``config`` (default: ``GemmConfig`` for ``a``'s dtype)."""
    if config is None:
        dev = arrays.describe(a, "a")
        config = GemmConfig(dtype=(dev[3] if dev else _dtype(np.asarray(a).dtype)).name)
    return Gemm(config, backend)(a, b)


__all__ = ["GemmConfig", "Gemm", "gemm", "NoDeviceError"]
