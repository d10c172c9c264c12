"""``Gemm``: the user-facing GEMM for a ``GemmConfig`` (``device/config.py``; CUTLASS ``GemmUniversalAdapter``).

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

import attrs

import os
import threading
import time


from ..dtypes import dtype as _dtype
from ..errors import ArgumentError, ArgumentTypeError, CuteDSLError, NoDeviceError, checked_arguments
from ..runtime import arrays
from . import extras
from ..runtime.selection import check_backend_arg

from ..problem import GemmProblem
from .config import GemmConfig
from ..runtime.dlpack import wrap_like
from ..runtime.binding import Binding
from ..runtime.params import check_tma_layout, map_extent
from .operands import check_operands, layout_changes
from ..runtime.workspace import WorkspacePool

class Gemm:
    """A compiled GEMM for one config, callable on any (M, N, K); see module docstring.

    ``backend``: ``"auto"`` (GPU, else emulator), ``"cuda"``, ``"sim"`` or a backend object.
    ``epilogue``: an ``Epilogue`` subclass replacing the config's (e.g. bias + ReLU), of the
    config's kind (``GemmConfig.epilogue``: a ``TmaStoreEpilogue`` subclass for ``"tma"``, a
    ``GlobalEpilogue`` subclass for ``"global"``; ``ConfigError`` otherwise); its extra kernel
    parameters are passed as keyword arguments of the call.
    ``kernel``: a ``GemmKernel`` subclass to run instead of the config's schedule (e.g. a
    split-K kernel); it gets the config's tile, dtypes, B major, stages and epilogue, and the
    call validates, allocates and launches ``kernel.grid(GemmProblem(m, n, k))`` CTAs as for any GEMM.
    ``cache``: a ``KernelCache``, ``None`` (``$CUTEDSL_CACHE_DIR``) or ``False`` (compile
    without caching; as env ``CUTEDSL_CACHE=off``). Wrong names or types raise at construction.

    Thread-safe: one ``Gemm`` may be called from many threads; the kernel is compiled (or
    loaded) and its module loaded once. Each call frees the device memory it allocated (see
    :meth:`prepare` and :mod:`cutedsl.runtime.arrays` for who owns what).
    """

    def __new__(cls, config=None, *args, **kwargs):
        if isinstance(config, str) and config == "auto":     # a config per call shape
            from .auto import AutoGemm
            return AutoGemm(*args, **kwargs)
        return super().__new__(cls)

    @checked_arguments()
    def __init__(self, config: GemmConfig, backend="auto", *, epilogue=None, kernel=None, cache=None,
                 dump_dir=None):
        if not isinstance(config, GemmConfig):
            raise ArgumentTypeError(f"config must be a GemmConfig, got {type(config).__name__}")
        self.config = config
        self.kernel = config.kernel(epilogue, kernel)
        self._custom = epilogue is not None or kernel is not None     # user code: not exportable
        self._user_classes = (epilogue, kernel)
        self._variants = {}      # GEMMs of this config with other layouts / a batch, built when a call needs one
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
        self._workspaces = WorkspacePool()     # zeroed scratch of kernels that declare one, reused
        # One Gemm may be called from many threads: the lazy compile, backend and module load
        # below happen once, under this lock (double-checked so warm calls never wait on it).
        self._lock = threading.RLock()

    def save(self, path):
        """Export the compiled kernel and config to directory ``path`` (``cutedsl.load(path)``
        runs it without MLIR; :mod:`cutedsl.device.export`). Returns the path."""
        from .export import save
        return save(self, path)

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
                    from ..runtime.selection import get_backend
                    self._backend = get_backend(self._backend_name, self.config.arch)
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
    def _check_operands(self, va, vb):
        """:func:`cutedsl.device.operands.check_operands` of this GEMM's config."""
        return check_operands(self.config, va, vb)

    def _device_sm_count(self):
        """The backend's SM count (persistent schedules fill it), None without one."""
        try:
            return getattr(self.backend, "sm_count", None)
        except CuteDSLError:
            return None

    def grid(self, m: int, n: int, k: int = 0, l: int = 1) -> tuple:
        """CTAs ``(x, y, z)`` launched for an (M, N, K, L) problem: ``kernel.grid(GemmProblem(...))``,
        checked against the hardware's grid limits (gridDim.x 1..2^31-1, y and z 1..65535).
        Raises ``ArgumentError`` naming the problem, the grid dimension and the limit, before
        anything is compiled, allocated or launched."""
        if self.config.sm_count is None and self.kernel.needs_sm_count():
            self.kernel.set_sm_count(self._device_sm_count())
        raw = self.kernel.grid(GemmProblem(m, n, k, l))
        g = tuple(int(x) for x in raw)
        if self.kernel.co_resident():
            self._check_resident(g)
        why = grid_reason(self.kernel, GemmProblem(m, n, k, l), self.config.tile, raw)
        if why:
            raise ArgumentError(why)
        return g

    def _check_resident(self, grid) -> None:
        """CTAs that wait on each other through global memory (stream-K / split-K pieces of one
        tile) must all be resident at once: ``ArgumentError`` when the launch has more CTAs
        than the device's SMs hold (``GemmConfig.sm_count`` above the device's)."""
        have = self._device_sm_count()
        if have is not None and grid[0] > self.kernel.resident_ctas(have):
            raise ArgumentError(f"{self.config.decomposition} launches {grid[0]} CTAs that wait on each other, "
                                f"but the device holds {self.kernel.resident_ctas(have)} at once ({have} SMs): "
                                f"GemmConfig.sm_count={self.config.sm_count} exceeds the device's {have}")

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
        for name, x in (("a", a), ("b", b), ("out", out)):
            if isinstance(x, arrays.DeviceArray):
                x.check_allocation(name)     # same address and shape, but freed since?
        if run is None:
            launch, _ = self.prepare(a, b, out)
            try:
                handle, grid, params, zero_d = launch.packed
                if zero_d:                   # the launch does more than one kernel call
                    return None
                kern = launch.compiled       # a layout variant's (raster N, majors), not self.compiled
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
        the caller owns its memory (see :mod:`cutedsl.runtime.arrays`)."""
        va, vb = arrays.TensorView.of(a, "a"), arrays.TensorView.of(b, "b")    # described once
        changes = self._layout_changes(va, vb)
        if changes:
            return self.variant(**changes).prepare(a, b, out, **extra)
        m, n, k, l, la, lb = self._check_operands(va, vb)
        declared = extras.check_names(self.kernel.params(), extra, self.kernel.host_params())
        extras.check_scalars(declared, extra)         # alpha=1e40 / nan: named now, not after compiling
        grid = self.grid(m, n, k, l)
        kern = self.compiled
        be = self.backend
        for name, x in (("a", a), ("b", b), ("out", out), *extra.items()):
            arrays.check_backend_of(x, be, name)
        bind = Binding(be, kern, self._module(be, kern))
        try:
            launch, result = self._prepare(bind, va, vb, out, (m, n, k, l, la, lb), grid, extra, declared)
        except BaseException:
            bind.release()             # nothing leaks from a call that fails before launch
            raise
        result.keep = launch.keep      # both callables keep the device memory alive
        result.release = launch.release
        return launch, result

    def variant(self, **changes) -> "Gemm":
        """This GEMM with the config fields ``changes`` (``batched``, ``a_major``, ``b_major``, ``raster``),
        on the same backend, built once and kept."""
        key = tuple(sorted(changes.items()))
        with self._lock:
            g = self._variants.get(key)
            if g is None:
                epi, kern = self._user_classes
                be = self._backend if self._backend is not None else self._backend_name   # not resolved yet
                g = self._variants[key] = Gemm(attrs.evolve(self.config, **changes), be, epilogue=epi, kernel=kern,
                                               cache=self._cache, dump_dir=self._dump)
            return g

    def batched_gemm(self) -> "Gemm":
        """The batched variant (``GemmConfig(batched=True)``: rank-3 tensor maps, the batch in
        the grid or the persistent tile index); calls with 3-D operands go to it."""
        return self.variant(batched=True) if not self.config.batched else self

    def _layout_changes(self, va, vb) -> dict:
        """:func:`cutedsl.device.operands.layout_changes` of this GEMM's config."""
        return layout_changes(self.config, va, vb)

    def _prepare(self, bind, va, vb, out, mnkl, grid, extra, declared):
        """Bind the operands, the kernel's own values and the caller's extra arguments;
        returns ``(launch, result)`` (see :meth:`prepare`)."""
        cfg, be = self.config, bind.backend
        m, n, k, l, la, lb = mnkl
        out_shape = (l, m, n) if 3 in (len(va.shape), len(vb.shape)) else (m, n)
        da, a_host = extras.operand_array(be, va, cfg.a_major == "K")
        db, b_host = extras.operand_array(be, vb, cfg.b_major == "MN")
        for arr, copied in ((da, a_host), (db, b_host)):
            if copied:
                bind.own(arr)
        check_tma_layout("a", da)
        check_tma_layout("b", db)
        out_dt = _dtype(cfg.out_dtype)
        d_is_map = bind.compiled.param("d").kind == "tensormap"     # else a C-contiguous pointer
        host_out = a_host or b_host
        if out is None:
            dd = arrays.empty(be, out_shape, out_dt, pitch_align=16 if d_is_map else 1, label="Gemm output d")
            if host_out:               # copied back to a numpy result: the call's own buffer
                bind.own(dd)
        else:
            od = arrays.describe(out, "out")
            if od is None:
                raise ArgumentTypeError("out must be a device array (numpy results are returned, not filled)")
            ptr, shape, strides, dt, _ = od
            if tuple(shape) != out_shape or dt.name != out_dt.name:
                raise ArgumentError(f"out must have shape {out_shape} and dtype {out_dt.name}, got {shape} {dt.name}")
            dd = arrays.DeviceArray(ptr, shape, strides, dt, be, out)
            if not d_is_map and not dd.is_c_contiguous():
                raise ArgumentError("out must be C-contiguous for the 'global' epilogue")
        if d_is_map:
            check_tma_layout("out", dd)
        problem = GemmProblem(m, n, k, l)
        bind.values.update(m=m, n=n, k=k)
        if cfg.batched:
            bind.values.update(l=l, la=la, lb=lb)
        bind.values.update(self.kernel.host_values(problem))
        bind.workspace(self._workspaces, self.kernel.workspace(problem))
        as_map = arrays.as_batch if cfg.batched else None    # one batch of a rank-3 (L, rows, cols) map
        for name, arr in (("a", da), ("b", db), ("d", dd)):
            arr = as_map(arr) if as_map else arr
            if name in bind.specs:
                bind.tensor_map(name, arr, map_extent(bind.specs[name], arr))
            else:
                bind.pointer(name, arr)
        bind.keep += [da, db, dd]      # device memory (ours or the caller's) must outlive the launch
        dims = {"m": m, "n": n, "k": k, "l": l, "la": la, "lb": lb, **self.kernel.param_dims(problem)}
        for p in declared:
            bind.argument(p, extra[p.name], dims, as_map)
        outputs = {"d": dd}
        launch = bind.launcher(grid, [outputs[name] for name in self.kernel.zero_filled_outputs()])

        def result():
            bind.finish()
            if out is not None:
                return out
            if host_out:
                return arrays.to_host(dd)
            return wrap_like(dd, va.framework)
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


