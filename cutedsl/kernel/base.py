"""Kernel base class: a CTA program (thread roles, shared-memory plan, signature) that
builds its module, compiles it through the cache and computes its grid."""
from __future__ import annotations

import time


class Kernel:
    """Subclasses implement :meth:`config`, :meth:`define` and :meth:`grid`."""

    name = "kernel"

    def config(self) -> dict:
        """JSON-able description; with the code identity and toolchain, the cache key."""
        raise NotImplementedError

    def collectives(self) -> tuple:
        """The objects (and classes) that generate code with this kernel — mainloop, epilogue,
        tile scheduler. Their classes and the user modules behind them are part of the cache
        key (``cutedsl.compiler.identity``). Default: every non-builtin object or class held in
        the kernel's attributes, and the classes named by class attributes (``epilogue_cls``,
        ``mainloop_cls``, ``scheduler_cls``...); override to name them explicitly."""
        held = [v for v in vars(self).values() if isinstance(v, type) or type(v).__module__ != "builtins"]
        named = [v for c in type(self).__mro__ for v in vars(c).values() if isinstance(v, type)]
        return tuple(held + named)

    def cache_key(self) -> tuple:
        """``(key, identity)``: name + config + library sources + user code of this kernel and
        its collectives (see :func:`cutedsl.compiler.identity.kernel_key`)."""
        from ..compiler.identity import kernel_key
        return kernel_key(self.name, self.config(), (self,) + tuple(self.collectives()))

    def define(self):
        """Build the module. Returns ``(KernelBuilder, dynamic_smem_bytes, tensor_map_specs)``."""
        raise NotImplementedError

    def grid(self, problem) -> tuple:
        """CTAs (x, y, z) for a problem (a ``GemmProblem`` for GEMM kernels)."""
        raise NotImplementedError

    # -- host contract: what a launch needs besides the caller's arguments. The front end (Device
    #    layer) asks these and hands the answers to the runtime's launch binding
    #    (cutedsl.runtime.binding); it never reads the kernel's collectives. Defaults: nothing.
    def host_params(self) -> list:
        """Names of parameters the kernel's own host side fills (e.g. a tile scheduler's
        decomposition), not taken from the caller."""
        return []

    def host_values(self, problem) -> dict:
        """Host: ``{name: value}`` of :meth:`host_params` for ``problem``."""
        return {}

    def workspace(self, problem) -> dict:
        """Host: bytes of each workspace parameter (``ParamSpec.workspace``) a launch for
        ``problem`` needs; the runtime provides them zeroed (:mod:`cutedsl.runtime.workspace`)."""
        return {}

    def zero_filled_outputs(self) -> tuple:
        """Output parameters the kernel adds into, zero-filled before every launch."""
        return ()

    def co_resident(self) -> bool:
        """True when the launch's CTAs wait on each other through global memory, so all of
        them must be resident at once (at most :meth:`resident_ctas` CTAs)."""
        return False

    def resident_ctas(self, sm_count: int) -> int:
        """CTAs of this kernel resident at once on ``sm_count`` SMs (one per SM by default)."""
        return sm_count

    def needs_sm_count(self) -> bool:
        """True when the grid depends on the device's SM count and none was configured
        (a persistent schedule); the front end then calls :meth:`set_sm_count`."""
        return False

    def set_sm_count(self, sm_count) -> None:
        """Host: the device's SM count (None: unknown), for a kernel whose grid fills the device."""

    def compile(self, *, cache=None, dump_dir=None, use_cache: bool = True):
        """Return the ``CompiledKernel``, from the on-disk cache when possible.

        ``cache``: a ``KernelCache`` (default: ``$CUTEDSL_CACHE_DIR``), or ``False`` to compile
        without any cache (as ``use_cache=False``, a ``dump_dir``, env ``CUTEDSL_DUMP_DIR`` or
        env ``CUTEDSL_CACHE=off`` do; nothing is read or written then). The artifact's ``meta`` records the config,
        ``build_seconds`` (IR construction) and the user code in its key; ``last_cache_hit``
        says whether it came from the cache. Raises ``CacheError`` on a miss where no MLIR
        toolchain is installed."""
        import os
        from ..compiler.cache import caching_enabled, default_cache

        if dump_dir is None:          # env CUTEDSL_DUMP_DIR dumps too: it must bypass a cache hit
            dump_dir = os.environ.get("CUTEDSL_DUMP_DIR") or None
        use = use_cache and cache is not False and dump_dir is None and caching_enabled()
        key, ident = self.cache_key() if use else (None, None)

        def build():
            from ..compiler import compile_kernel
            from ..compiler.compile import COMPILE_LOCK
            with COMPILE_LOCK:        # MLIR is not thread-safe: one thread builds IR at a time
                t0 = time.perf_counter()
                kb, smem, tmaps = self.define()
                t_build = time.perf_counter() - t0
                meta = {"config": self.config(), "build_seconds": t_build}
                if ident is not None:
                    meta["user_code"] = ident["user_code"]
                k = compile_kernel(kb, dynamic_smem=smem, tensor_maps=tmaps, dump_dir=dump_dir, meta=meta)
            import attrs
            return attrs.evolve(k, compile_seconds=k.compile_seconds + t_build)

        if not use:
            self.last_cache_hit = False
            return build()
        k, hit = (cache or default_cache()).get_or_build(key, build)
        self.last_cache_hit = hit
        return k
