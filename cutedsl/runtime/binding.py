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

"""
from __future__ import annotations

from ..errors import ArgumentError, LaunchError
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
        ``keep`` (the binding's memory) and ``packed = (module, grid, params, reusable?)`` for
        a launch cache (not reusable when it zero-fills or takes a workspace)."""
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
        launch.release, launch.keep = scratch.release, scratch
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


__all__ = ["Binding"]