def grid_reason(kernel, problem, tile, grid=None) -> str | None:
    """Why ``kernel``'s grid for ``problem`` (``grid``: already computed) breaks the hardware's
    limits (gridDim.x 1..2^31-1, y and z 1..65535), naming the problem, the dimension and the
    limit; or None. ``Gemm.grid`` raises it (``ArgumentError``), ``GemmConfig.can_implement``
    returns it."""
    from ..runtime.backend import MAX_GRID
    raw = kernel.grid(problem) if grid is None else grid
    who = f"{type(kernel).__name__}.grid()"
    if len(tuple(raw)) != 3:
        return f"{who} must return (x, y, z), got {raw!r}"
    user = "" if type(kernel).__module__.startswith("cutedsl.") else f" ({who})"
    for axis, v, hi in zip("xyz", (int(x) for x in raw), MAX_GRID):
        if not 1 <= v <= hi:
            hint = ": split the problem into smaller GEMMs" if v > hi else ""   # else a grid() bug
            return (f"M={problem.m}, N={problem.n}, K={problem.k} with {tile[0]}x{tile[1]} tiles needs "
                    f"gridDim.{axis} = {v} CTAs{user}; the hardware allows 1..{hi} on {axis}{hint}")
    return None


def gemm(a, b, config: GemmConfig | None = None, backend="auto"):
    """One-shot ``a @ b`` with ``config`` (default: ``GemmConfig`` for ``a``'s dtype)."""
    if config is None:
        dev = arrays.describe(a, "a")
        config = GemmConfig(dtype=(dev[3] if dev else _dtype(arrays.host_array(a).dtype)).name)
    return Gemm(config, backend)(a, b)


def __getattr__(name):          # AutoGemm lives in .auto (imports this module)
    if name == "AutoGemm":
        from .auto import AutoGemm
        return AutoGemm
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["GemmConfig", "Gemm", "AutoGemm", "gemm", "NoDeviceError"]
