"""Kernel base class: a CTA program (thread roles, shared-memory plan, signature) that
builds its module, compiles it through the cache and computes its grid."""
from __future__ import annotations

import time


class Kernel:
    """Subclasses implement :meth:`config`, :meth:`define` and :meth:`grid`."""

    name = "kernel"

    def config(self) -> dict:
        """JSON-able description; with the library source and toolchain, the cache key."""
        raise NotImplementedError

    def define(self):
        """Build the module. Returns ``(KernelBuilder, dynamic_smem_bytes, tensor_map_specs)``."""
        raise NotImplementedError

    def grid(self, **problem) -> tuple:
        """CTAs (x, y, z) for a problem."""
        raise NotImplementedError

    def compile(self, *, cache=None, dump_dir=None, use_cache: bool = True):
        """Return the ``CompiledKernel``, from the on-disk cache when possible.

        The kernel's ``meta`` records ``build_seconds`` (IR construction) and whether it came
        from the cache (``cache_hit``)."""
        from ..compiler.cache import default_cache

        def build():
            from ..compiler import compile_kernel
            from ..compiler.compile import COMPILE_LOCK
            with COMPILE_LOCK:        # MLIR is not thread-safe: one thread builds IR at a time
                t0 = time.perf_counter()
                kb, smem, tmaps = self.define()
                t_build = time.perf_counter() - t0
                k = compile_kernel(kb, dynamic_smem=smem, tensor_maps=tmaps, dump_dir=dump_dir,
                                   meta={"config": self.config(), "build_seconds": t_build})
            import attrs
            return attrs.evolve(k, compile_seconds=k.compile_seconds + t_build)

        if not use_cache or dump_dir is not None:
            k = build()
            self.last_cache_hit = False
            return k
        cache = cache or default_cache()
        k, hit = cache.get_or_build({"kernel": self.name, **self.config()}, build)
        self.last_cache_hit = hit
        return k
