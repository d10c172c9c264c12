"""One launch binding for every kernel: from a compiled kernel's declared parameters and the
caller's values to host copies, tensor maps, workspace, packed parameters, launch and release
(CUTLASS's ``device::Universal<Kernel>`` adapter, Mosaic GPU's ``as_gpu_kernel``: one host path,
whatever the kernel family).

A front end (``Gemm``, ``GroupedGemm``, SAXPY) opens a :class:`Binding`, fills its values --
arrays it copied (:meth:`Binding.own`), tensor maps (:meth:`Binding.tensor_map`), a declared
parameter from the caller's value (:meth:`Binding.argument`), a workspace
(:meth:`Binding.workspace`) -- and asks :meth:`Binding.launcher` for the ``launch()`` callable;
this is the one place kernel parameters are packed. Everything the binding allocated or encoded
is released by :meth:`Binding.release` (or when the last callable holding it goes).

:func:`launch` does all of it in one call for a kernel composed from atoms: the caller gives
arrays and scalars by parameter name, never tensor-map or parameter bytes.
"""
from __future__ import annotations

import numpy as np

from ..dtypes import PACKED_TMA, dtype as _dtype
from ..errors import ArgumentError, ArgumentTypeError, LaunchError
from . import arrays, params as _params


class Binding:
    """The host side of one launch of ``compiled`` (a ``CompiledKernel``) on ``backend``.

    ``module``: the loaded module handle (``backend.load(compiled)`` when None, on first
    :meth:`launcher`). ``values`` maps parameter names to launch values (pointers as ints,
    scalars, tensor maps as their 128 bytes); ``keep`` holds the caller's memory the launch
    uses (kept alive as long as the binding); ``copy_back`` the ``(numpy array, device copy)``
    pairs of outputs given as numpy, filled by :meth:`finish`."""

    def __init__(self, backend, compiled, module=None):
        self.backend, self.compiled, self._module = backend, compiled, module
        self.scratch = arrays.CallScratch(backend)
        self.values, self.keep, self.copy_back = {}, [], []
        self.specs = {t.param: t for t in compiled.tensor_maps}
        self._workspace = None
        self.scratch.keep = self.keep

    # -- values -----------------------------------------------------------------------------
    def own(self, arr):
        """``arr`` (a ``DeviceArray`` this launch allocated) is freed on release; returns it."""
        self.scratch.arrays.append(arr)
        return arr

    def encode(self, spec, arr, extent=None) -> bytes:
        """The tensor map of ``spec`` (a ``TensorMapSpec``, or the name of a parameter's) over
        device array ``arr`` (``extent``: ``(shape, strides)`` instead of the array's); released
        with the binding. A map that is not a parameter (e.g. in a table in global memory) is
        encoded here too."""
        spec = self.specs[spec] if isinstance(spec, str) else spec
        shape, strides = extent if extent is not None else (arr.shape, arr.strides)
        blob = self.backend.encode_tensor_map(spec, arr.ptr, shape, strides)
        self.scratch.tmaps.append(blob)
        return blob

    def tensor_map(self, name: str, arr, extent=None) -> None:
        """Parameter ``name`` := the tensor map over ``arr`` (:meth:`encode`)."""
        self.values[name] = self.encode(name, arr, extent)

    def pointer(self, name: str, arr) -> None:
        """Parameter ``name`` := the address of C-contiguous device array ``arr``
        (``ArgumentError`` naming it otherwise)."""
        if not arr.is_c_contiguous():
            raise ArgumentError(f"{name} must be C-contiguous for a pointer parameter")
        self.values[name] = arr.ptr

    def argument(self, p, v, dims=None, as_map=None) -> None:
        """Parameter ``p`` (a ``ParamSpec``) := caller's value ``v``, checked and converted by
        :func:`cutedsl.runtime.params.value` (``dims``: the sizes ``p.shape`` names). A
        ``tensormap`` parameter is encoded over the array after the TMA checks; ``as_map`` maps
        that array to the one the map covers (e.g. one batch)."""
        x = _params.value(self.backend, p, v, dims or {}, self.keep, self.scratch.arrays, self.copy_back)
        if p.kind == "tensormap":
            _params.check_tma_layout(p.name, x)
            self.tensor_map(p.name, as_map(x) if as_map is not None else x)
        else:
            self.values[p.name] = x

    def workspace(self, pool, sizes: dict) -> None:
        """The workspace parameters ``sizes`` (bytes by name, the kernel's ``workspace(problem)``)
        from ``pool`` (:func:`cutedsl.runtime.workspace.provide`); given back on release unless
        the launch raised."""
        from .workspace import provide
        self._workspace = provide(pool, sizes, self.backend, self.scratch, self.values)

    # -- launch -----------------------------------------------------------------------------
    def launcher(self, grid, zero_fill=()):
        """The ``launch()`` callable of ``grid`` CTAs ``(x, y, z)``: packs the parameters (the one
        place they are packed), loads the module if needed. ``zero_fill``: device arrays cleared
        before every launch (outputs the kernel adds into). The callable carries ``release``,
        ``keep`` (the binding's memory), ``compiled`` (the ``CompiledKernel`` it launches: a
        front end's call may have gone to a layout variant of its own config) and
        ``packed = (module, grid, params, reusable?)`` for a launch cache (not reusable when
        it zero-fills or takes a workspace)."""
        ck, be, ws = self.compiled, self.backend, self._workspace
        params = ck.pack_params(self.values)
        handle = self._module if self._module is not None else be.load(ck)
        scratch = self.scratch

        def launch():
            if not scratch.alive:          # its parameter block and tensor maps are gone
                raise LaunchError("this launch was released (launch.release()); call prepare() again for a new one")
            for arr in zero_fill:
                arrays.zero_fill(arr)
            try:
                be.launch(handle, grid, params, block=ck.block, cluster=ck.cluster, smem=ck.dynamic_smem)
            except BaseException:
                if ws is not None:         # its semaphores may be left mid-reduction: never reuse it
                    ws[1] = False
                raise
        launch.release, launch.keep, launch.compiled = scratch.release, scratch, ck
        launch.packed = (handle, tuple(grid), params, bool(zero_fill) or ws is not None)
        return launch

    def finish(self) -> None:
        """Wait for the launch; fill the numpy arrays given for output parameters."""
        self.backend.synchronize()
        for host, dev in self.copy_back:
            host[...] = arrays.to_host(dev)

    def release(self) -> None:
        """Free what the binding allocated and encoded (idempotent)."""
        self.scratch.release()


def _device_array(be, name, v, spec):
    """The device array behind tensor-map parameter ``name``: a numpy array is copied (rows
    padded to 16 B), a device array used in place; its dtype must be the map's."""
    want = None if spec.dtype in PACKED_TMA else _dtype(spec.dtype)
    dev = arrays.describe(v, name)
    if dev is None:
        host = np.asarray(v)
        if want is not None and host.dtype != want.numpy:
            raise ArgumentTypeError(f"{name} has dtype {host.dtype}, its tensor map reads {spec.dtype} "
                                    f"(numpy: {want.numpy})")
        return arrays.to_device(be, host, pitch_align=16), True
    if want is not None and dev[3].name != want.name:
        raise ArgumentTypeError(f"{name} has dtype {dev[3].name}, its tensor map reads {spec.dtype}")
    return arrays.DeviceArray(dev[0], tuple(dev[1]), tuple(dev[2]), dev[3], be, v), False


def launch(kernel, grid, *, backend="auto", **args):
    """Launch ``kernel`` (a ``CompiledKernel``, e.g. from ``compile_kernel``, or a ``Kernel``,
    compiled on first use) on ``grid`` CTAs ``(x, y, z)`` and wait for it.

    ``args``: one value per kernel parameter, by name. A ``tensormap`` parameter takes the
    array its ``TensorMapSpec`` covers (numpy: copied to the device, rows padded to TMA's
    16-byte pitch, and -- when writable -- copied back into it after the launch, since the
    kernel may store through any map; a ``DeviceArray`` or
    a torch/cupy/DLPack CUDA array: used in place, obeying TMA's rules); a ``ptr`` parameter a
    device array (or numpy, copied in only: a compiled kernel's parameters do not say which
    pointers are outputs, so pass a device array for a pointer the kernel writes); a scalar a
    number.
    ``backend``: a name (``"auto"``, ``"cuda"``, ``"sim"``) or a backend object.

    Raises ``ArgumentError`` for a missing or unknown parameter name, a grid that is not three
    positive ints, or an array breaking a TMA rule; ``ArgumentTypeError`` for a wrong dtype or
    value type; all before anything is launched. What the call allocated is freed on return.
    """
    from .selection import check_backend_arg, get_backend
    ck = kernel.compile() if hasattr(kernel, "compile") else kernel
    names = [p.name for p in ck.params]
    unknown, missing = sorted(set(args) - set(names)), [n for n in names if n not in args]
    if unknown or missing:
        raise ArgumentError(f"kernel {ck.entry!r} takes {', '.join(names) or 'no parameters'}: "
                            f"unknown {unknown}, missing {missing}")
    if len(tuple(grid)) != 3 or not all(isinstance(g, (int, np.integer)) and g >= 1 for g in grid):
        raise ArgumentError(f"grid must be three positive ints (x, y, z), got {grid!r}")
    check_backend_arg(backend)
    be = get_backend(backend) if isinstance(backend, str) else backend
    b = Binding(be, ck)
    try:
        for p in ck.params:
            v = args[p.name]
            if p.kind == "tensormap":
                arr, copied = _device_array(be, p.name, v, b.specs[p.name])
                if copied:
                    b.own(arr)
                    if isinstance(v, np.ndarray) and v.flags.writeable:    # the kernel may store through it
                        b.copy_back.append((v, arr))
                else:
                    b.keep.append(v)
                _params.check_tma_layout(p.name, arr)
                b.tensor_map(p.name, arr)
            else:
                b.argument(p, v)
        b.launcher(tuple(int(g) for g in grid))()
        b.finish()
    finally:
        b.release()


__all__ = ["Binding", "launch"]
